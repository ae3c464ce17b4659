"""The PostgreSQL backend: every SQL statement threadlog runs on PostgreSQL lives in this module.

`PostgresBackend` implements `backend.Backend` with psycopg 3 (`pip install "threadlog[postgres]"`);
`Store("postgresql://…")` opens it. The events, their JSON text and their hashes are the same
bytes SQLite stores, so an export from one restores into the other with identical hashes.

Concurrency (subtle; chosen by measurement). Two designs keep `read_all(after=p)` from skipping
an event that commits late with a lower position:

- A: one lock around position assignment, held until commit (positions = max + 1). Every
  writer queues behind it, through its commit's WAL flush.
- B (this module): no global lock held to commit. Each write transaction takes its positions
  from a sequence and its transaction id (`pg_current_xact_id()`, stored in `events.txid`)
  together, inside a critical section of a few microseconds (a session advisory lock taken and
  released by the same statement), so transaction ids and positions are handed out in the same
  order. A reader returns only events whose transaction id is below the snapshot's `xmin`
  (`pg_snapshot_xmin(pg_current_snapshot())`): every transaction below it has finished, and
  every transaction still running holds positions above everything it has finished. So the
  visible prefix only grows, in position order, and a late commit is never skipped: it is
  returned when every transaction before it has finished. Writers wait for each other only
  for the stream they write (a transaction-level advisory lock on the stream id), so
  commits on different threads flush the WAL together (group commit).

  A transaction that takes positions twice (`fan_out`, a restore) would break that order if
  another writer took positions in between, so its second reservation takes the order lock
  exclusively (`_ORDER`, held shared by every reservation until commit): it waits until
  every transaction that reserved before it has finished. Two such transactions at once,
  each holding the lock shared and waiting for it exclusively, would wait for each other, and
  the server would cancel one (a deadlock, `errors.Deadlocked`: nothing written). So `fan_out`
  says so up front (`transaction(reserves_twice=True)`) and takes it exclusively from its first
  reservation: fan_outs take turns. A restore that meets a deadlock reports it, saying to
  retry; `fan_out` still runs one again.

  Measured with raw psycopg on the machine this was written on (2 cores, fdatasync ~0.8 ms),
  one-event INSERT + COMMIT transactions on distinct streams: A 155-173/s with 1 writer and
  178-338/s with 8 writer processes (1.2-2.0x); B 141-270/s with 1 writer and 684-755/s with
  8 (2.8-4.9x). B keeps positions gap-free in practice but not by contract: a rolled-back
  writer leaves its positions unused (never reused). A long transaction anywhere in the
  cluster that holds a transaction id holds back what readers see until it ends.

  What 8 writers on distinct threads share, checked while they run (pg_locks, wait events):
  no heavyweight lock waits (the stream locks are distinct; `_ORDER` is shared; `_RESERVE` is
  held for one statement's few microseconds); the hot pages (the sequence, the right-most
  leaves of the position and event id indexes) were waited for in 2 of ~2,500 samples.
  The backends wait for their clients (Python's CPU) and for the WAL flush they share.

A single append is one round trip (`append_at`, `backend.AppendAtHead`): the store remembers
the head its own last write to each stream left, chains the event onto it, and sends one
prepared statement (`_PREPARED["threadlog_append_at"]`, its own implicit transaction) that
locks the stream, takes a position only if the stored head is still that one, moves the head
and inserts the event there. When another writer moved the head it writes nothing, and the
store appends the usual way, in two round trips (`_send`): BEGIN, the stream lock with the
reservation, and the head read; then the event and the new head in one statement, and
COMMIT. A store's first append to a stream it has not written (creating or forking one
counts as writing it), a batch, and an append with event ids of the caller's go that way
too. A remembered head decides only how many round trips an append takes: the server
checks it, and an event refused against it is judged again against the stored head. Each round trip is a libpq pipeline of statements
prepared once per connection (`_PREPARED`, `_TRANSACTION`), parameters passed as bytes: no
query text is built, quoted or parsed per append. Client instructions per single append
(callgrind, one writer): 485k when each round trip was one query string whose values a
`ClientCursor` quoted, 272-280k with two pipelined round trips, 191k now (a SQLite append,
all of it, is ~305k). Of the server's CPU per append, a sample (perf, with two round trips)
put ~23% in the commit's WAL flush (kernel), ~35% in running the statements (the inserts
into 4 indexes and the non-HOT update of the stream's row, whose `last_position` is
indexed), the rest in the protocol and transaction bookkeeping, which one statement instead
of five cuts.

What that buys 8 writers on 2 cores (`_writers` of bench/postgresql.py, 4 s runs, the machine
shared with other work at load 6-9): one writer at 0.18 ms of client and 0.28 ms of server
CPU per event when its disk is fast (before: 0.23 + 0.28 ms with two round trips, 0.39 + 0.34
ms with quoted query strings; 0.37-0.41 + 0.60-0.64 ms when it sleeps on a 3-4 ms fsync
between appends, its caches cold); eight at 0.35-0.44 + 0.36-0.50 ms. A lone writer is itself mostly
CPU (client then server, one after the other; its commit's flush is the rest of its wall
time), and eight on 2 cores spend ~1.6x its CPU per event (more switches between processes,
caches shared), so eight can at best run 2 x wall / CPU-of-eight its rate: cutting CPU per
append speeds both up alike, and the ratio rises only when eight spend less per event
relative to one, or when the lone writer waits longer for its flush (a slow disk, measured
at 3.8-4.4x). On a machine whose cores other work takes, eight writers get fewer of them
than they need, and the ratio falls with the load (1.1-1.4x measured at load 5-8).

Transactions run in READ COMMITTED; each statement after a lock sees the rows committed
before it. `read_transaction` is REPEATABLE READ, READ ONLY: one snapshot for `verify`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
import re
import select
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast, NamedTuple

import psycopg
from psycopg import sql
from psycopg.adapt import Transformer
from psycopg.copy import LibpqWriter

from .backend import (DOC_PARTS, DataRow, DocValues, EventRow, EventValues, HitRow, Scope, SnapshotRow,
                      doc_pieces,
                      NO_BOUND, StoredSnapshot, StreamRow, chain_order, forks_at_query, hit_filters, prefix_query, tools_query,
                      query_words, with_clause)
from .claims import Claim
from .errors import (Claimed, Deadlocked, Disconnected, KeyClash, Locked, NoStore, NotPermitted, SchemaError, SchemaTooOld,
                     StoreError, altered_index, documents_miscounted, first_line, pages_kept, transaction_open,
                     unsendable, waiting_inside)
from .urls import safe_url, without_passwords as _without_passwords
from .pgreach import not_connected
from .packing import NAMED_BEFORE_CODED, TYPE_CODES, pack_digest, pack_hash, pack_id, pack_ids_and_hashes, pack_time

SCHEMA_VERSION = 2

# The driver logs, as a warning, the error it ignored ending a COPY or a pipeline on a
# connection already lost ("error ignored terminating <psycopg.Copy [BAD] ...>"): the error
# that ended it is raised as the call's `StoreError`. Where nothing was set up to take log
# records, Python printed that warning on stderr, before the CLI's one `error:` line. A
# handler that drops them keeps it off; a program that configures logging still gets it.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

# Advisory lock keys (one 64-bit space per database): migrations; the order lock, held shared
# by every position reservation until commit; the critical section of a reservation.
_MIGRATE = 0x544C4F47_0001
_ORDER = 0x544C4F47_0002
_RESERVE = 0x544C4F47_0003
# The transactions (their virtual ids: a connection's next transaction has another) holding the
# order lock now, as `pg_locks` shows a bigint advisory key: its high and low 32 bits, subid 1.
_ORDER_HOLDERS = (f"SELECT virtualtransaction FROM pg_locks WHERE locktype = 'advisory' AND granted "
                  f"AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                  f"AND classid = {_ORDER >> 32} AND objid = {_ORDER & 0xFFFFFFFF} AND objsubid = 1 "
                  "AND pid <> pg_backend_pid()").encode()
# The search index's writers (a catch-up, a rebuild, a redaction's unindex) hold this one until
# commit: a catch-up reads events and writes their documents later in its transaction, so a
# redaction committed in between would find no document to remove and the catch-up would then
# store the erased text. Taken first, it makes the redaction's delete see the catch-up's rows,
# or the catch-up read the redacted row.
_INDEX = 0x544C4F47_0004

# The stored columns (schema 5's compact layout, as on SQLite: eventstore/packing.py): ids and
# hashes as bytes, a type as its code, a time as microseconds since 1970, and no digest where
# the data gives it back. A value the compact form cannot give back exactly is kept as text
# (`type_name`, `recorded_text`), or as its UTF-8 bytes in a bytea column, told apart by length:
# a packed id is 16 bytes, a packed hash or digest 32; a caller's id whose UTF-8 is 16 bytes
# long gets a 0xFF byte appended (a byte UTF-8 never holds).
STORED_COLUMNS = (
    'root_id, position, stream_id, "offset", event_id, type, type_name, schema_version, data, meta, '
    "recorded_at, recorded_text, data_digest, hash, pending, redacted_by"
)


# Hex pairs that are UTF-8 without U+0000 (what PostgreSQL's text holds): the tail of a
# continuation byte, then one to four bytes a character, overlongs and surrogates excluded.
_TAIL = "[89ab][0-9a-f]"
_UTF8_HEX = ("^(0[1-9a-f]|[1-7][0-9a-f]|c[2-9a-f]" + _TAIL + "|d[0-9a-f]" + _TAIL + "|e0[ab][0-9a-f]" + _TAIL
             + "|e[1-9a-cef]" + _TAIL * 2 + "|ed[89][0-9a-f]" + _TAIL + "|f0[9ab][0-9a-f]" + _TAIL * 2
             + "|f[1-3]" + _TAIL * 3 + "|f48[0-9a-f]" + _TAIL * 2 + ")*$")


def _text(value: str) -> str:
    """SQL giving `value` (bytea) as text, or NULL when it is not UTF-8 text (only raw SQL stores
    such bytes): `convert_from` would fail the whole query, naming no row, and the reader then
    names the row and column (`recorded.from_row`), and `verify` its position."""
    return f"CASE WHEN encode({value}, 'hex') ~ '{_UTF8_HEX}' THEN convert_from({value}, 'UTF8') END"


def _hash(alias: str = "") -> str:
    """SQL giving an event's hash back as text (see `STORED_COLUMNS`)."""
    return f"CASE WHEN length({alias}hash) = 32 THEN 'tl2:' || encode({alias}hash, 'hex') ELSE {_text(alias + 'hash')} END"


def _decoded_columns(alias: str = "") -> str:
    """The SELECT list giving an `EventRow`'s text values back from the stored columns (NULL for
    bytes that decode to no text: see `_text`)."""
    a = alias
    return (
        f'{a}position, {a}stream_id, {a}"offset", '
        f"CASE WHEN length({a}event_id) = 16 THEN encode({a}event_id, 'hex') "
        f"WHEN length({a}event_id) = 0 THEN NULL "
        f"WHEN get_byte({a}event_id, length({a}event_id) - 1) = 255 "
        f"THEN {_text(f'substring({a}event_id FROM 1 FOR length({a}event_id) - 1)')} "
        f"ELSE {_text(f'{a}event_id')} END, "
        f"{_type(a)}, {a}schema_version, {a}data, {a}meta, "
        f"{_time(a)}, "
        f"CASE WHEN {a}data_digest IS NULL THEN NULL "
        f"WHEN length({a}data_digest) = 32 THEN encode({a}data_digest, 'hex') ELSE {_text(f'{a}data_digest')} END, "
        f"{_hash(a)}, {a}pending, {a}redacted_by"
    )


