"""A full verify keeps the fork points (the events forks chain to) in memory only up to
`KEPT_POINTS`, and only until the last fork chaining to each has started; a fork past those
reads its point from the file when it starts. These tests hold the two ways to the same
verdicts (every problem found, not only the first): none kept, one kept and all kept, on a
sound file and with one byte changed anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.chaincheck import Problem
from eventstore.fullscan import Fold, FullScan
from eventstore.sqlite import SQLiteBackend
from tests.test_verify_plain import COLUMNS, _run, changed_copy, template  # noqa: F401  (a fixture)
from threadlog import Store

KEPT = (10**9, 1, 0)  # every point kept, only the first fork's, none


@contextmanager
def _opened(path: Path) -> Iterator[SQLiteBackend]:
    """The file's backend, read-only, inside one read transaction (as `Store.verify` runs)."""
    backend = SQLiteBackend(path, read_only=True)
    try:
        with backend.read_transaction():
            yield backend
    finally:
        backend.close()


def _verdict(path: Path, kept: int) -> tuple[int, list[Problem]]:
    """(events checked, every problem found, in order) of a full scan keeping `kept` points."""
    with _opened(path) as backend:
        scan = FullScan(backend, kept_points=kept)
        checked = scan.run(Fold(None), None)
        return checked, sorted(scan.problems)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 10_000), column=st.sampled_from(COLUMNS), at=st.integers(0, 10_000), byte=st.integers(1, 255))
def test_fork_points_read_from_the_file_give_the_verdicts_of_points_kept(
        template: Path, tmp_path_factory: pytest.TempPathFactory, row: int, column: str, at: int,  # noqa: F811
        byte: int) -> None:
    path = changed_copy(template, tmp_path_factory.mktemp("points"), row, column, at, byte)
    if path is None:
        return  # the file refuses the change itself
    verdicts = [_verdict(path, kept) for kept in KEPT]
    assert verdicts[0][1], f"{column} of row {row} was not caught"
    assert verdicts[1] == verdicts[0] and verdicts[2] == verdicts[0]


def test_a_fork_reads_its_point_from_the_file_when_none_is_kept(template: Path) -> None:  # noqa: F811
    with _opened(template) as backend:
        kept, read = FullScan(backend), FullScan(backend, kept_points=0)
        assert kept.points and not any(read.points.values())
        assert kept.run(Fold(None), None) == read.run(Fold(None), None)
        assert not kept.problems and not read.problems


def test_every_point_is_dropped_once_its_forks_have_started(template: Path) -> None:  # noqa: F811
    """The template's fan-out has two forks chaining to one event: its point stays until both
    have started, and a sound scan ends holding no point at all."""
    with _opened(template) as backend:
        scan = FullScan(backend)
        assert scan.sharing and sum(map(len, scan.points.values())) >= 3
        scan.run(Fold(None), None)
        assert not scan.problems
        assert not any(scan.points.values()) and not scan.sharing


def test_a_fork_of_a_fork_point_never_reached_is_named_alike_both_ways(tmp_path: Path) -> None:
    """A parent's events from the fork point on were deleted (its head lowered to match): the
    fork chains to an event that is gone, whether its point was kept or is read from the file."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        t = store.create_thread(title="t", thread_id="T")
        for i in range(6):
            store.append_message(t, "user", f"message {i}")
        store.fork(t, at=4, fork_id="F")
        store.append_message("F", "user", "in the fork")
    _run(path, ("DELETE FROM events WHERE stream_id = 'T' AND \"offset\" >= 3", ()),
         ("UPDATE streams SET head = 3 WHERE id = 'T'", ()))
    verdicts = [_verdict(path, kept) for kept in KEPT]
    assert any("fork F points at a missing parent event" in why for _, why in verdicts[0][1])
    assert verdicts.count(verdicts[0]) == len(KEPT)
