"""Every release opens a database written by the first released schema (tests/fixtures/v1.db).

The fixture is copied first and never modified. Opening migrates it to the current schema
version, whatever that is; the history (every `events` and `streams` row) must come through
the migration unchanged, verify, and read as it did.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventstore.sqlite import SCHEMA_VERSION
from threadlog import Store
from threadlog.cli import cli

FIXTURE = Path(__file__).parent / "fixtures" / "v1.db"


def history(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every events and streams row, read with raw sqlite3."""
    conn = sqlite3.connect(db)
    try:
        events = conn.execute(
            'SELECT position, stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, '
            "data_digest, hash, pending, redacted_by FROM events ORDER BY position"
        ).fetchall()
        streams = conn.execute(
            "SELECT id, parent_id, parent_offset, root_id, depth, head, created_position, kind, head_hash, facts, "
            "first_message_offset FROM streams ORDER BY id"
        ).fetchall()
        return events, streams
    finally:
        conn.close()


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    db = tmp_path / "v1.db"
    shutil.copy(FIXTURE, db)
    return db


def test_fixture_is_the_first_schema_and_untouched() -> None:
    conn = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 20
    finally:
        conn.close()


def test_v1_database_migrates_verifies_and_reads(v1: Path) -> None:
    fixture_digest = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    before = history(v1)
    with Store(v1) as store:
        assert store.schema_version() == SCHEMA_VERSION
        report = store.verify()
        threads = store.all_threads()
        lengths = {t.id: len(list(store.read(t.id))) for t in threads}
        kinds = sorted(t.kind for t in threads)
        redacted = [e for e in store.read_all() if e.redacted]
        all_events = list(store.read_all())
    print(f"\nv1 fixture migrated 1 -> {SCHEMA_VERSION}: verify ok ({report.events} events, {report.streams} threads, "
          f"{report.redacted} redacted); thread lengths {sorted(lengths.values())}")
    assert (report.events, report.streams, report.redacted) == (20, 4, 1)
    assert kinds == ["fork", "subagent", "subagent", "thread"]
    assert len(redacted) == 1 and all_events[0].type == "thread.created"
    assert all(length == t.head for t in threads for length in [lengths[t.id]])
    assert history(v1) == before, "the migration changed the history"
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == fixture_digest


def test_migrated_database_takes_appends_and_forks(v1: Path) -> None:
    with Store(v1) as store:
        root = next(t for t in store.all_threads() if t.kind == "thread")
        subagent = next(t for t in store.all_threads() if t.kind == "subagent")
        event = store.append_message(subagent.id, "assistant", "done")
        assert event.offset == subagent.head
        fork = store.fork(subagent.id)
        assert store.thread(fork).head == subagent.head + 2
        assert store.head(root.id) == root.head
        store.verify()
    with Store(v1) as store:  # reopening a migrated file migrates nothing
        assert store.schema_version() == SCHEMA_VERSION
        store.verify()


def test_cli_opens_v1_database(v1: Path) -> None:
    runner = CliRunner()
    init = runner.invoke(cli, ["init", "--db", str(v1)])
    assert init.exit_code == 0, init.output
    assert f"schema {SCHEMA_VERSION}" in init.stdout
    verify = runner.invoke(cli, ["verify", "--db", str(v1)])
    assert verify.exit_code == 0, verify.output
    tree = runner.invoke(cli, ["tree", "--db", str(v1)])
    assert tree.exit_code == 0 and len(tree.stdout.splitlines()) >= 4
    print(f"\n$ threadlog init: {init.stdout.strip()}\n$ threadlog verify: {verify.stdout.strip()}")
