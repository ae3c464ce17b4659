"""The storage layout (schema 5): what is stored compactly reads back as exactly the text
that was hashed, whatever the text; generated event ids are time-ordered UUIDv7s."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import packing
from eventstore.ids import event_ids
from eventstore.integrity import digest_of
from eventstore.sqlite import SQLiteBackend
from threadlog import Store

HEX = "0123456789abcdef"

ids = st.one_of(st.text(HEX, min_size=32, max_size=32), st.text("0123456789abcdefABCDEF -", min_size=31, max_size=33),
                st.text(min_size=1, max_size=40))
times = st.one_of(st.sampled_from(["2025-03-01T10:00:00Z", "2026-01-31T12:00:00.123456Z"]), st.text(max_size=30))
hashes = st.one_of(st.text(HEX, min_size=64, max_size=64).map(lambda h: "tl2:" + h),
                   st.text(HEX, min_size=64, max_size=64), st.text("tl2:ABCDEFabcdef0123", min_size=60, max_size=70))
types = st.one_of(st.sampled_from(sorted(packing.TYPE_CODES)), st.text(min_size=1, max_size=20))


@settings(max_examples=150, deadline=None)
@given(event_id=ids, recorded_at=times, hash_=hashes, type_=types, digest=st.one_of(st.none(), hashes.map(lambda h: h[-64:])))
def test_every_value_reads_back_as_the_text_it_was(event_id: str, recorded_at: str, hash_: str,
                                                   type_: str, digest: str | None) -> None:
    backend = SQLiteBackend(":memory:")
    data = '{"a":1}'
    backend.insert_events([(1, "s", 0, event_id, type_, 1, data, "{}", recorded_at, digest, hash_, None, None)])
    row = backend.event_at_position(1)
    assert row is not None
    assert (row.event_id, row.type, row.recorded_at, row.hash) == (event_id, type_, recorded_at, hash_)
    assert row.data_digest == (packing.unpack_digest(digest) if digest is not None else None)
    assert digest_of(row) == (packing.unpack_digest(digest) if digest is not None else
                              "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862")
    assert [r.event_id for r in backend.events_by_id([event_id])] == [event_id]
    # And the Python decoders (other backends', the tests') agree with the SQL.
    stored = backend.conn.execute("SELECT event_id, type, recorded_at, hash FROM events").fetchone()
    assert (packing.unpack_id(stored[0]), packing.unpack_type(stored[1]), stored[2],
            packing.unpack_hash(stored[3])) == (event_id, type_, recorded_at, hash_)
    backend.close()


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.tuples(st.one_of(st.text(HEX, min_size=32, max_size=32), ids), hashes,
                                 st.one_of(st.none(), st.just('{"tools":["t1"]}'))), min_size=2, max_size=6),
       uniform=st.booleans())
def test_a_batch_reads_back_as_the_text_it_was(values: list[tuple[str, str, str | None]], uniform: bool) -> None:
    """Batches are packed all at once when every id and hash is packable, else one by one."""
    if uniform:  # the common case: generated ids and tagged hashes only
        values = [(event_ids(1)[0], "tl2:" + event_ids(1)[0] * 2, facts) for _, _, facts in values]
    if len({event_id for event_id, _, _ in values}) != len(values):
        return
    backend = SQLiteBackend(":memory:")
    backend.insert_events([(i + 1, "s", i, event_id, "message.appended", 1, '{"a":1}', "{}", "2026-01-31T12:00:00.123456Z",
                            None, hash_, facts, None) for i, (event_id, hash_, facts) in enumerate(values)])
    rows = [backend.event_at_position(i + 1) for i in range(len(values))]
    assert [(row.event_id, row.hash, row.facts) for row in rows if row is not None] == values
    assert [r.event_id for r in backend.events_by_id([values[-1][0]])] == [values[-1][0]]
    if uniform:
        packed = "SELECT count(*) FROM events WHERE length(event_id) = 16 AND length(hash) = 32 AND typeof(hash) = 'blob'"
        assert backend.conn.execute(packed).fetchone()[0] == len(values)
    backend.close()


GOOD_ID, GOOD_HASH = "0" * 31 + "a", "tl2:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("odd", [
    ("A" + GOOD_ID[1:], GOOD_HASH),  # an uppercase digit
    (" " + GOOD_ID[1:], GOOD_HASH),  # a space, which fromhex skips
    (GOOD_ID, "ab" + "tl2:" + GOOD_HASH[6:]),  # the tag further on
    (GOOD_ID, "tl2:tl2:" + GOOD_HASH[8:]),  # the tag twice
    (GOOD_ID, "tl2:" + "0123456789ABCDEF" * 4),
    (GOOD_ID, "xl2:" + GOOD_HASH[4:]),
], ids=["upper-id", "space-id", "tag-inside", "tag-twice", "upper-hash", "other-tag"])
def test_a_batch_with_one_odd_value_reads_back(odd: tuple[str, str]) -> None:
    values = [("1" * 32, "tl2:" + "1" * 64), odd, ("2" * 32, "tl2:" + "2" * 64)]
    backend = SQLiteBackend(":memory:")
    backend.insert_events([(i + 1, "s", i, event_id, "message.appended", 1, "{}", "{}", "2026-01-31T12:00:00.123456Z",
                            None, hash_, None, None) for i, (event_id, hash_) in enumerate(values)])
    rows = [backend.event_at_position(i + 1) for i in range(len(values))]
    assert [(row.event_id, row.hash) for row in rows if row is not None] == values
    backend.close()


def test_generated_event_ids_are_uuid7_in_time_order() -> None:
    first = event_ids(50)
    time.sleep(0.002)
    second = event_ids(50)
    assert first == sorted(first) and second == sorted(second) and first[-1] < second[0]
    assert len(set(first + second)) == 100
    for value in first + second:
        parsed = uuid.UUID(hex=value)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and parsed.hex == value
    assert abs(int(first[0][:12], 16) - time.time() * 1000) < 60_000  # the prefix is the time in ms


def test_a_file_stores_the_compact_forms(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="x")
        for i in range(20):
            store.append_message(t, "user", f"message {i}")
        store.append(t, [{"type": "title.set", "data": {"title": "y"}, "meta": {"event_id": "mine"}}])
        events = list(store.read(t))
        store.verify()
    assert [e.event_id for e in events] == sorted(e.event_id for e in events[:-1]) + ["mine"]
    conn = sqlite3.connect(db)
    try:
        kinds = conn.execute("SELECT typeof(event_id), typeof(type), typeof(recorded_at), typeof(hash), "
                             "typeof(data_digest), count(*) FROM events GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        conn.close()
    assert kinds == [("blob", "integer", "text", "blob", "null", 21), ("text", "integer", "text", "blob", "null", 1)]


def test_an_append_to_a_thread_writes_four_pages_and_moves_its_listing_key_rarely(tmp_path: Path) -> None:
    """A message appended to a thread commits its event's row, its entries in the two unique
    indexes, and its stream's row: four pages in the write-ahead log (counted in frames), not
    five. The stream's listing key (`recency`, its last position to within 1,024) is written
    only when it moves, so `streams_recency` stays out of the commit; listings stay exact."""
    db = tmp_path / "pages.db"
    with Store(db, synchronous="FULL") as store:  # FULL: no checkpoint thread to take frames away
        thread = store.create_thread(title="pages")
        other = store.create_thread(title="other")
        store.append_message(thread, "user", "warm")
        conn = sqlite3.connect(db, isolation_level=None)
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        for i in range(100):
            store.append_message(thread, "user", f"message {i}")
        frames = (Path(f"{db}-wal").stat().st_size - 32) // (4096 + 24)
        assert 400 <= frames < 450  # 5 pages an append before schema 8 (> 500); a leaf fills now and then
        keys = dict(conn.execute("SELECT id, recency FROM streams").fetchall())
        assert keys == {thread: 103 >> 10, other: 2 >> 10}
        store.append(other, [{"type": "message.appended", "data": {"role": "user", "content": "x"}}] * 1030)
        store.append_message(thread, "user", "latest")
        keys = dict(conn.execute("SELECT id, last_position >> 10 FROM streams WHERE recency = last_position >> 10"))
        assert keys == {thread: 1134 >> 10, other: 1133 >> 10}
        assert [info.id for info in store.threads()] == [thread, other]
        assert [info.id for info in store.threads(before=1134)] == [other]
        conn.close()
