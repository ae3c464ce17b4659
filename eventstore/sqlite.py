"""The SQLite backend: every SQL statement and pragma threadlog runs lives in this module.

`SQLiteBackend` implements `backend.Backend`; `Store` speaks to it through that interface
only, so a second backend (PostgreSQL is planned) implements the same methods and passes
the same contract suite. SQLite-only settings (`synchronous`, the journal mode, the file's
`application_id` and `user_version`) live here and nowhere else.

Ordering (subtle, and the reason for `BEGIN IMMEDIATE`): an append reads the thread's head,
checks the caller's expectation and inserts, all under SQLite's single write lock, taken
at `BEGIN`. Because nobody else can commit in between, `position` (AUTOINCREMENT, never
reused) is assigned in commit order, and a reader tailing `read_all(after=p)` can never
see a position appear below one it already saw. A deferred `BEGIN` (what sqlite-utils'
`atomic()` issues) would take the lock only at the first write and let two writers read
the same head.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlite_utils

from .backend import DataRow, EventRow, EventValues, SnapshotRow, StoredSnapshot, StreamRow
from .errors import SchemaError, StoreError

# Identifies a threadlog file (PRAGMA application_id), so we never "migrate" someone
# else's database. The bytes spell "TLOG".
APPLICATION_ID = 0x544C4F47

# Schema versions, recorded in PRAGMA user_version. Each migration takes the database
# from version n - 1 to n inside the caller's transaction.
SCHEMA_VERSION = 2

EVENT_COLUMNS = (
    'position, stream_id, "offset", event_id, type, schema_version, data, meta, '
    "recorded_at, data_digest, hash, pending, redacted_by"
)
INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
STREAM_COLUMNS = (
    "id, parent_id, parent_offset, root_id, depth, head, created_position, kind, "
    "head_hash, facts, first_message_offset"
)

# One row whatever happens: the events sequence, then the stream's columns (NULLs if absent).
STREAM_FOR_APPEND = (
    "SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'events'), "
    + ", ".join(f"s.{c.strip()}" for c in STREAM_COLUMNS.split(","))
    + " FROM (SELECT 1) LEFT JOIN streams s ON s.id = ?"
)

EVENTS_DDL = """
CREATE TABLE events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id TEXT NOT NULL REFERENCES streams(id),
    "offset" INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    type TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    data TEXT NOT NULL,
    meta TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    data_digest TEXT NOT NULL,
    hash TEXT NOT NULL,
    pending TEXT,
    redacted_by INTEGER
)
"""


def _migrate_1(db: sqlite_utils.Database) -> None:
    """Version 1: streams and the append-only events log."""
    db.table("streams").create(
        {
            "id": str,
            "parent_id": str,
            "parent_offset": int,
            "root_id": str,
            "depth": int,
            "head": int,
            "created_position": int,
            "kind": str,
            "head_hash": str,
            "facts": str,
            "first_message_offset": int,
        },
        pk="id",
        not_null=["root_id", "depth", "head", "kind", "head_hash"],
    )
    db.table("streams").create_index(["parent_id"], index_name="streams_parent")
    # sqlite-utils cannot declare AUTOINCREMENT, which `position` needs (never reused).
    db.execute(EVENTS_DDL)
    db.table("events").create_index(["stream_id", "offset"], index_name="events_stream_offset", unique=True)
    db.table("events").create_index(["event_id"], index_name="events_event_id", unique=True)


def _migrate_2(db: sqlite_utils.Database) -> None:
    """Version 2: `snapshots`, a cache of projection states (never truth; safe to empty).

    A row is one projection's state after the first `offset` events of `stream_id`'s
    logical history, as computed by that projection's code `version`.
    """
    db.table("snapshots").create(
        {"projection": str, "version": int, "stream_id": str, "offset": int, "state": str},
        pk=("projection", "version", "stream_id", "offset"),
        not_null=["state"],
    )


MIGRATIONS = {1: _migrate_1, 2: _migrate_2}


_P = ParamSpec("_P")
_R = TypeVar("_R")

# Builds a named row from a driver row in C: `_new(EventRow, row)`, with no Python-level
# `__new__` per row (reading rows this way costs about what reading plain tuples does).
_new: Callable[..., Any] = tuple.__new__

# SQLite's primary result codes (the low byte of an extended code) and what they mean here.
_FULL = "the database or disk is full ({error}); nothing was written"
_BUSY = "the database stayed locked by another writer ({error}); retry"
_MESSAGES = {
    sqlite3.SQLITE_READONLY: "{path} is read-only ({error}); open a writable copy to change it",
    sqlite3.SQLITE_FULL: _FULL,
    sqlite3.SQLITE_BUSY: _BUSY,
    sqlite3.SQLITE_LOCKED: _BUSY,
    sqlite3.SQLITE_IOERR: "the disk refused an operation on {path} ({error}): it may be full, capped or failing; "
    "nothing was written",
    sqlite3.SQLITE_CORRUPT: "{path} is damaged ({error}): SQLite met a corrupt page; restore the file from a backup",
    sqlite3.SQLITE_CANTOPEN: "cannot open {path} ({error}); check that its directory exists and is writable",
    sqlite3.SQLITE_PERM: "cannot open {path} ({error}); check that its directory exists and is writable",
    sqlite3.SQLITE_NOTADB: "{path} is not a SQLite database",
}


def translate(error: sqlite3.Error, path: str) -> StoreError:
    """The `StoreError` for a driver error, chosen by SQLite's result code, never by its text."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:  # raised by the driver itself: e.g. a cursor used after `close()`
        if isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error):
            return StoreError(f"the store for {path} is closed; open it again to read or write")
        return StoreError(f"database error on {path}: {error}")
    template = _MESSAGES.get(code & 0xFF)
    if template is None:
        return StoreError(f"database error on {path}: {error} ({error.sqlite_errorname})")
    kind = SchemaError if code & 0xFF == sqlite3.SQLITE_NOTADB else StoreError
    return kind(template.format(path=path, error=error))


