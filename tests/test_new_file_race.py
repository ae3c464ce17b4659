"""Processes opening one database file that does not exist yet, all at once: each either makes
its schema or finds it made. The check of what a file is reads its application id, schema
version and tables; read apart, another process's creation could commit between them, and the
new file was then refused as "a SQLite database but not a threadlog one".
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import sqlite as sqlite_backend
from threadlog import Store


def test_a_creation_committed_while_this_store_checks_the_file_is_found_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other process's creation made to commit exactly when this store begins to read what
    the file is: it must see all of it or none of it."""
    path = tmp_path / "new.db"
    sqlite3.connect(path).close()  # the empty file the first process made
    connect = sqlite_backend._connect
    made: list[str] = []

    def racing(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]

        def trace(statement: str) -> None:
            if "user_version" in statement and not made:  # read apart, the second of three reads
                made.append(statement)
                conn.set_trace_callback(None)
                Store(path).close()  # the other process, creating the schema now

        conn.set_trace_callback(trace)
        return conn

    monkeypatch.setattr(sqlite_backend, "_connect", racing)
    with Store(path) as store:
        store.create_thread(title="after the race")
    monkeypatch.undo()
    assert made
    with Store(path) as store:
        assert [store.title(t.id) for t in store.threads()] == ["after the race"]


WORKER = """
import sys
from threadlog import Store
with Store(sys.argv[1]) as store:
    store.create_thread(title=sys.argv[2])
"""


def test_processes_creating_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    for round_ in range(4):
        path = tmp_path / f"r{round_}.db"
        procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), f"p{i}"], stderr=subprocess.PIPE, text=True)
                 for i in range(6)]
        outcomes = [(proc.returncode, err) for proc in procs for _, err in [proc.communicate(timeout=120)]]
        assert [code for code, _ in outcomes] == [0] * 6, outcomes
        with Store(path) as store:
            assert sorted(store.title(t.id) or "" for t in store.threads()) == [f"p{i}" for i in range(6)]
            assert store.verify().events == 6
