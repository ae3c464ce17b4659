"""Shared fixtures: a store on a real file and on `:memory:` (the contract runs on both)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import Store


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "t.db" if request.param == "file" else ":memory:")
    yield s
    s.close()


@pytest.fixture
def mem() -> Iterator[Store]:
    """A store in memory, for tests of what is computed rather than what is stored."""
    s = Store(":memory:")
    yield s
    s.close()


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "t.db")
    yield s
    s.close()


def dump(store: Store) -> list[str]:
    """Every row of every table, as SQL: equal dumps mean an unchanged database."""
    conn: sqlite3.Connection = store.backend.conn
    return list(conn.iterdump())
