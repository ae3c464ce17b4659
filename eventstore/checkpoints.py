"""WAL checkpoints off the append path.

In WAL mode a commit appends pages to the `-wal` file, and a checkpoint copies them back into
the database file, syncing both. SQLite runs one inside the commit that takes the log past
1,000 pages: measured here, 17-22 ms once every ~125 commits on a quiet machine, most of a
recorded turn's mean cost (its commits' median is tens of microseconds). A `Checkpointer`
runs them on a thread of its own instead, with a connection of its own: SQLite lets a
`PASSIVE` checkpoint run while a writer commits (it takes no lock a writer waits for), and
the driver lets other threads run while SQLite works. Nothing about durability changes: a
committed transaction is in the log, which survives a crash whether or not it was copied yet.

A store at `synchronous` FULL or EXTRA has no thread (`SQLiteBackend._checkpoints` says
why: each commit syncs there anyway, and the thread's syncs wait on the same disk).

The thread starts at the first request, so a store that commits little never has one. The
writer's own automatic checkpoint stays, at a higher threshold (`BACKSTOP`, which
`SQLiteBackend` sets), and under steady writing it still runs: a `PASSIVE` checkpoint copies
the frames there were when it began, the commits made meanwhile stay behind, and SQLite starts
the log over from its beginning only once every frame was copied, so the log grows until the
writer's own checkpoint (which no commit overtakes) copies the rest and lets it start over.
After `os.fork` the child's first request starts a thread of its own.

A store dropped unclosed ends its thread too, and its files are left as `close()` leaves them:
the thread's connection closes first, then the writer's, which, the last one open, copies the
log into the file and removes it. A garbage collection can drop a store anywhere, deep in a
recursion near the interpreter's limit: the Python calls of a `stop()` run there raised
`RecursionError` (printed at exit), and the thread, its connection and the log stayed. So
all that runs there is one call into C: a weak reference to the store puts itself on the
thread's queue. The thread holds the writer's connection, and lets it go after closing its own.
At the interpreter's exit every thread still running is stopped (`_at_exit`).

A fork never happens while a checkpoint thread is inside SQLite (`_IN_SQLITE`, held around
each of its calls and by `os.fork` itself): the child would inherit SQLite's process-wide
mutexes held by a thread it does not have, and its first open of a database would wait forever.
"""

from __future__ import annotations

import atexit
import os
import queue
import sqlite3
import threading
import urllib.parse
import weakref

# Commits between two checkpoint requests: at a turn's ~6-7 pages a commit, a log of about
# 2.6 MB, under SQLite's own 1,000-page threshold. Large batches ask sooner: every `EVERY_ROWS`
# events written (a 1,000-message batch is ~150 pages).
EVERY = 100
EVERY_ROWS = 2000
# The writer's `wal_autocheckpoint` while a checkpointer serves it, in pages (64 MiB at 4 KiB).
# Each of its checkpoints copies only what the thread's last one left (~600-1,000 pages of
# single appends; 17-23 ms with its syncs, on a 2.6M-event file): at 4,000 pages that came
# every ~600 single appends. Five thousand single appends to random threads of that file, four
# interleaved pairs: a mean of 146-217 µs an append at 16,000 pages, 176-450 µs at 4,000.
BACKSTOP = 16000

_IN_SQLITE = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_IN_SQLITE.acquire, after_in_parent=_IN_SQLITE.release,
                        after_in_child=_IN_SQLITE.release)


class Checkpointer:
    """Checkpoints one database file on a daemon thread when asked (`committed`), for as long as
    `owner` (the store's backend, whose connection `writer` is) lives."""

    __slots__ = ("path", "running", "rows", "_commits", "_requests", "_owner", "_writer", "_thread", "_stopped")

    def __init__(self, path: str, owner: object, writer: sqlite3.Connection) -> None:
        self.path = path
        # Held during each of the thread's checkpoints: a checkpoint of the store's own (purge's
        # TRUNCATE) holds it too, so it never finds the thread's running and gives up.
        self.running = threading.Lock()
        self.rows = 0  # events written since the last request (the writer adds them)
        self._commits = 0
        self._requests: queue.SimpleQueue[object] = queue.SimpleQueue()  # what wakes the thread: a request, a stop
        # The owner collected, this reference puts itself on the queue: a call into C, no Python frame.
        self._owner = weakref.ref(owner, self._requests.put)
        self._writer: sqlite3.Connection | None = writer
        self._thread: threading.Thread | None = None
        self._stopped = False

    def committed(self) -> None:
        """Count a commit; every `EVERY`th, or one that takes the events written past
        `EVERY_ROWS`, wakes the thread (starting it if none is running)."""
        self._commits += 1
        if (self._commits < EVERY and self.rows < EVERY_ROWS) or self._stopped:
            return
        self._commits = self.rows = 0
        thread = self._thread
        if thread is None or not thread.is_alive():
            thread = threading.Thread(target=self._run, name=f"threadlog checkpoints {self.path}", daemon=True)
            _RUNNING.add(self)  # (before it starts: an exit meanwhile stops it too)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (interpreter shutting down, limits): the backstop runs them
                _RUNNING.discard(self)
                return
            self._thread = thread
        self._requests.put(None)

    def _run(self) -> None:
        try:
            with _IN_SQLITE:
                try:  # never creating the file: one removed under an open store stays removed
                    conn = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=rw", uri=True,
                                           isolation_level=None, check_same_thread=False)
                except sqlite3.Error:  # the backstop checkpoints, as SQLite does without a thread
                    return
            try:
                while self._next():
                    with self.running, _IN_SQLITE:
                        try:
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        except sqlite3.Error:  # busy (another process checkpoints) or failing: the next request retries
                            pass
            finally:
                with _IN_SQLITE:
                    conn.close()
                    if self._owner() is None:  # dropped unclosed: the writer's connection goes after this one
                        self._writer = None
        finally:
            _RUNNING.discard(self)

    def _next(self) -> bool:
        """Wait for a request (True), or for the thread's end (False). Requests made meanwhile
        are all served by one checkpoint."""
        self._requests.get()
        while not self._requests.empty():
            self._requests.get()
        return not self._stopped and self._owner() is not None

    def stop(self) -> None:
        """End the thread, after the checkpoint it is running (if any)."""
        self._stopped = True
        self._requests.put(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


# The checkpointers whose thread runs: at the interpreter's exit each is stopped (a daemon thread
# left in SQLite's hands would never close its connection), as is one whose store was dropped
# where not even the call into C that tells it could run.
_RUNNING: set[Checkpointer] = set()


def _at_exit() -> None:
    for checkpointer in list(_RUNNING):
        checkpointer.stop()


atexit.register(_at_exit)
