"""A store used from several Python threads (`Connections`): each thread its own connection.

A SQLite connection serves one thread at a time, and a transaction belongs to its connection:
two threads writing through one would write into each other's transactions. A web server's
worker threads, `asyncio.to_thread` and a thread pool all call one `Store` from threads other
than the one that opened it, and each call failed there with SQLite's "objects created in a
thread can only be used in that same thread". So the thread that opened the store keeps its
connection, and any other thread opens its own on the same database at its first call, as
another process would: SQLite's locks (and PostgreSQL's) order them, and the store's
concurrency guarantees between processes hold between threads. `close()` closes them all.

A `:memory:` database lives in its one connection: another thread is refused, by name. A
store made from a backend object of threadlog's (SQLite's or PostgreSQL's) opens another with
that one's settings (`backend.Reopens`); any other backend object is used as given.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .backend import AppendAtHead, Backend, Reopens
from .errors import StoreError
from .head import Head
from .sqlite import SQLiteBackend


class Local:
    """What one thread uses of a store: its backend and the heads its own writes left there
    (`Store._append_known`; only a backend that checks a head on the server has them)."""

    __slots__ = ("backend", "append_at", "known", "__weakref__")

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.append_at = backend.append_at if isinstance(backend, AppendAtHead) else None
        self.known: dict[str, Head] | None = {} if self.append_at is not None else None


class Connections:
    """The `Local` of each thread using one store: the opening thread's (`own`), and for every
    other thread one `reopen()` makes at its first call (None: it cannot be opened again)."""

    def __init__(self, backend: Backend, reopen: Callable[[], Backend] | None) -> None:
        self.own = Local(backend)
        self._owner = threading.get_ident()
        self._reopen = reopen
        self._local = threading.local()
        self._closers: list[weakref.finalize[Any, Any]] = []  # of the other threads' (`_open`)
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> Local:
        """The calling thread's."""
        if threading.get_ident() == self._owner:
            return self.own
        local: Local | None = getattr(self._local, "state", None)
        return local if local is not None else self._open()

    def _open(self) -> Local:
        backend = self.own.backend
        if self._closed:
            raise StoreError(f"the store for {backend.path} is closed; open it again to read or write")
        if isinstance(backend, SQLiteBackend) and backend.path == ":memory:":
            raise StoreError("a :memory: store serves only the thread that opened it (its database lives in that thread's "
                             "connection); use a file to share a store between threads")
        if self._reopen is not None:
            local = Local(self._reopen())
        elif isinstance(backend, Reopens):
            local = Local(backend.another())
        else:
            return self.own  # a backend object of another kind: used as given
        # Closed when its thread ends (the thread's locals go with it), or by `close`: a server
        # starting a thread per request would otherwise keep a connection for each.
        closer = weakref.finalize(local, local.backend.close)
        with self._lock:
            if self._closed:  # closed while this one opened
                closer()
                raise StoreError(f"the store for {backend.path} is closed; open it again to read or write")
            self._closers = [c for c in self._closers if c.alive]
            self._closers.append(closer)
        self._local.state = local
        return local

    def close(self) -> None:
        """Close every thread's connection (the other threads' first, the opening thread's last)."""
        with self._lock:
            self._closed = True
            closers, self._closers = self._closers, []
        for closer in closers:
            closer()
        self.own.backend.close()
