"""The backends the contract suite runs on, and `dump`, which reads any of them whole.

A second backend is one more line in `BACKENDS`: how to make one in a test's temporary
directory, and how to dump its whole content (for tests that prove nothing changed).
"""

from __future__ import annotations

import itertools
import sqlite3
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from eventstore import Store
from eventstore.backend import Backend, StreamRow
from eventstore.sqlite import SQLiteBackend


class BackendCase(NamedTuple):
    id: str
    make: Callable[[Path], Backend]
    dump: Callable[[Backend], list[str]]  # every row of every table, as text


def _sqlite_dump(backend: Backend) -> list[str]:
    assert isinstance(backend, SQLiteBackend)
    return list(backend.conn.iterdump())


class _Server:
    """The session's throwaway PostgreSQL cluster (tests/pgcluster.py), started on first use;
    each test gets a schema of its own in one database (much faster than a database each)."""

    cluster: object = None
    failed: str | None = None
    schemas = itertools.count(1)

    @classmethod
    def url(cls) -> str:
        """A URL whose connections use a new, empty schema."""
        from tests.pgcluster import Cluster, ClusterUnavailable

        if cls.failed is not None:
            pytest.skip(cls.failed)
        if cls.cluster is None:
            try:
                import psycopg  # noqa: F401
            except ImportError:
                cls.failed = 'psycopg is not installed: pip install -e ".[test]"'
                pytest.skip(cls.failed)
            try:
                cls.cluster = Cluster()
            except ClusterUnavailable as error:
                cls.failed = str(error)
                pytest.skip(cls.failed)
        assert isinstance(cls.cluster, Cluster)
        schema = f"t{next(cls.schemas)}"
        cls.cluster.execute(f"CREATE SCHEMA {schema}")
        return cls.cluster.url() + "&options=" + urllib.parse.quote(f"-csearch_path={schema}")

    @classmethod
    def stop(cls) -> None:
        from tests.pgcluster import Cluster

        if isinstance(cls.cluster, Cluster):
            cls.cluster.stop()
            cls.cluster = None


def postgres_url() -> str:
    """A URL of an empty schema on the session's throwaway PostgreSQL cluster (skips without one)."""
    return _Server.url()


def postgres_cluster() -> "Cluster":  # noqa: F821
    """The session's cluster itself (started if need be), for tests that stop or kill it."""
    _Server.url()
    return _Server.cluster  # type: ignore[return-value]


def login_role(name: str) -> "Cluster":  # noqa: F821
    """The session's cluster, with a role `name` that may log in and nothing more (made once)."""
    cluster = postgres_cluster()
    cluster.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') "
                    f"THEN CREATE ROLE {name} LOGIN; END IF; END $$")
    return cluster


def _postgres(tmp: Path, partitions: int = 0) -> Backend:
    from eventstore.postgres import PostgresBackend

    return PostgresBackend(postgres_url(), partitions=partitions)


def _postgres_dump(backend: Backend) -> list[str]:
    from eventstore.postgres import PostgresBackend

    assert isinstance(backend, PostgresBackend)
    return backend.dump()


BACKENDS = [
    BackendCase("sqlite-file", lambda tmp: SQLiteBackend(tmp / "t.db"), _sqlite_dump),
    BackendCase("sqlite-memory", lambda tmp: SQLiteBackend(":memory:"), _sqlite_dump),
    BackendCase("postgresql", _postgres, _postgres_dump),
]

# The contract suite again on an events table hash-partitioned by root thread (tests/test_partitioned.py).
PARTITIONED = BackendCase("postgresql-partitioned", lambda tmp: _postgres(tmp, partitions=4), _postgres_dump)

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


def file_dump(path: Path) -> list[str]:
    """`dump` of a SQLite file no store holds open: its SQL, as `sqlite3`'s `.dump` writes it."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture(name="mem", params=["sqlite-memory", "postgresql"])
def mem_on_every_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """`mem` for the modules that test projections (what is computed, not how it is stored):
    a module imports this to run its `mem` tests on SQLite in memory and on PostgreSQL."""
    case = next(c for c in BACKENDS if c.id == request.param)
    store = open_store(case, tmp_path)
    yield store
    store.close()


def counting_ancestry(backend: Backend, patch: pytest.MonkeyPatch) -> list[int]:
    """Patch `backend.ancestry` to count the stream rows it returns: the list's one item."""
    ancestry = backend.ancestry
    read = [0]

    def counted(stream_id: str, start: int = 0) -> list[StreamRow]:
        rows = ancestry(stream_id, start)
        read[0] += len(rows)
        return rows

    patch.setattr(backend, "ancestry", counted)
    return read
