"""The files beside a database: a command that was refused or only read leaves none.

In WAL mode SQLite makes `DB-wal` and `DB-shm` as a connection first reads, and removes them
as the last connection closes, when it can copy the log into the file: a read-only connection
cannot, so `ls`, `show`, `verify` … left both, empty, after they exited. Each test runs real
processes on real files, and checks the database's bytes too: reading never writes it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import Store

SIDE = ("-wal", "-shm")


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), *args], capture_output=True, text=True,
                          timeout=120)


def _side_files(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name != db.name)


def _digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str]:
    """A database holding one thread of two messages, closed: no file beside it."""
    path = tmp_path / "t.db"
    with Store(str(path)) as store:
        thread = store.create_thread(title="walk")
        store.append_message(thread, "user", "a question")
        store.append_message(thread, "assistant", "an answer")
    assert _side_files(path) == []
    return path, thread


@pytest.mark.parametrize("args", [
    ("ls",), ("ls", "--all"), ("show", "{t}"), ("log", "{t}"), ("rows", "{t}"), ("export", "{t}"), ("verify",),
    ("checkpoint",),
], ids=lambda args: args[0] + ("-all" if "--all" in args else ""))
def test_a_read_command_leaves_no_file_beside_the_database(db: tuple[Path, str], args: tuple[str, ...]) -> None:
    path, thread = db
    before = _digest(path)
    done = _cli(path, *(arg.format(t=thread) for arg in args))
    assert done.returncode == 0, done.stderr
    assert _side_files(path) == []
    assert _digest(path) == before


@pytest.mark.parametrize("args", [
    ("append", "nosuch", "--role", "user", "--text", "hi"),
    ("append", "{t}", "--role", "user", "--text", "hi", "--expect", "99"),
    ("show", "nosuch"),
    ("export", "nosuch"),
], ids=["append-missing-thread", "append-wrong-head", "show-missing-thread", "export-missing-thread"])
def test_a_refused_command_leaves_no_file_beside_the_database(db: tuple[Path, str], args: tuple[str, ...]) -> None:
    path, thread = db
    before = _digest(path)
    done = _cli(path, *(arg.format(t=thread) for arg in args))
    assert done.returncode == 1 and done.stderr.startswith("error: "), (done.returncode, done.stderr)
    assert _side_files(path) == []
    assert _digest(path) == before


_LIBRARY = """
import sys
from eventstore import Store
store = Store(sys.argv[1], read_only=sys.argv[2] == "ro")
print(store.counts().events, len(list(store.read_all())))
store.close()
"""


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_a_store_opened_read_and_closed_leaves_no_file_beside_the_database(db: tuple[Path, str], mode: str) -> None:
    path, _ = db
    before = _digest(path)
    done = subprocess.run([sys.executable, "-c", _LIBRARY, str(path), mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "3"]
    assert _side_files(path) == []
    assert _digest(path) == before


_HOLDER = """
import sys
from eventstore import Store
store = Store(sys.argv[1], read_only=sys.argv[2] == "ro")
if sys.argv[2] == "writer":
    store.append_message(sys.argv[3], "user", "written while the others read")
print(store.counts().events, flush=True)
sys.stdin.readline()
print(store.counts().events, flush=True)
store.close()
"""


@pytest.mark.parametrize("holder", ["ro", "writer"])
def test_the_files_stay_while_another_process_holds_the_database_open(db: tuple[Path, str], holder: str) -> None:
    """Another process's open connection needs them (a writer's log holds its commits): only
    a clean close, the last one, removes them; the commands here close theirs and leave them."""
    path, thread = db
    with subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), holder, thread], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdin is not None
        events = child.stdout.readline().strip()
        assert events == ("4" if holder == "writer" else "3"), child.stderr.read() if child.stderr else ""
        for args in (("ls",), ("show", thread), ("append", "nosuch", "--role", "user", "--text", "hi")):
            _cli(path, *args)
            assert _side_files(path) == sorted(path.name + suffix for suffix in SIDE), args
        assert "written while the others read" in _cli(path, "log", thread).stdout or holder != "writer"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == events
        assert child.wait(timeout=60) == 0
    # The holder's close was the last: it removed them (a read-only one as a writer's does).
    assert _side_files(path) == []
    assert _cli(path, "verify").returncode == 0
    assert _side_files(path) == []


def test_a_read_through_a_symlink_leaves_no_file_beside_the_file_it_names(db: tuple[Path, str]) -> None:
    """SQLite keeps the log beside the file a symlink names: those were left."""
    path, thread = db
    shelf = path.parent / "shelf"
    shelf.mkdir()
    real = shelf / path.name
    path.rename(real)
    path.symlink_to(real)
    done = _cli(path, "show", thread)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in path.parent.iterdir()) == ["shelf", path.name]
    assert sorted(p.name for p in shelf.iterdir()) == [path.name]


_DROPPED = """
import gc, os, sys, threading
from eventstore import Store
store = Store(sys.argv[1], read_only=True)
if sys.argv[2] == "thread":  # read on a thread of its own, which has its own connection and ends
    worker = threading.Thread(target=lambda: print(store.counts().events, len(list(store.read_all()))))
    worker.start()
    worker.join()
