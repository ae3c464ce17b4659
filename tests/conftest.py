"""Shared fixtures: the contract's `store` runs on every backend in `tests/backends.py`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import Store
from tests.backends import BACKENDS, BackendCase, open_store


@pytest.fixture(params=BACKENDS, ids=[case.id for case in BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    case: BackendCase = request.param
    s = open_store(case, tmp_path)
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