def _time(alias: str = "") -> str:
    """SQL giving an event's `recorded_at` text back from its stored columns (`packing.unpack_time`)."""
    a = alias
    return (f"coalesce({a}recorded_text, to_char(to_timestamp(({a}recorded_at / 1000000)::float8) AT TIME ZONE 'UTC', "
            f"'YYYY-MM-DD\"T\"HH24:MI:SS') || '.' || lpad(mod({a}recorded_at, 1000000)::text, 6, '0') || 'Z')")


def _type(alias: str = "") -> str:
    """SQL giving an event's type name back from its code (or its `type_name`)."""
    types = " ".join(f"WHEN {code} THEN '{name}'" for name, code in TYPE_CODES.items())
    return f"CASE WHEN {alias}type_name IN ({_ALWAYS_CODED}) THEN NULL ELSE coalesce({alias}type_name, CASE {alias}type {types} END) END"


# The catalogue's types no release of this backend kept by name (`packing.NAMED_BEFORE_CODED`).
# One kept so (raw SQL) decodes as NULL, a value of another kind, which readers refuse and
# `verify` names: the queries that find a thread's title look for its code (`events_titles`
# holds codes), and passed over it while its hash held.
_ALWAYS_CODED = ", ".join(f"'{name}'" for name in TYPE_CODES if name not in NAMED_BEFORE_CODED)


EVENT_COLUMNS = _decoded_columns()
_TYPE = _type()
_TITLE_TYPES = f"({TYPE_CODES['thread.created']}, {TYPE_CODES['title.set']})"


_Blob = TypeVar("_Blob", bytes, bytearray)


def _bytes(value: str | _Blob, packed: int) -> _Blob | bytes:
    """A packed value as it is, or text as UTF-8 (marked when its length would read as packed)."""
    if not isinstance(value, str):
        return value
    raw = value.encode("utf-8")
    return raw + b"\xff" if len(raw) == packed else raw


def stored_id(event_id: str) -> bytes:
    return _bytes(pack_id(event_id), 16)


def _stored(root: str, row: EventValues) -> tuple[Any, ...]:
    """An event row as inserted (see `STORED_COLUMNS`)."""
    return _stored_as(root, row, stored_id(row[3]), _bytes(pack_hash(row[10]), 32), pack_time(row[8]))


def _stored_as(root: str, row: EventValues, event_id: bytes | bytearray, hash_: bytes | bytearray,
               when: str | int) -> tuple[Any, ...]:
    """`_stored`, given the row's id, hash and time as stored."""
    position, stream_id, offset, _, type_, version, data, meta, _, digest, _, facts, redacted_by = row
    code = TYPE_CODES.get(type_)
    return (root, position, stream_id, offset, event_id, code, None if code else type_, version, data, meta,
            when if isinstance(when, int) else None, when if isinstance(when, str) else None,
            None if digest is None else _bytes(pack_digest(digest), 32), hash_, facts, redacted_by)


def _stored_rows(root: str, rows: Sequence[EventValues]) -> Iterator[tuple[Any, ...]]:
    """`_stored` of each row, with the ids and hashes converted together
    (`packing.pack_ids_and_hashes`) and a time converted once for the rows that share it, as
    a batch's rows do."""
    ids, hashes = pack_ids_and_hashes(rows)
    text, when = "", pack_time("")
    for row, id_, hash_ in zip(rows, ids, hashes):
        if row[8] != text:
            text, when = row[8], pack_time(row[8])
        yield _stored_as(root, row, _bytes(id_, 16), _bytes(hash_, 32), when)


STREAM_COLUMNS = (
    "id, parent_id, parent_offset, root_id, depth, head, created_position, kind, "
    "head_hash, facts, first_message_offset, last_position"
)

# A stream whose last_position raw SQL set to NULL, a negative number or past every position
# is in no range of `streams_activity` a page below a bound reads (NULL and the largest numbers
# sort above every position, a negative one below them all): each page also looks for one at
# both ends of the index (three seeks, each ending at once when there is none), as SQLite's
# `_UNLISTED` does, for the reader to refuse by name. Any row these find is refused
# (`Store.threads`), so none lengthens a page past its limit.
_UNLISTED = " UNION ALL ".join(
    f"(SELECT {STREAM_COLUMNS} FROM streams WHERE {bound}{{roots}} LIMIT 1)"
    for bound in ("last_position IS NULL", "last_position < 0", f"last_position >= {NO_BOUND}"))

# A stream's ancestry (`ancestry`; as on SQLite, where eventstore/sqlite.py says why it can stop early).
_ANCESTRY = """WITH RECURSIVE chain(id) AS (
        SELECT %s::text COLLATE "C"
        UNION
        SELECT s.parent_id FROM streams s JOIN chain ON s.id = chain.id WHERE s.parent_id IS NOT NULL{})
    SELECT {} FROM chain JOIN streams s ON s.id = chain.id"""
_PREFIXED_COLUMNS = ", ".join("s." + column.strip() for column in STREAM_COLUMNS.split(","))
ANCESTRY = _ANCESTRY.format("", _PREFIXED_COLUMNS)
ANCESTRY_FROM = _ANCESTRY.format(" AND coalesce(s.parent_offset > %s, true)", _PREFIXED_COLUMNS)


def _jsonb(column: str) -> str:
    """SQL reading a JSON text column as jsonb. PostgreSQL's jsonb refuses `\\u0000` (its text
    cannot hold U+0000), which an event's JSON can hold (a reason, an actor): it is read as
    `\\u0020` instead, JSON still whether the escape was one or followed an escaped backslash.
    (The cast failed: a search, or a snapshot's save after such a redaction, with it.)"""
    return f"replace({column}, '\\u0000', '\\u0020')::jsonb"


# Rows below this transaction id are visible and final (see the module doc).
_VISIBLE = "txid < pg_snapshot_xmin(pg_current_snapshot())"


def _reservation(count: str) -> str:
    """The expressions of a reservation of `count` positions (a placeholder); the next to last
    is the last position taken. They run in order. One position is a `nextval` alone: `setval`
    writes WAL every time."""
    return (f"pg_advisory_xact_lock_shared({_ORDER}), pg_advisory_lock({_RESERVE}), pg_current_xact_id(), "
            f"CASE {count}::bigint WHEN 1 THEN nextval('event_positions') "
            f"ELSE setval('event_positions', nextval('event_positions') + {count}::bigint - 1) END, pg_advisory_unlock({_RESERVE})")


# A reservation of %s positions (the count, twice).
_RESERVE_SQL = f"SELECT {_reservation('%s')}"
_RESERVE_AGAIN_SQL = _RESERVE_SQL.replace("pg_advisory_xact_lock_shared", "pg_advisory_xact_lock")

# The statements of an append, prepared once per connection (libpq's `prepare`) and run by
# name: the server parses and plans them once, not on every append (see `_send`).
_TRANSACTION = {"threadlog_begin": "BEGIN", "threadlog_commit": "COMMIT"}
_PREPARED = {
    # Lock the stream (for the transaction), then take positions: (stream id, count).
    "threadlog_lock": f"SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), {_reservation('$2')}",
    "threadlog_lock_again": f"SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), "
                            f"{_reservation('$2').replace('pg_advisory_xact_lock_shared', 'pg_advisory_xact_lock')}",
    "threadlog_stream": f"SELECT {STREAM_COLUMNS} FROM streams WHERE id = $1",
    # Lock the stream alone (`lock_stream`): (stream id).
    "threadlog_lock_stream": "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
    "threadlog_insert_event": f"INSERT INTO events ({STORED_COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, 17))})",
    "threadlog_insert_stream": f"INSERT INTO streams ({STREAM_COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, 13))})",
    "threadlog_update_head": "UPDATE streams SET head = $1, head_hash = $2, facts = $3, first_message_offset = $4, "
                             "last_position = $5 WHERE id = $6",
    # One event and its stream's new head, in one statement (`update_head` after `insert_events`).
    "threadlog_append_one": f"WITH event AS (INSERT INTO events ({STORED_COLUMNS}) "
                            f"VALUES ({', '.join(f'${i}' for i in range(1, 17))})) "
                            "UPDATE streams SET head = $17, head_hash = $18, facts = $19, first_message_offset = $20, "
                            "last_position = $21 WHERE id = $22",
    # `append_at`: one statement, so one implicit transaction (committed at the pipeline's sync).
    # `reserved` locks the stream and takes a position only if the stream's head is the one
    # given ($1 the stream, $19 its head, $20 its head hash); `moved` moves the head to the
    # position taken, again only if the head is the one given, and the event is inserted there.
    # The statement's snapshot is taken before it waits for the stream's lock: if another writer
    # moved the head meanwhile, the UPDATE sees it (READ COMMITTED re-checks a row changed by a
    # transaction that committed since) and writes nothing, leaving the position unused. The
    # position is taken before any row is written, so the transaction id comes with it, inside
    # the reservation (see the module doc): the UPDATE joins the position it needs.
    "threadlog_append_at": "WITH reserved(stream_lock, order_lock, reserve_lock, txid, position, unlock) AS MATERIALIZED "
                           f"(SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), {_reservation('1')} "
                           "FROM streams WHERE id = $1 AND head = $19 AND head_hash = $20), "
                           "moved AS (UPDATE streams SET head = $15, head_hash = $16, facts = $17, "
                           "first_message_offset = $18, last_position = reserved.position FROM reserved "
                           "WHERE id = $1 AND head = $19 AND head_hash = $20 RETURNING root_id, last_position) "
                           f"INSERT INTO events ({STORED_COLUMNS}) SELECT root_id, last_position, $1::text, $2::bigint, "
                           "$3::bytea, $4::smallint, $5::text, $6::integer, $7::text, $8::text, $9::bigint, $10::text, "
                           "$11::bytea, $12::bytea, $13::text, $14::bigint FROM moved RETURNING position",
}


# Rows converted together and written to a COPY before the next are asked for: about the
# driver's 32 KiB send buffer of message rows.
_COPY_CHUNK = 100

# The append's statements by name, as `_send` queues them.
_BEGIN, _COMMIT = b"threadlog_begin", b"threadlog_commit"
_LOCK, _LOCK_AGAIN, _STREAM = b"threadlog_lock", b"threadlog_lock_again", b"threadlog_stream"
_LOCK_STREAM = b"threadlog_lock_stream"
_INSERT_EVENT, _INSERT_STREAM = b"threadlog_insert_event", b"threadlog_insert_stream"
_UPDATE_HEAD, _APPEND_ONE = b"threadlog_update_head", b"threadlog_append_one"
_APPEND_AT = b"threadlog_append_at"


# The search index's words, as FTS5's `unicode61 remove_diacritics 2` tokenizer makes them on
# SQLite: every run of letters and digits is a word, case folded, a Latin letter's accents
# removed. PostgreSQL's own parser kept a path, a file name, a URL, a host, an e-mail address
# or a version whole (`src/main.py` one word: `main` found nothing) and left out a markup tag
# (`<thinking>`), name and all. The text is folded here and every other character made a
# separator before the parser sees it, which then finds only the plain words. ICU's root
# collation classifies the characters and folds case whatever the database's locale (under
# the "C" locale, `[:alnum:]` holds ASCII alone). `remove_diacritics 2` folds Latin letters
# only, as the marks removed after `[a-z]` do; a mark on another letter is recomposed with it.
# A server built without ICU has no such collation: the database's own is used then, and under
# the "C" locale only ASCII letters are folded and kept.
class _Folding(NamedTuple):
    utf8: bool  # the database's encoding is UTF8 (else it cannot hold `ſ`, nor run `normalize`)
    icu: bool  # ICU's root collation "und-x-icu" is usable here (a server built with ICU, an encoding ICU takes)


def _folded(value: str, how: _Folding) -> str:
    """SQL giving the text `value` case folded and its Latin accents removed (see `_Folding`).
    A database of another encoding than UTF8 keeps the accents."""
    collate = ' COLLATE "und-x-icu"' if how.icu else ""
    if not how.utf8:
        return f"lower({value}{collate}){collate}"
    return (f"normalize(regexp_replace(normalize(translate(lower({value}{collate}), 'µſ', 'μs'), NFD), "
            f"'([a-z])[\\u0300-\\u036f]+', '\\1', 'g'), NFC){collate}")


