"""The bytes that are hashed never change: pinned hashes and digests, and every appended
event's hash recomputed here from the layout as `integrity.chain_hash` documents it.

The append path is tuned for speed (a shortcut for text messages, hashes chained a batch at
a time, rows packed for the driver); these tests hold whatever it does to the layout that
every stored file and the PostgreSQL backend already use.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import integrity
from eventstore.prepare import prepare
from threadlog import Store

TEXT = "Find me a train — to Lyon \"quoted\" \\ and \u2028 ünïcode 🚆"


def reference_hash(prev: str, stream_id: str, offset: int, event_id: str, type_: str, version: int,
                   recorded_at: str, meta: str, data_digest: str) -> str:
    """The `tl2:` layout, spelled out field by field: `<length>:<value>` after a `tl2\\n` line."""
    fields = [prev, stream_id, str(offset), event_id, type_, str(version), recorded_at, meta, data_digest]
    header = "tl2\n" + "".join(f"{len(field)}:{field}" for field in fields)
    return "tl2:" + hashlib.sha256(header.encode("utf-8")).hexdigest()


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


PINNED = [
    (("", "0123456789abcdef", 0, "0192a3b4c5d67e8f9a0b1c2d3e4f5a6b", "thread.created", 1, "2026-01-31T12:00:00.123456Z",
      "{}", hashlib.sha256(b'{"title":"x"}').hexdigest()),
     "tl2:e0df259ab35f17b292114c46f61a21edaf08006087f4b2c38170d414cf6c4d99"),
    (("tl2:" + "ab" * 32, "thread-é", 12, "my own id", "message.appended", 3, "2026-12-01T23:59:59.000001Z",
      '{"actor":"ana"}', "0" * 64),
     "tl2:090e7714112fd3c6d93fd87679ebcbe30f4c680373ab14a9330a8d86de0c75bf"),
]


@pytest.mark.parametrize(("fields", "expected"), PINNED, ids=["first-event", "chained-non-ascii"])
def test_chain_hash_is_pinned(fields: tuple[Any, ...], expected: str) -> None:
    assert integrity.chain_hash(*fields) == expected
    assert reference_hash(*fields) == expected


@settings(max_examples=200, deadline=None)
@given(prev=st.text(max_size=80), stream_id=st.text(min_size=1, max_size=300), offset=st.integers(0, 10**12),
       event_id=st.text(max_size=300), type_=st.text(max_size=40), version=st.integers(1, 10**4),
       recorded_at=st.text(max_size=40), meta=st.text(max_size=2000), data_digest=st.text(max_size=70))
def test_chain_hash_is_the_layout_for_any_fields(prev: str, stream_id: str, offset: int, event_id: str, type_: str,
                                                 version: int, recorded_at: str, meta: str, data_digest: str) -> None:
    fields = (prev, stream_id, offset, event_id, type_, version, recorded_at, meta, data_digest)
    try:
        expected = reference_hash(*fields)
    except UnicodeEncodeError:  # lone surrogates: never stored (appends refuse them)
        return
    assert integrity.chain_hash(*fields) == expected


@pytest.mark.parametrize(("role", "digest"), [
    ("user", "772affede301a880ec294036fbf04555f798bcfb48a51a6493b80bc18d6dbf6b"),
    ("assistant", "13fea236fcab497a4ad073276e329536df55ec6de147dd5507e0677b55e9b139"),
], ids=["user", "assistant"])
def test_text_message_bytes_are_pinned(role: str, digest: str) -> None:
    prepared = prepare({"type": "message.appended", "data": {"role": role, "content": TEXT}}, 0)
    assert prepared.data_json == canonical({"content": [{"text": TEXT, "type": "text"}], "role": role})
    assert prepared.data_digest == digest == hashlib.sha256(prepared.data_json.encode()).hexdigest()


def _events() -> list[dict[str, Any]]:
    """A turn's worth of every shape the append path treats differently."""
    return [
        {"type": "run.started", "data": {"run_id": "r1"}, "meta": {"actor": "agent"}},
        {"type": "message.appended", "data": {"role": "user", "content": TEXT}},
        {"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "trains", "input": {"to": "Lyon"}}]}},
        {"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "08:04"}]}, "meta": {"event_id": "ev-fixed"}},
        {"type": "message.appended", "data": {"role": "assistant", "content": "The 08:04."}},
        {"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}},
    ]


def _check_chain(store: Store, thread: str) -> None:
    prev = ""
    for event in store.read(thread):
        meta = canonical(event.meta)
        data_digest = hashlib.sha256(canonical(event.data).encode("utf-8")).hexdigest()
        assert event.data_digest == data_digest
        expected = reference_hash(prev, event.stream_id, event.offset, event.event_id, event.type, event.schema_version,
                                  event.recorded_at, meta, data_digest)
        assert event.hash == expected, f"offset {event.offset} of {thread}"
        prev = event.hash


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "one-batch"])
def test_every_appended_hash_follows_the_layout(tmp_path: Path, batched: bool) -> None:
    with Store(tmp_path / "log.db") as store:
        thread = store.create_thread(title="Trip", metadata={"user": "ana"})
        recorded = []
        if batched:
            recorded += store.append(thread, _events())
        else:
            for event in _events():
                recorded += store.append(thread, [event])
        assert recorded == list(store.read(thread, 1))
        fork = store.fork(thread, todos=[{"content": "book"}])
        store.append(fork, [{"type": "message.appended", "data": {"role": "user", "content": "Cheaper?"}}] * 3)
        for name in (thread, fork):
            _check_chain(store, name)
        store.verify()
