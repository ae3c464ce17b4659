"""`verify` on a file outside WAL mode while another process waits to commit.

The verify reads in one transaction and checks the file's structure through a second
connection beside its scan. Outside WAL mode a writer waiting to commit holds every new reader
off until the verify's read ends, and the verify waits for that check: it must check within
its own read instead of waiting out the lock timeout and failing with "locked".
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore.structure import Structure
from threadlog import IntegrityError, Store


def _file(path: Path) -> None:
    with Store(path) as store:
        t = store.create_thread(thread_id="trip-to-lyon")
        for i in range(5):
            store.append_message(t, "user", f"question {i}")
        store.fork(t, 3)
        store.purge()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    conn.close()


def _readers_held_off(path: Path) -> bool:
    probe = sqlite3.connect(path, timeout=0)
    try:
        probe.execute("SELECT count(*) FROM streams").fetchone()
        return False
    except sqlite3.OperationalError as error:
        assert error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
        return True
    finally:
        probe.close()


def wait_for_readers_held_off(path: Path) -> None:
    """Return once a writer waits to commit on `path` (new readers are held off), polling: a
    busy machine may take a while to run the writer's thread."""
    deadline = time.monotonic() + 30
    while not _readers_held_off(path):
        assert time.monotonic() < deadline, "the writer never came to wait on the verify's read"
        time.sleep(0.01)


def _verify_with_a_waiting_writer(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, float, list[float]]:
    """Run `verify` with a writer already waiting to commit (on the verify's own read) when the
    structure check begins; return what it returned or raised, its time, and when the writer committed."""
    writer = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    committed: list[float] = []

    def commit() -> None:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE streams SET kind = kind WHERE id = 'trip-to-lyon'")
        writer.execute("COMMIT")  # waits for the verify's read to end
        committed.append(time.monotonic())

    thread = threading.Thread(target=commit)
    start = Structure.start

    def held(structure: Structure) -> Structure:
        thread.start()
        wait_for_readers_held_off(path)
        return start(structure)

    monkeypatch.setattr(Structure, "start", held)
    began = time.monotonic()
    outcome: Any
    with Store(path, read_only=True) as store:
        try:
            outcome = store.verify()
        except IntegrityError as error:
            outcome = error
    ended = time.monotonic()
    thread.join(timeout=60)
    writer.close()
    assert committed  # the writer committed once the verify's read ended
    return outcome, ended - began, committed


def test_a_writer_waiting_to_commit_does_not_make_verify_fail_with_locked(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.db"
    _file(path)
    report, took, _ = _verify_with_a_waiting_writer(path, monkeypatch)
    assert not isinstance(report, Exception), report
    assert report.events == 7 and report.streams == 2
    assert took < 10, f"the verify took {took:.1f} s: it waited out the lock"


def test_the_structure_is_still_checked_when_the_second_reader_is_held_off(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The check moves into the verify's own read; a damaged index is still found there."""
    path = tmp_path / "t.db"
    _file(path)
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events_stream_offset'").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    at = data.index(b"trip-to-lyon", start, start + page_size)
    data[at + 5] ^= 0x20  # an index key now sorts under another thread's id
    path.write_bytes(data)
    outcome, took, _ = _verify_with_a_waiting_writer(path, monkeypatch)
    assert isinstance(outcome, IntegrityError) and "structure is damaged" in str(outcome), outcome
    assert took < 10, f"the verify took {took:.1f} s: it waited out the lock"
