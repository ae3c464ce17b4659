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
import hashlib
import json
import os
import re
import sqlite3
import time
import urllib.parse
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, TypeVar

if TYPE_CHECKING:  # imported where a schema is made or migrated: ~50-100 ms of every command's start
    import sqlite_utils

from .backend import (DOC_PARTS, ENGINE_SNIPPET_CHARS, QUERY_OPERATORS, SNIPPET_MARKS, DataRow, DocValues, EventRow,
                      EventValues, HitRow, Scope, SnapshotRow, NO_BOUND, StoredSnapshot, StreamRow, chain_order, forks_at_query,
                      hit_filters, prefix_query, tools_query, query_words, with_clause)
from .checkpoints import BACKSTOP, Checkpointer
from .claims import Claim, file_claim, unclaimed
from .errors import (Locked, ReadersHeldOff, SchemaError, SchemaTooOld, StoreError, UnreadableRow, altered_index, documents_miscounted,
                     empty_file, not_threadlog, pages_kept, shown, transaction_open, unsendable,
                     waiting_inside)
from .packing import TYPE_CODES, pack_appended, pack_id, pack_row, pack_type
from .recorded import altered_stream

# Identifies a threadlog file (PRAGMA application_id), so we never "migrate" someone
# else's database. The bytes spell "TLOG".
APPLICATION_ID = 0x544C4F47

WRITER_CACHE_KIB = 65536

# Schema versions, recorded in PRAGMA user_version. Each migration takes the database
# from version n - 1 to n inside the caller's transaction.
SCHEMA_VERSION = 8

# The layout (schema 5) stores an event's text columns compactly where that gives the same
# text back (`eventstore/packing.py`): ordered ids and hashes as BLOBs, types as small
# integers, no digest that the data gives back. Measured with raw sqlite3 at
# 1,000,000 events (the rows of 2,000 interleaved threads, 1,000-row batches, 4 KiB pages):
# the store's text layout made a 1,000-row insert slow down as its random-id index outgrew
# the cache; time-ordered ids kept inserts near the lean table's; and the compact columns
# (then with integer times too) made the file 406 MB against the lean table's 308 MB (1.32x;
# 2.26x before); keeping the digest and text types made it 463 MB (1.50x). Times are text
# again (see packing.py: decoding them cost more than their 19 bytes). Page size, same probe
# at 500,000 events: 4 KiB 27.5 ms a batch and 203 MB, 8 KiB 25.5 ms and 200 MB, within this
# machine's noise, so SQLite's default 4 KiB stays (an existing file's would need a VACUUM).
# The page cache of a writing connection is 64 MiB (`WRITER_CACHE_KIB`; SQLite's default is
# 2 MiB): an append to a random thread of a large file reads the thread's pages of three
# indexes and the streams table, and at 550,000 events (500 threads, 50,000 forks; 254 MB)
# single appends took a median 538 us with the default cache, 379 us with 64 MiB, and 439 us
# with a 1 GiB memory map instead (interleaved in one process, loaded machine). The cache
# fills only as pages are read and is never more than that; read-only connections (verify,
# the viewer) keep the default: a scan gains nothing from it. No memory map: it gained less,
# its pages count in a reader's RSS, and an I/O error under it is a signal, not an error code.
# Reads decode in SQL, so rows are still built in C (`EVENT_COLUMNS`); a digest not stored
# reads as None.
STORED_COLUMNS = (
    'position, stream_id, "offset", event_id, type, schema_version, data, meta, '
    "recorded_at, data_digest, hash, pending, redacted_by"
)
INSERT_EVENT = f"INSERT INTO events ({STORED_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
# An appended event's row (`packing.pack_appended`): no stored digest and no redaction, written
# as NULL literals, and `pending` too when nothing is pending after any event of the batch
# (the driver binds None only after an adapter lookup: see `packing.pack_appended`).
INSERT_APPENDED = f"INSERT INTO events ({STORED_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,NULL,?,?,NULL)"
INSERT_APPENDED_IDLE = f"INSERT INTO events ({STORED_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,NULL,?,NULL,NULL)"
# A stream's listing key, `recency`, is its `last_position` shifted right by `RECENCY_SHIFT`:
# its last activity to within 1,024 positions. `streams_recency` indexes that, not
# `last_position`, so an append moves the index entry only when its stream's key changes:
# once in 1,024 positions for a thread appended to again and again (a conversation's turns),
# and SQLite writes an index's page for an UPDATE whenever the SET names a column the index
# holds, even to the value it had. So the head's UPDATE names `recency` only when it moves
# (`update_head`): one page fewer a commit (5 to 4 for a message, counted in WAL frames).
RECENCY_SHIFT = 10
_UPDATE_HEAD = ("UPDATE streams SET head = ?1, head_hash = ?2, facts = ?3, first_message_offset = ?4, last_position = ?5{} "
                "WHERE id = ?6")
_UPDATE_HEAD_IDLE = ("UPDATE streams SET head = ?1, head_hash = ?2, facts = NULL, first_message_offset = ?3, "
                     "last_position = ?4{} WHERE id = ?5")
# (facts pending, key moved) -> the statement
_UPDATE_HEADS = {
    (True, False): _UPDATE_HEAD.format(""),
    (True, True): _UPDATE_HEAD.format(f", recency = ?5 >> {RECENCY_SHIFT}"),
    (False, False): _UPDATE_HEAD_IDLE.format(""),
    (False, True): _UPDATE_HEAD_IDLE.format(f", recency = ?4 >> {RECENCY_SHIFT}"),
}


def _decoded_columns() -> str:
    """The SELECT list giving an `EventRow`'s text values back from the stored columns
    (`packing.unpack_*`, in SQL). A digest not stored reads as NULL (None): see `EventValues`."""
    return (
        'position, stream_id, "offset", '
        "CASE WHEN typeof(event_id) = 'blob' THEN lower(hex(event_id)) ELSE event_id END, "
        f"{_type('type')}, schema_version, data, meta, {_time('recorded_at')}, "
        "CASE WHEN typeof(data_digest) = 'blob' THEN lower(hex(data_digest)) ELSE data_digest END, "
        "CASE WHEN typeof(hash) = 'blob' THEN 'tl2:' || lower(hex(hash)) ELSE hash END, pending, redacted_by"
    )


def _listed_by(row: StreamRow) -> tuple[bool, int, str]:
    """Where `recent_streams` lists a row, to merge its pages of roots and of forks: by
    (last_position, id) as the queries sort (Python orders str as SQLite's BINARY orders
    UTF-8). A row holding what raw SQL alone writes (`_ASTRAY`, an id that is not text) comes
    first, its key unknown here: a page holding it is refused, never one that passes it."""
    if row.last_position.__class__ is int and 0 <= row.last_position < NO_BOUND and row.id.__class__ is str:
        return False, row.last_position, row.id
    return True, 0, ""


def _filed(row: Sequence[Any]) -> StreamRow:
    """A row of `recent_streams` (the stream's columns, then its listing key), refused where
    the key is not its last_position's: raw SQL set one, and the listing read it out of its
    place (a page ending with it started the next above or below threads not yet listed).
    A last_position that is no position is left to the reader, which names that column."""
    stream: StreamRow = _new(StreamRow, row[:-1])
    recency = row[-1]
    if _listed_by(stream)[0] or (recency.__class__ is int and recency == stream.last_position >> RECENCY_SHIFT):
        return stream
    raise altered_stream(stream, "recency", f"its last_position's listing key ({stream.last_position} >> {RECENCY_SHIFT}, "
                                            f"{stream.last_position >> RECENCY_SHIFT})", recency)


def _time(column: str) -> str:
    """SQL giving `packing.unpack_time` of a stored `recorded_at`: text as it is (every time
    written since schema 6), integer microseconds (schema 5 wrote them) formatted back."""
    return (f"CASE WHEN typeof({column}) = 'integer' THEN strftime('%Y-%m-%dT%H:%M:%S', {column} / 1000000, 'unixepoch') "
            f"|| printf('.%06dZ', {column} % 1000000) ELSE {column} END")


def _type(column: str) -> str:
    types = " ".join(f"WHEN {code} THEN '{name}'" for name, code in TYPE_CODES.items())
    return f"CASE {column} {types} ELSE {column} END"


EVENT_COLUMNS = _decoded_columns()
_TITLE_TYPES = f"({TYPE_CODES['thread.created']}, {TYPE_CODES['title.set']})"
_MESSAGE = TYPE_CODES["message.appended"]
# A type stored as its name reads as the same type (`_type`; only raw SQL stores one of the
# catalogue's so, but its hash holds: the name is what was hashed), so a query by type matches
# both spellings. These follow the code each time, so SQLite still takes `events_other`.
_TITLES_EITHER_WAY = f"IN {_TITLE_TYPES[:-1]}, 'thread.created', 'title.set')"
_NOT_A_MESSAGE = f"type != {_MESSAGE} AND type != 'message.appended'"
_REDACTION_EITHER_WAY = f"IN ({TYPE_CODES['event.redacted']}, 'event.redacted')"
STREAM_COLUMNS = (
    "id, parent_id, parent_offset, root_id, depth, head, created_position, kind, "
    "head_hash, facts, first_message_offset, last_position"
)

# The streams at the top of a fork tree (`Backend.streams(tops=True)`): roots, and forks whose
# parent's row is gone. Each parent looked up by its id, not the table gathered in memory.
_TOPS = " (parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM streams p WHERE p.id = streams.parent_id))"

# The forks whose parent was not written before them (`Backend.streams(strays=True)`). Written
# before is a lower rowid, which the id's index holds: created_position is in the table only,
# and reading it for each parent took 330 ms of 200,000 forks instead of 60. Any order serves:
# around a cycle of parents, one fork's parent comes after it in every order.
_STRAYS = (" (parent_id IS NOT NULL AND NOT EXISTS "
           "(SELECT 1 FROM streams p WHERE p.id = streams.parent_id AND p.rowid < streams.rowid))")

# A stream's ancestry, from the stream up (`ancestry`). The recursion keeps each stream once
# (UNION), so a cycle of parents, which only raw SQL writes, ends it. From `start`, it stops
# at the first stream whose own events begin at or below that offset: the streams above hold
# only earlier offsets, so reading a thread's last events reads one stream however deep its
# chain of forks is.
_ANCESTRY = """WITH RECURSIVE chain(id) AS (
        SELECT ?
        UNION
        SELECT s.parent_id FROM streams s JOIN chain ON s.id = chain.id WHERE s.parent_id IS NOT NULL{})
    SELECT {} FROM chain JOIN streams s ON s.id = chain.id"""
