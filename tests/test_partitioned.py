"""The contract suite again, on PostgreSQL with the events table hash-partitioned by root
thread (declarative partitioning, 4 partitions): the layout "When one machine is not enough"
in the README describes. Every test of tests/test_contract.py runs here with this `store`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from eventstore import Store
from eventstore.postgres import PostgresBackend
from tests.backends import PARTITIONED, open_store, postgres_url
from tests.test_contract import *  # noqa: F403 (the contract's tests, collected here again)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(PARTITIONED, tmp_path)
    yield s
    s.close()


def test_a_thread_and_its_forks_live_in_one_partition() -> None:
    backend = PostgresBackend(postgres_url(), partitions=4)
    store = Store(backend)
    t = store.create_thread(title="root")
    store.append_message(t, "user", "hi")
    f = store.fork(t, 2)
    store.append_message(f, "user", "in the fork")
    rows = backend.conn.execute(
        "SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1").fetchall()
    assert len(rows) == 1 and rows[0][1] == 4, rows
    store.close()
