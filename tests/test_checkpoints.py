"""WAL checkpoints run off the append path (`eventstore/checkpoints.py`): a busy writer's log
stays small without SQLite checkpointing inside its commits, the thread ends with the store,
and nothing committed depends on it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from eventstore.checkpoints import BACKSTOP, EVERY, EVERY_ROWS
from threadlog import Store

PAGE = 4096 + 24  # a WAL frame: its header and one page
ROOT = Path(__file__).resolve().parents[1]


def _checkpoint_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"threadlog checkpoints {path}" and t.is_alive()]


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return max(0, wal.stat().st_size - 32) // PAGE if wal.exists() else 0


def _grows(path: Path, size: int) -> bool:
    """Whether the database file (not its log) grows past `size` within a few seconds."""
    deadline = time.monotonic() + 10
    while path.stat().st_size <= size and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.stat().st_size > size


def test_a_busy_writer_s_pages_reach_the_database_file_from_the_thread_not_its_commits(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    with Store(db) as store:
        thread = store.create_thread(title="busy")
        store.purge()  # the log copied into the file and emptied
        size = db.stat().st_size
        for i in range(2 * EVERY + 1):
            store.append_message(thread, "user", f"message {i}" * 50)
        # Far fewer pages than the backstop are in the log: the writer's commits never
        # checkpointed, yet the database file takes the pages, copied by the thread.
        assert _wal_frames(db) < BACKSTOP
        assert _checkpoint_threads(db), "no checkpoint thread after many commits"
        assert _grows(db, size), "nothing was checkpointed"
        assert len(list(store.read(thread))) == 2 * EVERY + 2
        store.verify()
        for _ in range(5):  # the store's own checkpoints wait for the thread's, never fail on it
            for i in range(EVERY):
                store.append_message(thread, "user", "more")
            store.purge()
            assert _wal_frames(db) == 0
    assert not _checkpoint_threads(db), "the thread outlived the store"


def test_a_store_that_commits_little_starts_no_thread_and_a_dropped_one_ends_it(tmp_path: Path) -> None:
    small, dropped = tmp_path / "small.db", tmp_path / "dropped.db"
    with Store(small) as store:
        thread = store.create_thread()
        for i in range(10):
            store.append_message(thread, "user", f"m{i}")
        assert not _checkpoint_threads(small)
    store = Store(dropped)
    thread = store.create_thread()
    for i in range(EVERY + 1):
        store.append_message(thread, "user", f"m{i}")
    assert _checkpoint_threads(dropped)
    del store
    gc.collect()
    deadline = time.monotonic() + 10
    while _checkpoint_threads(dropped) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _checkpoint_threads(dropped), "a store dropped unclosed left its thread running"


def test_children_forked_while_the_thread_checkpoints_open_the_file_and_write(tmp_path: Path) -> None:
    """A fork waits until the checkpoint thread is out of SQLite: a child that inherited a
    mutex held by that thread would hang on its first open. Each child opens its own store
    (a connection is never used across a fork), writes enough to start its own thread, and exits."""
    db = tmp_path / "forked.db"
    children = 12
    with Store(db) as store:
        parent = store.create_thread()
        pids = []
        for n in range(children):
            for i in range(EVERY // 4 + 1):  # keeps the parent's thread checkpointing
                store.append_message(parent, "user", f"parent {n}.{i}")
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    with Store(db) as own:
                        thread = own.create_thread(title=f"child {n}")
                        for i in range(EVERY + 1):
                            own.append_message(thread, "user", f"child {i}")
                        code = 0 if _checkpoint_threads(db) else 2
                finally:
                    os._exit(code)
            pids.append(pid)
        deadline = time.monotonic() + 60
        codes = {}
        while len(codes) < children and time.monotonic() < deadline:
            for pid in pids:
                if pid not in codes:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        codes[pid] = os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        for pid in set(pids) - set(codes):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert len(codes) == children, f"{children - len(codes)} children hung"
        assert set(codes.values()) == {0}, codes
        assert len(store.threads()) == children + 1
        store.verify()


def test_the_thread_never_creates_a_file_removed_under_the_store(tmp_path: Path) -> None:
    db = tmp_path / "gone.db"
    store = Store(db)
    thread = store.create_thread()
    for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        name.unlink(missing_ok=True)
    for i in range(EVERY + 1):  # the writer's open handles still take the commits
        store.append_message(thread, "user", f"m{i}")
    deadline = time.monotonic() + 5
    while _checkpoint_threads(db) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not db.exists(), "the checkpoint thread created an empty database where the file was removed"
    store.close()


def test_large_batches_ask_for_checkpoints_sooner_than_every_hundred_commits(tmp_path: Path) -> None:
    db = tmp_path / "batches.db"
    with Store(db) as store:
        thread = store.create_thread()
        store.purge()
        size = db.stat().st_size
        for n in range(EVERY_ROWS // 500 + 1):  # a few commits, far fewer than EVERY
            store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"{n}.{i} " * 20}}
                                  for i in range(500)])
        assert _checkpoint_threads(db) and _grows(db, size)


def test_at_synchronous_full_the_writer_checkpoints_inside_its_commits_and_starts_no_thread(tmp_path: Path) -> None:
    """At FULL every commit syncs the log; a thread's checkpoint syncs would contend with them
    (measured slower), so SQLite's own checkpoint (every 1,000 pages) keeps the log small."""
    db = tmp_path / "full.db"
    with Store(db, synchronous="FULL") as store:
        thread = store.create_thread(title="full")
        size = db.stat().st_size
        for i in range(2 * EVERY + 1):
            store.append_message(thread, "user", f"message {i}" * 200)
        assert not _checkpoint_threads(db)
        assert db.stat().st_size > size, "nothing was checkpointed"
        assert _wal_frames(db) <= 1000 + 20  # SQLite's threshold, plus the commit that crossed it
        assert len(list(store.read(thread))) == 2 * EVERY + 2
        store.verify()


