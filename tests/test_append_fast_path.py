"""The append path's shortcut for plain text messages gives exactly what full validation gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.errors import InvalidEvent
from eventstore.events import parse
from eventstore.prepare import _text_data, _text_message, prepare


@given(role=st.sampled_from(["user", "assistant"]), text=st.text(), meta=st.sampled_from([None, {}]))
def test_text_message_shortcut_equals_parse(role: str, text: str, meta: dict[str, Any] | None) -> None:
    event: dict[str, Any] = {"type": "message.appended", "data": {"role": role, "content": text}}
    if meta is not None:
        event["meta"] = meta
    plain = _text_message(event)
    assert plain is not None
    assert ("message.appended", _text_data(*plain), {}) == parse(event, "e")


@pytest.mark.parametrize(
    "event",
    [
        {"type": "message.appended", "data": {"role": "system", "content": "hi"}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": "hi"}]}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi", "model": "m"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}, "meta": {"actor": "ana"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}, "extra": 1},
        {"type": "message.appended", "data": {"role": "user", "text": "hi"}},
        {"type": "title.set", "data": {"title": "hi"}},
    ],
    ids=["bad-role", "blocks", "optional-field", "meta", "unknown-key", "missing-content", "other-type"],
)
def test_anything_else_takes_full_validation(event: dict[str, Any]) -> None:
    assert _text_message(event) is None


def test_unstorable_text_is_refused_the_same_way() -> None:
    event = {"type": "message.appended", "data": {"role": "user", "content": "\ud800"}}
    assert _text_message(event) is not None
    with pytest.raises(InvalidEvent) as shortcut:
        prepare(event, "events[0]")
    assert shortcut.value.field == "events[0].data"


@given(role=st.sampled_from(["user", "assistant"]), text=st.text() | st.sampled_from(["\ud800", "\x00\n\"\\", "é😀"]))
def test_text_message_json_equals_canonical(role: str, text: str) -> None:
    from eventstore.integrity import canonical
    from eventstore.prepare import _text_json

    assert _text_json(role, text) == canonical({"role": role, "content": [{"type": "text", "text": text}]})