def _words(value: str, how: _Folding) -> str:
    """SQL giving the text `value` as the index's words separated by spaces."""
    return f"regexp_replace({_folded(value, how)}, '[^[:alnum:]]+', ' ', 'g')"


def _query_words(value: str, how: _Folding) -> str:
    """`_words` of a web search query, its syntax kept: its quotes, spaces and a `-` before a
    word. Any other separator becomes a comma, which splits words but not the operand they are
    in, so `foo.py` and `-a/b` are phrases, as FTS5 reads them."""
    return (f"regexp_replace(regexp_replace({_folded(value, how)}, '[^[:alnum:][:space:]\"-]+', ',', 'g'), "
            "'([^[:space:]\"])-+', '\\1,', 'g')")


# A plain word's phrase is matched by its first 256 parts (the regular expression's repetition
# takes at most 255). A message's text is a retrieval's query, and one word of it can hold
# thousands (a CSV line, minified code): the server failed to build a phrase of 20,000 ("stack
# depth limit exceeded"), and took seconds to match 64 of 10,000. A tsvector holds no position
# past 16,383, so a longer phrase could not be matched exactly anyway.
_PHRASE_PARTS = 256
_FIRST_PARTS = f"^ *((?:[^ ]+ +){{0,{_PHRASE_PARTS - 1}}}[^ ]*)"


def _tsv(how: _Folding) -> str:
    """The search table's generated column of words."""
    return f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', {_words('text', how)})) STORED"


# The rows (stream_id, lo, hi) of a search's scope, bound as a JSON array (`hit_filters`).
_SCOPE_ROWS = "SELECT value ->> 0, (value ->> 1)::bigint, (value ->> 2)::bigint FROM jsonb_array_elements(%s::jsonb)"
_TSV_INDEX = "CREATE INDEX search_tsv ON search_docs USING gin (tsv)"


def _schema_1(partitions: int, how: _Folding) -> list[str]:
    """The tables: the same columns as SQLite's, plus `events.root_id` (the partition key when
    the events are hash-partitioned by root thread) and `events.txid` (see the module doc)."""
    key = "root_id, " if partitions else ""
    events = (
        "CREATE TABLE events (position bigint NOT NULL, txid xid8 NOT NULL DEFAULT pg_current_xact_id(), "
        'root_id text COLLATE "C" NOT NULL, stream_id text COLLATE "C" NOT NULL, "offset" bigint NOT NULL, '
        "event_id bytea NOT NULL, type smallint, type_name text, schema_version integer NOT NULL, data text NOT NULL, "
        "meta text NOT NULL, recorded_at bigint, recorded_text text, data_digest bytea, hash bytea NOT NULL, pending text, "
        f'redacted_by bigint, PRIMARY KEY ({key}position), UNIQUE ({key}stream_id, "offset"), UNIQUE ({key}event_id))'
        + (" PARTITION BY HASH (root_id)" if partitions else "")
    )
    return [
        "CREATE TABLE threadlog_schema (version integer NOT NULL, partitions integer NOT NULL)",
        f"INSERT INTO threadlog_schema VALUES ({SCHEMA_VERSION}, {partitions})",
        "CREATE SEQUENCE event_positions",
        'CREATE TABLE streams (id text COLLATE "C" PRIMARY KEY, parent_id text COLLATE "C", parent_offset bigint, '
        'root_id text COLLATE "C" NOT NULL, depth integer NOT NULL, head bigint NOT NULL, created_position bigint, '
        "kind text NOT NULL, head_hash text NOT NULL, facts text, first_message_offset bigint, last_position bigint)",
        "CREATE INDEX streams_parent ON streams (parent_id)",
        "CREATE INDEX streams_activity ON streams (last_position)",
        events,
        *(f"CREATE TABLE events_p{i} PARTITION OF events FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
          for i in range(partitions)),
        f'CREATE INDEX events_titles ON events (stream_id, "offset") WHERE type IN {_TITLE_TYPES}',
        'CREATE TABLE snapshots (projection text NOT NULL, version integer NOT NULL, stream_id text COLLATE "C" NOT NULL, '
        '"offset" bigint NOT NULL, state text NOT NULL, PRIMARY KEY (projection, version, stream_id, "offset"))',
        *_search_tables(how),
    ]


def _search_tables(how: _Folding) -> list[str]:
    """The search index's tables, empty (as `_INDEX_SHAPE` describes them)."""
    return [
        'CREATE TABLE search_docs (docid bigint PRIMARY KEY, position bigint NOT NULL, stream_id text COLLATE "C" NOT NULL, '
        '"offset" bigint NOT NULL, kind text NOT NULL, role text, tool text, text text NOT NULL, '
        f"{_tsv(how)})",
        _TSV_INDEX,
        "CREATE INDEX search_titles ON search_docs (stream_id, \"offset\") WHERE kind = 'title'",
        "CREATE TABLE search_progress (name text PRIMARY KEY, position bigint NOT NULL)",
        "INSERT INTO search_progress VALUES ('index', 0)",
    ]


# What `_search_tables` makes, as the catalog describes it (`_INDEX_SHAPE_SQL`): each table's
# columns, a generated one marked so, and the indexes on the words and titles. A rebuild makes
# the tables again when raw SQL changed this (see `PostgresBackend.clear_index`).
_INDEX_SHAPE = ["search_docs: docid bigint, position bigint, stream_id text, offset bigint, kind text, role text, tool text, "
                "text text, tsv tsvector generated", "search_progress: name text, position bigint", "search_titles", "search_tsv"]
_INDEX_SHAPE_SQL = (
    "SELECT t || ': ' || (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) "
    "|| CASE WHEN attgenerated <> '' THEN ' generated' ELSE '' END, ', ' ORDER BY attnum) FROM pg_attribute "
    "WHERE attrelid = to_regclass(t) AND attnum > 0 AND NOT attisdropped) FROM unnest(ARRAY['search_docs', 'search_progress']) t "
    "UNION ALL SELECT i FROM unnest(ARRAY['search_titles', 'search_tsv']) i WHERE to_regclass(i) IS NOT NULL ORDER BY 1"
)


# Schema 1 -> 2: the search index's words are split as on SQLite (`_words`). Dropping the
# generated column drops its index; the new one is computed for every document as it is added.
def _schema_2(how: _Folding) -> list[str]:
    """The statements migrating schema 1 to 2."""
    return ["ALTER TABLE search_docs DROP COLUMN tsv", f"ALTER TABLE search_docs ADD COLUMN {_tsv(how)}", _TSV_INDEX,
            "UPDATE threadlog_schema SET version = 2"]


# Where the document that search document `d` is a piece of begins: the nearest of its event's
# parts at or below it that follows a gap (or is the event's first). `_tsvector_sized` leaves a
# gap before a document alike in kind, role and tool to one before it in its event, so two such
# documents (two results of one tool in a message) are two hits, and a long text's pieces, with
# none between them, one. An index an earlier release built has no gaps: its documents alike in
# an event are one hit, as they were, until `threadlog index --rebuild`.
_EVENT_BASE = f"{{0}}.docid / {DOC_PARTS} * {DOC_PARTS}"  # the first docid of `{0}`'s event (no `%`: a placeholder's mark)
_STARTS_DOCUMENT = f"({{0}}.docid = {_EVENT_BASE} OR NOT EXISTS (SELECT 1 FROM search_docs p WHERE p.docid = {{0}}.docid - 1))"
_DOCUMENT = (f"(CASE WHEN {_STARTS_DOCUMENT.format('d')} THEN d.docid ELSE (SELECT max(s.docid) FROM search_docs s "
             f"WHERE s.docid >= {_EVENT_BASE.format('d')} AND s.docid < d.docid AND {_STARTS_DOCUMENT.format('s')}) END)")

_TABLES = ("threadlog_schema", "streams", "events", "snapshots", "search_docs", "search_progress")

_P = ParamSpec("_P")
_R = TypeVar("_R")

# SQLSTATE classes and codes, and what they mean here.
_MESSAGES = {
    "40P01": "two writers waited for each other on {path} and this one was cancelled ({error}); nothing was written; retry",
    "40001": "a concurrent writer changed what this write read on {path} ({error}); nothing was written; retry",
    "53100": "the server's disk is full ({error}); nothing was written",
    "22P05": "the database {path} cannot hold a character of this write in its encoding ({error}); nothing was written; "
             "keep threadlog in a UTF8 database",
    "23505": "another writer stored the same key at the same time on {path} ({error}), or its rows were altered outside "
             "threadlog (`threadlog verify` names where); nothing was written; retry",
    "25006": "{path} is read-only here ({error}): it was opened read-only, or this server is a replica; "
             "open it writable (on the primary) to write",
    "42501": "the database user may not do this on {path} ({error}); grant it or connect as the owner",
    # Threadlog sets no statement_timeout and cancels nothing: a statement_timeout set on the
    # user or the database (or a cancel by hand) did, and cancels the same call again.
    # What the server says both when it shuts down and when pg_terminate_backend ends one session.
    "57P01": "the server for {path} ended this connection ({error}): it shut down or restarted, or an administrator "
             "ended this session (pg_terminate_backend); nothing was acknowledged; retry (the store connects again)",
    "57014": "the server cancelled a statement on {path} ({error}): a statement_timeout set for this database user or "
             "database, or a cancel by hand, ends it; its transaction was rolled back; raise the timeout for threadlog's user "
             "(ALTER ROLE ... SET statement_timeout = 0, or a longer one) and run it again",
}
# The refusals a caller may act on by their class (the others are `StoreError`).
_KINDS: dict[str, type[StoreError]] = {"23505": KeyClash, "40P01": Deadlocked, "42501": NotPermitted, "08": Disconnected,
                                       "57014": StoreError, "57": Disconnected}
# A lock not granted within lock_timeout (the store's `timeout`).
_LOCK_TIMEOUTS = ("55P03",)
_CLASSES = {
    "08": "lost the connection to {path} ({error}); nothing was acknowledged; retry (the store connects again)",
    "57": "the server for {path} shut down or restarted ({error}); nothing was acknowledged; retry (the store connects "
          "again)",
    "53": "the server for {path} ran out of resources ({error}); retry later",
    "XX": "the server for {path} reported damage ({error}); check the server's log and restore from a backup",
}


# What leaves the driver for a statement it could not send or the server refused: text that
# is not UTF-8 (a lone surrogate, as Python reads undecodable bytes of a command line) cannot
# be sent.
_FAILED_CALLS = (psycopg.Error, UnicodeEncodeError)


def _closed(path: str) -> StoreError:
    return StoreError(f"the store for {path} is closed; open it again to read or write")


def translate(error: psycopg.Error | UnicodeEncodeError, path: str, url: str = "", lost: bool = False) -> StoreError:
    """The `StoreError` for a driver error, chosen by its SQLSTATE, never by its text. `url` is
    given while connecting to it: its passwords are hidden (a connection's errors may quote
    the URL). A connection that could not be made is `pgreach.not_connected`'s. `lost` says
    the connection is broken (its libpq status): a connection the server ended while a call
    waited for its result (a batch waiting for a lock) comes back from libpq as a result with
    no SQLSTATE, which psycopg raises as a plain `DatabaseError`, and it was said as a
    `database error`, a plain `StoreError` no caller could tell from any other."""
    if isinstance(error, UnicodeEncodeError):
        return unsendable(error, path)
    text = first_line(error)
    if url:
        text = _without_passwords(text, url)
    state = error.sqlstate
    if state is None:
        if isinstance(error, psycopg.InterfaceError) and "closed" in text:
            return _closed(path)
        if lost or isinstance(error, psycopg.OperationalError):  # a connection made, since lost
            return Disconnected(_CLASSES["08"].format(path=path, error=text))
        return StoreError(f"database error on {path}: {text}")
    if state in _LOCK_TIMEOUTS:
        return Locked(path, text)
    template = _MESSAGES.get(state) or _CLASSES.get(state[:2])
    if template is None:
        return StoreError(f"database error on {path}: {text} (SQLSTATE {state})")
    return _KINDS.get(state, _KINDS.get(state[:2], StoreError))(template.format(path=path, error=text))


