"""Every release opens a database written by the first released schema (tests/fixtures/v1.db)
and one written by schema 4, the last text layout (tests/fixtures/v4.db).

The fixtures are copied first and never modified. Opening migrates them to the current schema
version, whatever that is; the history (every `events` and `streams` row, read back as the
text it stands for) must come through the migration unchanged, verify, and read as it did.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import packing
from eventstore.sqlite import EVENTS_DDL_5, SCHEMA_VERSION
from tests.stored import back_to_schema_7
from threadlog import Store
from threadlog.cli import cli

FIXTURE = Path(__file__).parent / "fixtures" / "v1.db"
FIXTURE_V4 = Path(__file__).parent / "fixtures" / "v4.db"
# What `checkpoint()` printed when tests/fixtures/make_v4.py wrote v4.db.
V4_CHECKPOINT = "tlc1:16:e58d97da4567a8b532879240f21de92688ad7716a8b880496f21e713c631598c"


def _unpacked(row: tuple[Any, ...]) -> tuple[object, ...]:
    """A stored events row as the text it stands for, decoded in Python (`eventstore.packing`),
    apart from the SQL the backend decodes with: a row of any layout reads the same."""
    position, stream, offset, event_id, type_, version, data, meta, recorded_at, digest, hash_, pending, by = row
    digest = hashlib.sha256(data.encode()).hexdigest() if digest is None else packing.unpack_digest(digest)
    return (position, stream, offset, packing.unpack_id(event_id), packing.unpack_type(type_), version, data, meta,
            recorded_at, digest, packing.unpack_hash(hash_), pending, by)


def history(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every events and streams row, read with raw sqlite3."""
    conn = sqlite3.connect(db)
    try:
        events = [_unpacked(row) for row in conn.execute(
            'SELECT position, stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, '
            "data_digest, hash, pending, redacted_by FROM events ORDER BY position"
        )]
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


@pytest.fixture
def v4(tmp_path: Path) -> Path:
    db = tmp_path / "v4.db"
    shutil.copy(FIXTURE_V4, db)
    return db


def test_v4_fixture_is_the_text_layout_and_untouched() -> None:
    conn = sqlite3.connect(f"file:{FIXTURE_V4}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        kinds = conn.execute("SELECT DISTINCT typeof(event_id), typeof(hash), typeof(recorded_at) FROM events").fetchall()
        assert kinds == [("text", "text", "text")]
    finally:
        conn.close()


def test_v4_database_migrates_to_the_compact_layout_and_keeps_its_checkpoint(v4: Path) -> None:
    before = history(v4)
    with Store(v4) as store:
        assert store.schema_version() == SCHEMA_VERSION
        report = store.verify(checkpoint=V4_CHECKPOINT)  # every position and hash as they were
        events = list(store.read_all())
    assert (report.events, report.streams, report.redacted) == (16, 4, 1)
    assert history(v4) == before, "the migration changed the history"
    by_id = {e.event_id: e for e in events}
    # Caller-chosen ids read back exactly as given, whether or not they look like generated ones.
    assert {"caller-chosen-1", "0123456789abcdef0123456789abcdef", "ABCDEF0123456789ABCDEF0123456789"} <= set(by_id)
    assert by_id["ABCDEF0123456789ABCDEF0123456789"].time == "2025-03-01T10:00:00Z"
    conn = sqlite3.connect(v4)
    try:
        stored = dict(conn.execute("SELECT typeof(event_id), count(*) FROM events GROUP BY 1").fetchall())
        assert stored == {"blob": 14, "text": 2}  # only the two ids that are not 32 lowercase hex digits stay text
        assert conn.execute("SELECT count(*) FROM events WHERE typeof(hash) != 'blob' OR typeof(type) != 'integer'"
                            ).fetchone()[0] == 0
        # Only the redacted row keeps a digest: its data is the skeleton, not what the digest covers.
        assert conn.execute("SELECT position FROM events WHERE data_digest IS NOT NULL").fetchall() == [(5,)]
        # Every position came through: the next one is the one after the last.
        assert conn.execute("SELECT max(position) FROM events").fetchone()[0] == 16
    finally:
        conn.close()


def test_migrated_v4_database_takes_appends_redactions_and_searches(v4: Path) -> None:
    from threadlog import search

    with Store(v4) as store:
        root = next(t for t in store.all_threads() if t.kind == "thread")
        assert [hit.position for hit in search(store, "TGV")]  # the index built before still answers
        event = store.append_message(root.id, "user", "one more")
        assert event.position == 17
        retry = {"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "08:04 TGV 6601; 09:00 TGV 6603"}]},
            "meta": {"event_id": "0123456789abcdef0123456789abcdef"}}
        assert store.append(root.id, [retry])[0].position == 4  # an id stored before the migration: a no-op retry
        store.redact(2, reason="test", actor="t")
        assert store.event_at(root.id, 1).redacted
        store.verify(checkpoint=V4_CHECKPOINT)


def test_a_schema_5_file_with_integer_times_opens_and_verifies(tmp_path: Path) -> None:
    """Schema 5 (as first released) stored times as integer microseconds and had no listing
    indexes; such a file migrates to the current schema and reads and verifies as it was."""
    db = tmp_path / "five.db"
    with Store(db) as store:
        t = store.create_thread(title="five")
        store.append_message(t, "user", "hello")
        fork = store.fork(t)
        before = [e.to_json() for e in store.read_all()]
        kept = store.checkpoint()
    conn = sqlite3.connect(db)
    times = conn.execute("SELECT position, recorded_at FROM events").fetchall()
    conn.executemany("UPDATE events SET recorded_at = ? WHERE position = ?",
                     [(packing.pack_time(recorded_at), position) for position, recorded_at in times])
    back_to_schema_7(conn)
    conn.execute("DROP INDEX events_other")
    conn.execute("DROP INDEX streams_recent")
    conn.execute("CREATE INDEX streams_activity ON streams (last_position)")
    conn.execute('CREATE INDEX events_titles ON events (stream_id, "offset") WHERE type IN (1, 12)')
    conn.execute("PRAGMA user_version=5")
    conn.commit()
    assert {row[0] for row in conn.execute("SELECT typeof(recorded_at) FROM events")} == {"integer"}
    conn.close()
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert [e.to_json() for e in store.read_all()] == before
        store.verify(checkpoint=kept)
        assert store.verify(since=kept).events == 0
        assert [info.id for info in store.threads(forks=False)] == [t]
        assert store.count(fork, "message.appended") == 1 and store.title(fork) == "five"


def test_a_schema_6_file_migrates_to_fewer_pages_per_append_and_reads_as_it_did(tmp_path: Path) -> None:
    """Schema 6 numbered events with AUTOINCREMENT and listed streams through two indexes;
    its file migrates in place: the same rows, the same listing, the same checkpoint, the
    next position after the last, and the layout a new file gets."""
    db, fresh = tmp_path / "six.db", tmp_path / "fresh.db"
    with Store(db) as store:
        roots = [store.create_thread(title=f"t{i}") for i in range(3)]
        for i, root in enumerate(roots * 2):
            store.append_message(root, "user", f"message {i}")
        forks = [store.fork(roots[0], at=2), store.fork(roots[1])]
        store.append_message(roots[2], "assistant", "latest")
        listing = ([t.id for t in store.threads(forks=False)], [t.id for t in store.threads(forks=True)],
                   [t.id for t in store.threads(forks=True, limit=2)])
        kept, last = store.checkpoint(), max(e.position for e in store.read_all())
    before = history(db)
    conn = sqlite3.connect(db)
    with conn:  # back to schema 6's layout, rows untouched
        back_to_schema_7(conn)
        conn.execute(EVENTS_DDL_5.format(name="events_6"))
        conn.execute("INSERT INTO events_6 SELECT * FROM events ORDER BY position")
        conn.execute("DROP TABLE events")
        conn.execute("ALTER TABLE events_6 RENAME TO events")
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'events_6'")
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (last,))
        conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset")')
        conn.execute("CREATE UNIQUE INDEX events_event_id ON events (event_id)")
        conn.execute('CREATE INDEX events_other ON events (stream_id, "offset", type) WHERE type != 2')
        conn.execute("DROP INDEX streams_recent")
        conn.execute("CREATE INDEX streams_activity ON streams (last_position)")
        conn.execute("CREATE INDEX streams_roots ON streams (last_position) WHERE parent_id IS NULL")
        conn.execute("PRAGMA user_version = 6")
    assert "AUTOINCREMENT" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    conn.close()
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert ([t.id for t in store.threads(forks=False)], [t.id for t in store.threads(forks=True)],
                [t.id for t in store.threads(forks=True, limit=2)]) == listing
        store.verify(checkpoint=kept)
        assert store.append_message(forks[0], "user", "after").position == last + 1
    assert history(db)[0][:len(before[0])] == before[0]
    assert layout(db) == layout(fresh)


