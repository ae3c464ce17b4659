"""The backends the contract suite runs on, and `dump`, which reads any of them whole.

A second backend is one more line in `BACKENDS`: how to make one in a test's temporary
directory, and how to dump its whole content (for tests that prove nothing changed).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from eventstore import Store
from eventstore.backend import Backend
from eventstore.sqlite import SQLiteBackend


class BackendCase(NamedTuple):
    id: str
    make: Callable[[Path], Backend]
    dump: Callable[[Backend], list[str]]  # every row of every table, as text


def _sqlite_dump(backend: Backend) -> list[str]:
    assert isinstance(backend, SQLiteBackend)
    return list(backend.conn.iterdump())


BACKENDS = [
    BackendCase("sqlite-file", lambda tmp: SQLiteBackend(tmp / "t.db"), _sqlite_dump),
    BackendCase("sqlite-memory", lambda tmp: SQLiteBackend(":memory:"), _sqlite_dump),
]

_DUMPS: weakref.WeakKeyDictionary[Store, Callable[[], list[str]]] = weakref.WeakKeyDictionary()


def open_store(case: BackendCase, tmp_path: Path) -> Store:
    """A store on a new backend of `case`, which `dump` can read."""
    backend = case.make(tmp_path)
    store = Store(backend)
    _DUMPS[store] = lambda: case.dump(backend)
    return store


def dump(store: Store) -> list[str]:
    """Every row of every table of a store `open_store` made: equal dumps mean an unchanged database."""
    return _DUMPS[store]()
