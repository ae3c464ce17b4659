"""The split verify's child process (`eventstore.splitscan`) in the situations a caller may
put it in: it must check the file this process has open, with this package's code, and any
failure of it must leave the verify to one scan.
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import splitscan
from eventstore.packing import TYPE_CODES
from tests.test_verify_plain import _run, template  # noqa: F401  (a fixture)
from tests.test_verify_held_off import wait_for_readers_held_off
from tests.test_verify_split import _last, _one_scan, split_always  # noqa: F401  (a fixture)
from threadlog import IntegrityError, Store


def _later_event(path: Path) -> int:
    """A position in the later half of the log, that of a plain message of thread T."""
    conn = sqlite3.connect(path)
    try:
        (last,) = conn.execute("SELECT max(position) FROM events").fetchone()
        (position,) = conn.execute("SELECT min(position) FROM events WHERE stream_id = 'T' AND position > ? AND type = ?",
                                   (last // 2, TYPE_CODES["message.appended"])).fetchone()
        return int(position)
    finally:
        conn.close()


def test_the_child_checks_the_file_open_here_after_the_working_directory_changed(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A store opened by a relative name, then the working directory changed to one holding
    another file of that name (an untouched copy): the child must not check that one."""
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    tampered, copy = tmp_path / "here" / "t.db", tmp_path / "there" / "t.db"
    shutil.copy(template, tampered)
    shutil.copy(template, copy)
    _run(tampered, ("UPDATE events SET meta = '{\"k\":1}' WHERE position = ?", (_later_event(tampered),)))
    expected = _one_scan(tampered)
    assert isinstance(expected, str)
    monkeypatch.chdir(tmp_path / "here")
    with Store("t.db", read_only=True) as store:
        monkeypatch.chdir(tmp_path / "there")
        with pytest.raises(IntegrityError) as error:
            store.verify()
    assert str(error.value) == expected
    assert split_always[-1] is None  # the split declined: one scan named the problem


def test_the_child_runs_this_package_not_one_in_the_working_directory(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """`python -m` puts the working directory first on the path: a directory holding a
    package named `eventstore` (another checkout, or anything) must not run as the child."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    other = tmp_path / "cwd" / "eventstore"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    ran = tmp_path / "ran"
    (other / "splitscan.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path / "cwd")
    with Store(path, read_only=True) as store:
        report = store.verify()
    assert not ran.exists()
    assert split_always == [(report.streams, report.events, report.redacted)]  # the split passed it


@pytest.mark.parametrize("column", ["data", "meta", "recorded_at", "hash", "pending"])
def test_text_that_is_not_utf8_in_the_last_event_is_named_by_one_scan(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch, column: str) -> None:  # noqa: F811
    """The split reads the last event for its view of the log: a row reads refuse must not end
    the verify with a read error, but leave it to one scan, which names the row."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    with Store(path) as store:
        store.append_message("T", "user", "the last event")
    _run(path, (f"UPDATE events SET \"{column}\" = CAST(x'ff41' AS TEXT) WHERE position = (SELECT max(position) FROM events)", ()))
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    expected = _one_scan(path)
    assert isinstance(expected, str)
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 0)
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError) as error:
            store.verify()
    assert str(error.value) == expected
    assert split_always == [None]


def test_a_hash_that_is_not_utf8_after_the_cut_is_named_by_one_scan_with_a_checkpoint(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """With a checkpoint, the first part folds the stored hashes past the cut: one that reads
    refuse is the later part's problem, named by one scan."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    with Store(path) as store:
        kept = store.checkpoint()
        store.append_message("T", "user", "after the checkpoint")
    _run(path, ("UPDATE events SET hash = CAST(x'ff41' AS TEXT) WHERE position = ?", (_later_event(path),)))
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError) as one:
            store.verify(checkpoint=kept)
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 0)
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError) as split:
            store.verify(checkpoint=kept)
    assert str(split.value) == str(one.value)
    assert split_always == [None]


def test_a_writer_waiting_on_a_file_in_rollback_journal_mode_does_not_stall_the_split(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Outside WAL mode a writer about to commit holds off new readers until this process's read
    transaction ends: the child, opened after, cannot read, and must give up at once (the
    verify then runs in one scan) rather than wait out its lock timeout while the verify waits
    on it."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    conn.close()
    writer = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    committed: list[float] = []

    def commit() -> None:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE streams SET kind = kind WHERE id = 'T'")
        writer.execute("COMMIT")  # waits for this process's read lock
        committed.append(time.monotonic())

    started = splitscan._Child.start.__func__  # type: ignore[attr-defined]

    def start(cls: type[splitscan._Child], *args: Any) -> splitscan._Child | None:
        thread.start()
        wait_for_readers_held_off(path)  # the writer is waiting to commit
        return started(cls, *args)  # type: ignore[no-any-return]

    thread = threading.Thread(target=commit)
    monkeypatch.setattr(splitscan._Child, "start", classmethod(start))
    began = time.monotonic()
    with Store(path, read_only=True) as store:
        report = store.verify()
    took = time.monotonic() - began
    thread.join()
    writer.close()
    assert split_always == [None] and report.events == _last(path) and committed
    assert took < 10, f"the verify took {took:.1f} s"


def test_a_process_holding_many_files_open_verifies_with_the_split(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A server holding more than 1024 descriptors open gets pipes numbered past what
    `select.select` takes: the split must still wait on them, not end the verify with an error."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open at most {hard} files")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with Store(path, read_only=True) as store:
            report = store.verify()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert split_always == [(report.streams, report.events, report.redacted)]
