"""Schema 5's migration against v4 files with unusual but legal rows, and against a process
killed while it migrates.

A v4 file is made here by writing a store with this release and rewriting it into the text
layout (the inverse of the migration: every column decoded by the backend's own SQL, the v4
indexes), then by giving some events times an older release or a restore could have stored
(fewer fraction digits, before 1970, a leap second, year 9999), their chain rehashed as
that release would have. `tests/test_upgrade.py` holds the fixture written by the real v4
release; these files reach the rows it does not have.
"""

from __future__ import annotations

import hashlib

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from eventstore.integrity import chain_hash
from eventstore.sqlite import EVENT_COLUMNS, EVENTS_DDL, SCHEMA_VERSION
from tests.stored import back_to_schema_7
from tests.test_upgrade import history
from threadlog import Store

ODD_IDS = [
    "0123456789abcdef0123456789abcdef",  # what a generated id looks like
    "00000000000000000000000000000000",
    "ABCDEF0123456789ABCDEF0123456789",  # upper-case hex: stays text
    "abcdef0123456789ABCDEF0123456789",  # mixed case
    "0123456789abcdef0123456789abcde",  # 31 digits
    "0123456789abcdef0123456789abcdef0",  # 33 digits
    "0123456789abcdef 123456789abcdef",  # a space among hex digits
    "ｆ123456789abcdef0123456789abcdef",  # a full-width digit (not ASCII hex)
]
ODD_TIMES = [
    "2025-03-01T10:00:00Z",  # no fraction
    "2025-03-01T10:00:00.5Z",  # fewer digits than the compact form gives back
    "1969-12-31T23:59:59.999999Z",  # before 1970
    "2016-12-31T23:59:60.000000Z",  # a leap second
    "9999-12-31T23:59:59.999999Z",
    "2025-03-01T10:00:00.000000Z",  # the usual form: packs
]


def to_v4(path: Path, restamp: dict[str, list[str]] | None = None) -> None:
    """Rewrite the schema 5 file at `path` in the v4 text layout; `restamp` gives threads
    (without forks) new `recorded_at` texts for their first events, rehashing their chains."""
    conn = sqlite3.connect(path)
    conn.create_function("tl_digest", 1, lambda data: hashlib.sha256(data.encode()).hexdigest())
    with conn:
        back_to_schema_7(conn)
        sequence = conn.execute("SELECT max(position) FROM events").fetchone()[0]
        rows = [list(row) for row in conn.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY position")]
        for row in rows:  # schema 5 stores no digest that the data gives back; v4 stored every one
            if row[9] is None:
                row[9] = hashlib.sha256(row[6].encode()).hexdigest()
        conn.execute("DROP TABLE events")
        conn.execute(EVENTS_DDL)
        for stream, times in (restamp or {}).items():
            own = sorted((row for row in rows if row[1] == stream), key=lambda row: row[2])
            prev = ""
            for row in own:
                if row[2] < len(times):
                    row[8] = times[row[2]]
                row[10] = prev = chain_hash(prev, row[1], row[2], row[3], row[4], row[5], row[8], row[7], row[9])
            conn.execute("UPDATE streams SET head_hash = ? WHERE id = ?", (prev, stream))
        conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'events'")
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (sequence,))
        conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset")')
        conn.execute("CREATE UNIQUE INDEX events_event_id ON events (event_id)")
        conn.execute("CREATE INDEX events_titles ON events(stream_id, \"offset\") WHERE type IN ('thread.created', 'title.set')")
        conn.execute("DROP INDEX streams_recent")
        conn.execute("CREATE INDEX streams_activity ON streams (last_position)")
        conn.execute("PRAGMA user_version = 4")
    conn.close()