# Stores dropped unclosed at each depth a few calls short of the recursion limit: by the last
# reference going (inside `dict.pop`), or by a garbage collection of a cycle holding the store.
DROPPED_DEEP = """
import gc, sys
from pathlib import Path
from threadlog import Store
from eventstore.checkpoints import EVERY

def depth():
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n

def deep(n, key):
    if n > 0:
        return deep(n - 1, key)
    stores.pop(key)
    if key[0] == "collected":
        gc.collect()

stores = {}
for short in range(1, 16):
    for how in ("dropped", "collected"):
        store = Store(Path(sys.argv[1]) / f"{how}-{short}.db")
        thread = store.create_thread()
        for i in range(EVERY + 1):  # enough to start its checkpoint thread
            store.append_message(thread, "user", f"m{i}")
        if how == "collected":
            cycle = [store]
            cycle.append(cycle)
            stores[how, short] = cycle
            del cycle
        else:
            stores[how, short] = store
        del store
        deep(sys.getrecursionlimit() - depth() - short, (how, short))
"""


def test_a_store_dropped_deep_in_a_recursion_ends_its_thread_quietly_and_closes_as_on_close(tmp_path: Path) -> None:
    """Dropped near the recursion limit (a garbage collection deep in a nested input's
    processing), the store's thread was told to stop by Python calls that raised
    `RecursionError`: a traceback at exit, the thread's connection left open, and so the log
    left beside the file, never copied back as a closed store's is. Nothing is printed, and each
    file is as `close()` leaves it: no `-wal`, every event in the file."""
    done = subprocess.run([sys.executable, "-c", DROPPED_DEEP, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    files = sorted(tmp_path.glob("*.db"))
    assert len(files) == 30
    left = [f"{db.name}-wal" for db in files if Path(f"{db}-wal").exists()]
    assert not left, f"logs left beside their files, not checkpointed on close: {left}"
    for db in files:
        with Store(db, read_only=True) as store:
            assert store.counts().events == EVERY + 2