_PREFIXED_COLUMNS = ", ".join("s." + column.strip() for column in STREAM_COLUMNS.split(","))
ANCESTRY = _ANCESTRY.format("", _PREFIXED_COLUMNS)
ANCESTRY_FROM = _ANCESTRY.format(" AND coalesce(s.parent_offset > ?, 1)", _PREFIXED_COLUMNS)

# `recent_streams`: a page of roots (?1 = 1) or of forks (?1 = 0) after (?3, ?4) in the
# listing's order, from listing key ?2 down, at most ?5, each with its key. A row whose
# last_position is no position (raw SQL wrote text, NULL, a blob or a number past every
# position, and left its key as it was), or whose key is not its last_position's (raw SQL
# set one), compares with no bound: it is read first among its key's rows by any page that
# reaches that key, to be refused by name (`_filed`, the reader), not left out of every page.
_ASTRAY = f"coalesce(last_position NOT BETWEEN 0 AND {NO_BOUND - 1}, 1)"
_MISPLACED = f"({_ASTRAY} OR recency IS NOT last_position >> {RECENCY_SHIFT})"
_RECENT_STREAMS = (f"SELECT {STREAM_COLUMNS}, recency FROM streams INDEXED BY streams_recency "
                   "WHERE (parent_id IS NULL) = ?1 AND recency <= ?2 "
                   f"AND (last_position < ?3 OR last_position = ?3 AND id < ?4 OR {_MISPLACED}) "
                   f"ORDER BY recency DESC, {_MISPLACED} DESC, last_position DESC, id DESC LIMIT ?5")
# A stream whose listing key raw SQL set to NULL, a negative number, or past every key (text
# and blobs sort there too) is in no range of keys `_RECENT_STREAMS` reads: each listing
# looks for one at both ends of `streams_recency` (three seeks, each ending at once when
# there is none) to refuse it by name rather than leave it out of every page.
_LAST_KEY = (NO_BOUND - 1) >> RECENCY_SHIFT
_UNLISTED = " UNION ALL ".join(
    f"SELECT * FROM (SELECT {STREAM_COLUMNS}, recency FROM streams INDEXED BY streams_recency "
    f"WHERE (parent_id IS NULL) = ?1 AND {bound} LIMIT 1)"
    for bound in ("recency IS NULL", "recency < 0", f"recency > {_LAST_KEY}")) + " LIMIT 1"

# One row whatever happens: the last position, then the stream's columns (NULLs if absent).
STREAM_FOR_APPEND = (
    "SELECT (SELECT max(position) FROM events), "
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

# Schema 5: the packed columns are declared BLOB, the one affinity that stores what it is
# given (a text id stays text, a packed one bytes; NUMERIC would turn the id "12" into 12).
EVENTS_DDL_5 = """
CREATE TABLE {name} (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id TEXT NOT NULL REFERENCES streams(id),
    "offset" INTEGER NOT NULL,
    event_id BLOB NOT NULL,
    type BLOB NOT NULL,
    schema_version INTEGER NOT NULL,
    data TEXT NOT NULL,
    meta TEXT NOT NULL,
    recorded_at BLOB NOT NULL,
    data_digest BLOB,
    hash BLOB NOT NULL,
    pending TEXT,
    redacted_by INTEGER
)
"""


# The index of `search_docs.text`. External content: FTS5 keeps only its inverted index and
# reads a row's text from `search_docs` when it needs it (snippets, and a delete, which must
# be given the exact text that was indexed; both tables are written together, so it is).
SEARCH_FTS_DDL = (
    "CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_docs', content_rowid='docid', "
    "tokenize='unicode61 remove_diacritics 2')"
)


# The rows (stream_id, lo, hi) of a search's scope, bound as a JSON array (`hit_filters`).
_SCOPE_ROWS = "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)"


def _varint(record: bytes, at: int = 0) -> tuple[int, int]:
    """The SQLite varint that begins at `at` in one of FTS5's records, and where the next one
    begins (a record cut short gives what it holds)."""
    value = 0
    for i, byte in enumerate(record[at:at + 9]):
        if i == 8:
            return value << 8 | byte, at + 9
        value = value << 7 | byte & 0x7F
        if byte < 0x80:
            return value, at + i + 1
    return value, len(record)


def _fts_rows(totals: bytes) -> int:
    """How many rows FTS5 indexes: the first varint of its record of totals (none: no row)."""
    return _varint(totals)[0]


# FTS5's record of its structure: a 4-byte cookie, the marker of its second layout (which a
# later SQLite writes for options this index does not use; read all the same), then the number
# of levels of its segments.
_FTS_STRUCTURE_V2 = b"\xff\x00\x00\x01"
# SQLite from 3.41 keeps at most 64 levels (its 'optimize' merges onto the 64th at most); an
# index with more was merged by an earlier one.
_FTS_MOST_LEVELS = 64


def _fts_levels(conn: sqlite3.Connection) -> int:
    """How many levels FTS5's index of the documents holds (0: no record of its structure)."""
    row = conn.execute("SELECT block FROM search_fts_data WHERE id = 10").fetchone()
    record = row[0] if row is not None and isinstance(row[0], bytes) else b""
    return _varint(record, 8 if record[4:8] == _FTS_STRUCTURE_V2 else 4)[0]


def _count_documents(conn: sqlite3.Connection, added: int) -> None:
    """Add `added` to the count of documents the index wrote; an index with none (an earlier
    release's, or one just made) is counted whole, once."""
    if not conn.execute("UPDATE search_progress SET position = position + ? WHERE name = 'documents'", (added,)).rowcount:
        conn.execute("INSERT INTO search_progress VALUES ('documents', (SELECT count(*) FROM search_docs))")


# FTS5's own tables behind `search_fts` (external content: they hold no copy of the text).
_FTS_TABLES = ("search_fts_data", "search_fts_idx", "search_fts_docsize", "search_fts_config")


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


def _migrate_3(db: sqlite_utils.Database) -> None:
    """Version 3: the full-text search index (FTS5), kept apart from the log and off its
    append path: `search_docs` holds the text each event contributes (one row per part: a
    message's text, each tool call, each tool result, a summary, a title), `search_fts`
    indexes it as external content, and `search_progress` the last position covered (a later
    release adds a `documents` row there, whose `position` holds the count of documents the
    index wrote). Everything in these tables is derived from `events`; `rebuild_index` recreates it.
    """
    db.table("search_docs").create(
        {"docid": int, "position": int, "stream_id": str, "offset": int, "kind": str, "role": str, "tool": str,
         "text": str},
        pk="docid",
        not_null=["position", "stream_id", "offset", "kind", "text"],
    )
    db.table("search_progress").create({"name": str, "position": int}, pk="name", not_null=["position"])
    db.table("search_progress").insert({"name": "index", "position": 0})
    # sqlite-utils creates neither virtual tables nor partial indexes.
    db.execute(SEARCH_FTS_DDL)
    db.execute("CREATE INDEX search_titles ON search_docs (stream_id, \"offset\") WHERE kind = 'title'")


def _migrate_4(db: sqlite_utils.Database) -> None:
    """Version 4: `streams.last_position` (the stream's latest own event), indexed, so that
    `threads()` lists the most recently active threads by reading one page of an index; and a
    partial index on the events that name a title, so a thread's title is found without a scan.
    """
    db.table("streams").add_column("last_position", int)
    db.execute("UPDATE streams SET last_position = (SELECT max(position) FROM events WHERE stream_id = streams.id)")
    db.execute("UPDATE streams SET last_position = created_position WHERE last_position IS NULL")
    db.table("streams").create_index(["last_position"], index_name="streams_activity")
    db.execute("CREATE INDEX events_titles ON events(stream_id, \"offset\") WHERE type IN ('thread.created', 'title.set')")


def _migrate_5(db: sqlite_utils.Database) -> None:
    """Version 5: the compact layout (see `STORED_COLUMNS`, `eventstore/packing.py`).

    The events are copied, in position order, into a table of the new layout, each value
    packed only where that gives the same text back; a digest is dropped only where it is
    the digest of the row's data (so a tampered row stays as visible as it was). The events
    sequence is carried over, so no position is given twice.
    """
    conn = db.conn
    sequence = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    conn.execute(EVENTS_DDL_5.format(name="events_5"))
    rows = conn.execute(f"SELECT {STORED_COLUMNS} FROM events ORDER BY position")
    conn.executemany(f"INSERT INTO events_5 ({STORED_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", map(_pack_old, rows))
    conn.execute("DROP TABLE events")
    conn.execute("ALTER TABLE events_5 RENAME TO events")
    conn.execute("DELETE FROM sqlite_sequence WHERE name IN ('events', 'events_5')")
    if sequence is not None:
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (sequence[0],))
    conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset")')
    conn.execute("CREATE UNIQUE INDEX events_event_id ON events (event_id)")
    conn.execute(f'CREATE INDEX events_titles ON events (stream_id, "offset") WHERE type IN {_TITLE_TYPES}')