else:
    print(store.counts().events, len(list(store.read_all())))
del store
gc.collect()
print(sorted(name for name in os.listdir(os.path.dirname(sys.argv[1])) if name != os.path.basename(sys.argv[1])))
"""


@pytest.mark.parametrize("read", ["here", "thread"])
def test_a_read_only_store_dropped_without_close_leaves_no_file_beside_the_database(db: tuple[Path, str], read: str) -> None:
    """A read-only store collected without `close()` (dropped, or its thread's connection gone
    with the thread) closed its connection as the driver does, which left `-wal` and `-shm`,
    empty: only `close()` closed the log. Collected, it now closes as `close()` does, at the
    collection (the files are gone before the process ends), and says nothing on stderr."""
    path, _ = db
    before = _digest(path)
    done = subprocess.run([sys.executable, "-c", _DROPPED, str(path), read], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == ["3 3", "[]"]
    assert _side_files(path) == []
    assert _digest(path) == before


_KILLED = """
import os, sys
from eventstore import Store
store = Store(sys.argv[1])
store.append_message(sys.argv[2], "user", "committed by a writer killed before its close")
os._exit(0)
"""


def test_a_writer_killed_while_a_read_only_store_closes_leaves_its_commits_to_the_next_writer(
        db: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only store's close looks at the log, and only when it is empty opens the file
    writable to close it. A writer that committed and was killed just after that look left its
    commits in the log, and that close, the last, copied them into the file: the read wrote
    the database. It now looks again once it has the log open, and leaves what it finds there
    as SQLite leaves it, for the next writer."""
    path, thread = db
    seen: list[str] = []
    getsize = os.path.getsize

    def then_a_writer_commits_and_dies(name: str) -> int:
        size = getsize(name)
        if str(name).endswith("-wal") and not seen:
            done = subprocess.run([sys.executable, "-c", _KILLED, str(path), thread], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr
            seen.append(_digest(path))
        return size

    store = Store(str(path), read_only=True)
    assert store.counts().events == 3
    monkeypatch.setattr(os.path, "getsize", then_a_writer_commits_and_dies)
    store.close()
    monkeypatch.undo()
    assert seen and _digest(path) == seen[0]  # the close wrote nothing into the file
    assert os.path.getsize(f"{path}-wal") > 0
    with Store(str(path)) as writer:  # the next writer copies the commits in
        assert list(writer.read(thread))[-1].data["content"][0]["text"] == "committed by a writer killed before its close"
    assert _side_files(path) == []


_CLOSED_MID_READ = """
import os, sys
from eventstore import Store
store = Store(sys.argv[1], read_only=sys.argv[3] == "read-only")
reads = [store.read(sys.argv[2]), store.read_all(), store.read(sys.argv[2])]
next(reads[0]), next(reads[1])  # the third is never begun
store.close()
print(sorted(name for name in os.listdir(os.path.dirname(sys.argv[1])) if name != os.path.basename(sys.argv[1])))
"""


@pytest.mark.parametrize("mode", ["read-only", "writable"])
def test_a_store_closed_while_reads_are_unfinished_leaves_no_file_beside_the_database(db: tuple[Path, str],
                                                                                       mode: str) -> None:
    """A store closed with a read begun and not read to its end left `-wal` and `-shm` behind
    (a read-only one for good, a writable one until the read was collected): the unfinished
    read kept its connection open past `close()`, so the close of the log was not the last.
    Its close now ends the reads it left unfinished first."""
    path, thread = db
    before = _digest(path)
    done = subprocess.run([sys.executable, "-c", _CLOSED_MID_READ, str(path), thread, mode], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == ["[]"]
    assert _side_files(path) == []
    assert _digest(path) == before