def _translated(method: Callable[Concatenate[PostgresBackend, _P], _R]) -> Callable[Concatenate[PostgresBackend, _P], _R]:
    """Run a backend method so that only `StoreError` leaves it."""

    def run(self: PostgresBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            if self._queued:
                self._flush()  # a read sees the writes queued before it
            return method(self, *args, **kwargs)
        except _FAILED_CALLS as error:
            raise self._failed(error) from None

    functools.update_wrapper(run, method)
    return run


# What the server answers a statement of the search index's fixed SQL when raw SQL dropped or
# changed the tables or columns it names: no such table, column or operator, another type.
_ALTERED_INDEX = ("42P01", "42703", "42883", "42804")


def _index_call(method: Callable[Concatenate[PostgresBackend, _P], _R]) -> Callable[Concatenate[PostgresBackend, _P], _R]:
    """`_translated`, for the search index's upkeep and queries: the server refusing their SQL
    as naming what is not there means the index's tables were altered outside threadlog, which
    a rebuild mends (`clear_index`), as on SQLite; it said "relation search_docs does not exist"."""

    @functools.wraps(method)
    def run(self: PostgresBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except psycopg.Error as error:
            if error.sqlstate in _ALTERED_INDEX:
                raise altered_index(f"PostgreSQL reports: {first_line(error)}") from None
            raise

    return _translated(run)


def _absent(answer: Callable[[], Any]) -> Callable[[Callable[Concatenate[PostgresBackend, _P], _R]],
                                                  Callable[Concatenate[PostgresBackend, _P], _R]]:
    """For a lookup by stream id (or other key text): `answer()` when the key holds U+0000,
    which no PostgreSQL text can hold, so nothing stored has it: no such stream, as SQLite
    answers, instead of the server's (or the driver's) refusal to take the text."""

    def decorate(method: Callable[Concatenate[PostgresBackend, _P], _R]) -> Callable[Concatenate[PostgresBackend, _P], _R]:
        @functools.wraps(method)
        def run(self: PostgresBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            if any(isinstance(value, str) and "\x00" in value for value in (*args, *kwargs.values())):
                return cast(_R, answer())
            return method(self, *args, **kwargs)

        return run

    return decorate


def _queueing(method: Callable[Concatenate[PostgresBackend, _P], _R]) -> Callable[Concatenate[PostgresBackend, _P], _R]:
    """`_translated` for the write methods that queue their statements instead of flushing
    the queue first (see `PostgresBackend._queued`)."""

    def run(self: PostgresBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except _FAILED_CALLS as error:
            raise self._failed(error) from None

    functools.update_wrapper(run, method)
    return run


_new: Callable[..., Any] = tuple.__new__
_stream_row: Callable[[Sequence[Any]], StreamRow] = functools.partial(_new, StreamRow)
_SYNC, _FAILED = psycopg.pq.ExecStatus.PIPELINE_SYNC, psycopg.pq.ExecStatus.FATAL_ERROR
_LOST = psycopg.pq.ConnStatus.BAD


def _next_result(pgconn: psycopg.pq.abc.PGconn) -> psycopg.pq.abc.PGresult | None:
    """libpq's next result, waited for with `select` on the socket rather than inside libpq,
    whose blocking read holds the GIL: every other thread of the process would stand still
    (one holding a lock this store waits for, until the lock timed out), and a signal's
    handler would run only once the server answered. The connection is non-blocking (the
    driver's): what the socket did not take yet (a large event) is sent as it drains, while
    what the server answers meanwhile is read."""
    socket = pgconn.socket
    while pgconn.is_busy():
        unsent = pgconn.flush()  # 1: output left in libpq's buffer
        select.select((socket,), (socket,) if unsent else (), ())
        pgconn.consume_input()
    return pgconn.get_result()


def _end_pipeline(pgconn: psycopg.pq.abc.PGconn, synced: bool) -> None:
    """Read what the server still owes a pipeline left midway, up to its end (its sync)."""
    with contextlib.suppress(psycopg.Error):
        if not synced:
            pgconn.pipeline_sync()
        while pgconn.status != _LOST:
            result = _next_result(pgconn)
            if result is not None and result.status == _SYNC:
                return


_Text = TypeVar("_Text", str, str | None)


def _tsvector_sized(docs: Sequence[DocValues]) -> Iterator[DocValues]:
    """The documents, a text longer than a tsvector holds cut into `doc_pieces`; each event's
    parts numbered anew from its first docid (the parts past `DOC_PARTS` left out). A document
    of the same kind, role and tool as one before it in its event starts one number past the
    last part: a search tells documents apart from pieces by that gap (`_DOCUMENT`)."""
    position, part = -1, 0
    labels: set[tuple[str, str | None, str | None]] = set()
    for doc in docs:
        if doc[1] != position:
            position, part = doc[1], 0
            labels.clear()
        if (label := (doc[4], doc[5], doc[6])) in labels:
            part += 1
        labels.add(label)
        for text in doc_pieces(doc[7]):
            if part < DOC_PARTS:
                yield (position * DOC_PARTS + part, *doc[1:7], text)
            part += 1


def _indexable(text: _Text) -> _Text:
    """Text as the search index holds it: PostgreSQL text cannot hold U+0000, which an event's
    JSON can; a space in its place separates words as FTS5 does on SQLite."""
    return text.replace("\x00", " ") if text is not None and "\x00" in text else text


def _encoded(values: Sequence[Any]) -> tuple[list[bytes | None], list[int]]:
    """Parameters as libpq takes them, with their formats: an int as its digits (text: the
    server reads it as the prepared statement's type says; a binary int would have to be as wide
    as that type), text as UTF-8 (the connection's encoding) and bytes as they are (binary: the
    server checks the UTF-8, and refuses a NUL as psycopg does). The driver's own adapters
    (`Transformer.dump_sequence`) cost 14k more instructions per append (callgrind)."""
    data: list[bytes | None] = []
    formats: list[int] = []
    for value in values:
        if value is None:
            data.append(None)
            formats.append(0)
        elif isinstance(value, int):
            data.append(b"%d" % value)
            formats.append(0)
        else:
            data.append(value.encode() if isinstance(value, str) else value)
            formats.append(1)
    return data, formats


# A claim (`PostgresBackend.claim`) is a session advisory lock on a connection of its own, under a
# key made of the store's schema and the claim's name: one key space serves a whole database,
# its schemas (each a store of its own) included. 63 bits of a SHA-256, so no key of threadlog's
# own (`_MIGRATE` and the others) is one by more than chance. The connection says whose it is
# in its `application_name`, which a refusal reads (through `pg_locks`) to name the holder.
_CLAIM_SCHEMA = b"SELECT current_schema()"
_CLAIM_TAKE = b"SELECT set_config('application_name', %s, false), pg_try_advisory_lock(%s)"
_CLAIM_HOLDER = b"""SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = %s AND l.objid::bigint = %s"""
_CLAIMANT = re.compile(r"threadlog \(pid (\d+)\)")


def _claim_key(schema: str, name: str) -> int:
    """The advisory lock key of the claim `name` on the store in `schema`."""
    return int.from_bytes(hashlib.sha256(f"threadlog claim\0{schema}\0{name}".encode()).digest()[:8], "big") >> 1


def _no_schema(path: str, search_path: str) -> str:
    """The refusal of a connection whose search_path names no schema to keep a store in: the
    server passes over a schema that does not exist, or that the user may not use, without a
    word (a store there looked like none, and creating one failed with SQLSTATE 3F000)."""
    return (f"{path} gives no schema to keep the store in: the search_path ({search_path}) names none that exists "
            "and this user may use; create it (CREATE SCHEMA name), grant the user USAGE on it (and CREATE, to make "
            "the store), or name another in the URL (options=-csearch_path=name)")


# Rows read per round trip when a read is streamed.
_PAGE = 2000
# Names of server-side cursors (several may be open at once on one connection).
_CURSORS = itertools.count(1)


class PostgresBackend:
    """One connection to one PostgreSQL database, named by a `postgresql://` URL. Not shared
    between threads (a `Store` opens `another` for each). `partitions` > 0 creates the events table hash-partitioned by root thread
    (only when the schema is created). Writers wait up to `timeout` seconds for a lock."""

    def __init__(self, url: str, timeout: float = 30.0, *, partitions: int = 0, read_only: bool = False) -> None:
        scheme, separator, rest = url.partition("://")
        url = scheme.lower() + separator + rest  # libpq reads the scheme in small letters only
        self.path = safe_url(url)
        self.read_only = read_only
        self.timeout = timeout  # (what `Store.timeout` reports)
        self._in_transaction = False
        self._snapshot = False  # inside `read_transaction`: one snapshot for every read
        self._reserved = 0  # reservations made in the current write transaction
        self._reserves_twice = False  # the current write transaction's (`transaction`)
        # Statements of the write transaction not sent yet: its BEGIN, then its writes, sent
        # with the next read or with the COMMIT in one round trip (`_send`). An append is
        # then two round trips: BEGIN with the lock, reservation and head read; the inserts with
        # the COMMIT. Round trips are what many writers on few cores wait for (measured: with 8
        # writer processes on 2 busy cores, a BEGIN alone took 4 ms to come back).
        self._queued: list[tuple[bytes, Sequence[Any]]] = []
        self._begun = False
        self._roots: dict[str, str] = {}  # stream id -> root id, for the events' partition key
        # Another thread's connection (`another`): the URL as given, with its password.
        self._another = functools.partial(PostgresBackend, url, timeout, partitions=partitions, read_only=read_only)
        self._reconnects = False  # from the end of this set-up until `close`
        self._closed = False  # by `close`
        connect_timeout = max(1, int(timeout))
        try:
            # UTF-8 whatever the database's encoding: the server converts, and refuses a character
            # its encoding cannot hold (22P05) before anything is written.
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout, client_encoding="UTF8")
            self._loader = Transformer(self.conn)  # the driver's adapters, without its cursors: `_send`'s rows
        except psycopg.OperationalError as error:  # the server not reached, or refusing
            raise not_connected(error, self.path, url, connect_timeout) from None
        except _FAILED_CALLS as error:
            raise translate(error, self.path, url) from None
        try:
            # At least 1 ms: PostgreSQL reads a lock_timeout of 0 as none (a timeout of 0 waited for good).
            self.conn.execute(f"SET lock_timeout = {max(1, int(timeout * 1000))}".encode())
            icu, schema, path = self.conn.execute(
                b"SELECT to_regcollation('pg_catalog.\"und-x-icu\"') IS NOT NULL, current_schema(), "
                b"current_setting('search_path')").fetchone() or (False, None, "")
            if schema is None:
                raise SchemaError(_no_schema(self.path, str(path)))
            self._folding = _Folding(self.conn.info.parameter_status("server_encoding") == "UTF8", bool(icu))
            if read_only:  # the server refuses every write of this session (a viewer, a read command)
                if self._version() == 0:
                    raise NoStore(self.path)
                self.conn.execute(b"SET default_transaction_read_only = on")
            self._prepare(_TRANSACTION)  # the migration runs in a transaction
            self._migrate(partitions)
            self._prepare(_PREPARED)
        except _FAILED_CALLS as error:
            failed = self._failed(error)  # lost or not, asked of the connection before it is closed
            self._conn.close()
            raise failed from None
        except StoreError:
            self._conn.close()
            raise
        self._reconnects = True

    def _failed(self, error: psycopg.Error | UnicodeEncodeError) -> StoreError:
        """`translate(error)`, `Disconnected` when the connection is lost now, whatever the
        driver raised for it."""
        conn = getattr(self, "_conn", None)  # (none yet while the first connection is made)
        return translate(error, self.path, lost=conn is not None and conn.pgconn.status == _LOST)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The connection, made again when the server ended the last one (a restart, a
        failover, an idle timeout) and no transaction was open on it: the call under way when
        it was lost failed, unacknowledged, and the calls after it go on, as a pool gives a
        new connection for a broken one. Inside a transaction or a snapshot the loss stands:
        what was begun there is gone with the connection."""
        self._mend()
        return self._conn

    def _mend(self) -> None:
        """Connect again if the server ended the connection and no transaction is open on it
        (`conn`). `transaction` calls it before it opens one: its BEGIN is only queued, so the
        first statement sent inside found the connection lost and, inside, kept it lost: after
        a loss, every call writing in a transaction (a batch, a fork with a title, fan_out,
        redact) failed, for as long as no call outside one came between."""
        if self._conn.pgconn.status != _LOST:
            return
        if self._closed:  # by its owner: the driver's errors said the connection was lost, "retry"
            raise _closed(self.path)
        if self._reconnects and not self._in_transaction:
            self._reconnect()

    def _reconnect(self) -> None:
        """Take a new connection's session (its settings, its prepared statements) for the
        lost one; `Disconnected` (nothing changed) while the server does not answer."""
        fresh = self._another()
        with contextlib.suppress(psycopg.Error):
            self._conn.close()
        self._conn, self._loader, self._folding = fresh._conn, fresh._loader, fresh._folding
        self._queued, self._begun = [], False

    def _prepare(self, statements: dict[str, str]) -> None:
        """Prepare `statements` on this connection, by name, at the protocol level (which takes
        BEGIN and COMMIT too, unlike the SQL command PREPARE)."""
        for name, text in statements.items():
            prepared = self.conn.pgconn.prepare(name.encode(), text.encode())
            if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
                raise psycopg.errors.error_from_result(prepared, encoding=self.conn.info.encoding)

    # -- schema -------------------------------------------------------------------------

    def _tables(self) -> set[str]:
        rows = self.conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
        return {str(r[0]) for r in rows}

    def _migrate(self, partitions: int) -> None:
        if self._version() == SCHEMA_VERSION:
            return
        with self.transaction():
            self._flush()  # BEGIN now: every statement below runs inside this transaction
            # One process migrates; another waits here, then finds the work done.
            self.conn.execute(f"SELECT pg_advisory_xact_lock({_MIGRATE})".encode())
            version = self._version()
            if version == 0:
                for statement in _schema_1(partitions, self._folding):
                    self.conn.execute(statement.encode())
            elif version == 1:
                for statement in _schema_2(self._folding):
                    self.conn.execute(statement.encode())

    def _version(self) -> int:
        tables = self._tables()
        if "threadlog_schema" not in tables:
            if tables & set(_TABLES):
                raise SchemaError(f"{self.path} holds tables named like threadlog's ({', '.join(sorted(tables)[:5])}) but "
                                  "is not a threadlog database; use another database or schema")
            return 0
        row = self.conn.execute("SELECT version FROM threadlog_schema").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaError(f"{self.path} was written by a newer threadlog (schema version {version}; this release "
                              f"reads up to {SCHEMA_VERSION}); upgrade threadlog to open it")
        if 0 < version < SCHEMA_VERSION and self.read_only:
            raise SchemaTooOld(f"{self.path} has schema version {version}: open it writable once to migrate it")
        return version

    @_translated
    def schema_version(self) -> int:
        return self._version()

    @_translated
    def partitions(self) -> int:
        """How many hash partitions the events table has (0: not partitioned)."""
        row = self.conn.execute("SELECT partitions FROM threadlog_schema").fetchone()
        return int(row[0]) if row else 0

    # -- transactions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, reserves_twice: bool = False) -> Iterator[None]:
        """BEGIN … COMMIT (READ COMMITTED); any error rolls back and leaves the database as it was.
        Writers serialise per stream (`stream_for_append`), not globally: see the module doc.
        With `reserves_twice`, its first reservation takes the order lock exclusively, as a
        second one would: two such transactions taking it shared first, then each waiting to
        take it exclusively, deadlocked, and the server cancelled one (`fan_out` ran it again,
        up to 8 times: four processes fanning out at once on a slow machine ran out of them)."""
        if self._in_transaction:
            raise transaction_open(self._snapshot)
        self._mend()
        self._in_transaction, self._reserved, self._begun = True, 0, False
        self._reserves_twice = reserves_twice
        self._queued = [(_BEGIN, ())]
        try:
            yield
            if self._begun or len(self._queued) > 1:
                self._send((_COMMIT, ()))
        except BaseException as error:
            if self._begun:
                self._rollback()
            if isinstance(error, _FAILED_CALLS):
                raise self._failed(error) from None
            raise
        finally:
            self._in_transaction = self._reserves_twice = False
            self._queued = []
            self._roots.clear()

    def _send(self, *then: tuple[bytes, Sequence[Any]]) -> list[psycopg.pq.abc.PGresult]:
        """Send the queued statements, then `then`, in one round trip; the result of each of `then`.

        Each statement is one prepared once per connection (`_PREPARED`, `_TRANSACTION`), run by
        name with its parameters: libpq's pipeline mode sends them together and the server runs
        them in order; after the first error it runs none of the rest, and that error is raised.
        The parameters go as bytes (`_encoded`); the driver's adapters read the rows. The driver's
        cursors do this work in Python: its `ClientCursor`, which quoted each value into one
        query string, cost 1.8x the client instructions per append (see the module doc).
        Per append, client CPU is what 8 writers on 2 cores run out of first.

        The wait for the server lets the process's other threads run, and a signal's handler
        (a Ctrl-C) run at once (`_next_result`)."""
        statements = [*self._queued, *then]
        if self._queued and self._queued[0][0] == _BEGIN:
            self._begun = True
        self._queued = []
        if not statements:
            return []
        messages = [(name, *_encoded(values)) for name, values in statements]  # a bad value: nothing sent
        pgconn = self.conn.pgconn
        pgconn.enter_pipeline_mode()
        results: list[psycopg.pq.abc.PGresult] = []
        error: psycopg.pq.abc.PGresult | None = None
        synced = done = False
        try:
            for name, params, formats in messages:
                pgconn.send_query_prepared(name, params, formats)
            pgconn.pipeline_sync()
            synced = True
            while True:
                result = _next_result(pgconn)
                if result is None:  # the end of one statement's results
                    if pgconn.status == _LOST:
                        raise psycopg.OperationalError(pgconn.get_error_message())
                    continue
                status = result.status
                if status == _SYNC:
                    break
                if status == _FAILED and error is None:
                    error = result
                results.append(result)
            done = True
        finally:
            if not done:  # interrupted (a Ctrl-C, a lost server): leave the connection usable, if it still is
                _end_pipeline(pgconn, synced)
            with contextlib.suppress(psycopg.Error):
                pgconn.exit_pipeline_mode()
        if error is not None:
            raise psycopg.errors.error_from_result(error, encoding=self.conn.info.encoding)
        return results[len(results) - len(then):]

    def _flush(self) -> None:
        self._send()

    def _rollback(self) -> None:
        # A reservation interrupted between its lock and unlock would keep the session lock.
        self._libpq_rollback(b"ROLLBACK; SELECT pg_advisory_unlock_all()")

    def _libpq_rollback(self, statements: bytes) -> None:
        """Run a ROLLBACK (and `statements` after it) through libpq itself: the driver, when it
        sees a ROLLBACK go by, deallocates every statement prepared in the session, the append's
        (`_PREPARED`) with its own. A store its owner closed has nothing to roll back either:
        closing ended the session (a read view left open, an abandoned export's, ends after it)."""
        if self._closed:
            return
        with contextlib.suppress(psycopg.Error):  # a lost connection has nothing to roll back
            self.conn.pgconn.exec_(statements)

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """One snapshot (REPEATABLE READ, READ ONLY) for several reads; writers carry on."""
        if self._in_transaction:
            yield
            return
        try:
            self.conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except _FAILED_CALLS as error:
            raise self._failed(error) from None
        self._in_transaction = self._snapshot = True
        try:
            yield
        finally:
            self._in_transaction = self._snapshot = False
            self._libpq_rollback(b"ROLLBACK")

    @_translated
    def wait_for_writes(self) -> None:
        """`Backend.wait_for_writes`: every transaction that reserved positions holds the order
        lock shared until it ends (module doc), so this reads which transactions hold it now
        (`pg_locks`, which any role may read) and polls until none of those still does. A
        transaction that reserves after this began is not waited for, and no lock is asked
        for: a request for it exclusively would queue every writer's shared one behind it, and
        one long write (a restore, a fan_out, a transaction opened by hand) would stop every
        append until it ended. A position is taken before its transaction commits, so one
        below a position seen committed may still be in flight. Waits up to the store's
        `timeout` (`Locked`)."""
        if self._in_transaction:
            raise waiting_inside(self._snapshot)
        holders = {row[0] for row in self.conn.execute(_ORDER_HOLDERS)}
        deadline, pause = time.monotonic() + self.timeout, 0.001
        while holders:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Locked(self.path, f"{len(holders)} write{'s' if len(holders) > 1 else ''} begun before this wait "
                                        f"did not end within {self.timeout:g} s")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
            holders &= {row[0] for row in self.conn.execute(_ORDER_HOLDERS)}

    def claim(self, name: str) -> Claim:
        """`Backend.claim`: a session advisory lock (`pg_try_advisory_lock`) on a connection
        opened for it and kept open while the claim is held; closing it (the claim released,
        or the process ended however it ended, the server then seeing its connection gone)
        lets go of the lock. Per schema: a store in another schema of the database has claims
        of its own. `Claim.keep` asks the server whether the connection still stands, and
        takes the lock again on a new one when it does not (a restart ended it)."""
        holders = [self._claimed(name)]

        def keep() -> None:
            try:
                holders[0]._conn.execute(b"SELECT 1")  # not `conn`: a connection made again holds no lock
            except _FAILED_CALLS:
                holders[0].close()
                holders[0] = self._claimed(name)

        return Claim(lambda: holders[0].close(), keep)

    def _claimed(self, name: str) -> PostgresBackend:
        """A connection holding the claim `name` (`claim`); `Claimed` if another holds it."""
        holder = self._another()
        try:
            schema = holder.conn.execute(_CLAIM_SCHEMA).fetchone()
            key = _claim_key(str(schema[0] if schema else ""), name)
            taken = holder.conn.execute(_CLAIM_TAKE, (f"threadlog (pid {os.getpid()}) claim {name}", key)).fetchone()
            if not (taken and taken[1]):
                held = holder.conn.execute(_CLAIM_HOLDER, (key >> 32, key & 0xFFFFFFFF)).fetchone()
                found = _CLAIMANT.match(str(held[0])) if held else None
                raise Claimed(self.path, name, int(found.group(1)) if found else None)
        except _FAILED_CALLS as error:
            holder.close()
            raise self._failed(error) from None
        except StoreError:
            holder.close()
            raise
        return holder

    def another(self) -> PostgresBackend:
        """Another connection to this database, with these settings (`backend.Reopens`)."""
        return self._another()

    def close(self) -> None:
        self._reconnects, self._closed = False, True
        self._conn.close()

    def _paged(self, query: str, args: tuple[Any, ...], kind: Any, key: int) -> Iterator[Any]:
        """The rows of `query` (which ends in `> %s ORDER BY <key column> LIMIT %s`, the key's
        lower bound and the page size last in `args`), read a page per round trip, as `kind`."""
        *fixed, after, limit = args
        left = limit
        try:
            if self._queued:
                self._flush()
            while left is None or left > 0:
                page = min(_PAGE, left) if left is not None else _PAGE
                rows = self.conn.execute(query, (*fixed, after, page)).fetchall()
                for row in rows:
                    yield row if kind is tuple else _new(kind, row)
                if len(rows) < page:
                    return
                after = rows[-1][key]
                if left is not None:
                    left -= len(rows)
        except _FAILED_CALLS as error:
            raise self._failed(error) from None

    # -- streams ----------------------------------------------------------------------------

    @_absent(lambda: None)
    @_translated
    def stream(self, stream_id: str) -> StreamRow | None:
        row = self.conn.execute(f"SELECT {STREAM_COLUMNS} FROM streams WHERE id = %s", (stream_id,)).fetchone()
        return _new(StreamRow, row) if row else None

    def _reserve(self, count: int) -> int:
        """Take `count` consecutive positions and this transaction's id, in one order (module doc)."""
        query = _RESERVE_SQL if self._reserved == 0 and not self._reserves_twice else _RESERVE_AGAIN_SQL
        last = self.conn.execute(query, (count, count)).fetchone()
        assert last is not None
        self._reserved += 1
        return int(last[-2]) - count + 1

    @_absent(lambda: None)
    @_queueing
    def lock_stream(self, stream_id: str) -> None:
        """`Backend.lock_stream`: the lock `stream_for_append` takes, queued, so the read after it
        sends both in one round trip and runs once it is held (seeing every write committed
        before it)."""
        self._queued.append((_LOCK_STREAM, (stream_id,)))

    @_absent(lambda: (None, 0))
    @_queueing
    def stream_for_append(self, stream_id: str, count: int = 1) -> tuple[StreamRow | None, int]:
        """Lock the stream (for this transaction), take `count` positions and read the stream's
        row: one round trip. The row is read by a statement that starts after the lock is held,
        so it is the latest committed one."""
        again = self._reserved > 0 or self._reserves_twice
        reserved, found = self._send((_LOCK_AGAIN if again else _LOCK, (stream_id, count)),
                                     (_STREAM, (stream_id,)))
        self._reserved += 1
        last = int(reserved.get_value(0, 4) or 0)  # the reservation's last position (see `_reservation`)
        if not found.ntuples:
            return None, last - count + 1
        loader = self._loader
        loader.set_pgresult(found)
        row: StreamRow = loader.load_row(0, _stream_row)
        self._roots[stream_id] = row.root_id
        return row, last - count + 1

    def append_at(self, row: EventValues, head: int, head_hash: str, new_head: int, new_hash: str, facts: str | None,
                  first_message: int | None) -> int | None:
        """`backend.AppendAtHead.append_at`: one statement (`_PREPARED["threadlog_append_at"]`),
        its own transaction, one round trip. When the head had moved it wrote nothing, and took
        no position unless the head moved while it waited for the stream's lock."""
        if self._in_transaction:
            raise transaction_open(self._snapshot)
        try:
            (appended,) = self._send((_APPEND_AT, (*_stored("", row)[2:], new_head, new_hash, facts, first_message, head,
                                                   head_hash)))
        except BaseException as error:
            self._rollback()  # a reservation stopped between its lock and unlock would keep the session lock
            if isinstance(error, _FAILED_CALLS):
                raise self._failed(error) from None
            raise
        return int(appended.get_value(0, 0) or 0) if appended.ntuples else None

    @_absent(list)
    @_translated
    def ancestry(self, stream_id: str, start: int = 0) -> list[StreamRow]:
        rows = self.conn.execute(ANCESTRY_FROM if start else ANCESTRY, (stream_id, start) if start else (stream_id,)).fetchall()
        return chain_order((_new(StreamRow, r) for r in rows), stream_id)  # each stream once: see chain_order

    def streams(self, stored: bool = False, part: tuple[int, bool] | None = None, tops: bool = False,
                strays: bool = False) -> Iterator[StreamRow]:
        """Every stream in creation order (`stored` too: a table's order on the server is not
        the same from one scan to the next), through a server-side cursor read `_PAGE` rows per
        round trip: memory stays bounded however many streams there are (a full `verify` reads
        them all). Outside a transaction the cursor is WITH HOLD: the server keeps the result
        (in temporary files past `work_mem`) until the last row is read or the iterator closed."""
        try:
            if self._queued:
                self._flush()
            cursor = self.conn.cursor(f"threadlog_streams_{next(_CURSORS)}", withhold=not self._in_transaction)
            cursor.itersize = _PAGE
            with cursor:
                wheres, params = [], []
                if part is not None:
                    wheres.append("(created_position > %s)" if part[1] else "(created_position IS NULL OR created_position <= %s)")
                    params.append(part[0])
                if tops:  # roots, and forks whose parent's row is gone
                    wheres.append("(parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM streams p WHERE p.id = streams.parent_id))")
                if strays:  # forks whose parent was not written before them: gone, or raw SQL named a later one
                    wheres.append("(parent_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM streams p WHERE p.id = streams.parent_id "
                                  "AND p.created_position < streams.created_position))")
                where = f" WHERE {' AND '.join(wheres)}" if wheres else ""
                cursor.execute(f"SELECT {STREAM_COLUMNS} FROM streams{where} ORDER BY created_position, id", params)
                for row in cursor:
                    yield _new(StreamRow, row)
        except _FAILED_CALLS as error:
            raise self._failed(error) from None

    @_translated
    def stream_starts(self) -> list[int]:
        rows = self.conn.execute("SELECT created_position FROM streams WHERE created_position IS NOT NULL").fetchall()
        return sorted(row[0] for row in rows)

    @_absent(list)
    @_translated
    def streams_with_prefix(self, prefix: str, limit: int) -> list[str]:
        where, bounds = prefix_query("%s", prefix)
        rows = self.conn.execute(f"SELECT id FROM streams WHERE {where} ORDER BY id LIMIT %s", (*bounds, limit)).fetchall()
        return [str(r[0]) for r in rows]

    @_translated
    def streams_held(self, stream_ids: Collection[str]) -> set[str]:
        """`Backend.streams_held` in one query; an id holding U+0000, which no PostgreSQL text
        holds, is none of them (`_absent`)."""
        ids = [stream_id for stream_id in stream_ids if "\x00" not in stream_id]
        return {row[0] for row in self.conn.execute("SELECT id FROM streams WHERE id = ANY(%s)", (ids,)).fetchall()}

    @_absent(list)
    @_translated
    def streams_with_prefix_after(self, prefix: str, after: int) -> list[StreamRow]:
        where, bounds = prefix_query("%s", prefix)
        rows = self.conn.execute(f"SELECT {STREAM_COLUMNS} FROM streams WHERE {where} AND last_position > %s ORDER BY id",
                                 (*bounds, after)).fetchall()
        return [_new(StreamRow, row) for row in rows]

    @_translated
    def recent_streams(self, limit: int | None, before: int | None, forks: bool,
                       before_id: str | None = None) -> list[StreamRow]:
        # Ids are COLLATE "C": compared as UTF-8 bytes, as SQLite compares them. The bound on
        # `last_position` alone is what `streams_activity` is scanned from; the ties after it
        # are sorted by id as they are read (an incremental sort). The rows of `_UNLISTED`
        # are read in the same round trip: every page reaches them, as the index keeps no
        # other place for them.
        where, bounds = ("TRUE", ()) if before is None else ("last_position < %s", (before,)) if before_id is None else (
            "last_position <= %s AND (last_position < %s OR id < %s)", (before, before, before_id))
        roots = "" if forks else " AND parent_id IS NULL"
        rows = self.conn.execute(
            f"{_UNLISTED.format(roots=roots)} UNION ALL (SELECT {STREAM_COLUMNS} FROM streams WHERE {where}{roots} "
            "ORDER BY last_position DESC, id DESC LIMIT %s)",
            (*bounds, limit),
        ).fetchall()
        return [_new(StreamRow, r) for r in rows]

    @_absent(lambda: None)
    @_translated
    def last_title_event(self, stream_id: str, lo: int, hi: int | None) -> EventRow | None:
        row = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = %s AND "offset" >= %s AND "offset" < %s '
            f'AND type IN {_TITLE_TYPES} ORDER BY "offset" DESC LIMIT 1',
            (stream_id, lo, NO_BOUND if hi is None else hi),
        ).fetchone()
        return _new(EventRow, row) if row else None

    @_absent(lambda: 0)
    @_translated
    def count_type(self, stream_id: str, lo: int, hi: int | None, type_: str) -> int:
        row = self.conn.execute(
            'SELECT count(*) FROM events WHERE stream_id = %s AND "offset" >= %s AND "offset" < %s '
            + ("AND (type = %s OR type_name = %s)" if type_ in TYPE_CODES else "AND type_name = %s"),  # see packing.TYPE_CODES
            (stream_id, lo, NO_BOUND if hi is None else hi, *((TYPE_CODES[type_], type_) if type_ in TYPE_CODES else (type_,))),
        ).fetchone()
        return int(row[0]) if row else 0

    @_absent(list)
    @_translated
    def subtree(self, stream_id: str) -> list[StreamRow]:
        columns = ", ".join("s." + c.strip() for c in STREAM_COLUMNS.split(","))
        rows = self.conn.execute(
            f"""WITH RECURSIVE tree(id) AS (
                    SELECT %s::text COLLATE "C" UNION SELECT s.id FROM streams s JOIN tree ON s.parent_id = tree.id)
                SELECT {columns} FROM tree JOIN streams s ON s.id = tree.id ORDER BY s.created_position, s.id""",
            (stream_id,),
        ).fetchall()
        return [_new(StreamRow, r) for r in rows]

    def forks_at(self, stream_id: str, lo: int, hi: int, limit: int) -> list[tuple[StreamRow, int]]:
        columns = ", ".join("s." + c.strip() for c in STREAM_COLUMNS.split(","))
        rows = self.conn.execute(forks_at_query(columns, "%s"), (stream_id, lo, hi, limit)).fetchall()
        return [(_new(StreamRow, r[:-1]), r[-1]) for r in rows]

    @_queueing
    def insert_stream(self, row: StreamRow) -> None:
        self._queued.append((_INSERT_STREAM, row))
        self._roots[row.id] = row.root_id

    @_queueing
    def update_head(self, stream_id: str, head: int, head_hash: str, facts: str | None, first_message: int | None,
                    last_position: int, previous_position: Any = None) -> None:
        values = (head, head_hash, facts, first_message, last_position, stream_id)
        if self._queued and self._queued[-1][0] is _INSERT_EVENT and self._queued[-1][1][2] == stream_id:
            self._queued[-1] = (_APPEND_ONE, (*self._queued[-1][1], *values))  # one statement, not two
        else:
            self._queued.append((_UPDATE_HEAD, values))

    # -- events ------------------------------------------------------------------------------

    @_translated
    def next_position(self, count: int = 1) -> int:
        """Take `count` positions for this transaction (see the module doc); the first of them."""
        return self._reserve(count)

    @_queueing
    def insert_events(self, rows: Iterable[EventValues]) -> None:
        """One row is queued (sent with the commit); more go by COPY, converted and written
        `_COPY_CHUNK` at a time as the store makes them (`backend.Backend.insert_events`), and
        each of the driver's 32 KiB blocks is sent at once (`flush_threshold=0`; the driver's
        default waits for 1 MiB): the server inserts the first rows while the store hashes
        the rest. Batches of 1,000 messages, 2 cores, three runs each against the code that
        hashed every row before the COPY began: 27.1-32.7 µs an event against 34.7-36.6 (raw
        psycopg COPY in the same runs: 16.9-20.9 µs); the server's wait at the end of the COPY
        2.3-3.6 ms against 5.7-6.4. Flushing each block made no steady difference to raw COPY,
        whose rows are made faster than the server inserts them."""
        pending = iter(rows)
        first = list(itertools.islice(pending, _COPY_CHUNK))
        if not first:
            return
        stream_id = first[0][1]
        root = self._roots.get(stream_id)
        if root is None:
            self._flush()
            found = self.conn.execute("SELECT root_id FROM streams WHERE id = %s", (stream_id,)).fetchone()
            root = str(found[0]) if found else stream_id
        if self._reserved == 0:  # positions chosen by the caller (a restore keeps an export's)
            first += pending
            self._flush()
            self.conn.execute(
                f"SELECT pg_advisory_xact_lock({_ORDER}), pg_current_xact_id(), "
                "setval('event_positions', greatest(%s, (SELECT last_value FROM event_positions)))",
                (max(row[0] for row in first),),
            )
        if len(first) == 1 and self._in_transaction:
            self._queued.append((_INSERT_EVENT, _stored(root, first[0])))
            return
        self._flush()
        with self.conn.cursor() as cursor, cursor.copy(f"COPY events ({STORED_COLUMNS}) FROM STDIN",
                                                       writer=LibpqWriter(cursor, flush_threshold=0)) as copy:
            write = copy.write_row
            chunk = first
            while chunk:
                for stored in _stored_rows(root, chunk):
                    write(stored)
                chunk = list(itertools.islice(pending, _COPY_CHUNK))

    @_translated
    def events_by_id(self, event_ids: Sequence[str]) -> list[EventRow]:
        # An id stored as its text's bytes where its packed bytes belong reads as the same id (see
        # the SQLite backend's): looked for both ways.
        ids = [spelled for event_id in event_ids for spelled in {stored_id(event_id), _bytes(event_id, 16)}]
        rows = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id = ANY(%s)", (ids,)).fetchall()
        return [_new(EventRow, r) for r in rows]

    @_translated
    def fork_points(self, created_after: int, upto: int) -> Iterator[tuple[str, int, int, str | bytes, str | None]]:
        return iter(self.conn.execute(
            'SELECT s.parent_id, e."offset", e.position, '
            f"{_hash('e.')}, "
            "e.pending FROM streams s "
            'JOIN events e ON e.stream_id = s.parent_id AND e."offset" = s.parent_offset - 1 '
            f"WHERE s.created_position > %s AND e.position <= %s AND e.{_VISIBLE}", (created_after, upto)).fetchall())

    @_absent(lambda: None)
    @_translated
    def event_at(self, stream_id: str, offset: int) -> EventRow | None:
        row = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = %s AND "offset" = %s', (stream_id, offset)
        ).fetchone()
        return _new(EventRow, row) if row else None

    @_translated
    def event_at_position(self, position: int) -> EventRow | None:
        row = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE position = %s", (position,)).fetchone()
        return _new(EventRow, row) if row else None

    @_absent(lambda: iter(()))
    def range(self, stream_id: str, lo: int, hi: int | None) -> Iterator[EventRow]:
        return self._paged(
            f'SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = %s AND "offset" < %s AND "offset" > %s '
            'ORDER BY "offset" LIMIT %s',
            (stream_id, NO_BOUND if hi is None else hi, lo - 1, None), EventRow, 2,
        )

    @_absent(lambda: iter(()))
    def range_data(self, stream_id: str, lo: int, hi: int | None) -> Iterator[DataRow]:
        return self._paged(
            f'SELECT "offset", {_TYPE}, schema_version, data FROM events WHERE stream_id = %s AND "offset" < %s '
            'AND "offset" > %s ORDER BY "offset" LIMIT %s',
            (stream_id, NO_BOUND if hi is None else hi, lo - 1, None), tuple, 0,
        )

    def all_events(self, after: int, limit: int | None, whole: bool = False) -> Iterator[EventRow]:
        """Every visible event after `after`, in position order: only those below the snapshot's
        `xmin`, so one committed late with a lower position is never skipped (module doc).

        `whole` inside `read_transaction`: every event its snapshot holds, the one snapshot the
        streams' rows are read in too (`verify`, a backup). Cut at `xmin` there, the events of
        every transaction that committed while any other was open (in any database of the
        server) were missing beside their streams' heads: verify failed, and a backup left
        them out. (Not for a tail: a lower position may still commit after them.)"""
        visible = "true" if whole and self._snapshot else _VISIBLE
        return self._paged(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE {visible} AND position > %s ORDER BY position LIMIT %s",
            (after, limit), EventRow, 0,
        )

    def stored_events(self, after: int = 0, upto: int | None = None) -> Iterator[EventRow]:
        """`all_events`: the text forms (this backend decodes in SQL)."""
        rows = self.all_events(after, None, whole=True)
        return rows if upto is None else itertools.takewhile(lambda row: bool(row.position <= upto), rows)

    @_translated
    def redact(self, position: int, data: str, redacted_by: int) -> None:
        # The digest of what is erased stays (only redacted rows keep one).
        self.conn.execute("UPDATE events SET data_digest = coalesce(data_digest, sha256(convert_to(data, 'UTF8'))), "
                          "data = %s, redacted_by = %s WHERE position = %s", (data, redacted_by, position))

    @_translated
    def set_facts(self, position: int, facts: str | None) -> None:
        self.conn.execute("UPDATE events SET pending = %s WHERE position = %s", (facts, position))

    @_absent(lambda: None)
    @_translated
    def redacted_since(self, stream_id: str, lo: int, hi: int | None, after: int) -> tuple[int, int] | None:
        bounds = (stream_id, lo, NO_BOUND if hi is None else hi)
        if after > 0:
            row = self.conn.execute(
                f"SELECT t.position, r.position FROM events r JOIN events t ON t.position = ({_jsonb('r.data')}->>'position')::bigint "
                f"WHERE r.position > %s AND r.type = {TYPE_CODES['event.redacted']} AND t.stream_id = %s AND t.\"offset\" >= %s "
                'AND t."offset" < %s LIMIT 1',
                (after, *bounds),
            ).fetchone()
        else:
            row = self.conn.execute(
                'SELECT position, redacted_by FROM events WHERE stream_id = %s AND "offset" >= %s AND "offset" < %s '
                "AND redacted_by IS NOT NULL LIMIT 1",
                bounds,
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    @_translated
    def last_position(self) -> int:
        """The highest visible position (0 for an empty log): none below it can still appear."""
        row = self.conn.execute(f"SELECT max(position) FROM events WHERE {_VISIBLE}").fetchone()
        return int(row[0] or 0) if row else 0

    def first_position(self) -> int | None:
        row = self.conn.execute("SELECT min(position) FROM events").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @_translated
    def sequence_position(self) -> int | None:
        """None for a role that may not read the sequence (a reader granted SELECT on the tables only)."""
        allowed = self.conn.execute(b"SELECT has_sequence_privilege('event_positions', 'SELECT')").fetchone()
        if not (allowed and allowed[0]):
            return None
        row = self.conn.execute(b"SELECT last_value + is_called::int FROM event_positions").fetchone()
        return int(row[0]) if row else None

    @_translated
    def unseen_position(self) -> int | None:
        """A stored row's transaction committed before the statement's snapshot, so its id is
        finished in that snapshot, unless the id was altered: past every transaction given
        yet, or one still running, `_VISIBLE` keeps the row from every tail."""
        row = self.conn.execute(b"SELECT min(position) FROM events WHERE txid >= pg_snapshot_xmin(pg_current_snapshot()) "
                                b"AND NOT pg_visible_in_snapshot(txid, pg_current_snapshot())").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def hashes(self, upto: int, after: int = 0) -> Iterator[tuple[int, str]]:
        return self._paged(
            f"SELECT position, {_hash()} "
            f"FROM events WHERE {_VISIBLE} AND position <= %s AND position > %s "
            "ORDER BY position LIMIT %s",
            (upto, after, None), tuple, 0,
        )

    def settle_wal(self) -> None:
        """Nothing: the server checkpoints its own WAL."""

    @_translated
    def truncate_wal(self) -> None:
        """Vacuum the tables a redaction rewrites, so the old row versions (the erased payload)
        are removed from the tables' pages. PostgreSQL's WAL and its archive keep them until
        the server recycles them: that is the server's retention, not threadlog's."""
        if self._in_transaction:
            return
        # A transaction of this database older than the last redaction (a snapshot taken before it
        # committed, or an id taken before it) still sees the old row version, and VACUUM leaves
        # it in the table's file: redact and purge said all was done. Asked before the vacuum: one
        # that ends while it runs has already kept the old version through it. (The server's own test,
        # the horizon VACUUM uses, from the sessions' `backend_xmin` and `backend_xid`. An
        # autovacuum worker shows a `backend_xmin` too, which VACUUM's horizon leaves out: counted,
        # a redaction while one ran was reported as kept.)
        # A transaction prepared for two-phase commit holds it up too, and no session shows it.
        held = self.conn.execute(
            f"WITH r AS (SELECT txid FROM events WHERE type = {TYPE_CODES['event.redacted']} ORDER BY position DESC LIMIT 1), "
            "x AS (SELECT ((txid::text::bigint % 4294967296)::text)::xid AS xid FROM r) "
            "SELECT (SELECT count(*) FROM pg_stat_activity a, x WHERE a.datname = current_database() "
            "AND a.pid <> pg_backend_pid() AND a.backend_type <> 'autovacuum worker' "
            "AND ((a.backend_xmin IS NOT NULL AND age(a.backend_xmin) >= age(x.xid)) "
            "OR (a.backend_xid IS NOT NULL AND age(a.backend_xid) > age(x.xid)))), "
            "(SELECT count(*) FROM pg_prepared_xacts p, x WHERE p.database = current_database() "
            "AND age(p.transaction) > age(x.xid))"
        ).fetchone()
        open_elsewhere, prepared = held if held is not None else (0, 0)
        kept = open_elsewhere + prepared
        # ANALYZE too: the server's own (autovacuum's, once a table has grown) sampled the rows'
        # values into `pg_statistic`, where any role that may read the table reads them (`pg_stats`),
        # an erased text or word among them. This one samples only the rows as they are now.
        self.conn.execute(b"VACUUM (ANALYZE) events, snapshots, search_docs")
        unindexed = self.conn.execute(b"SELECT position FROM search_progress WHERE name = 'unindexed'").fetchone()
        if unindexed is not None:  # (`unindex` notes it)
            # A GIN index never removes a word from its tree once no row holds it (VACUUM only
            # empties its list of rows), and a vacuumed page keeps a removed row's bytes in
            # its free space: the erased text would stay in both files. VACUUM FULL writes the
            # table and its indexes anew, from the live rows only; its cost is a rebuild of
            # the index, paid only by a redaction of an indexed event (as FTS5's 'optimize'
            # on SQLite). A transaction open elsewhere since before the redaction keeps the
            # removed rows alive, and so in the new files too, until it ends: purge() again.
            self.conn.execute(b"VACUUM FULL search_docs")
            if not kept:  # else the note stays: the purge() asked for below writes the index anew again
                # (A redaction's note committed meanwhile names another position, and stays.)
                self.conn.execute("DELETE FROM search_progress WHERE name = 'unindexed' AND position = %s", unindexed)
        if kept:
            holders = [f"{open_elsewhere} transaction(s) open elsewhere"] if open_elsewhere else []
            if prepared:  # ended only by COMMIT PREPARED or ROLLBACK PREPARED, from any session
                holders.append(f"{prepared} prepared transaction(s) (pg_prepared_xacts)")
            raise pages_kept(self.path, f"{' and '.join(holders)} since before the last redaction still see "
                             "the old row version of its event, so it stays in the table's file",
                             "they end" if not prepared else "they end (a prepared one by COMMIT or ROLLBACK PREPARED)")

    @_translated
    def counts(self) -> tuple[int, int]:
        row = self.conn.execute("SELECT (SELECT count(*) FROM streams), (SELECT count(*) FROM events)").fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    @_translated
    def orphan_position(self) -> int | None:
        row = self.conn.execute(
            "SELECT min(position) FROM events e WHERE NOT EXISTS (SELECT 1 FROM streams s WHERE s.id = e.stream_id)"
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def misfiled_stream(self, ids: Collection[str] | None = None) -> tuple[str, Any, Any] | None:
        """None: streams are listed by `last_position` itself (`streams_activity`). An update
        that leaves an indexed column's value as it was is HOT here whatever its SET names,
        so a coarser key, as SQLite's `recency`, would spare no index write."""
        return None

    def damaged(self, *, beside: bool = False) -> str | None:
        """None: the server checks its own pages (checksums, when the cluster has them); an
        index's agreement with its table is `amcheck`'s, an extension threadlog does not install."""
        return None

    # -- the search index (tsvector, GIN) ------------------------------------------------------------
    #
    # `search_docs.tsv` is generated from the text's words (`_words`, split and folded as FTS5's
    # unicode61 does) with the `simple` configuration (no stemming, no stop words). Ranking is `ts_rank`,
    # returned negated so that lower is better, as BM25 scores are. The index's text, tool
    # names and queries hold a space where an event holds U+0000 (`_indexable`).

    @_index_call
    def index_position(self) -> int:
        """Inside a write transaction (a catch-up reads it first) the index's lock is taken before
        the read, and held until commit: see `_INDEX`."""
        if self._in_transaction:
            self.conn.execute(f"SELECT pg_advisory_xact_lock({_INDEX})".encode())
        row = self.conn.execute("SELECT position FROM search_progress WHERE name = 'index'").fetchone()
        return int(row[0]) if row else 0

    @_index_call
    def index_last_docid(self) -> int:
        """The newest document's id (-1: none). An index holding none that wrote some (emptied by
        raw SQL: a search found nothing) is refused here, a lookup of the key's ends; documents
        removed below the newest, or copied, need a count of them (`check_index_count`)."""
        newest, counted = self.conn.execute(
            b"SELECT (SELECT max(docid) FROM search_docs), (SELECT position FROM search_progress WHERE name = 'documents')"
        ).fetchone() or (None, None)
        if newest is None and counted:
            raise documents_miscounted(counted, 0)
        return -1 if newest is None else int(newest)

    @_index_call
    def check_index_count(self) -> None:
        """Refuse an index that holds another number of documents than it wrote (`documents` in
        `search_progress`): documents deleted by raw SQL (the newest left in place) were silently
        no hits, and a row copied was one hit hidden behind another. The count reads every
        document's key (an index-only scan: about 80 ms a million documents), too much for each
        search: `threadlog index` asks it. An index an earlier release built has no count until
        its next catch-up writes one (`index_docs`)."""
        held, counted = self.conn.execute(
            b"SELECT (SELECT count(*) FROM search_docs), (SELECT position FROM search_progress WHERE name = 'documents')"
        ).fetchone() or (0, None)
        if counted is not None and held != counted:
            raise documents_miscounted(counted, held)

    @_index_call
    def index_docs(self, docs: Sequence[DocValues], upto: int) -> None:
        written = 0
        if docs:
            with self.conn.cursor() as cursor, cursor.copy(
                'COPY search_docs (docid, position, stream_id, "offset", kind, role, tool, text) FROM STDIN'
            ) as copy:
                for doc in _tsvector_sized(docs):
                    copy.write_row((*doc[:6], _indexable(doc[6]), _indexable(doc[7])))
                    written += 1
        self.conn.execute("UPDATE search_progress SET position = %s WHERE name = 'index'", (upto,))
        # The count `check_index_count` compares (`position` of its `documents` row holds a
        # count, not a position); an index with none (an earlier release's, or one just made)
        # is counted whole, once.
        if not self.conn.execute("UPDATE search_progress SET position = position + %s WHERE name = 'documents'", (written,)).rowcount:
            self.conn.execute(b"INSERT INTO search_progress SELECT 'documents', count(*) FROM search_docs")

    @_index_call
    def unindex(self, position: int) -> int:
        bounds = (position * DOC_PARTS, (position + 1) * DOC_PARTS)
        self.conn.execute(f"SELECT pg_advisory_xact_lock({_INDEX})".encode())
        removed = self.conn.execute("DELETE FROM search_docs WHERE docid >= %s AND docid < %s", bounds).rowcount
        if removed:
            self.conn.execute("UPDATE search_progress SET position = position - %s WHERE name = 'documents'", (removed,))
            # The next purge writes the index anew (`truncate_wal`), whichever connection runs it:
            # noted in the database, it was this connection's alone, and a redaction with
            # purge=False on one thread (or process) left the erased words in the index's files
            # after purge() on another.
            self.conn.execute("INSERT INTO search_progress VALUES ('unindexed', %s) "
                              "ON CONFLICT (name) DO UPDATE SET position = excluded.position", (position,))
        return removed

    @_index_call
    def clear_index(self) -> None:
        """Empty the index's tables, which keeps what was granted on them (a role that may only
        read searches them). Tables that raw SQL dropped or changed (`_INDEX_SHAPE`) are made
        again instead, as SQLite's always are, so a rebuild mends them; and the progress row is
        written anew, whatever became of it (removed, the rebuild left the index saying it
        covered nothing, and every search asked for another rebuild)."""
        self.conn.execute(f"SELECT pg_advisory_xact_lock({_INDEX})".encode())
        if [row[0] for row in self.conn.execute(_INDEX_SHAPE_SQL.encode())] == _INDEX_SHAPE:
            self.conn.execute(b"DELETE FROM search_docs")
            self.conn.execute(b"DELETE FROM search_progress WHERE name IN ('index', 'documents')")
            self.conn.execute(b"INSERT INTO search_progress VALUES ('index', 0)")
            return
        self.conn.execute(b"DROP TABLE IF EXISTS search_docs, search_progress")
        for statement in _search_tables(self._folding):
            self.conn.execute(statement.encode())

    @_index_call
    def search(self, query: str, match: str, scope: Sequence[Scope] | None, role: str | None, tool: str | None,
               limit: int) -> list[HitRow]:
        """See `Backend.search`. `"query"` is PostgreSQL's web search syntax (quotes, `or`,
        `-word`), which takes any text; `"words"` all the words; `"any"` any of them.

        No hit has a snippet: the search projection cuts one from the text. `ts_headline`'s
        fragment was no part of the text to point at: it drops markup tags, marks no cut, and
        begins at the match (of "message number 9998 about the fjord" it gave "**9998** about
        the fjord"), so a fragment read as the whole text."""
        self.index_last_docid()  # not emptied
        query, role, tool = _indexable(query), _indexable(role), _indexable(tool)
        words = query_words(query)
        if match == "query":
            tsquery, args = f"websearch_to_tsquery('simple', {_query_words('%s', self._folding)})", [query]
        else:
            if not words:
                return []
            # Each word a phrase of its parts, as SQLite's quoted words: `foo.py`, `foo` then `py`;
            # its first `_PHRASE_PARTS` parts (see there).
            joiner = " || " if match == "any" else " && "
            phrase = f"phraseto_tsquery('simple', substring({_words('%s', self._folding)} from '{_FIRST_PARTS}'))"
            tsquery, args = "(" + joiner.join([phrase] * len(words)) + ")", list(words)
        filters = hit_filters("%s", _SCOPE_ROWS, scope, role, tool)
        if filters is None:
            return []
        where, params = ["d.tsv @@ q.q", *filters.where], [*filters.with_params, *args, *filters.params]
        # One hit a document: a text indexed in `doc_pieces` matched once a piece, and a long
        # event filled the hits with copies of itself (its best piece is kept). The pieces name
        # no document of their own: those of an event alike in kind, role and tool are one
        # document up to the next gap in its parts (`_DOCUMENT`), where another begins.
        tables = with_clause(filters, f"q AS (SELECT {tsquery} AS q)")
        rows = self.conn.execute(
            f"{tables}, best AS (SELECT DISTINCT ON (d.position, d.kind, d.role, d.tool, {_DOCUMENT}) d.docid, "
            f"-ts_rank(d.tsv, q.q) AS score FROM q, search_docs d WHERE {' AND '.join(where)} "
            f"ORDER BY d.position, d.kind, d.role, d.tool, {_DOCUMENT}, score, d.docid) "
            'SELECT d.position, d.stream_id, d."offset", d.kind, d.role, d.tool, '
            f"coalesce({_jsonb('e.meta')}->>'occurred_at', {_time('e.')}), d.text, NULL, b.score "
            "FROM best b JOIN search_docs d ON d.docid = b.docid LEFT JOIN events e ON e.position = d.position "
            "ORDER BY b.score, d.docid LIMIT %s",
            (*params, limit),
        ).fetchall()
        return [_new(HitRow, (*row[:9], float(row[9]))) for row in rows]

    @_index_call
    def index_tools(self, scope: Sequence[Scope] | None) -> list[str]:
        query = tools_query("%s", _SCOPE_ROWS, scope)
        return [] if query is None else [row[0] for row in self.conn.execute(*query)]

    @_translated
    def triggers(self) -> list[str]:
        """User triggers and rules on threadlog's tables (threadlog creates none). A table raw SQL
        dropped has none: a search table gone failed `verify`, which never reads the index."""
        rows = self.conn.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN (SELECT to_regclass(t) FROM unnest(%s::text[]) t) "
            "UNION SELECT rulename FROM pg_rules WHERE schemaname = current_schema() AND tablename = ANY(%s) ORDER BY 1",
            (list(_TABLES), list(_TABLES)),
        ).fetchall()
        return [str(r[0]) for r in rows]

    # -- snapshots (a cache) -------------------------------------------------------------------

    @_translated
    def save_snapshot(self, projection: str, version: int, stream_id: str, offset: int, state: str) -> None:
        self.conn.execute(
            'INSERT INTO snapshots (projection, version, stream_id, "offset", state) VALUES (%s,%s,%s,%s,%s) '
            'ON CONFLICT (projection, version, stream_id, "offset") DO UPDATE SET state = EXCLUDED.state',
            (projection, version, stream_id, offset, state),
        )

    @_absent(lambda: None)
    @_translated
    def nearest_snapshot(self, projection: str, version: int, stream_id: str, lo: int, hi: int) -> SnapshotRow | None:
        row = self.conn.execute(
            'SELECT "offset", state FROM snapshots WHERE projection = %s AND version = %s AND stream_id = %s '
            'AND "offset" >= %s AND "offset" <= %s ORDER BY "offset" DESC LIMIT 1',
            (projection, version, stream_id, lo, hi),
        ).fetchone()
        return SnapshotRow(int(row[0]), str(row[1])) if row else None

    @_absent(lambda: 0)
    @_translated
    def drop_snapshots(self, projection: str | None = None, stream_id: str | None = None) -> int:
        return self.conn.execute(
            "DELETE FROM snapshots WHERE (%s::text IS NULL OR projection = %s) AND (%s::text IS NULL OR stream_id = %s)",
            (projection, projection, stream_id, stream_id),
        ).rowcount

    @_translated
    def count_snapshots(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM snapshots").fetchone()
        return int(row[0]) if row else 0

    @_translated
    def snapshots(self) -> Iterator[StoredSnapshot]:
        rows = self.conn.execute('SELECT projection, version, stream_id, "offset", state FROM snapshots '
                                 'ORDER BY projection, version, stream_id, "offset"').fetchall()
        return (StoredSnapshot(*row) for row in rows)

    # -- for tests and operators --------------------------------------------------------------

    @_translated
    def dump(self) -> list[str]:
        """Every row of every threadlog table, as text, in a stable order (equal dumps: no change)."""
        out: list[str] = []
        for table in _TABLES:
            query = sql.SQL("SELECT t::text FROM {} t ORDER BY 1").format(sql.Identifier(table))
            out += [f"{table}: {r[0]}" for r in self.conn.execute(query).fetchall()]
        return out  # not the positions sequence: a refused write may use positions up (never reused)

