"""`PerThread`: a store for each thread that uses one, for the integrations a framework calls
from threads of its own (LangGraph's workers, the Agents SDK's `run_sync` in a threaded server).

A SQLite connection serves only the thread that opened it, so a thread other than the one that
made the integration gets a store of its own on the same file, opened on first use. A
PostgreSQL store serves every thread as given (opened again from `path` it would lack the
URL's password, which `path` hides): its callers take turns, under a lock of their own. A
`:memory:` store serves only the thread that opened it: another thread is refused.
"""

from __future__ import annotations

import threading

from eventstore import Store, StoreError
from eventstore.store import is_url


class PerThread:
    """`get()` is the store the calling thread uses; `why` ends the refusal of a `:memory:`
    store on another thread (what calls from other threads, and what to give instead)."""

    def __init__(self, store: Store, why: str) -> None:
        self.given = store
        self._why = why
        self._owner = threading.get_ident()
        self._local = threading.local()

    def get(self) -> Store:
        """The given store on the thread that made this one (and, for PostgreSQL, on any); on
        another thread, that thread's own on the same file."""
        given = self.given
        if threading.get_ident() == self._owner or is_url(given.path):
            return given
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            if given.path == ":memory:":
                raise StoreError(f"a :memory: store serves only the thread that opened it; {self._why}")
            store = self._local.store = Store(given.path, synchronous=given.synchronous, read_only=given.read_only)
        return store

    def close_own(self) -> None:
        """Close the calling thread's own store, if it opened one (never the given store)."""
        own: Store | None = getattr(self._local, "store", None)
        if own is not None:
            own.close()
            self._local.store = None
