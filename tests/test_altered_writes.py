"""Writing to a file whose stream rows were altered outside threadlog: every write that reads
the altered row is refused in one line that says so and names `threadlog verify`, and the
file stays exactly as it was (its SQL dump compared before and after).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventstore import StoreError
from threadlog import Store
from threadlog.cli import cli
from tests.backends import file_dump


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("altered") / "template.db"
    with Store(db) as store:
        store.create_thread(title="root", thread_id="R")
        store.append_message("R", "user", "u1")
        store.append_message("R", "assistant", "a1")
    return db


def altered(template: Path, tmp_path: Path, statement: str) -> Path:
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    conn = sqlite3.connect(db)
    with conn:
        assert conn.execute(statement).rowcount == 1
    conn.close()
    return db


def refused(db: Path, write: Callable[[Store], object]) -> str:
    """What `write` was refused with on the file `db`, which must be left exactly as it was."""
    before = file_dump(db)
    with Store(db) as store, pytest.raises(StoreError) as caught:
        write(store)
    assert file_dump(db) == before
    return str(caught.value)


FACTS = [
    ("not-json", "garbage{"),
    ("a-list", "[]"),
    ("a-number-for-runs", '{"runs": 5}'),
    ("nested-too-deeply", "[" * 100_000 + "]" * 100_000),
]

WRITES: list[tuple[str, Callable[[Store], object]]] = [
    ("append", lambda store: store.append_message("R", "user", "more")),
    ("fork", lambda store: store.fork("R")),
    ("fan-out", lambda store: store.fan_out("R", ["a", "b"])),
]


@pytest.mark.parametrize("write", [w for _, w in WRITES], ids=[n for n, _ in WRITES])
@pytest.mark.parametrize("facts", [f for _, f in FACTS], ids=[n for n, _ in FACTS])
def test_a_write_over_pending_facts_altered_outside_threadlog_is_refused(template: Path, tmp_path: Path, facts: str,
                                                                        write: Callable[[Store], object]) -> None:
    message = refused(altered(template, tmp_path, f"UPDATE streams SET facts = '{facts}' WHERE id = 'R'"), write)
    assert "R" in message and "altered outside threadlog" in message and "threadlog verify" in message, message
    assert len(message) < 400 and "\n" not in message


def test_an_append_after_a_lowered_head_is_refused(template: Path, tmp_path: Path) -> None:
    db = altered(template, tmp_path, "UPDATE streams SET head = 1 WHERE id = 'R'")
    message = refused(db, lambda store: store.append_message("R", "user", "more"))
    assert "altered outside threadlog" in message and "threadlog verify" in message, message


LAST_POSITION = 2**63 - 1


@pytest.mark.parametrize("statement", ["UPDATE streams SET facts = 'garbage{' WHERE id = 'R'",
                                       "UPDATE streams SET head = 1 WHERE id = 'R'",
                                       f"UPDATE events SET position = {LAST_POSITION} WHERE position = 3"],
                         ids=["facts", "head", "largest-position"])
def test_the_cli_refuses_such_an_append_in_one_line(template: Path, tmp_path: Path, statement: str) -> None:
    db = altered(template, tmp_path, statement)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "append", "R", "--role", "user", "--text", "more"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "threadlog verify" in lines[0], result.stderr
    assert file_dump(db) == before
    verified = CliRunner().invoke(cli, ["--db", str(db), "verify"])  # and verify names the row
    assert verified.exit_code == 1 and ("R" in verified.stderr or str(LAST_POSITION) in verified.stderr), verified.output


@pytest.mark.parametrize("write", [WRITES[0][1], WRITES[1][1], lambda store: store.create_thread(title="new")],
                         ids=["append", "fork", "create"])
def test_a_write_after_the_largest_position_was_moved_to_sqlites_end_is_refused(template: Path, tmp_path: Path,
                                                                              write: Callable[[Store], object]) -> None:
    # Appends and restores never come near the end of SQLite's integers: only raw SQL puts a
    # position there, and a write then has none left to give (it failed deep in the driver).
    message = refused(altered(template, tmp_path, f"UPDATE events SET position = {LAST_POSITION} WHERE position = 3"), write)
    assert str(LAST_POSITION) in message and "altered outside threadlog" in message and "threadlog verify" in message, message