def _pack_old(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of the text layout, packed (schema 5)."""
    data, data_digest = row[6], row[9]
    try:
        recomputed = isinstance(data, str) and _digest(data) == data_digest
    except UnicodeEncodeError:
        recomputed = False
    return pack_row((*row[:9], None if recomputed else data_digest, *row[10:]))


def _migrate_6(db: sqlite_utils.Database) -> None:
    """Version 6: listing at scale. Every event but messages (a tenth of a busy file's rows)
    indexed with its type, `events_other`: a thread's title is found in it, and its messages
    are counted as its events (offsets have no gaps) minus these, without reading a message
    (`count_type`; `threadlog ls` shows the count); it replaces `events_titles`. And root
    threads by activity, `streams_roots`: `ls` lists roots, and with many recent forks it
    walked past every one of them in `streams_activity` to find a page of roots.

    Times are written as text again from this version (see `packing`); the integers schema 5
    wrote stay and read back the same.
    """
    conn = db.conn
    conn.execute("DROP INDEX IF EXISTS events_titles")
    conn.execute(f'CREATE INDEX IF NOT EXISTS events_other ON events (stream_id, "offset", type) WHERE type != {_MESSAGE}')
    conn.execute("CREATE INDEX IF NOT EXISTS streams_roots ON streams (last_position) WHERE parent_id IS NULL")


# Schema 7: the events table as it is from this version.
EVENTS_DDL_7 = EVENTS_DDL_5.replace("PRIMARY KEY AUTOINCREMENT", "PRIMARY KEY")


def _migrate_7(db: sqlite_utils.Database) -> None:
    """Version 7: fewer pages written per append (8 to 6 for a turn's, counted in its WAL
    frames), for the same rows and answers.

    `position` drops AUTOINCREMENT: events are never deleted (a redaction rewrites its row),
    so the largest position plus one is the next, as the `sqlite_sequence` row said, and
    that row was one more page per commit. The rows are copied as they are, in position
    order. And one index, `streams_recent` on (is a root, last activity), replaces
    `streams_activity` and `streams_roots`, which every append moved both: roots are one
    range of it, every stream two ranges merged (`recent_streams`).
    """
    conn = db.conn
    conn.execute(EVENTS_DDL_7.format(name="events_7"))
    conn.execute(f"INSERT INTO events_7 ({STORED_COLUMNS}) SELECT {STORED_COLUMNS} FROM events ORDER BY position")
    conn.execute("DROP TABLE events")
    conn.execute("ALTER TABLE events_7 RENAME TO events")
    conn.execute("DELETE FROM sqlite_sequence WHERE name IN ('events', 'events_7')")
    conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset")')
    conn.execute("CREATE UNIQUE INDEX events_event_id ON events (event_id)")
    conn.execute(f'CREATE INDEX events_other ON events (stream_id, "offset", type) WHERE type != {_MESSAGE}')
    conn.execute("DROP INDEX IF EXISTS streams_activity")
    conn.execute("DROP INDEX IF EXISTS streams_roots")
    conn.execute("CREATE INDEX streams_recent ON streams (parent_id IS NULL, last_position)")


def _migrate_8(db: sqlite_utils.Database) -> None:
    """Version 8: one page fewer an append. Streams are listed by `recency` (`last_position`
    to within 1,024 positions, see `RECENCY_SHIFT`) through `streams_recency`, which replaces
    `streams_recent`: an append moves that index only when its stream's key changes."""
    conn = db.conn
    conn.execute("ALTER TABLE streams ADD COLUMN recency INTEGER")
    conn.execute(f"UPDATE streams SET recency = last_position >> {RECENCY_SHIFT}")
    conn.execute("DROP INDEX IF EXISTS streams_recent")
    conn.execute("CREATE INDEX streams_recency ON streams (parent_id IS NULL, recency)")


MIGRATIONS = {1: _migrate_1, 2: _migrate_2, 3: _migrate_3, 4: _migrate_4, 5: _migrate_5, 6: _migrate_6, 7: _migrate_7,
              8: _migrate_8}


def _lenient_text(value: bytes) -> str | bytes:
    """A text value as str, or as its bytes when they are not UTF-8: a value of another kind,
    which verify names, never text that could equal what was hashed (decoding with U+FFFD for
    what is not UTF-8 gave the hashed text back when it held U+FFFD there)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _digest(data: str | bytes) -> str:
    """`tl_digest(data)`: the SHA-256 of an event's data, hex (what a packed row does not store)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


_P = ParamSpec("_P")
_R = TypeVar("_R")

# Builds a named row from a driver row in C: `_new(EventRow, row)`, with no Python-level
# `__new__` per row (reading rows this way costs about what reading plain tuples does).
_new: Callable[..., Any] = tuple.__new__

# SQLite's primary result codes (the low byte of an extended code) and what they mean here.
_FULL = "the database or disk is full ({error}); nothing was written"
_MESSAGES = {
    sqlite3.SQLITE_READONLY: "{path} is read-only ({error}); open a writable copy to change it",
    sqlite3.SQLITE_FULL: _FULL,
    sqlite3.SQLITE_IOERR: "the disk refused an operation on {path} ({error}): it may be full, capped or failing; "
    "nothing was written",
    sqlite3.SQLITE_CORRUPT: "{path} is damaged ({error}): SQLite met a corrupt page; restore the file from a backup",
    sqlite3.SQLITE_CANTOPEN: "cannot open {path} ({error}); check that its directory exists and is writable",
    sqlite3.SQLITE_PERM: "cannot open {path} ({error}); check that its directory exists and is writable",
    sqlite3.SQLITE_NOTADB: "{path} is not a SQLite database",
    # Every write checks its keys under the write lock first, so only rows altered outside
    # threadlog (a lowered head, a deleted stream row) can make one collide.
    sqlite3.SQLITE_CONSTRAINT: "{path} refused a write that would store a second row under one key ({error}): its rows "
    "were altered outside threadlog (`threadlog verify` names where); nothing was written",
}


def _read_only(path: str, error: sqlite3.Error) -> str:
    """What SQLite's "readonly database" means here: the file, or what SQLite writes beside it.
    A writable file was called read-only when a reader had left a read-only `-shm` beside it
    (as SQLite does reading a file while it is read-only) or its directory was read-only."""
    if os.access(path, os.W_OK):
        for suffix in ("-wal", "-shm"):
            if os.path.exists(path + suffix) and not os.access(path + suffix, os.W_OK):
                return (f"{path}{suffix}, which SQLite keeps beside {path}, is read-only, though {path} is not ({error}): make "
                        "it writable as the database file is (a reader may have left it while the file was read-only)")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.access(folder, os.W_OK):
            return (f"{path} is in a read-only directory, {folder}, where SQLite must write its write-ahead log beside it "
                    f"({error}); make the directory writable, or open a copy in a writable one")
    return _MESSAGES[sqlite3.SQLITE_READONLY].format(path=path, error=error)


# What Python's `sqlite3` raises for stored text that is not UTF-8 (only raw SQL writes it).
_UNDECODED = re.compile(r"Could not decode to UTF-8 column '([^']{0,100})'")


# What leaves the driver for a call it could not make: SQLite's errors, and text that is not
# UTF-8 (a lone surrogate), which cannot be bound.
_FAILED_CALLS = (sqlite3.Error, UnicodeEncodeError)


def translate(error: sqlite3.Error | UnicodeEncodeError, path: str) -> StoreError:
    """The `StoreError` for a driver error, chosen by SQLite's result code, never by its text."""
    if isinstance(error, UnicodeEncodeError):
        return unsendable(error, path)
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:  # raised by the driver itself: e.g. a cursor used after `close()`
        if isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error):
            return StoreError(f"the store for {path} is closed; open it again to read or write")
        undecoded = _UNDECODED.match(str(error))
        if undecoded is not None:  # the driver's message quotes the whole text, which may be megabytes
            column = undecoded.group(1)
            named = re.search(r"typeof\((\w+)\)", column)  # a decoding expression (`_decoded_columns`): its column
            return UnreadableRow(f"{path} holds text that is not UTF-8 (column {named.group(1) if named else column!r}): "
                                 "a row was altered outside threadlog (`threadlog verify` names it)")
        return StoreError(f"database error on {path}: {error}")
    if code == sqlite3.SQLITE_CORRUPT_VTAB:  # the file's one virtual table is the search index, a cache
        return altered_index(f"SQLite reports: {error}")
    if code & 0xFF == sqlite3.SQLITE_READONLY:
        return StoreError(_read_only(path, error))
    if code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Locked(path, str(error))
    template = _MESSAGES.get(code & 0xFF)
    if template is None:
        return StoreError(f"database error on {path}: {error} ({error.sqlite_errorname})")
    kind = SchemaError if code & 0xFF == sqlite3.SQLITE_NOTADB else StoreError
    return kind(template.format(path=path, error=error))


def _index_call(method: Callable[Concatenate[SQLiteBackend, _P], _R]) -> Callable[Concatenate[SQLiteBackend, _P], _R]:
    """`_translated`, for the search index's upkeep and queries. Their SQL is fixed, so SQLite
    refusing it as an error (no such table or column, FTS5's "invalid fts5 file format")
    means the index's tables were altered outside threadlog: a rebuild makes them again."""

    @functools.wraps(method)
    def run(self: SQLiteBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_ERROR:
                raise altered_index(f"SQLite reports: {error}") from None
            raise

    return _translated(run)


def _translated(method: Callable[Concatenate[SQLiteBackend, _P], _R]) -> Callable[Concatenate[SQLiteBackend, _P], _R]:
    """Run a backend method so that only `StoreError` leaves it."""

    def run(self: SQLiteBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except _FAILED_CALLS as error:
            raise translate(error, self.path) from None

    functools.update_wrapper(run, method)
    return run


_LAST_POSITION = 2**63 - 1  # SQLite's largest integer
# What SQLite says dropping an FTS5 table whose own tables raw SQL dropped or garbled: the
# table cannot be opened (`clear_index`).
_UNOPENED_TABLE = (sqlite3.SQLITE_ERROR, sqlite3.SQLITE_CORRUPT)
# Seconds the structure check's own connection waits to begin reading (`damaged(beside=True)`).
_BESIDE_WAIT = 0.5
# KiB of page cache for that connection. The check looks each row up in every index of its
# table, in the table's order: rows of a few thousand threads written in turn touch as many
# leaf pages of the (stream, offset) index, which SQLite's default 2 MB does not hold, so each
# lookup read its page from the file again. On a file of 2.2M events in 2,000 threads (4 KB
# pages) 32 MB took the check from 4.9 s of CPU to 4.0 s, and a full verify's system time
# from 3.5-4.2 s to 2.3-2.6 s; a larger cache gained nothing (4.5 s at 256 MB).
_BESIDE_CACHE_KIB = 32768


def _next_position(last: int | None, count: int) -> int:
    """The position after `last` (the log's largest, None when empty), if `count` events fit
    below SQLite's largest integer. Appends and restores never come near it (a restore keeps
    positions up to 2**62); a position past that was written by raw SQL."""
    if last is not None and last > _LAST_POSITION - count:
        events = "1 more event" if count == 1 else f"{count} more events"
        raise StoreError(f"the log's largest position is {last}, which leaves no room for {events} below SQLite's "
                         "largest integer: it was altered outside threadlog (`threadlog verify` names the row); nothing was written")
    return (last or 0) + 1


def _in_transaction(conn: sqlite3.Connection) -> bool:
    """Whether `conn` holds an open transaction; False for a closed one, whose error
    `translate` names (asked of a closed connection, `in_transaction` raises)."""
    try:
        return conn.in_transaction
    except sqlite3.Error:
        return False


class _Transaction:
    """The context manager behind `SQLiteBackend.transaction` (a class: it is on every append's path).

    On the way out it commits; if the body or the commit raised, it rolls back and
    re-raises, translating `sqlite3` errors into `StoreError`. With a `_Wait`, a writer that
    finds the lock held calls its `notice` and keeps waiting for the rest of the timeout.
    """

    __slots__ = ("conn", "cursor", "path", "wait", "committed")

    def __init__(self, conn: sqlite3.Connection, cursor: sqlite3.Cursor, path: str, wait: _Wait | None = None,
                 committed: Callable[[], None] | None = None) -> None:
        self.conn = conn
        self.cursor = cursor  # BEGIN and COMMIT run on the backend's cursor for writes
        self.path = path
        self.wait = wait
        self.committed = committed  # told of every commit (`Checkpointer.committed`)

    def __enter__(self) -> None:
        try:
            self.cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            if _in_transaction(self.conn):  # (a read view is refused before: `SQLiteBackend.transaction`)
                raise transaction_open(reading=False) from None
            if self.wait is None or (getattr(error, "sqlite_errorcode", 0) & 0xFF) != sqlite3.SQLITE_BUSY:
                raise translate(error, self.path) from None
            self._wait_longer()

    def _wait_longer(self) -> None:
        """The rest of the wait, `_WAIT_SLICE` seconds at a time: SQLite's wait holds back the
        process's signal handlers until it ends, and a second Ctrl-C (a follower's "stop now")
        waited out the whole --timeout, then counted as the first."""
        assert self.wait is not None
        self.wait.notice()
        deadline = time.monotonic() + self.wait.rest
        try:
            while True:
                left = deadline - time.monotonic()
                self.conn.execute(f"PRAGMA busy_timeout={max(int(min(left, _WAIT_SLICE) * 1000), 0)}")
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.Error as error:
                    if left <= _WAIT_SLICE or (getattr(error, "sqlite_errorcode", 0) & 0xFF) != sqlite3.SQLITE_BUSY:
                        raise translate(error, self.path) from None
        finally:
            self.conn.execute(f"PRAGMA busy_timeout={int(self.wait.first * 1000)}")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if error is None:
            try:
                self.cursor.execute("COMMIT")
            except BaseException as failed:
                error = failed
            else:
                if self.committed is not None:
                    self.committed()
                return
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


# How long one of the waits making up the rest of a writer's wait for the lock lasts (`_Wait`).
_WAIT_SLICE = 0.1


class _Wait(NamedTuple):
    """How a writer waits for the lock: `first` seconds, then `notice()`, then `rest` more."""

    notice: Callable[[], None]
    first: float
    rest: float


_MARKS = ", ".join(f"char({ord(mark)})" for mark in SNIPPET_MARKS)  # FTS5's snippet's marks, as SQL


def _structure_check(conn: sqlite3.Connection) -> str | None:
    """SQLite's first complaint about the file's structure, or None."""
    rows = conn.execute("PRAGMA integrity_check(1)").fetchall()
    found = str(rows[0][0]) if rows else "ok"
    return None if found == "ok" else found


def holds_no_table(path: str) -> bool:
    """Whether the file at `path` is one SQLite made and wrote no table into, read without
    SQLite (a disk that refused to make the database may refuse SQLite's own opening too):
    empty, or its first page alone, a schema page of no row, with no write-ahead log beside it
    that could hold more."""
    try:
        if os.path.exists(path + "-wal") and os.path.getsize(path + "-wal"):
            return False
        with open(path, "rb") as file:
            page = file.read(65537)
    except OSError:
        return False
    if not page:
        return True
    if len(page) < 108 or page[:16] != b"SQLite format 3\0":
        return False
    size = int.from_bytes(page[16:18], "big")
    size = 65536 if size == 1 else size
    # The schema's b-tree page header follows the file header: a leaf table page (13) of no cell.
    return len(page) == size and page[100] == 13 and page[103:105] == b"\0\0"


def _wal_holds_news(path: str) -> bool:
    """Whether the WAL beside `path` holds a committed page the main file does not: the last
    frame of each page, up to the last commit, compared with the file's page. A checkpointed
    WAL keeps its frames (and its size) until the last connection closes, and the same pages
    are in the file then: a copy of a live database has one."""
    try:
        with open(path + "-wal", "rb") as wal:
            header = wal.read(32)
            if len(header) < 32 or header[:4] not in (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83"):
                return False  # no frame, or not a WAL: SQLite reads none either
            size, salts = int.from_bytes(header[8:12], "big"), header[16:24]
            latest: dict[int, int] = {}  # page number -> where its last frame's page starts
            pending: dict[int, int] = {}  # the frames after the last commit seen
            while len(frame := wal.read(24)) == 24 and frame[8:16] == salts:
                pending[int.from_bytes(frame[:4], "big")] = wal.tell()
                if len(wal.read(size)) < size:
                    break  # a frame cut short: never committed
                if frame[4:8] != b"\0\0\0\0":  # a commit frame: the database's size after it
                    latest.update(pending)
                    pending.clear()
            with open(path, "rb") as main:
                for page, at in latest.items():
                    wal.seek(at)
                    main.seek((page - 1) * size)
                    if wal.read(size) != main.read(size):
                        return True
    except FileNotFoundError:
        return False
    except OSError:  # one it may not read: what it holds is unknown, and an immutable opening would leave it out
        return True
    return False


def _connect(path: str, timeout: float, read_only: bool) -> sqlite3.Connection:
    """A connection; read-only ones never create the file and never write to it.

    A read-only file in a directory nobody may write to (read-only media, a locked-down
    directory) cannot get the shared-memory file WAL readers need: it is opened `immutable`,
    which is safe there because no writer can change it either, unless a WAL file beside it
    holds commits (a writer killed before its checkpoint, files copied without the -shm):
    those an immutable opening would leave out, so it is refused.
    """
    if not read_only:
        # Any thread may close it (`Store.close`); only its own uses it (`eventstore/connections.py`).
        return sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    if not os.path.isfile(path):
        raise StoreError(f"no database at {path}; create one with `threadlog init` (or check the path)")
    directory = os.path.dirname(os.path.abspath(path))
    frozen = not os.access(directory, os.W_OK) and not os.path.exists(path + "-shm")
    if frozen and _wal_holds_news(path):
        # `immutable` reads the main file alone: the commits still in the WAL were left out,
        # and verify said "ok" of the older log.
        raise StoreError(f"{path}-wal holds changes not yet in {path}, and they cannot be read here: the directory is "
                         f"read-only and {path}-shm, which a reader of the WAL needs, is missing: copy the files to a "
                         "writable directory to read them (or copy the -shm file with them)")
    # The name's bytes, quoted: a Linux file name need not be UTF-8 text (quote() of the str would refuse it).
    uri = f"file:{urllib.parse.quote(os.fsencode(os.path.abspath(path)))}?mode=ro" + ("&immutable=1" if frozen else "")
    return sqlite3.connect(uri, timeout=timeout, isolation_level=None, uri=True, check_same_thread=False)


def _close_log(path: str) -> None:
    """Close the write-ahead log a read-only connection left open, as the last connection closes it.

    In WAL mode SQLite makes `-wal` and `-shm` as a connection first reads, and the last one
    to close removes them once it has copied the log into the file; a read-only connection may
    not copy, so it removed neither: `ls`, `show` and `verify` each left both behind, empty.
    So a read-only store's close opens the file writable, reads the schema, and closes it:
    SQLite then closes the log as its last connection (never while another process holds the file
    open, whose lock its close does not get), and a writer's clean close does no more. Only
    an empty log: one holding commits (a writer's, left by a crash or by a close while another
    process read) is the next writer's to copy. The log is looked at before the file is opened
    and again once this connection has it open; what a writer killed between those looks
    committed is left in it (a connection opened read-only, closing last, copies nothing). One
    killed in the instant between the second look and the close has its commits copied into
    the file by that close, as the next writer would: nothing is lost either way. Not where
    this user may not write the file or its directory: there SQLite could not remove them
    either. SQLite follows a symlink and keeps the log beside the file it names: that file's
    are the ones looked at.
    """
    path = os.path.realpath(path)
    try:
        if os.path.getsize(path + "-wal") != 0:
            return
    except OSError:
        return  # none: nothing was left
    if not (os.access(path, os.W_OK) and os.access(os.path.dirname(path), os.W_OK)):
        return
    quoted = urllib.parse.quote(os.fsencode(path))
    try:
        conn = sqlite3.connect(f"file:{quoted}?mode=rw", timeout=0, isolation_level=None, uri=True)
    except sqlite3.Error:
        return
    keeper: sqlite3.Connection | None = None
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the log, which only a connection that read closes
        if os.path.getsize(path + "-wal") != 0:  # a writer committed since the first look: its commits stay in the log
            keeper = sqlite3.connect(f"file:{quoted}?mode=ro", timeout=0, isolation_level=None, uri=True)
            keeper.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # open on the log: this close is not the last
    except (sqlite3.Error, OSError):
        pass  # busy, or not a database now: what it left stays, as SQLite leaves it
    finally:
        conn.close()
        if keeper is not None:
            keeper.close()


def _end_reads(unfinished: weakref.WeakSet[sqlite3.Cursor]) -> None:
    """End the lazy reads a connection left `unfinished`, before it closes: a cursor still on a
    row kept the connection open past its close (the driver's), and with it the log, so both
    side files stayed (a read-only store's for good, a writer's until the read was collected).
    A backend is one thread's (`connections.py`), so none is being read from meanwhile."""
    for cursor in list(unfinished):
        with contextlib.suppress(sqlite3.Error):
            cursor.close()


def _close_read_only(conn: sqlite3.Connection, path: str, unfinished: weakref.WeakSet[sqlite3.Cursor]) -> None:
    """Close a read-only connection, its lazy reads first (`_end_reads`), then the log it
    leaves (`_close_log`): by `close()`, or when its backend is collected. Raises nothing: the
    collector's caller is any code at all."""
    _end_reads(unfinished)
    with contextlib.suppress(sqlite3.Error):
        conn.close()
    _close_log(path)


class SQLiteBackend:
    """One connection to one threadlog file (or `:memory:`). Not shared between threads: a
    `Store` opens one for each thread that uses it, and may close them from any.

    `synchronous` is SQLite's durability setting: `NORMAL` (the default, in WAL mode) is
    durable across a process crash but may lose the last commits on power loss; `FULL`
    syncs every commit. Writers wait up to `timeout` seconds for SQLite's write lock; with
    `on_wait`, a writer still waiting after a second calls it once and waits the rest.
    `read_only=True` opens an existing file without writing to it (never creating it): a
    file whose schema is older than this release's must be migrated by a writable opening first.
    `on_migrate(old, new)` is called as such an opening starts migrating the file from schema
    version `old` to `new`, under the write lock: a large file takes a while (16 s from version
    6 at 2.2M events).
    """

    def __init__(self, path: str | Path, synchronous: str = "NORMAL", timeout: float = 30.0, *,
                 read_only: bool = False, on_wait: Callable[[], None] | None = None,
                 on_migrate: Callable[[int, int], None] | None = None) -> None:
        synchronous = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreError(f"synchronous must be NORMAL, FULL, EXTRA or OFF, not {shown(synchronous)}")
        self.path = str(path)
        if not self.path:  # SQLite's private temporary database: what was written to it went when it closed
            raise StoreError("an empty path names no database file (SQLite would open a temporary one, gone when it closes); "
                             "pass a file path, or ':memory:' for a database in memory")
        self.synchronous = synchronous
        self.read_only = read_only
        self._reading = False  # inside `read_transaction`, which opened the transaction: a write is refused
        self._closer: weakref.finalize[Any, Any] | None = None  # a read-only connection's close, once
        self._unfinished: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()  # its lazy reads (`_lazy`)
        self.timeout, self.on_wait = timeout, on_wait  # (what another thread's connection opens with)
        self.on_migrate = on_migrate
        first = min(1.0, timeout)
        self._wait = _Wait(on_wait, first, max(timeout - first, 0.0)) if on_wait is not None and timeout > first else None
        try:
            self.conn = _connect(self.path, first if self._wait else timeout, read_only)
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        # The append path's statements run on this one cursor (each finished before the next
        # starts): `conn.execute` makes and frees a cursor a statement.
        self._writes = self.conn.cursor()
        try:
            self.conn.create_function("tl_digest", 1, _digest, deterministic=True)
            self.conn.execute("PRAGMA foreign_keys=OFF")
            # Zero the space a deleted or rewritten row leaves, so a redacted payload (or a
            # dropped snapshot) is not left readable in a free page.
            self.conn.execute("PRAGMA secure_delete=ON")
            self._check_file()
            self.journal_mode = self._set_journal_mode()
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            if not read_only:
                self.conn.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            self._checkpointer = self._checkpoints()
            self._migrate()
        except sqlite3.Error as error:
            self.conn.close()
            raise translate(error, self.path) from None
        except StoreError:
            self.conn.close()
            raise
        if read_only:
            # A read-only store dropped without `close()` (or its thread's connection, gone with
            # the thread: `eventstore/connections.py`) left `-wal` and `-shm` behind: the driver
            # closed the collected connection, and only `close()` closed the log. Collected, it
            # closes as `close()` does. Safe then: nothing holds the backend, so no call is using
            # its connection (each of its lazy reads holds it), and `_close_log` runs on a
            # connection of its own. Not at the interpreter's exit, where a daemon thread may
            # still be in a call on it (as `connections.py` leaves other threads' there).
            self._closer = weakref.finalize(self, _close_read_only, self.conn, self.path, self._unfinished)
            self._closer.atexit = False

    # -- schema -------------------------------------------------------------------------

    def _check_file(self) -> None:
        # One statement, so one snapshot: read apart, another process's migration of a new file
        # could commit between them, and its tables were then read with no application id.
        app_id, version, listed = self.conn.execute(
            "SELECT (SELECT application_id FROM pragma_application_id), (SELECT user_version FROM pragma_user_version), "
            "(SELECT json_group_array(name) FROM sqlite_master WHERE type = 'table')").fetchone()
        tables = json.loads(listed)
        if app_id == 0 and tables:
            raise not_threadlog(self.path, tables)
        if app_id not in (0, APPLICATION_ID):
            raise SchemaError(f"{self.path} belongs to another application (application_id {app_id})")
        if version < 0:
            raise SchemaError(f"{self.path} says it has schema version {version}, which no threadlog writes: its "
                              "user_version was changed by hand; set it back, or restore the file from a backup")
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"{self.path} was written by a newer threadlog (schema version {version}; "
                f"this release reads up to {SCHEMA_VERSION}); upgrade threadlog to open it"
            )

    def _set_journal_mode(self) -> str:
        if self.read_only or self.path == ":memory:" or self.path.startswith("file::memory:"):
            return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])
        try:
            return str(self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError:  # a read-only file keeps the mode it has
            return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    def _checkpoints(self) -> Checkpointer | None:
        """A writer of a WAL file checkpoints on a thread of its own (`eventstore/checkpoints.py`),
        keeping its own automatic checkpoint as a backstop; it is stopped with the store.

        Not at `synchronous` FULL or EXTRA: there every commit syncs the log anyway, and a
        checkpoint's two syncs on another thread wait on the same disk as the writer's, so
        SQLite's own checkpoint (every 1,000 pages, inside a commit) costs less. Measured,
        single appends interleaved with raw BEGIN/INSERT/COMMIT at FULL (load 2-2.5, three
        runs): 0.507-0.524x of raw's speed with the thread, 0.551-0.578x without it.
        """
        if self.read_only or self.journal_mode.lower() != "wal" or self.synchronous in ("FULL", "EXTRA"):
            return None
        self.conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP}")
        return Checkpointer(self.path, self, self.conn)  # stopped by close(), or when this backend is collected

    def _migrate(self) -> None:
        if self.schema_version() == SCHEMA_VERSION:
            return
        if self.read_only and not self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:  # nothing to read or migrate
            raise empty_file(self.path)
        if self.read_only:
            raise SchemaTooOld(f"{self.path} has schema version {self.schema_version()} and this release reads "
                               f"version {SCHEMA_VERSION}: open it writable once (`threadlog init`) to migrate it")
        with self.transaction():
            self._check_file()  # another process may have migrated while we waited
            version = self.schema_version()
            if self.on_migrate is not None and version:  # (a new file, version 0, is made, not migrated)
                self.on_migrate(version, SCHEMA_VERSION)
            import sqlite_utils

            db = sqlite_utils.Database(self.conn)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                try:
                    MIGRATIONS[target](db)
                except sqlite3.OperationalError as error:
                    if (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF != sqlite3.SQLITE_ERROR:
                        raise  # the disk, a lock: translated as any other
                    raise SchemaError(f"{self.path} says it has schema version {version}, but its tables are not that "
                                      f"version's (migrating to version {target}: {error}); was its user_version "
                                      "changed by hand? Nothing was changed") from None
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

    def transaction(self, reserves_twice: bool = False) -> _Transaction:
        """`BEGIN IMMEDIATE` … `COMMIT`; any error rolls back and leaves the file as it was.
        One writer at a time holds the file: `reserves_twice` changes nothing here."""
        if self._reading:
            raise transaction_open(reading=True)
        committed = self._checkpointer.committed if self._checkpointer is not None else None
        return _Transaction(self.conn, self._writes, self.path, self._wait, committed)

    def wait_for_writes(self) -> None:
        """Nothing to wait for: one writer at a time holds the file, and its positions are seen
        once it commits, with every position below them. Refused inside a transaction, as on
        PostgreSQL (`errors.waiting_inside`); on a closed store, said so (`translate`)."""
        try:
            inside = self.conn.in_transaction
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        if inside:
            raise waiting_inside(self._reading)

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """A consistent view for several reads; in WAL mode writers are not blocked meanwhile.
        Inside a transaction already (a read view, or a write), the reads are in that one's view."""
        conn = self.conn
        try:
            inside = conn.in_transaction  # a closed connection raises here already
            if not inside:
                conn.execute("BEGIN")
                conn.execute("SELECT 1 FROM streams LIMIT 1").fetchall()  # takes the read snapshot
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        if inside:
            yield
            return
        self._reading = True
        try:
            yield
        finally:
            self._reading = False
            with contextlib.suppress(sqlite3.Error):  # a closed connection has nothing to roll back
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def claim(self, name: str) -> Claim:
        """`Backend.claim`: a lock on a file beside the database (`claims.file_claim`); nothing
        to hold for a database in memory, which no other process can open."""
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            return unclaimed()
        return file_claim(self.path, name)

    def another(self) -> SQLiteBackend:
        """Another connection to this file, with these settings (`backend.Reopens`)."""
        return SQLiteBackend(self.path, self.synchronous, self.timeout, read_only=self.read_only, on_wait=self.on_wait,
                             on_migrate=self.on_migrate)

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        if self._closer is not None:
            self._closer()  # (a second call does nothing)
        else:
            _end_reads(self._unfinished)
            self.conn.close()

    def _lazy(self, query: str, params: Sequence[Any]) -> sqlite3.Cursor:
        """`conn.execute` for a read whose rows are read as they are asked for: the store's
        close ends it, read to its end or not (`_end_reads`)."""
        cursor = self.conn.execute(query, params)
        self._unfinished.add(cursor)
        return cursor

    def _rows(self, cursor: Iterator[Any], kind: type[_R]) -> Iterator[_R]:
        """The cursor's rows as `kind`, translating errors met while iterating (a damaged
        page is found when it is read). Closing this generator early leaves the cursor to
        be collected: it never touches a connection that may be closed by then."""
        try:
            yield from map(_new, repeat(kind), cursor)
        except sqlite3.Error as error:
            raise translate(error, self.path) from None

    def _fetch(self, query: str, params: Sequence[Any] = (), one: bool = False) -> Any:
        """The query's rows (its first row or None, with `one`), fully read. A stored text that
        is not UTF-8 (only raw SQL writes one) comes as its bytes, a value of another kind that
        the reader names (`ThreadInfo.from_row`, verify's checks), instead of a driver error
        naming no row. Only then, and only while the rows are read, does the
        connection decode text leniently."""
        try:
            cursor = self.conn.execute(query, params)
            return cursor.fetchone() if one else cursor.fetchall()
        except sqlite3.OperationalError as error:
            if _UNDECODED.match(str(error)) is None:
                raise
        return self._leniently(query, params, one)

    def _leniently(self, query: str, params: Sequence[Any], one: bool) -> Any:
        """The query's first row (`one`) or rows, a text that is not UTF-8 read as its bytes: for
        a read the driver refused to decode. The connection decodes strictly again before this
        returns, so nothing else ever reads leniently."""
        factory = self.conn.text_factory
        self.conn.text_factory = _lenient_text
        try:
            cursor = self.conn.execute(query, params)
            return cursor.fetchone() if one else cursor.fetchall()
        except sqlite3.Error as error:
            raise translate(error, self.path) from None
        finally:
            self.conn.text_factory = factory

    # -- streams ----------------------------------------------------------------------------

    @_translated
    def stream(self, stream_id: str) -> StreamRow | None:
        row = self._fetch(f"SELECT {STREAM_COLUMNS} FROM streams WHERE id = ?", (stream_id,), one=True)
        return _new(StreamRow, row) if row else None

    def lock_stream(self, stream_id: str) -> None:
        """`Backend.lock_stream`: the transaction (`BEGIN IMMEDIATE`) holds the whole file for
        one writer already."""

    @_translated
    def stream_for_append(self, stream_id: str, count: int = 1) -> tuple[StreamRow | None, int]:
        """The stream's row (None if it does not exist) and the next position, in one query.

        Valid only inside a write transaction, like `next_position`.
        """
        row = self._writes.execute(STREAM_FOR_APPEND, (stream_id,)).fetchone()
        return (_new(StreamRow, row[1:]) if row[1] is not None else None), _next_position(row[0], count)

    @_translated
    def ancestry(self, stream_id: str, start: int = 0) -> list[StreamRow]:
        """The stream's row, then its parent's, up to the root, or up to the first stream whose
        own events begin at or below `start`: one recursive query."""
        query, params = (ANCESTRY, (stream_id,)) if start == 0 else (ANCESTRY_FROM, (stream_id, start))
        return chain_order((_new(StreamRow, r) for r in self._fetch(query, params)), stream_id)  # each once: see chain_order

    def streams(self, stored: bool = False, part: tuple[int, bool] | None = None, tops: bool = False,
                strays: bool = False) -> Iterator[StreamRow]:
        # In creation order SQLite sorts the whole table first (0.45-0.9 s for 202,000 streams);
        # in rowid order it reads the table as it lies, which inserts keep in creation order.
        # (rowid last: SQLite lets a TEXT PRIMARY KEY hold NULL twice, and the order must be one.)
        # A part's streams are chosen here, not by the caller: each row made in Python costs
        # ~1.8 us, and each part of a split verify reads its streams twice.
        order = "rowid" if stored else "created_position, id, rowid"
        where = ""
        params: tuple[int, ...] = ()
        if part is not None:
            where = (" WHERE (typeof(created_position) = 'integer' AND created_position > ?)" if part[1] else
                     " WHERE (typeof(created_position) != 'integer' OR created_position <= ?)")
            params = (part[0],)
        for wanted, condition in ((tops, _TOPS), (strays, _STRAYS)):
            if wanted:
                where += (" AND" if where else " WHERE") + condition
        query = f"SELECT {STREAM_COLUMNS} FROM streams{where} ORDER BY {order}"
        done = 0
        try:
            for row in self._lazy(query, params):
                yield _new(StreamRow, row)
                done += 1
            return
        except sqlite3.Error as error:
            if _UNDECODED.match(str(error)) is None:  # the driver's own error: it has no result code
                raise translate(error, self.path) from None
        # Text that is not UTF-8 (only raw SQL writes it): the rest read again with such text as
        # its bytes, a value of another kind that verify names, instead of a driver error naming
        # no stream. Read whole: the connection's text factory is back before anything else runs.
        yield from map(_new, repeat(StreamRow), self._leniently(query, params, False)[done:])

    def opened_file(self) -> str | None:
        """The absolute name of the file this connection has open (None in memory). The name it
        was opened by may be relative, and the working directory changed since: another
        process must open this file, not one of that name where this process is now."""
        row = self.conn.execute("SELECT CAST(file AS BLOB) FROM pragma_database_list WHERE name = 'main'").fetchone()
        return os.fsdecode(row[0]) if row is not None and row[0] else None

    @_translated
    def stream_starts(self) -> list[int]:
        rows = self.conn.execute("SELECT created_position FROM streams WHERE typeof(created_position) = 'integer'").fetchall()
        return sorted(row[0] for row in rows)

    @_translated
    def streams_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Ids starting with `prefix`, in order, at most `limit`: a range scan of the primary key."""
        where, bounds = prefix_query("?", prefix)
        rows = self.conn.execute(f"SELECT id FROM streams WHERE {where} ORDER BY id LIMIT ?", (*bounds, limit)).fetchall()
        return [str(r[0]) for r in rows]

    @_translated
    def streams_held(self, stream_ids: Collection[str]) -> set[str]:
        """`Backend.streams_held`: 500 ids a query, as `events_by_id` binds them."""
        ids = list(stream_ids)
        held: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            held.update(row[0] for row in self._fetch(f"SELECT id FROM streams WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        return held

    @_translated
    def streams_with_prefix_after(self, prefix: str, after: int) -> list[StreamRow]:
        """A range scan of the primary key, or of `last_position`'s index when fewer rows are past `after`."""
        where, bounds = prefix_query("?", prefix)
        rows = self._fetch(f"SELECT {STREAM_COLUMNS} FROM streams WHERE {where} AND last_position > ? ORDER BY id", (*bounds, after))
        return [_new(StreamRow, row) for row in rows]

    @_translated
    def recent_streams(self, limit: int | None, before: int | None, forks: bool,
                       before_id: str | None = None) -> list[StreamRow]:
        """Newest activity first: a walk down `streams_recency`'s range of roots, key by key,
        each key's streams (at most 1,024 positions) sorted by `last_position` and id, that
        stops once `limit` rows are sorted; with forks, its range of forks too, the two merged.
        Without `before_id`, `id < ''` holds for no stream: the bound is `before` alone."""
        position = NO_BOUND if before is None else before
        key = (position if before_id else position - 1) >> RECENCY_SHIFT
        bounds = (key, position, before_id or "", -1 if limit is None else limit)
        rows: list[StreamRow] = []
        for roots in (1, 0) if forks else (1,):
            rows += map(_filed, self._fetch(_UNLISTED, (roots,)) + self._fetch(_RECENT_STREAMS, (roots, *bounds)))
        if forks:
            rows.sort(key=_listed_by, reverse=True)
            del rows[len(rows) if limit is None else limit:]
        return rows

    @_translated
    def last_title_event(self, stream_id: str, lo: int, hi: int | None) -> EventRow | None:
        # The types are written out, not bound, and the index's own condition repeated: SQLite
        # uses the partial index `events_other` only when the query's condition plainly implies it.
        row = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND "offset" >= ? AND "offset" < ? '
            f'AND type {_TITLES_EITHER_WAY} AND type != {_MESSAGE} ORDER BY "offset" DESC LIMIT 1',
            (stream_id, lo, NO_BOUND if hi is None else hi),
        ).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def count_type(self, stream_id: str, lo: int, hi: int | None, type_: str) -> int:
        """Through `events_other` only: messages are the stream's own events in the range (its
        offsets have no gaps: base..head-1) less the others."""
        others = f'SELECT count(*) FROM events WHERE stream_id = ? AND "offset" >= ? AND "offset" < ? AND {_NOT_A_MESSAGE}'
        bounds = (stream_id, lo, NO_BOUND if hi is None else hi)
        if type_ != "message.appended":
            # IN: a type given a code after a file stored it as text is held both ways (packing.TYPE_CODES).
            return int(self.conn.execute(others + " AND type IN (?, ?)", (*bounds, pack_type(type_), type_)).fetchone()[0])
        row = self.conn.execute(
            f"SELECT max(0, min(head, ?) - max(coalesce(parent_offset, 0), ?)) - ({others}) FROM streams WHERE id = ?",
            (bounds[2], lo, *bounds, stream_id),
        ).fetchone()
        return int(row[0]) if row else 0

    @_translated
    def subtree(self, stream_id: str) -> list[StreamRow]:
        """The stream and every stream forked from it, directly or not, in creation order
        (a recursive walk down the `parent_id` index, not a scan of every stream)."""
        columns = ", ".join("s." + c.strip() for c in STREAM_COLUMNS.split(","))
        rows = self._fetch(
            f"""WITH RECURSIVE tree(id) AS (
                    SELECT ? UNION SELECT s.id FROM streams s JOIN tree ON s.parent_id = tree.id)
                SELECT {columns} FROM tree JOIN streams s ON s.id = tree.id ORDER BY s.created_position, s.id""",
            (stream_id,),
        )
        return [_new(StreamRow, r) for r in rows]

    def forks_at(self, stream_id: str, lo: int, hi: int, limit: int) -> list[tuple[StreamRow, int]]:
        columns = ", ".join("s." + c.strip() for c in STREAM_COLUMNS.split(","))
        rows = self._fetch(forks_at_query(columns, "?"), (stream_id, lo, hi, limit))
        return [(_new(StreamRow, r[:-1]), r[-1]) for r in rows]

    @_translated
    def insert_stream(self, row: StreamRow) -> None:
        self.conn.execute(f"INSERT INTO streams ({STREAM_COLUMNS}, recency) "
                          f"VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12, ?12 >> {RECENCY_SHIFT})", row)

    @_translated
    def update_head(self, stream_id: str, head: int, head_hash: str, facts: str | None, first_message: int | None,
                    last_position: int, previous_position: Any = None) -> None:
        # The listing key is written only when it moves (see `RECENCY_SHIFT`); when the stored
        # last position is not a number (only raw SQL writes one), it is written.
        moved = (previous_position.__class__ is not int
                 or previous_position >> RECENCY_SHIFT != last_position >> RECENCY_SHIFT)
        if facts is None:
            self._writes.execute(_UPDATE_HEADS[False, moved], (head, head_hash, first_message, last_position, stream_id))
        else:
            self._writes.execute(_UPDATE_HEADS[True, moved], (head, head_hash, facts, first_message, last_position, stream_id))

    # -- events ------------------------------------------------------------------------------

    @_translated
    def next_position(self, count: int = 1) -> int:
        """The position the next insert will get (valid only inside a write transaction)."""
        row = self.conn.execute("SELECT max(position) FROM events").fetchone()
        return _next_position(row[0], count)

    @_translated
    def insert_events(self, rows: Iterable[EventValues]) -> None:
        rows = rows if isinstance(rows, list) else list(rows)  # nothing to overlap: the file is here
        if self._checkpointer is not None:
            self._checkpointer.rows += len(rows)
        appended = pack_appended(rows)
        if appended is None:  # a restore's rows, with digests or redactions
            self.conn.executemany(INSERT_EVENT, map(pack_row, rows))
            return
        pending, packed = appended
        statement = INSERT_APPENDED if pending else INSERT_APPENDED_IDLE
        if len(packed) == 1:
            self._writes.execute(statement, packed[0])
        else:
            self._writes.executemany(statement, packed)

    @_translated
    def events_by_id(self, event_ids: Sequence[str]) -> list[EventRow]:
        rows = []
        for start in range(0, len(event_ids), 500):  # ids are bound packed, so no json_each
            # An id stored as its text where its bytes belong reads as the same id (its hash
            # holds: only raw SQL stores one so), so it is looked for both ways: a retry found
            # none, and wrote its events again.
            chunk = [spelled for event_id in event_ids[start:start + 500] for spelled in {pack_id(event_id), event_id}]
            query = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id IN ({','.join('?' * len(chunk))})"
            rows += self.conn.execute(query, chunk).fetchall()
        return [_new(EventRow, r) for r in rows]

    @_translated
    def event_at(self, stream_id: str, offset: int) -> EventRow | None:
        row = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND "offset" = ?', (stream_id, offset)
        ).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def fork_points(self, created_after: int, upto: int) -> Iterator[tuple[str, int, int, str | bytes, str | None]]:
        cursor = self._lazy(
            # The streams first, each fork's event looked up by (stream, offset): left to itself
            # the planner walked the events by position (70 s against 2 s, 135,000 forks).
            'SELECT s.parent_id, e."offset", e.position, e.hash, e.pending FROM streams s '
            'CROSS JOIN events e ON e.stream_id = s.parent_id AND e."offset" = s.parent_offset - 1 '
            "WHERE s.created_position > ? AND +e.position <= ?", (created_after, upto))
        return self._rows(cursor, tuple)

    @_translated
    def event_at_position(self, position: int) -> EventRow | None:
        row = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE position = ?", (position,)).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def range(self, stream_id: str, lo: int, hi: int | None) -> Iterator[EventRow]:
        """A stream's own events with lo <= offset < hi, in offset order: one index range scan."""
        cursor = self._lazy(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND "offset" >= ? AND "offset" < ? '
            'ORDER BY "offset"',
            (stream_id, lo, NO_BOUND if hi is None else hi),
        )
        return self._rows(cursor, EventRow)

    @_translated
    def range_data(self, stream_id: str, lo: int, hi: int | None) -> Iterator[DataRow]:
        """Like `range`, but only (offset, type, schema_version, data): what a fold needs."""
        cursor = self._lazy(
            f'SELECT "offset", {_type("type")}, schema_version, data FROM events WHERE stream_id = ? AND "offset" >= ? '
            'AND "offset" < ? ORDER BY "offset"',
            (stream_id, lo, NO_BOUND if hi is None else hi),
        )
        return self._rows(cursor, tuple)

    def all_events(self, after: int, limit: int | None, whole: bool = False) -> Iterator[EventRow]:
        # Commits take positions in their order here: the two readings of `whole` are one.
        # A row holding text that is not UTF-8 (only raw SQL writes one) comes with that text as
        # its bytes, as in `stored_events`: `from_row` and `verify --since` name its position.
        query = f"SELECT {EVENT_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?"
        left = -1 if limit is None else limit
        while left != 0:
            try:
                for row in self._lazy(query, (after, left)):
                    after, left = row[0], left - 1 if left > 0 else left
                    yield _new(EventRow, row)
                return
            except sqlite3.Error as error:
                if _UNDECODED.match(str(error)) is None:
                    raise translate(error, self.path) from None
            row = self._leniently(query, (after, 1), True)
            if row is None:
                return
            after, left = row[0], left - 1 if left > 0 else left
            yield _new(EventRow, row)

    @_translated
    def stored_events(self, after: int = 0, upto: int | None = None) -> Iterator[tuple[Any, ...]]:
        # Undecoded: the SQL decoding of `all_events` costs ~1.5 µs a row, a third of a full
        # verify's budget, and verify decodes in Python only the rows its shortcut cannot take.
        # A memory map (mmap_size 1 GiB) made this scan no faster (2.3-3.7 µs a row either way,
        # 220,000 rows, load 3-4) and would count every page read in the reader's memory.
        # A row holding text that is not UTF-8 (only raw SQL writes one) comes with that text as
        # its bytes, so it reaches verify, which names its position (a value of another kind),
        # instead of ending the scan with a driver error that names nothing.
        query = f"SELECT {STORED_COLUMNS} FROM events WHERE position > ? AND position <= ? ORDER BY position"
        upto = _LAST_POSITION if upto is None else upto
        while True:
            try:
                for row in self._lazy(query, (after, upto)):
                    after = row[0]
                    yield row
                return
            except sqlite3.Error as error:
                if _UNDECODED.match(str(error)) is None:
                    raise translate(error, self.path) from None
            row = self._leniently(query + " LIMIT 1", (after, upto), True)
            if row is None:
                return
            after = row[0]
            yield row

    @_translated
    def redact(self, position: int, data: str, redacted_by: int) -> None:
        # The digest of what is erased stays (hex text: only redacted rows keep one).
        self.conn.execute("UPDATE events SET data_digest = coalesce(data_digest, tl_digest(data)), data = ?, redacted_by = ? "
                          "WHERE position = ?", (data, redacted_by, position))

    @_translated
    def set_facts(self, position: int, facts: str | None) -> None:
        self.conn.execute("UPDATE events SET pending = ? WHERE position = ?", (facts, position))

    @_translated
    def redacted_since(self, stream_id: str, lo: int, hi: int | None, after: int) -> tuple[int, int] | None:
        """(position, redacted_by) of an event of `stream_id` with lo <= offset < hi that was
        redacted by an `event.redacted` at a position > `after`, or None.

        With `after` > 0 only the redactions recorded since then are read (usually none);
        with 0, the stream's range is scanned.
        """
        bounds = (stream_id, lo, NO_BOUND if hi is None else hi)
        if after > 0:
            row = self.conn.execute(
                "SELECT t.position, r.position FROM events r "
                "JOIN events t ON t.position = json_extract(r.data, '$.position') WHERE r.position > ? "
                f"AND r.type {_REDACTION_EITHER_WAY} "
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
    def first_position(self) -> int | None:
        row = self.conn.execute("SELECT min(position) FROM events").fetchone()
        return None if row[0] is None else int(row[0])

    def sequence_position(self) -> int | None:
        return None

    def unseen_position(self) -> int | None:
        return None

    @_translated
    def hashes(self, upto: int, after: int = 0) -> Iterator[tuple[int, str]]:
        """(position, hash) of every event with `after` < position <= `upto`, in position order."""
        cursor = self._lazy(
            "SELECT position, CASE WHEN typeof(hash) = 'blob' THEN 'tl2:' || lower(hex(hash)) ELSE hash END FROM events "
            "WHERE position > ? AND position <= ? ORDER BY position", (after, upto))
        return self._rows(cursor, tuple)

    @_translated
    def truncate_wal(self) -> None:
        """Checkpoint the WAL into the database file and truncate it to zero bytes."""
        if self.journal_mode.lower() != "wal":
            return
        with self._checkpointer.running if self._checkpointer is not None else contextlib.nullcontext():
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise pages_kept(self.path, "another connection is reading (or writing), so the write-ahead log still "
                             "holds old pages", "the readers are done")

    @_translated
    def settle_wal(self) -> None:
        if self.journal_mode.lower() == "wal":
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

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
    def misfiled_stream(self, ids: Collection[str] | None = None) -> tuple[str, Any, Any] | None:
        query = f"SELECT id, last_position, recency FROM streams WHERE recency IS NOT last_position >> {RECENCY_SHIFT}"
        rows = [self._fetch(query + " LIMIT 1", (), one=True)] if ids is None else (
            self._fetch(query + " AND id = ?", (stream_id,), one=True) for stream_id in ids)
        return next((tuple(row) for row in rows if row is not None), None)

    @_translated
    def damaged(self, *, beside: bool = False) -> str | None:
        """None for an in-memory database, which no byte of a file stands for. `beside` waits
        at most `_BESIDE_WAIT` for its connection to begin reading: outside WAL mode a writer
        waiting to commit holds new readers off until this connection's read ends, and the
        verify holding that read waits for the check."""
        # `quick_check` reads the pages but not whether each index matches its table: a flipped
        # byte in an index key passed it, and `log T` and `export T` then left events out.
        if self.path == ":memory:":
            return None
        if not beside:
            return _structure_check(self.conn)
        conn = _connect(self.path, _BESIDE_WAIT, read_only=True)
        try:
            conn.execute(f"PRAGMA cache_size=-{_BESIDE_CACHE_KIB}")
            return _structure_check(conn)
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            raise ReadersHeldOff(f"{self.path}: a writer waiting to commit holds new readers off") from None
        finally:
            conn.close()

    # -- the search index (FTS5) -------------------------------------------------------------------
    #
    # Redaction must leave no copy of an event's text in the file. Deleting an FTS5 row only
    # records a delete marker (in SQLite before 3.42, which has no 'secure-delete' option): the
    # old segment keeps the terms, and the marker repeats them, until segments merge. So
    # `unindex` deletes the documents and then runs FTS5's 'optimize', which merges every
    # segment into one and drops deleted entries; `secure_delete` zeroes the pages that frees,
    # and the store's purge truncates the WAL. Its cost is a rewrite of the index (seconds at a
    # million documents), paid only by a redaction of an indexed event. A contentless table would
    # not help: it needs the original text to delete, and leaves the same markers.

    @_index_call
    def index_position(self) -> int:
        row = self.conn.execute("SELECT position FROM search_progress WHERE name = 'index'").fetchone()
        if row is None:
            return 0
        if row[0].__class__ is not int:  # raw SQL stored it: the index cannot say what it covers
            raise altered_index(f"its progress holds {row[0]!r}, not a position")
        return int(row[0])

    @_index_call
    def index_last_docid(self) -> int:
        """The newest document's id (-1: none), once the index agrees with itself. Emptied or cut by
        raw SQL (FTS5's `delete-all` or `delete`, the documents deleted, both together, or a row
        copied), a search silently found nothing, fewer hits than the log holds, or one twice; so
        the newest documents of both tables must agree, and FTS5's count of what it indexes must
        be the count of documents the index wrote (`documents` in `search_progress`), which FTS5
        keeps in one record: four lookups, whatever the index holds. A document deleted while
        FTS5 still lists it is seen by the search that matches it (`_search`). An index an
        earlier release built has no count until its next catch-up writes one (`index_docs`)."""
        if self.conn.in_transaction:  # FTS5 writes its count when it flushes what this transaction indexed
            self.conn.execute("SAVEPOINT index_count")
            self.conn.execute("RELEASE index_count")
        fts, docs, counted, totals = self.conn.execute(
            "SELECT (SELECT max(id) FROM search_fts_docsize), (SELECT max(docid) FROM search_docs), "
            "(SELECT position FROM search_progress WHERE name = 'documents'), (SELECT block FROM search_fts_data WHERE id = 1)"
        ).fetchone()
        if fts != docs:
            raise altered_index(f"its newest document is {'none' if docs is None else docs}, and FTS5's index of them "
                                f"ends at {'none' if fts is None else fts}")
        if counted is not None:
            if counted.__class__ is not int or totals is not None and totals.__class__ is not bytes:
                raise altered_index(f"its count of documents holds {counted!r}, and FTS5's record of its totals {totals!r}")
            indexed = _fts_rows(totals or b"")
            if indexed != counted:
                raise documents_miscounted(counted, indexed, "FTS5's index")
        return -1 if docs is None else int(docs)

    @_index_call
    def check_index_count(self) -> None:
        """Refuse an index that holds another number of documents than it wrote: in FTS5's
        index (`index_last_docid`, which each search asks: FTS5 keeps its count in one record)
        and in the table of documents (a row deleted there while FTS5 still lists it is seen
        only by the search that matches it), counted here."""
        self.index_last_docid()
        held, counted = self.conn.execute(
            "SELECT (SELECT count(*) FROM search_docs), (SELECT position FROM search_progress WHERE name = 'documents')"
        ).fetchone()
        if counted is not None and held != counted:
            raise documents_miscounted(counted, held, "its table of them")

    @_index_call
    def index_docs(self, docs: Sequence[DocValues], upto: int) -> None:
        if docs:
            self.conn.executemany(
                'INSERT INTO search_docs (docid, position, stream_id, "offset", kind, role, tool, text) '
                "VALUES (?,?,?,?,?,?,?,?)",
                docs,
            )
            self.conn.execute("INSERT INTO search_fts (rowid, text) SELECT docid, text FROM search_docs WHERE docid >= ?",
                              (docs[0][0],))
        self.conn.execute("UPDATE search_progress SET position = ? WHERE name = 'index'", (upto,))
        _count_documents(self.conn, len(docs))

    @_index_call
    def unindex(self, position: int) -> int:
        bounds = (position * DOC_PARTS, (position + 1) * DOC_PARTS)
        self.conn.execute(
            "INSERT INTO search_fts (search_fts, rowid, text) "
            "SELECT 'delete', docid, text FROM search_docs WHERE docid >= ? AND docid < ?",
            bounds,
        )
        removed = self.conn.execute("DELETE FROM search_docs WHERE docid >= ? AND docid < ?", bounds).rowcount
        if removed:
            # SQLite before 3.41 puts each 'optimize' on a level above the last: about a thousand
            # redactions on, FTS5 read its index as malformed and refused every search and
            # redaction. Past the levels a later SQLite keeps, the index is made again from its
            # documents instead (a 'rebuild', about twice an 'optimize', which leaves no deleted
            # entry either), on a few levels again. (So on such a SQLite a rebuild here also
            # mends an index raw SQL emptied, which a later one's next search refuses: the
            # index is a cache of `search_docs`, and every hit is checked against the log.)
            command = "rebuild" if _fts_levels(self.conn) > _FTS_MOST_LEVELS else "optimize"
            self.conn.execute(f"INSERT INTO search_fts (search_fts) VALUES ('{command}')")
            self.conn.execute("UPDATE search_progress SET position = position - ? WHERE name = 'documents'", (removed,))
        return removed

    @_translated
    def clear_index(self) -> None:
        """Empty the index by making its tables again, as version 3 made them (no later version
        changed them): whatever raw SQL did to them (FTS5's own tables dropped or garbled, a
        table gone), a rebuild starts from none."""
        self.conn.execute("SAVEPOINT clear_index")
        try:
            self.conn.execute("DROP TABLE IF EXISTS search_fts")
        except sqlite3.Error as error:
            # A full disk or a failing one: SQLite may have rolled the whole transaction back
            # already, and `ROLLBACK TO` then said "no such savepoint", in place of the disk.
            if (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF not in _UNOPENED_TABLE or not self.conn.in_transaction:
                raise
            # FTS5 cannot open the table to drop it (one of its own tables dropped or garbled), so
            # its row in the schema is removed instead: a virtual table has no pages of its own.
            self.conn.execute("ROLLBACK TO clear_index")
            self.conn.execute("PRAGMA writable_schema = ON")
            try:
                self.conn.execute("DELETE FROM sqlite_master WHERE type = 'table' AND name = 'search_fts'")
            finally:
                self.conn.execute("PRAGMA writable_schema = RESET")  # off, and the schema read again
        self.conn.execute("RELEASE clear_index")
        for table in (*_FTS_TABLES, "search_docs", "search_progress"):
            self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        import sqlite_utils

        _migrate_3(sqlite_utils.Database(self.conn))

    @_index_call
    def search(self, query: str, match: str, scope: Sequence[Scope] | None, role: str | None, tool: str | None,
               limit: int) -> list[HitRow]:
        """See `Backend.search`. FTS5 reports a bad query (`"unbalanced`, `AND AND`, an unknown
        `column:`) as a plain SQL error (SQLITE_ERROR); such a query is run again as plain words.
        A bad query's operators are left out of its words, unless nothing else is left.
        FTS5 reads a query only up to its first U+0000, and dropped the words after one (a search
        for two words joined by one found every text holding the first): it separates words here,
        as it does in what is indexed."""
        self.index_last_docid()  # FTS5's index and the documents agree
        if match == "query":
            try:
                return self._search(query.replace("\x00", " "), scope, role, tool, limit)
            except sqlite3.OperationalError as error:
                if getattr(error, "sqlite_errorcode", None) != sqlite3.SQLITE_ERROR:
                    raise
            # Its operators left out, when words remain: `ferry OR` required the word "or" too,
            # and found nothing.
            kept = [word for word in query.replace("\x00", " ").split() if word not in QUERY_OPERATORS]
            query, match = " ".join(kept) or query, "words"
        words = _fts_words(query, " OR " if match == "any" else " ")
        if not words:
            return []
        return self._search(words, scope, role, tool, limit)

    def _search(self, fts_query: str, scope: Sequence[Scope] | None, role: str | None, tool: str | None,
                limit: int) -> list[HitRow]:
        filters = hit_filters("?", _SCOPE_ROWS, scope, role, tool)
        if filters is None:
            return []
        # A document FTS5 lists and `search_docs` no longer holds (deleted by raw SQL) comes first,
        # whatever its rank: joined to none, it was silently no hit.
        kept = " AND ".join(filters.where) or "1"
        rows = self.conn.execute(
            f'{with_clause(filters)}SELECT d.position, d.stream_id, d."offset", d.kind, d.role, d.tool, '
            f"coalesce(json_extract(e.meta, '$.occurred_at'), {_time('e.recorded_at')}), d.text, "
            f"CASE WHEN length(d.text) <= {ENGINE_SNIPPET_CHARS} THEN snippet(search_fts, 0, {_MARKS}, '…', 16) END, "
            "bm25(search_fts), CASE WHEN d.docid IS NULL THEN search_fts.rowid END "
            "FROM search_fts LEFT JOIN search_docs d ON d.docid = search_fts.rowid LEFT JOIN events e ON e.position = d.position "
            f"WHERE search_fts MATCH ? AND (d.docid IS NULL OR {kept}) "
            "ORDER BY d.docid IS NOT NULL, bm25(search_fts), d.docid LIMIT ?",
            (*filters.with_params, fts_query, *filters.params, limit),
        ).fetchall()
        if rows and rows[0][-1] is not None:
            raise altered_index(f"FTS5's index lists document {rows[0][-1]!r}, which is not among its documents")
        return [_new(HitRow, r[:-1]) for r in rows]

    @_index_call
    def index_tools(self, scope: Sequence[Scope] | None) -> list[str]:
        query = tools_query("?", _SCOPE_ROWS, scope)
        return [] if query is None else [row[0] for row in self.conn.execute(*query)]

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
    def drop_snapshots(self, projection: str | None = None, stream_id: str | None = None) -> int:
        """Delete every snapshot (of one projection, of one stream, if named); returns how many."""
        return self.conn.execute(
            "DELETE FROM snapshots WHERE (? IS NULL OR projection = ?) AND (? IS NULL OR stream_id = ?)",
            (projection, projection, stream_id, stream_id),
        ).rowcount

    @_translated
    def count_snapshots(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0])

    @_translated
    def snapshots(self) -> Iterator[StoredSnapshot]:
        rows = self.conn.execute('SELECT projection, version, stream_id, "offset", state FROM snapshots '
                                 'ORDER BY projection, version, stream_id, "offset"').fetchall()
        return (StoredSnapshot(*row) for row in rows)


def _fts_words(text: str, joiner: str) -> str:
    """`text` as an FTS5 query of plain words (`query_words`): each becomes a quoted phrase, so
    no operator or column name is read in it."""
    return joiner.join('"' + chunk.replace('"', '""') + '"' for chunk in query_words(text))
