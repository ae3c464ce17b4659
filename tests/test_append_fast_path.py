"""The append path's shortcuts for plain text messages give exactly what full validation and the
batch path give."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eventstore.store as store_module
from eventstore.errors import InvalidEvent, StoreError
from eventstore.events import parse
from eventstore.integrity import canonical, digest
from eventstore.prepare import _text_message, prepare, prepare_text
from threadlog import Store


class Full(dict[str, Any]):
    """A dict the shortcut does not take (a subclass): `prepare` validates it in full."""


@given(role=st.sampled_from(["user", "assistant"]), text=st.text() | st.sampled_from(["\x00\n\"\\", "é😀", "\u2028"]),
       meta=st.sampled_from([None, {}]))
def test_text_message_shortcut_equals_full_validation(role: str, text: str, meta: dict[str, Any] | None) -> None:
    event: dict[str, Any] = {"type": "message.appended", "data": {"role": role, "content": text}}
    if meta is not None:
        event["meta"] = meta
    plain = _text_message(event)
    assert plain is not None and _text_message(Full(event)) is None
    try:
        full = prepare(Full(event), 0, "e1")
    except InvalidEvent:  # lone surrogates: refused the same way (test_unstorable_text_is_refused_the_same_way)
        return
    shortcut = prepare(event, 0, "e1")
    assert shortcut._replace(plain=False) == full
    assert shortcut.plain and shortcut.data_json == canonical(full.data) and shortcut.data_digest == digest(full.data_json)
    assert ("message.appended", shortcut.data, {}) == parse(event, "e")


@given(role=st.sampled_from(["user", "assistant"]), text=st.text() | st.sampled_from(["\x00\n\"\\", "é😀", "\u2028", ""]),
       meta=st.sampled_from([None, {}]), order=st.booleans())
def test_one_text_block_shortcut_equals_full_validation(role: str, text: str, meta: dict[str, Any] | None, order: bool) -> None:
    """A model's reply of text alone, and every text message of an export, is one text block:
    taken by the shortcut too (15 µs of validation each, under 2 µs taken), with what the full
    validation makes of it, and, as it changes no facts, marked plain as a text message is."""
    block = {"type": "text", "text": text} if order else {"text": text, "type": "text"}
    event: dict[str, Any] = {"type": "message.appended", "data": {"role": role, "content": [block]}}
    if meta is not None:
        event["meta"] = meta
    assert _text_message(event) == (role, text)
    try:
        full = prepare(Full(event), 0, "e1")
    except InvalidEvent:  # lone surrogates: refused the same way
        with pytest.raises(InvalidEvent):
            prepare(event, 0, "e1")
        return
    shortcut = prepare(event, 0, "e1")
    assert shortcut._replace(plain=False) == full
    assert shortcut == prepare({**event, "data": {"role": role, "content": text}}, 0, "e1")
    assert ("message.appended", shortcut.data, {}) == parse(event, "e")


class Block(dict[str, Any]):
    pass


class Text(str):
    pass


@pytest.mark.parametrize(
    "event",
    [
        {"type": "message.appended", "data": {"role": "system", "content": "hi"}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": "hi"}] * 2}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": "hi", "citations": None}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "cache_control": {}}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "image", "text": "hi"}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": 7}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [Block(type="text", text="hi")]}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": Text("text"), "text": "hi"}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": Text("hi")}]}},
        {"type": "message.appended", "data": {"role": "user", "content": ({"type": "text", "text": "hi"},)}},
        {"type": "message.appended", "data": {"role": "user", "content": []}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi", "model": "m"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}, "meta": {"actor": "ana"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}, "extra": 1},
        {"type": "message.appended", "data": {"role": "user", "text": "hi"}},
        {"type": "title.set", "data": {"title": "hi"}},
    ],
    ids=["bad-role", "two-blocks", "block-citations", "block-without-text", "image-block", "text-not-str", "block-subclass",
         "type-subclass", "text-subclass", "blocks-tuple", "no-block", "optional-field", "meta", "unknown-key", "missing-content",
         "other-type"],
)
def test_anything_else_takes_full_validation(event: dict[str, Any]) -> None:
    assert _text_message(event) is None


def test_unstorable_text_is_refused_the_same_way() -> None:
    event = {"type": "message.appended", "data": {"role": "user", "content": "\ud800"}}
    assert _text_message(event) is not None
    with pytest.raises(InvalidEvent) as shortcut:
        prepare(event, 1)
    with pytest.raises(InvalidEvent) as full:
        prepare(Full(event), 1)
    assert shortcut.value.field == full.value.field == "events[1].data"


# -- the store's shortcut for one text message (`Store._append_text`) ----------------------------

_FROZEN = "2026-12-07T00:00:00.000000Z"


def _history(path: Path, state: str, filler: int) -> tuple[Store, str]:
    """A store holding the same history whenever it is built (ids chosen, the clock frozen by
    the caller), and the stream to append to: a thread with only its creation (no message
    yet), one that talked, one whose tool call waits for its result (facts pending), one in a
    run (facts pending), a fork, or a sub-agent's fork; `filler` events in another thread after
    it, so that the append moves the listing key."""
    store = Store(path)
    store.create_thread(title="t", thread_id="t", event_id="c-t")
    target = "t"
    if state != "fresh":
        store.append_message("t", "user", "hello", event_id="m-1")
        store.append_message("t", "assistant", "hi", event_id="m-2")
    if state == "waiting":
        store.append_message("t", "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}],
                             event_id="m-3")
    if state == "running":
        store.append("t", [{"type": "run.started", "data": {"run_id": "r1"}, "meta": {"event_id": "r-1"}}])
    if state in ("fork", "subagent"):
        target = store.fork("t", fork_id="f", event_id="k-f", kind=state)
    if filler:
        store.create_thread(thread_id="o", event_id="c-o")
        store.append("o", [{"type": "message.appended", "data": {"role": "user", "content": f"x{i}"},
                            "meta": {"event_id": f"o-{i}"}} for i in range(filler)])
    return store, target


def _rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored row of the file, read by a connection of its own."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return (conn.execute("SELECT * FROM events ORDER BY position").fetchall(),
                conn.execute("SELECT * FROM streams ORDER BY id").fetchall())


@settings(max_examples=25, deadline=None)
@given(state=st.sampled_from(["fresh", "talked", "waiting", "running", "fork", "subagent"]), filler=st.sampled_from([0, 1030]),
       role=st.sampled_from(["user", "assistant"]), text=st.text(max_size=40) | st.sampled_from(["\x00\n\"\\", "é😀"]))
def test_a_text_message_appended_by_the_shortcut_is_what_the_batch_path_writes(tmp_path_factory: pytest.TempPathFactory,
                                                                              state: str, filler: int, role: str,
                                                                              text: str) -> None:
    """`append_message` of one text message skips the batch's machinery (`Store._append_text`):
    its rows, the stream's new head (hash, facts carried, first message, listing key) and the
    record it returns are byte for byte what the batch path (`_append_once`) makes of the
    same event at the same moment."""
    directory = tmp_path_factory.mktemp("shortcut")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "now", lambda: _FROZEN)
        shortcut, target = _history(directory / "shortcut.db", state, filler)
        batch, _ = _history(directory / "batch.db", state, filler)
        assert _rows(directory / "shortcut.db") == _rows(directory / "batch.db")
        item = prepare_text(role, text, 0, "0190a0b0c0d07000800000000000abcd")
        taken = shortcut._append_text(target, item)
        made = batch._append_once(target, [item], "any", True, False)
    assert taken == made
    assert _rows(directory / "shortcut.db") == _rows(directory / "batch.db")
    assert shortcut.verify().events == len(_rows(directory / "shortcut.db")[0])  # (verify raises on a broken chain)
    shortcut.close()
    batch.close()


def test_append_message_of_text_refuses_what_append_refuses(tmp_path: Path) -> None:
    """The same refusals, by the same names, whichever way one text message comes in."""
    store = Store(tmp_path / "x.db")
    thread = store.create_thread()
    calls = [
        lambda: store.append_message("nope", "user", "hi"),
        lambda: store.append_message("", "user", "hi"),
        lambda: store.append_message(thread, "user", "hi", expect="sometimes"),
        lambda: store.append_message(thread, "user", "hi", expect=7),
        lambda: store.append_message(thread, "user", "\ud800"),
    ]
    events = [
        lambda: store.append("nope", [_text("hi")]),
        lambda: store.append("", [_text("hi")]),
        lambda: store.append(thread, [_text("hi")], expect="sometimes"),
        lambda: store.append(thread, [_text("hi")], expect=7),
        lambda: store.append(thread, [_text("\ud800")]),
    ]
    for call, event in zip(calls, events):
        with pytest.raises(StoreError) as by_message:
            call()
        with pytest.raises(StoreError) as by_event:
            event()
        assert (type(by_message.value), str(by_message.value)) == (type(by_event.value), str(by_event.value))
    assert store.counts().events == 1


def _text(text: str) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user", "content": text}}