def _unusual(path: Path) -> dict[str, str]:
    with Store(path) as store:
        odd = store.create_thread(title="odd ids", thread_id="odd")
        for i, event_id in enumerate(ODD_IDS):
            store.append(odd, [{"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant",
                                                                      "content": f"message {i}"},
                                "meta": {"event_id": event_id}}])
        secret = store.append_message(odd, "user", "my card is 4111 1111 1111 1111")
        store.redact(secret.position, reason="card", actor="ana")
        store.fork(odd, fork_id="odd-fork")
        store.append_message("odd-fork", "user", "in the fork")
        stamped = store.create_thread(title="times", thread_id="times")
        for i in range(len(ODD_TIMES) - 1):
            store.append_message(stamped, "user" if i % 2 == 0 else "assistant", f"timed {i}")
        return {"checkpoint": store.checkpoint()}


def test_unusual_v4_rows_migrate_unchanged_and_verify(tmp_path: Path) -> None:
    path = tmp_path / "odd.db"
    _unusual(path)
    to_v4(path, {"times": ODD_TIMES})
    before = history(path)
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        report = store.verify()
        by_id = {event.event_id: event for event in store.read("odd")}
        times = [event.recorded_at for event in store.read("times")]
    assert history(path) == before, "the migration changed a row"
    assert report.redacted == 1
    assert set(ODD_IDS) <= set(by_id)
    assert times == ODD_TIMES
    conn = sqlite3.connect(path)
    try:
        kinds = dict(conn.execute("SELECT recorded_at, typeof(recorded_at) FROM events WHERE stream_id = 'times'").fetchall())
        ids = dict(conn.execute("SELECT event_id, typeof(event_id) FROM events WHERE typeof(event_id) = 'text'").fetchall())
    finally:
        conn.close()
    assert sorted(kinds.values()) == ["text"] * 6  # times stay text: decoding packed ones cost every read ~3 µs
    assert set(ids) == set(ODD_IDS[2:])  # every id that is not 32 lower-case hex digits stays text


# A child that migrates `path` and kills itself (SIGKILL: no cleanup, no rollback of its own)
# just before the migration's statement number `step` would run.
KILLER = """
import os, signal, sys
from eventstore import sqlite as backend
path, step = sys.argv[1], int(sys.argv[2])
migrate, count = backend.MIGRATIONS[5], [0]

class Conn:
    def __init__(self, conn):
        self._conn = conn
    def __getattr__(self, name):
        attr = getattr(self._conn, name)
        if name not in ("execute", "executemany"):
            return attr
        def run(*args):
            count[0] += 1
            if count[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return attr(*args)
        return run

class Db:
    def __init__(self, db):
        self.conn = Conn(db.conn)

backend.MIGRATIONS[5] = lambda db: migrate(Db(db))
from eventstore import Store
Store(path).close()
"""


def test_a_migration_killed_at_any_step_leaves_v4_or_v5_never_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _unusual(path)
    with Store(path) as store:
        thread = store.create_thread(title="more")
        store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"m {i}"}} for i in range(300)])
        checkpoint = store.checkpoint()
    to_v4(path)
    before = history(path)
    states = []
    for step in range(1, 30):
        copy = tmp_path / f"killed-{step}.db"
        copy.write_bytes(path.read_bytes())
        done = subprocess.run([sys.executable, "-c", KILLER, str(copy), str(step)], cwd=Path(__file__).parent.parent,
                              capture_output=True, text=True)
        assert done.returncode in (0, -signal.SIGKILL), done.stderr[-2000:]
        raw = sqlite3.connect(copy)
        try:
            version = raw.execute("PRAGMA user_version").fetchone()[0]
            assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            raw.close()
        states.append(version)
        assert version in (4, SCHEMA_VERSION), f"killed before statement {step}: schema {version}"
        assert history(copy) == before, f"killed before statement {step}: the history changed (schema {version})"
        with Store(copy) as store:  # whatever it was left as, the next opening finishes the job
            store.verify(checkpoint=checkpoint)
        if done.returncode == 0:  # ran to the end: every step was killed once
            break
    assert states.count(4) >= 5 and states[-1] == SCHEMA_VERSION, states
