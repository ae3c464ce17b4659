"""Hash chains and redaction (tampering is covered by the reliability suite)."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

from eventstore import IntegrityError, InvalidEvent, Store
from tests.backends import dump


def test_fork_chains_to_the_parent_event_before_the_fork_point(store: Store) -> None:
    t = store.create_thread()
    store.append_message(t, "user", "a")
    store.append_message(t, "user", "b")
    f = store.fork(t, at=2)
    parent_prev = store.event_at(t, 1)
    from eventstore.integrity import chain_hash, canonical

    first = store.event_at(f, 2)
    expected = chain_hash(parent_prev.hash, f, 2, first.event_id, first.type, 1, first.recorded_at, canonical(first.meta), first.data_digest)
    assert first.hash == expected
    report = store.verify()
    assert (report.streams, report.events) == (2, 4)


def test_redact_erases_the_payload_and_still_verifies(store: Store) -> None:
    t = store.create_thread()
    secret = store.append_message(t, "user", "my password is hunter2")
    store.append_message(t, "assistant", "noted")
    f = store.fork(t)
    record = store.redact(secret.position, "leaked password", "ops@example.com")
    assert record.type == "event.redacted"
    assert {k: v for k, v in record.data.items() if k != "skeleton_digest"} == {"position": secret.position, "reason": "leaked password", "actor": "ops@example.com"}
    erased = store.event_at(f, 1)
    assert erased.redacted and "hunter2" not in str(erased.data) and erased.data["role"] == "user"
    assert (erased.hash, erased.data_digest) == (secret.hash, secret.data_digest)
    assert "hunter2" not in "".join(dump(store))
    assert store.verify().redacted == 1


def test_redact_refusals_change_nothing(store: Store) -> None:
    t = store.create_thread()
    m = store.append_message(t, "user", "x")
    store.fork(t)
    store.redact(m.position, "r", "a")
    before = dump(store)
    for position in (0, 999, m.position, store.event_at(t, 2).position):
        with pytest.raises(InvalidEvent):
            store.redact(position, "again", "a")
    with pytest.raises(InvalidEvent):
        store.redact(1, "", "a")
    assert dump(store) == before


def test_erasing_data_without_a_redaction_record_is_caught(file_store: Store) -> None:
    t = file_store.create_thread()
    m = file_store.append_message(t, "user", "x")
    with contextlib.closing(sqlite3.connect(file_store.path)) as conn, conn:
        conn.execute("UPDATE events SET data = '{}', redacted_by = 1 WHERE position = ?", (m.position,))
    with pytest.raises(IntegrityError) as info:
        file_store.verify()
    assert info.value.position == m.position


def test_verify_reports_progress_up_to_the_total(store: Store) -> None:
    for _ in range(3):
        t = store.create_thread()
        store.append_message(t, "user", "x")
    seen: list[tuple[int, int]] = []
    store.verify(progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (6, 6) and seen == sorted(seen)  # every 10,000 events, and at the end
