"""A disk that fills partway through a command, met by the `threadlog` console script in a real
process: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes every write past it fail with
EFBIG, as a full disk fails it with ENOSPC. The command says what it kept, and once the limit is
lifted the file opens, verifies, and running the command again finishes it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from threadlog import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PI_SESSION = FIXTURES / "pi" / "large-session-head.jsonl"
THREADLOG = str(Path(sys.executable).parent / "threadlog")


def run_capped(args: list[str], limit: int | None) -> subprocess.CompletedProcess[str]:
    """The console script, every file it writes capped at `limit` bytes (None: no cap)."""
    argv = [THREADLOG, *args]
    if limit is not None:
        wrapper = ("import os, resource, signal, sys\n"
                   "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                   f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
                   "os.execv(sys.argv[1], sys.argv[1:])")
        argv = [sys.executable, "-c", wrapper, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def events(db: Path) -> int:
    with Store(db, read_only=True) as store:
        return store.counts().events


def test_an_import_the_disk_stops_partway_says_what_it_kept(tmp_path: Path) -> None:
    """The session's thread was committed, then its messages' write failed: the error said
    "nothing was written", though the thread stayed in the file for `ls` to show."""
    db = tmp_path / "t.db"
    Store(db).close()
    # Room in the write-ahead log for the thread's first event, not for the batch of messages after it.
    run = run_capped(["--db", str(db), "import", "pi", str(PI_SESSION)], 64 * 1024)
    print(f"\n$ threadlog import pi <session> with files capped at 64 KiB -> exit {run.returncode}: {run.stderr.strip()}")
    assert run.returncode == 1 and run.stdout == "" and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1 and run.stderr.startswith("error: the disk refused an operation on"), run.stderr
    kept = events(db)
    assert kept > 0, "the cap let nothing through: the test needs the first write to fit"
    said = re.search(r"(\d+) event\(s\) of (.+?) were written before it; importing again adds only what is missing$",
                     run.stderr.strip())
    assert said is not None, run.stderr
    assert (int(said.group(1)), said.group(2)) == (kept, str(PI_SESSION))
    again = run_capped(["--db", str(db), "import", "pi", "--json", str(PI_SESSION)], None)
    assert again.returncode == 0, again.stderr
    assert run_capped(["--db", str(db), "verify"], None).returncode == 0
    whole = tmp_path / "whole.db"
    assert run_capped(["--db", str(whole), "import", "pi", str(PI_SESSION)], None).returncode == 0
    assert events(db) == events(whole)


def test_a_redaction_whose_old_copies_the_disk_keeps_says_to_purge_once_there_is_room(tmp_path: Path) -> None:
    """The redaction was committed, then copying the write-ahead log into the file failed for
    want of room: the error told the user to run `threadlog purge` "once the readers are done"
    (there were none) and named the command twice."""
    db = tmp_path / "t.db"
    secret = "sk-live-4242-do-not-keep"
    with Store(db) as store:
        thread = store.create_thread(title="leak")
        for i in range(300):
            store.append_message(thread, "user", f"note {i}: " + "padding " * 60)
        leaked = store.append_message(thread, "user", f"my key is {secret}").position
    assert db.stat().st_size > 128 * 1024
    # Room in the write-ahead log for the redaction, none to copy it into the pages past 64 KiB.
    run = run_capped(["--db", str(db), "redact", str(leaked), "--reason", "leaked key", "--actor", "ana"], 64 * 1024)
    print(f"\n$ threadlog redact with files capped at 64 KiB -> exit {run.returncode}: {run.stderr.strip()}")
    assert run.returncode == 3 and run.stdout == "" and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"error: committed: position {leaked} is redacted"), run.stderr
    assert "the disk refused an operation on" in run.stderr and "readers" not in run.stderr, run.stderr
    assert run.stderr.count("`threadlog purge`") == 1, run.stderr
    purge = run_capped(["--db", str(db), "purge"], None)
    assert purge.returncode == 0, purge.stderr
    assert run_capped(["--db", str(db), "verify"], None).returncode == 0
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path
    with Store(db, read_only=True) as store:
        assert store.counts().events == 303


def test_a_search_index_rebuild_the_disk_stops_says_so_and_keeps_the_old_index(tmp_path: Path) -> None:
    """Dropping the old index failed for want of room, SQLite rolled the transaction back, and
    the error the user saw was `database error on t.db: no such savepoint: clear_index`."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread(title="ferries")
        for i in range(300):
            store.append_message(thread, "user", f"note {i} about ferries: " + "padding " * 60)
    assert run_capped(["--db", str(db), "index"], None).returncode == 0
    found = run_capped(["--db", str(db), "search", "ferries", "--json"], None)
    assert found.returncode == 0, found.stderr
    run = run_capped(["--db", str(db), "index", "--rebuild"], 40_000)
    print(f"\n$ threadlog index --rebuild with files capped at 40,000 bytes -> exit {run.returncode}: {run.stderr.strip()}")
    assert run.returncode == 1 and run.stdout == "" and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"error: the disk refused an operation on {db}"), run.stderr
    assert run_capped(["--db", str(db), "verify"], None).returncode == 0
    again = run_capped(["--db", str(db), "search", "ferries", "--json"], None)
    assert (again.returncode, again.stdout) == (0, found.stdout), again.stderr


def test_a_demo_the_disk_stops_part_way_names_the_disk(tmp_path: Path) -> None:
    """The demo's first writes were committed, a later one failed for want of room, and the
    user read that "another `threadlog demo` is building it, or one was stopped part way"."""
    db = tmp_path / "d.db"
    Store(db).close()
    run = run_capped(["--db", str(db), "demo"], db.stat().st_size + 16 * 1024)
    print(f"\n$ threadlog demo with files capped -> exit {run.returncode}: {run.stderr.strip()}")
    assert run.returncode == 1 and run.stdout == "" and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"error: the disk refused an operation on {db}"), run.stderr
    assert "another `threadlog demo`" not in run.stderr
    kept = events(db)
    assert kept > 0, "the cap let nothing through: the test needs the first write to fit"
    assert run.stderr.rstrip().endswith(f"{db} holds the part of the demo written before it, not whole: build the demo "
                                        "on a new file (threadlog --db demo.db demo)"), run.stderr
    assert run_capped(["--db", str(db), "verify"], None).returncode == 0


@pytest.mark.parametrize("limit", [0, 4096, 32768])
@pytest.mark.parametrize("command", [["init"], ["new"], ["demo"], ["import", "pi", str(PI_SESSION)]], ids=["init", "new", "demo", "import"])
def test_a_new_database_the_disk_has_no_room_for_leaves_no_file_behind(tmp_path: Path, command: list[str], limit: int) -> None:
    """The file SQLite had created (empty, and its -wal and -shm) stayed: every command then
    said the database was empty, not a threadlog database yet."""
    folder = tmp_path / "new"
    folder.mkdir()
    db = folder / "t.db"
    run = run_capped(["--db", str(db), *command], limit)
    assert run.returncode == 1 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"error: the disk refused an operation on {db}"), run.stderr
    assert sorted(p.name for p in folder.iterdir()) == []
    assert run_capped(["--db", str(db), *command], None).returncode == 0
