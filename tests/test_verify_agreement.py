"""What a full `verify` finds, a check of the thread alone (`only=`) and `verify --since` a
checkpoint taken before the tampered events find too, naming the same position."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from eventstore.sqlite import SQLiteBackend
from eventstore.verify import verify
from threadlog import IntegrityError, Store


def only(db: Path, thread: str) -> None:
    """`verify(only=[thread])`, on a backend of its own (as a restore runs it, on its store's)."""
    backend = SQLiteBackend(db, read_only=True)
    try:
        with backend.read_transaction():
            verify(backend, only=[thread])
    finally:
        backend.close()


def verdicts(db: Path, thread: str, since: str) -> list[tuple[int | None, str]]:
    """(position, message) of the full verify, the check of `thread` alone and `since`: each must fail."""
    out = []
    with Store(db, read_only=True) as store:
        for check in (store.verify, lambda: only(db, thread), lambda: store.verify(since=since)):
            with pytest.raises(IntegrityError) as caught:
                check()
            out.append((caught.value.position, caught.value.why))
    return out


def test_a_payload_put_back_after_its_redaction_fails_every_verify(tmp_path: Path) -> None:
    """The `event.redacted` says the payload was erased; a row holding it again (its original
    data, which still matches the chain, and no `redacted_by`) contradicts it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", thread_id="t")
        secret = store.append_message(t, "user", "my password is hunter2")
        store.append_message(t, "assistant", "noted")
        before = store.checkpoint()
        record = store.redact(secret.position, reason="leak", actor="dpo")
        store.verify()
    conn = sqlite3.connect(db)
    original = '{"content":[{"text":"my password is hunter2","type":"text"}],"role":"user"}'
    conn.execute("UPDATE events SET data = ?, data_digest = NULL, redacted_by = NULL WHERE position = ?",
                 (original, secret.position))
    conn.commit()
    conn.close()
    with Store(db, read_only=True) as store:
        assert store.event_at("t", 1).data["content"][0]["text"] == "my password is hunter2"
    found = verdicts(db, "t", before)
    assert {position for position, _ in found} == {record.position}, found
    assert all(f"names position {secret.position}, which it did not erase" in why for _, why in found), found


@pytest.mark.parametrize("kind", ["thread", "fork"])
def test_a_stream_row_with_no_events_fails_verify_and_a_check_of_it_alone(tmp_path: Path, kind: str) -> None:
    """Every stream starts with its own event (thread.created, thread.forked). A row added by
    hand with none, whose columns say what an empty history would (created_position NULL,
    head at the fork point, head_hash the parent's event), is listed and read like any other
    thread, and a checkpoint (which covers events) cannot see it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", thread_id="t")
        store.append_message(t, "user", "hello")
        store.append_message(t, "assistant", "hi")
        before = store.checkpoint()
        at_1 = store.event_at("t", 1).hash
    conn = sqlite3.connect(db)
    columns = ("id, parent_id, parent_offset, root_id, depth, head, created_position, kind, head_hash, facts, "
               "first_message_offset, last_position, recency")
    row = ("x", None, None, "x", 0, 0, None, "thread", "", None, None, 0, 0) if kind == "thread" else \
        ("x", "t", 2, "t", 1, 2, None, "thread", at_1, None, 1, 0, 0)
    conn.execute(f"INSERT INTO streams ({columns}) VALUES ({', '.join('?' * len(row))})", row)
    conn.commit()
    conn.close()
    with Store(db, read_only=True) as store:
        assert "x" in [info.id for info in store.threads(forks=True)]
        assert store.checkpoint() == before  # a checkpoint covers events: it cannot tell
        for check in (store.verify, lambda: only(db, "x")):
            with pytest.raises(IntegrityError, match="x: the stream's row has no first event"):
                check()


def _thread_and_checkpoint(db: Path) -> tuple[str, list[int]]:
    """A thread of five events; a checkpoint after the first three. (checkpoint, positions)"""
    with Store(db) as store:
        t = store.create_thread(title="t", thread_id="t")
        store.append_message(t, "user", "one")
        store.append_message(t, "assistant", "two")
        before = store.checkpoint()
        store.append_message(t, "user", "three")
        store.append_message(t, "assistant", "four")
        return before, [e.position for e in store.read(t)]


def test_since_names_the_event_after_a_deleted_one_as_the_full_verify_does(tmp_path: Path) -> None:
    """The first new event of the thread is gone: the next one has no event before it. Both
    name that next event, not the thread's first (which the checkpoint covers, untouched)."""
    db = tmp_path / "t.db"
    before, positions = _thread_and_checkpoint(db)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE position = ?", (positions[3],))
    conn.commit()
    conn.close()
    found = verdicts(db, "t", before)
    assert [position for position, _ in found] == [positions[4]] * 3, found


@pytest.mark.parametrize("offset", ["'x'", "3.5"])
def test_since_reports_an_offset_of_another_kind_as_an_integrity_error(tmp_path: Path, offset: str) -> None:
    db = tmp_path / "t.db"
    before, positions = _thread_and_checkpoint(db)
    conn = sqlite3.connect(db)
    conn.execute(f'UPDATE events SET "offset" = {offset} WHERE position = ?', (positions[3],))
    conn.commit()
    conn.close()
    found = verdicts(db, "t", before)
    assert all(position in positions[3:] for position, _ in found), found


def test_a_check_of_a_thread_whose_row_was_deleted_names_its_events(tmp_path: Path) -> None:
    """The row of a thread is gone and its events are still there: as the full verify, a check
    of that thread alone names its first event, instead of passing it (0 events checked)."""
    db = tmp_path / "t.db"
    before, positions = _thread_and_checkpoint(db)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM streams WHERE id = 't'")
    conn.commit()
    conn.close()
    found = verdicts(db, "t", before)
    assert found[0] == found[1] == (positions[0], "event belongs to no known stream"), found


@pytest.mark.parametrize("offset", [-(2**62) - 1, 2**62, 2**63 - 2])
def test_a_check_of_a_thread_alone_reads_every_offset(tmp_path: Path, offset: int) -> None:
    """An event added to the thread at an offset far outside its history (past the head) is
    named by the full verify and by a check of the thread alone."""
    db = tmp_path / "t.db"
    before, positions = _thread_and_checkpoint(db)
    conn = sqlite3.connect(db)
    columns = 'stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, data_digest, hash, pending, redacted_by'
    conn.execute(f"INSERT INTO events ({columns}) SELECT stream_id, ?, x'00', type, schema_version, data, meta, recorded_at, "
                 "data_digest, hash, pending, redacted_by FROM events WHERE position = ?", (offset, positions[-1]))
    conn.commit()
    conn.close()
    found = verdicts(db, "t", before)
    assert [position for position, _ in found] == [positions[-1] + 1] * 3, found
