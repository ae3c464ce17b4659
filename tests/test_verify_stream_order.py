"""A full verify reads the streams table in the order SQLite keeps it (by rowid, no sort), and
reads it that way again for the scan when that order is creation order, as appends leave it;
otherwise the scan has SQLite sort the streams by creation, as it always did. These tests hold
the two ways to the same verdicts: on files whose stream rows lie out of creation order, and on
files with a stream row altered (a value of another kind where a position belongs included).
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.chaincheck import Problem
from eventstore.fullscan import Fold, FullScan
from tests.test_verify_fork_points import _opened
from tests.test_verify_plain import _run, changed_copy, template  # noqa: F401  (a fixture)
from threadlog import Store

STREAM_COLUMNS = ("id", "parent_id", "parent_offset", "root_id", "depth", "head", "created_position", "kind",
                  "head_hash", "facts", "first_message_offset", "last_position")


def _verdicts(path: Path) -> tuple[bool, tuple[int, list[Problem]], tuple[int, list[Problem]]]:
    """(whether the scan found the stored order to be creation order, its verdict, and the verdict
    of a scan made to have SQLite sort the streams): each verdict is (events checked, every problem)."""
    with _opened(path) as backend:
        scan = FullScan(backend)
        in_order = scan.in_order
        checked = scan.run(Fold(None), None)
        found = (checked, sorted(scan.problems, key=repr))
        sorting = FullScan(backend)
        sorting.in_order = False
        checked = sorting.run(Fold(None), None)
        return in_order, found, (checked, sorted(sorting.problems, key=repr))


def _shuffle_rows(path: Path, seed: int) -> None:
    """Give the streams' rows other rowids, in a random order: the same rows, stored elsewhere."""
    conn = sqlite3.connect(path)
    rowids = [r for (r,) in conn.execute("SELECT rowid FROM streams ORDER BY rowid")]
    conn.close()
    moved = rowids[:]
    random.Random(seed).shuffle(moved)
    _run(path, ("UPDATE streams SET rowid = -rowid", ()),
         *(("UPDATE streams SET rowid = ? WHERE rowid = ?", (new, -old)) for old, new in zip(rowids, moved)))


def test_a_file_appends_wrote_is_read_in_its_stored_order(template: Path) -> None:  # noqa: F811
    in_order, found, sorted_ = _verdicts(template)
    assert in_order, "streams inserted as they were created should need no sort"
    assert found == sorted_ and not found[1]


def test_streams_stored_out_of_creation_order_verify_as_before(template: Path, tmp_path: Path) -> None:  # noqa: F811
    path = tmp_path / "moved.db"
    shutil.copy(template, path)
    _run(path, ("UPDATE streams SET rowid = (SELECT max(rowid) FROM streams) + 1 WHERE id = 'T'", ()))  # the first, last
    in_order, found, sorted_ = _verdicts(path)
    assert not in_order
    assert found == sorted_ and not found[1]
    with Store(template, read_only=True) as before, Store(path, read_only=True) as after:
        assert after.verify() == before.verify()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), row=st.integers(0, 10_000), column=st.sampled_from(("data", "hash", "offset")),
       at=st.integers(0, 10_000), byte=st.integers(1, 255))
def test_a_changed_event_is_named_alike_whatever_order_the_streams_are_stored_in(
        template: Path, tmp_path_factory: pytest.TempPathFactory, seed: int, row: int, column: str, at: int,  # noqa: F811
        byte: int) -> None:
    path = changed_copy(template, tmp_path_factory.mktemp("order"), row, column, at, byte)
    if path is None:
        return  # the file refuses the change itself
    _, expected, _ = _verdicts(path)
    _shuffle_rows(path, seed)
    in_order, found, sorted_ = _verdicts(path)
    assert found == sorted_ == expected and found[1], f"{column} of row {row}"


_ALTERED = (
    lambda value, byte: None,
    lambda value, byte: f"x{byte}",
    lambda value, byte: bytes([byte]),
    lambda value, byte: value ^ byte if isinstance(value, int) else f"{value}{chr(byte)}",
    lambda value, byte: -byte,
    lambda value, byte: byte + 0.5,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 100), column=st.sampled_from(STREAM_COLUMNS), how=st.integers(0, len(_ALTERED) - 1),
       byte=st.integers(1, 255), shuffled=st.booleans())
def test_an_altered_stream_row_is_named_alike_read_in_stored_or_sorted_order(
        template: Path, tmp_path_factory: pytest.TempPathFactory, row: int, column: str, how: int, byte: int,  # noqa: F811
        shuffled: bool) -> None:
    """Any value of any column of a stream row, of any kind (created_position as NULL, text, a
    blob, a float, another stream's position): the order check never changes a verdict."""
    path = tmp_path_factory.mktemp("stream") / "t.db"
    shutil.copy(template, path)
    conn = sqlite3.connect(path)
    rowids = [r for (r,) in conn.execute("SELECT rowid FROM streams ORDER BY rowid")]
    rowid = rowids[row % len(rowids)]
    (value,) = conn.execute(f'SELECT "{column}" FROM streams WHERE rowid = ?', (rowid,)).fetchone()
    conn.close()
    try:
        _run(path, (f'UPDATE streams SET "{column}" = ? WHERE rowid = ?', (_ALTERED[how](value, byte), rowid)))
    except sqlite3.IntegrityError:
        return  # NOT NULL, or an id another row holds: the file refuses it
    if shuffled:
        _shuffle_rows(path, byte)
    in_order, found, sorted_ = _verdicts(path)
    assert found == sorted_
