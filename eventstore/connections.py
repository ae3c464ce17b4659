"""A store used from several Python threads (`Connections`): each thread its own connection.

A SQLite connection serves one thread at a time, and a transaction belongs to its connection:
two threads writing through one would write into each other's transactions. A web server's
worker threads, `asyncio.to_thread` and a thread pool all call one `Store` from threads other
than the one that opened it, and each call failed there with SQLite's "objects created in a
thread can only be used in that same thread". So the thread that opened the store keeps its
connection, and any other thread opens its own on the same database at its first call, as
another process would: SQLite's locks (and PostgreSQL's) order them, and the store's
concurrency guarantees between processes hold between threads. `close()` closes the calling
thread's connection (and the opening thread's, called there or after that thread ended); each
other thread's closes at that thread's next call, or when it ends: never under a call.

A `:memory:` database lives in its one connection: another thread is refused, by name. A
store made from a backend object of threadlog's (SQLite's or PostgreSQL's) opens another with
that one's settings (`backend.Reopens`); any other backend object is used as given.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

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
    other thread one `reopen()` makes at its first call (None: the backend's `another()`, if it
    is one of threadlog's; else the backend object itself serves every thread)."""

    def __init__(self, backend: Backend, reopen: Callable[[], Backend] | None) -> None:
        self.own = Local(backend)
        self._owner = threading.get_ident()
        self._owner_thread = threading.current_thread()
        self._own_pending = False  # closed from another thread: the opening thread's goes at its next call
        self._reopen = reopen
        self._local = threading.local()
        self._closed = False

    def get(self) -> Local:
        """The calling thread's."""
        if threading.get_ident() == self._owner:
            if self._own_pending:
                self._own_pending = False
                self.own.backend.close()
                raise self.closed_error()
            return self.own
        local: Local | None = getattr(self._local, "state", None)
        if local is None:
            return self._open()
        if self._closed:  # the store closed since this thread's last call: its connection goes now
            self._close_local()
            raise self.closed_error()
        return local

    def closed_error(self) -> StoreError:
        """What a call on the closed store raises."""
        return StoreError(f"the store for {self.own.backend.path} is closed; open it again to read or write")

    def _open(self) -> Local:
        backend = self.own.backend
        if self._closed:
            raise self.closed_error()
        if isinstance(backend, SQLiteBackend) and backend.path == ":memory:":
            raise StoreError("a :memory: store serves only the thread that opened it (its database lives in that thread's "
                             "connection); use a file to share a store between threads")
        if self._reopen is not None:
            local = Local(self._reopen())
        elif isinstance(backend, Reopens):
            local = Local(backend.another())
        else:
            return self.own  # a backend object of another kind: used as given
        # Closed when its thread ends (the thread's locals go with it): a server starting a
        # thread per request would otherwise keep a connection for each. Not at the
        # interpreter's exit, where a daemon thread may still be using it.
        closer = weakref.finalize(local, local.backend.close)
        closer.atexit = False
        self._local.state, self._local.closer = local, closer
        return local

    def close(self) -> None:
        """Close the calling thread's connection; every other thread's closes at that thread's
        next call, or when it ends. Never here: a connection closed under a call running on its
        thread crashed the interpreter (SQLite's), or failed that call as a lost connection. The
        opening thread's closes here too when it has ended (its next call will never come)."""
        self._closed = True
        if getattr(self._local, "state", None) is not None:
            self._close_local()
        self._own_pending = threading.get_ident() != self._owner and self._owner_thread.is_alive()
        if not self._own_pending:
            self.own.backend.close()

    def _close_local(self) -> None:
        """Close the calling thread's own connection (not the opening thread's) and forget it."""
        self._local.closer()
        del self._local.state, self._local.closer