def test_a_schema_7_file_migrates_to_listing_keys_and_lists_as_it_did(tmp_path: Path) -> None:
    """Schema 7 listed streams through `streams_recent` on `last_position`; its file migrates
    in place to the coarse listing key (`recency`), set for every stream, with the same
    listings, every page of them, the same checkpoint, and the layout a new file gets."""
    db, fresh = tmp_path / "seven.db", tmp_path / "fresh.db"
    with Store(db) as store:
        roots = [store.create_thread(title=f"t{i}") for i in range(5)]
        for i, root in enumerate(roots * 3):
            store.append(root, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}}] * (150 + 40 * i))
        forks = [store.fork(roots[0], at=2), store.fork(roots[3])]
        store.append_message(forks[0], "user", "latest")

        def listings() -> list[list[str]]:
            out = [[t.id for t in store.threads(forks=forks_)] for forks_ in (False, True)]
            return out + [[t.id for t in store.threads(forks=True, limit=2, before=b)] for b in (1024, 2048, 2049, 4000)]

        listing, kept = listings(), store.checkpoint()
    conn = sqlite3.connect(db)
    with conn:
        back_to_schema_7(conn)
    conn.close()
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert listings() == listing
        store.verify(checkpoint=kept)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*), sum(recency = last_position >> 10) FROM streams").fetchone() == (7, 7)
    conn.close()
    assert layout(db) == layout(fresh)


def layout(path: Path) -> list[tuple[str, str, str]]:
    """The schema of the file at `path`; a new file's when it does not exist yet."""
    if not path.exists():
        Store(path).close()
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
    found = rows.fetchall()
    conn.close()
    return found


def test_a_read_of_an_older_file_another_writer_holds_says_how_to_bound_the_wait(v4: Path) -> None:
    """A read command migrates an older file before it reads it, so it waits for the write
    lock: it said `--timeout sets how long`, an option no read command takes (typed, it is a
    usage error), and waited 30 s with no way to shorten it. It names the command that
    migrates waiting as long as told; once the lock is free the read goes on."""
    holder = sqlite3.connect(v4, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    ls = subprocess.Popen([sys.executable, "-m", "threadlog", "--db", str(v4), "ls"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        assert ls.stderr is not None
        waiting = ls.stderr.readline()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out, err = ls.communicate(timeout=60)
    assert "--timeout sets" not in waiting and waiting.startswith("waiting for another writer…"), waiting
    assert f"`threadlog init --db {v4} --timeout SECONDS`" in waiting, waiting
    assert ls.returncode == 0 and len(out.splitlines()) >= 2, err