def _translated(method: Callable[Concatenate[SQLiteBackend, _P], _R]) -> Callable[Concatenate[SQLiteBackend, _P], _R]:
    """Run a backend method so that only `StoreError` leaves it."""

    def run(self: SQLiteBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as error:
            raise translate(error, self.path) from None

    functools.update_wrapper(run, method)
    return run


class _Transaction:
    """The context manager behind `SQLiteBackend.transaction` (a class: it is on every append's path).

    On the way out it commits; if the body or the commit raised, it rolls back and
    re-raises, translating `sqlite3` errors into `StoreError`.
    """

    __slots__ = ("conn", "path")

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path

    def __enter__(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise translate(error, self.path) from None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if error is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException as failed:
                error = failed
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error as failed:  # the connection is gone: nothing was committed
            if not isinstance(error, sqlite3.Error):
                error = failed
        if isinstance(error, sqlite3.Error):
            raise translate(error, self.path) from None
        if kind is None:  # the commit itself was interrupted
            raise error


class SQLiteBackend:
    """One connection to one threadlog file (or `:memory:`). Not shared between threads.

    `synchronous` is SQLite's durability setting: `NORMAL` (the default, in WAL mode) is
    durable across a process crash but may lose the last commits on power loss; `FULL`
    syncs every commit. Writers wait up to `timeout` seconds for SQLite's write lock.
    """

    def __init__(self, path: str | Path, synchronous: str = "NORMAL", timeout: float = 30.0) -> None:
        synchronous = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreError(f"synchronous must be NORMAL, FULL, EXTRA or OFF, not {synchronous!r}")
        self.path = str(path)
        self.synchronous = synchronous
        try:
            self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        try:
            self.conn.execute("PRAGMA foreign_keys=OFF")
            # Zero the space a deleted or rewritten row leaves, so a redacted payload (or a
            # dropped snapshot) is not left readable in a free page.
            self.conn.execute("PRAGMA secure_delete=ON")
            self._check_file()
            self.journal_mode = self._set_journal_mode()
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self._migrate()
        except sqlite3.Error as error:
            self.conn.close()
            raise translate(error, self.path) from None
        except StoreError:
            self.conn.close()
            raise

    # -- schema -------------------------------------------------------------------------

    def _check_file(self) -> None:
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if app_id == 0 and tables:
            raise SchemaError(
                f"{self.path} is a SQLite database but not a threadlog one "
                f"(it holds {', '.join(sorted(tables)[:5])}); pass another --db path"
            )
        if app_id not in (0, APPLICATION_ID):
            raise SchemaError(f"{self.path} belongs to another application (application_id {app_id})")
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"{self.path} was written by a newer threadlog (schema version {version}; "
                f"this release reads up to {SCHEMA_VERSION}); upgrade threadlog to open it"
            )

    def _set_journal_mode(self) -> str:
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])
        try:
            return str(self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError:  # a read-only file keeps the mode it has
            return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    def _migrate(self) -> None:
        if self.schema_version() == SCHEMA_VERSION:
            return
        with self.transaction():
            self._check_file()  # another process may have migrated while we waited
            version = self.schema_version()
            db = sqlite_utils.Database(self.conn)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[target](db)
            self.conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @_translated
    def schema_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    @_translated
    def ddl(self) -> str:
        """The schema's SQL, in a stable order (what `schema/schema.sql` holds)."""
        rows = self.conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY type DESC, name"
        )
        return ";\n\n".join(r[0].strip() for r in rows) + ";\n"

    # -- transactions ---------------------------------------------------------------------

    def transaction(self) -> _Transaction:
        """`BEGIN IMMEDIATE` … `COMMIT`; any error rolls back and leaves the file as it was."""
        return _Transaction(self.conn, self.path)

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """A consistent view for several reads; in WAL mode writers are not blocked meanwhile."""
        conn = self.conn
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT 1 FROM streams LIMIT 1").fetchall()  # takes the read snapshot
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # a closed connection has nothing to roll back
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()

    def _rows(self, cursor: Iterator[Any], kind: type[_R]) -> Iterator[_R]:
        """The cursor's rows as `kind`, translating errors met while iterating (a damaged
        page is found when it is read). Closing this generator early leaves the cursor to
        be collected: it never touches a connection that may be closed by then."""
        try:
            yield from map(_new, repeat(kind), cursor)
        except sqlite3.Error as error:
            raise translate(error, self.path) from None

    # -- streams ----------------------------------------------------------------------------

    @_translated
    def stream(self, stream_id: str) -> StreamRow | None:
        row = self.conn.execute(f"SELECT {STREAM_COLUMNS} FROM streams WHERE id = ?", (stream_id,)).fetchone()
        return _new(StreamRow, row) if row else None

    @_translated
    def stream_for_append(self, stream_id: str) -> tuple[StreamRow | None, int]:
        """The stream's row (None if it does not exist) and the next position, in one query.

        Valid only inside a write transaction, like `next_position`.
        """
        row = self.conn.execute(STREAM_FOR_APPEND, (stream_id,)).fetchone()
        return (_new(StreamRow, row[1:]) if row[1] is not None else None), (row[0] or 0) + 1

    @_translated
    def ancestry(self, stream_id: str) -> list[StreamRow]:
        """The stream's row, then its parent's, up to the root: one recursive query."""
        rows = self.conn.execute(
            f"""WITH RECURSIVE chain(id, n) AS (
                    SELECT ?, 0
                    UNION ALL
                    SELECT s.parent_id, chain.n + 1 FROM streams s JOIN chain ON s.id = chain.id
                    WHERE s.parent_id IS NOT NULL)
                SELECT {', '.join('s.' + c.strip() for c in STREAM_COLUMNS.split(','))}
                FROM chain JOIN streams s ON s.id = chain.id ORDER BY chain.n""",
            (stream_id,),
        ).fetchall()
        return [_new(StreamRow, r) for r in rows]

    @_translated
    def streams(self) -> list[StreamRow]:
        rows = self.conn.execute(f"SELECT {STREAM_COLUMNS} FROM streams ORDER BY created_position, id").fetchall()
        return [_new(StreamRow, r) for r in rows]

    @_translated
    def subtree(self, stream_id: str) -> list[StreamRow]:
        """The stream and every stream forked from it, directly or not, in creation order
        (a recursive walk down the `parent_id` index, not a scan of every stream)."""
        columns = ", ".join("s." + c.strip() for c in STREAM_COLUMNS.split(","))
        rows = self.conn.execute(
            f"""WITH RECURSIVE tree(id) AS (
                    SELECT ? UNION ALL SELECT s.id FROM streams s JOIN tree ON s.parent_id = tree.id)
                SELECT {columns} FROM tree JOIN streams s ON s.id = tree.id ORDER BY s.created_position, s.id""",
            (stream_id,),
        ).fetchall()
        return [_new(StreamRow, r) for r in rows]

    @_translated
    def insert_stream(self, row: StreamRow) -> None:
        self.conn.execute(f"INSERT INTO streams ({STREAM_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)

    @_translated
    def update_head(self, stream_id: str, head: int, head_hash: str, facts: str | None, first_message: int | None) -> None:
        self.conn.execute(
            "UPDATE streams SET head = ?, head_hash = ?, facts = ?, first_message_offset = ? WHERE id = ?",
            (head, head_hash, facts, first_message, stream_id),
        )

    # -- events ------------------------------------------------------------------------------

    @_translated
    def next_position(self) -> int:
        """The position the next insert will get (valid only inside a write transaction)."""
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        return (row[0] if row else 0) + 1

    @_translated
    def insert_events(self, rows: Sequence[EventValues]) -> None:
        if len(rows) == 1:
            self.conn.execute(INSERT_EVENT, rows[0])
        else:
            self.conn.executemany(INSERT_EVENT, rows)

    @_translated
    def events_by_id(self, event_ids: Sequence[str]) -> list[EventRow]:
        if len(event_ids) == 1:
            query = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id = ?"
            rows = self.conn.execute(query, (event_ids[0],)).fetchall()
        else:
            query = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
            rows = self.conn.execute(query, (json.dumps(list(event_ids)),)).fetchall()
        return [_new(EventRow, r) for r in rows]

    @_translated
    def event_at(self, stream_id: str, offset: int) -> EventRow | None:
        row = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND "offset" = ?', (stream_id, offset)
        ).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def event_at_position(self, position: int) -> EventRow | None:
        row = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE position = ?", (position,)).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def range(self, stream_id: str, lo: int, hi: int | None) -> Iterator[EventRow]:
        """A stream's own events with lo <= offset < hi, in offset order: one index range scan."""
        cursor = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND "offset" >= ? AND "offset" < ? '
            'ORDER BY "offset"',
            (stream_id, lo, _NO_BOUND if hi is None else hi),
        )
        return self._rows(cursor, EventRow)

    @_translated
    def range_data(self, stream_id: str, lo: int, hi: int | None) -> Iterator[DataRow]:
        """Like `range`, but only (offset, type, schema_version, data): what a fold needs."""
        cursor = self.conn.execute(
            'SELECT "offset", type, schema_version, data FROM events WHERE stream_id = ? AND "offset" >= ? '
            'AND "offset" < ? ORDER BY "offset"',
            (stream_id, lo, _NO_BOUND if hi is None else hi),
        )
        return self._rows(cursor, tuple)

    @_translated
    def all_events(self, after: int, limit: int | None) -> Iterator[EventRow]:
        cursor = self.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, -1 if limit is None else limit),
        )
        return self._rows(cursor, EventRow)

    @_translated
    def redact(self, position: int, data: str, redacted_by: int) -> None:
        self.conn.execute("UPDATE events SET data = ?, redacted_by = ? WHERE position = ?", (data, redacted_by, position))

    @_translated
    def redacted_since(self, stream_id: str, lo: int, hi: int | None, after: int) -> tuple[int, int] | None:
        """(position, redacted_by) of an event of `stream_id` with lo <= offset < hi that was
        redacted by an `event.redacted` at a position > `after`, or None.

        With `after` > 0 only the redactions recorded since then are read (usually none);
        with 0, the stream's range is scanned.
        """
        bounds = (stream_id, lo, 2**62 if hi is None else hi)
        if after > 0:
            row = self.conn.execute(
                "SELECT t.position, r.position FROM events r "
                "JOIN events t ON t.position = json_extract(r.data, '$.position') WHERE r.position > ? AND r.type = 'event.redacted' "
                'AND t.stream_id = ? AND t."offset" >= ? AND t."offset" < ? LIMIT 1',
                (after, *bounds),
            ).fetchone()
        else:
            row = self.conn.execute(
                'SELECT position, redacted_by FROM events WHERE stream_id = ? AND "offset" >= ? AND "offset" < ? '
                "AND redacted_by IS NOT NULL LIMIT 1",
                bounds,
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    @_translated
    def last_position(self) -> int:
        """The highest position ever given (0 for an empty log)."""
        row = self.conn.execute("SELECT max(position) FROM events").fetchone()
        return int(row[0] or 0)

    @_translated
    def hashes(self, upto: int) -> Iterator[tuple[int, str]]:
        """(position, hash) of every event with position <= `upto`, in position order."""
        cursor = self.conn.execute("SELECT position, hash FROM events WHERE position <= ? ORDER BY position", (upto,))
        return self._rows(cursor, tuple)

    @_translated
    def truncate_wal(self) -> None:
        """Checkpoint the WAL into the database file and truncate it to zero bytes."""
        if self.journal_mode.lower() != "wal":
            return
        busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise StoreError(
                f"{self.path}: another connection is reading, so the write-ahead log still holds old pages; "
                "the change is committed; call purge() (threadlog redact does) once the readers are done"
            )

    @_translated
    def counts(self) -> tuple[int, int]:
        """(streams, events)."""
        streams = self.conn.execute("SELECT count(*) FROM streams").fetchone()[0]
        events = self.conn.execute("SELECT count(*) FROM events").fetchone()[0]
        return int(streams), int(events)

    @_translated
    def orphan_position(self) -> int | None:
        """The lowest position of an event whose stream does not exist, if any."""
        row = self.conn.execute("SELECT min(position) FROM events WHERE stream_id NOT IN (SELECT id FROM streams)")
        return row.fetchone()[0]  # type: ignore[no-any-return]

    @_translated
    def triggers(self) -> list[str]:
        return [str(row[0]) for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")]

    # -- snapshots (a cache) -------------------------------------------------------------------

    @_translated
    def save_snapshot(self, projection: str, version: int, stream_id: str, offset: int, state: str) -> None:
        self.conn.execute(
            'INSERT OR REPLACE INTO snapshots (projection, version, stream_id, "offset", state) VALUES (?,?,?,?,?)',
            (projection, version, stream_id, offset, state),
        )

    @_translated
    def nearest_snapshot(self, projection: str, version: int, stream_id: str, lo: int, hi: int) -> SnapshotRow | None:
        """The snapshot of `stream_id` with the highest offset in lo..hi, as (offset, state)."""
        row = self.conn.execute(
            'SELECT "offset", state FROM snapshots WHERE projection = ? AND version = ? AND stream_id = ? '
            'AND "offset" >= ? AND "offset" <= ? ORDER BY "offset" DESC LIMIT 1',
            (projection, version, stream_id, lo, hi),
        ).fetchone()
        return SnapshotRow(int(row[0]), str(row[1])) if row else None

    @_translated
    def drop_snapshots(self, projection: str | None = None) -> int:
        """Delete every snapshot (of one projection, if named); returns how many."""
        if projection is None:
            return self.conn.execute("DELETE FROM snapshots").rowcount
        return self.conn.execute("DELETE FROM snapshots WHERE projection = ?", (projection,)).rowcount

    @_translated
    def count_snapshots(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0])

    @_translated
    def snapshots(self) -> Iterator[StoredSnapshot]:
        rows = self.conn.execute('SELECT projection, version, stream_id, "offset", state FROM snapshots '
                                 'ORDER BY projection, version, stream_id, "offset"').fetchall()
        return (StoredSnapshot(*row) for row in rows)


# An upper bound no offset reaches: one query shape whether or not a range is bounded.
_NO_BOUND = 2**62
