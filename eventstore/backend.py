"""The storage interface: what `Store` needs from a database, and the rows it gets back.

`Store` holds the rules (validation, expected versions, hash chains, fork checks); a
backend only keeps and finds rows. Everything above this interface reads rows by name
(`StreamRow`, `EventRow`), never by position, and knows nothing of the database behind it.

The contract every backend keeps (tests/test_contract.py runs it against each one):

- Writers are serialised from the start of a write transaction (`transaction()`), not from
  its first write: the head a writer reads inside it cannot change before it commits.
- Positions are never reused, even after a rollback or a deleted row, and a reader tailing
  `all_events(after=p)` never sees a position appear below one it has already seen (SQLite
  assigns them in commit order; PostgreSQL returns only a prefix no writer can still add to).
- `data` and `meta` are stored and returned byte-exact (they are hashed as text).
- Only `StoreError` (and its subclasses) leaves a backend: driver errors are translated
  at the boundary, on reads and while iterating over returned rows too.
- A failed or refused transaction leaves the database exactly as it was.
"""

from __future__ import annotations

import json
import re

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .claims import Claim


def forks_at_query(columns: str, mark: str) -> str:
    """`Backend.forks_at`'s query, `columns` of the streams table as `s`, `mark` the driver's
    placeholder. The forks are numbered by their ids alone, then joined for the rows kept:
    numbering whole rows sorted every column of 100,000 forks (0.31 s, against 0.18)."""
    return f"""SELECT {columns}, point.total FROM (
                   SELECT id, ROW_NUMBER() OVER (PARTITION BY parent_offset ORDER BY created_position, id) AS n,
                       COUNT(*) OVER (PARTITION BY parent_offset) AS total
                   FROM streams WHERE parent_id = {mark} AND parent_offset > {mark} AND parent_offset <= {mark}) AS point
               JOIN streams s ON s.id = point.id WHERE point.n <= {mark} ORDER BY s.parent_offset, s.created_position, s.id"""


def prefix_query(mark: str, prefix: str) -> tuple[str, tuple[str, ...]]:
    """The condition on `id` (and its parameters, `mark` the driver's placeholder) that holds
    for the ids starting with `prefix`, as a range of the primary key: from `prefix` to the
    first text past every id that starts with it (its last character, after those that are
    U+10FFFF, the greatest, one code point on). `prefix + U+10FFFF` as the end, as before, left
    out ids holding U+10FFFF just after the prefix; an empty prefix, or one of U+10FFFF
    alone, has no end. The stores compare ids by code point (SQLite's BINARY, "C")."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return f"id >= {mark}", (prefix,)
    following = ord(stem[-1]) + 1
    end = stem[:-1] + chr(0xE000 if 0xD800 <= following < 0xE000 else following)  # past the surrogates UTF-8 cannot hold
    return f"id >= {mark} AND id < {mark}", (prefix, end)


def chain_order(rows: Iterable[StreamRow], stream_id: str) -> list[StreamRow]:
    """The rows of `stream_id`'s ancestry, read in any order, each once, from the stream up to its
    root: each row's parent follows it.

    The recursive query that reads them keeps each stream once (UNION, not UNION ALL): a stream
    row whose parent_id names a stream forked from it (a cycle; only raw SQL writes one) would
    otherwise make it read forever. The list ends where its last row's parent is one already in
    it, for the reader to name (`recorded.cyclic`).
    """
    by_id = {row.id: row for row in rows}
    out: list[StreamRow] = []
    row = by_id.pop(stream_id, None)
    while row is not None:
        out.append(row)
        row = None if row.parent_id is None else by_id.pop(row.parent_id, None)
    return out


class StreamRow(NamedTuple):
    """One stream (thread or fork) as stored."""

    id: str
    parent_id: str | None
    parent_offset: int | None  # the fork point: how many parent events the fork inherits
    root_id: str
    depth: int
    head: int  # the logical length: the offset the next event gets
    created_position: int
    kind: str
    head_hash: str
    facts: str | None  # what is pending at the head (`facts.Facts` as JSON), None if nothing
    first_message_offset: int | None
    last_position: int  # the position of the stream's latest own event: its last activity


class EventRow(NamedTuple):
    """One event as stored: `data` and `meta` are the canonical JSON text that was hashed."""

    position: int
    stream_id: str
    offset: int
    event_id: str
    type: str
    schema_version: int
    data: str
    meta: str
    recorded_at: str
    data_digest: str | None  # None: the digest of `data` (see `EventValues`); `digest_of` gives it either way
    hash: str
    facts: str | None  # what is pending after this event (stored in the column `pending`)
    redacted_by: int | None = None  # the position of the `event.redacted` that erased `data`


# An event to insert: `EventRow`'s fields, in the same order, as a plain tuple. Every append
# builds one per event and the SQLite driver binds a plain tuple ~1 µs faster than a named
# one (measured; a batch of 1,000 runs near its benchmark target), so the write path passes
# these. Everything read back is an `EventRow`.
#
# Its `data_digest` is None when it is the digest of the row's `data` (every appended event):
# a backend may then store no digest (SQLite stores none); a str is a digest the data does not
# give back (a redacted row's, a restored redaction's skeleton's), which must be kept. Read
# back, `EventRow.data_digest` is None the same way: whoever needs it computes it from `data`
# (`integrity.digest_of`), and `verify`, which hashes the data anyway, does so only once.
EventValues = tuple[int, str, int, str, str, int, str, str, str, str | None, str, str | None, int | None]


class SnapshotRow(NamedTuple):
    """A cached projection state: after the first `offset` events, as JSON text."""

    offset: int
    state: str


# A document of the search index, as inserted: (docid, position, stream_id, offset, kind, role,
# tool, text). `docid` is the event's position times `DOC_PARTS`, plus the part's number, so
# the parts of one event are one docid range, found without an index on position.
DOC_PARTS = 1 << 16
# The last position whose documents' ids fit a 64-bit integer: the highest a restore keeps.
MAX_INDEXED_POSITION = 2**63 // DOC_PARTS - 1
DocValues = tuple[int, int, str, int, str, str | None, str | None, str]

# The most characters of one search document a backend may be unable to index whole: a
# PostgreSQL tsvector holds at most 1 MB (its words, 2 bytes a place they are at, and 4 of
# bookkeeping each), and 100,000 characters, 400 kB of UTF-8 at most, stay under that
# whatever the words. That backend indexes a longer text as its `doc_pieces` (one 1.35 MB
# tool output failed every later search: the index could not catch up past it).
DOC_PIECE_CHARS = 100_000


# Up to the last character that is no letter or digit (words are runs of those), and the run
# of letters and digits a text starts with.
_TO_LAST_SEPARATOR = re.compile(r".*[\W_]", re.DOTALL)
_FIRST_WORD = re.compile(r"\A[^\W_]+")


def doc_pieces(text: str) -> Iterator[str]:
    """`text` in pieces of at most `DOC_PIECE_CHARS` characters, each cut after the last
    character of its second half that is no letter or digit, so that no word is cut in two
    (cut at whitespace only, minified JSON had the word at the 100,000th character found as
    its two halves); a text that short is one piece. A second half that is all one word is cut
    where it must be, and the rest of that word is left out: longer than any word PostgreSQL
    indexes (2,047 bytes), it made a word of its own."""
    whole = text
    while len(text) > DOC_PIECE_CHARS:
        found = _TO_LAST_SEPARATOR.match(text, DOC_PIECE_CHARS // 2, DOC_PIECE_CHARS)
        cut = DOC_PIECE_CHARS if found is None else found.end()
        yield text[:cut]
        text = text[cut:] if found is not None else _FIRST_WORD.sub("", text[cut:], count=1)
    if text or text is whole:
        yield text


# A scope for a search: (stream, lo, hi), the stream's own offsets lo..hi-1 (no bound if None).
Scope = tuple[str, int, int | None]

# An upper bound no offset reaches: one query shape whether or not a range is bounded.
NO_BOUND = 2**62


class HitFilters(NamedTuple):
    """The conditions on a search's documents as `d`: `where` (and `params`, bound in that
    order) keep its hits within a scope and to a role and a tool; `with_` is the scope's
    common table, `scope`, to name in the query's WITH first (its one parameter
    `with_params`), or None when the search has no scope."""

    with_: str | None
    with_params: list[Any]
    where: list[str]
    params: list[Any]


def hit_filters(mark: str, scope_rows: str, scope: Sequence[Scope] | None, role: str | None,
                tool: str | None) -> HitFilters | None:
    """The conditions that keep a search's hits within `scope` and to `role` and `tool` (None:
    any), `mark` the driver's placeholder and `scope_rows` the backend's query of the rows
    (stream_id, lo, hi) of the JSON array bound to its one placeholder; None when the scope is empty, so nothing
    can be found.

    The scope is one parameter, a JSON array of its ranges, read once into a table: as one
    condition a range, ORed, SQLite took 0.19 s to plan the query of a fork at the end of a
    chain of 1,000 forks and 1.9 s at 4,000 (its planner weighs each term against the others).
    A document of a stream out of scope is passed over by one lookup (`IN`); one of a stream
    in it is compared with its ranges (one a stream: a scope is a thread's history)."""
    where: list[str] = []
    params: list[Any] = []
    with_, with_params = None, []
    if scope is not None:
        if not scope:
            return None
        with_ = f"scope (stream_id, lo, hi) AS MATERIALIZED ({scope_rows})"
        # The ids as the text they are: a `\u` escape of one beyond ASCII is read in the database's
        # encoding, which SQL_ASCII cannot convert to ("conversion between UTF8 and SQL_ASCII").
        with_params = [json.dumps([[stream_id, lo, NO_BOUND if hi is None else hi] for stream_id, lo, hi in scope],
                                  ensure_ascii=False)]
        where.append('d.stream_id IN (SELECT stream_id FROM scope) AND EXISTS (SELECT 1 FROM scope s WHERE '
                     's.stream_id = d.stream_id AND d."offset" >= s.lo AND d."offset" < s.hi)')
    for column, value in (("role", role), ("tool", tool)):
        if value is not None:
            where.append(f"d.{column} = {mark}")
            params.append(value)
    return HitFilters(with_, with_params, where, params)


def with_clause(filters: HitFilters, *more: str) -> str:
    """`WITH` and the common tables of a search's query: the scope's (if any), then `more`."""
    tables = [table for table in (filters.with_, *more) if table is not None]
    return f"WITH {', '.join(tables)} " if tables else ""


def tools_query(mark: str, scope_rows: str, scope: Sequence[Scope] | None) -> tuple[str, list[Any]] | None:
    """`Backend.index_tools`' query and its parameters (`mark` the driver's placeholder,
    `scope_rows` as `hit_filters` takes it); None when the scope is empty."""
    filters = hit_filters(mark, scope_rows, scope, None, None)
    if filters is None:
        return None
    where = " AND ".join(["d.tool IS NOT NULL", *filters.where])
    return f"{with_clause(filters)}SELECT DISTINCT d.tool FROM search_docs d WHERE {where}", [*filters.with_params, *filters.params]


# The longest document whose snippet the engine makes (FTS5's `snippet`; PostgreSQL's backend
# makes none). Its cost grows with the square of the matches in one document: FTS5 took 76 s
# for one tool result of 100,000 matching lines. Past this, `HitRow.snippet` is None and the
# search projection cuts one from the text (`projections.search.window`).
ENGINE_SNIPPET_CHARS = 4096
# What an engine's snippet puts around each match: private-use characters (the projection
# cuts the snippet of a text holding either itself). The projection gives the hit's snippet as
# Markdown, `**` around each match and the text's own `*` escaped: marked with `**` by the
# engine, a text's own `**bold**` read as more marks.
SNIPPET_MARKS = ("\ue000", "\ue001")
# The words FTS5 reads as operators (in capitals): no word of a query to find or mark.
QUERY_OPERATORS = frozenset(("AND", "OR", "NOT", "NEAR"))


class HitRow(NamedTuple):
    """One document a search found, best first."""

    position: int
    stream_id: str
    offset: int
    kind: str  # text, tool_use, tool_result, summary, title
    role: str | None
    tool: str | None
    time: str  # when the event happened (an import's source time) or was recorded
    text: str  # the document's whole text
    snippet: str | None  # the text around the matches, matches between `**`; None past `ENGINE_SNIPPET_CHARS`, and on PostgreSQL
    score: float  # BM25: lower is better


class StoredSnapshot(NamedTuple):
    """One row of the snapshot cache, whole: what `verify` compares with the events."""

    projection: str
    version: int
    stream_id: str
    offset: int
    state: str


# What a fold reads of an event: (offset, type, schema_version, data as JSON text).
DataRow = tuple[int, str, int, str]


class Backend(Protocol):
    """The storage a `Store` runs on (see the module doc for the contract).

    `path` names the database in messages (a file path, `:memory:` or a URL).
    """

    path: str

    # -- lifecycle and transactions

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def transaction(self, reserves_twice: bool = False) -> AbstractContextManager[None]:
        """A write transaction: serialised from its start; commits on success, else rolls back.
        `reserves_twice`: it will take positions more than once (`fan_out`), which a backend
        whose writers take positions side by side must know from its first reservation."""
        ...

    def read_transaction(self) -> AbstractContextManager[None]:
        """One consistent view for several reads; writers are not blocked meanwhile."""
        ...

    def wait_for_writes(self) -> None:
        """Return once every write transaction that took a position before this call has ended
        (committed or rolled back): a read after it sees every event below a position already
        seen committed. Inside a transaction on this connection (a read view or a write) it
        raises `StoreError` (`errors.waiting_inside`), waiting for nothing."""
        ...

    def claim(self, name: str) -> Claim:
        """Take the claim `name` (checked: `claims.check_name`) on this database now, without
        waiting, or raise `Claimed`, naming the holder's process id when known, if another
        holds it (another process, or another claim of this one's). Held until released, and
        let go of by the operating system or the server when the process ends, however it
        ends (`eventstore/claims.py`)."""
        ...

    # -- streams

    def stream(self, stream_id: str) -> StreamRow | None: ...

    def stream_for_append(self, stream_id: str, count: int = 1) -> tuple[StreamRow | None, int]:
        """The stream's row (None if absent) and the first of the `count` positions the append
        will take; inside a write transaction."""
        ...

    def lock_stream(self, stream_id: str) -> None:
        """Hold `stream_id` against its other writers until this write transaction ends, as an
        append to it does, without taking positions: a write that decides from what it reads
        of the stream first (`fan_out`) reads it after this, and nothing changes it meanwhile."""
        ...

    def ancestry(self, stream_id: str, start: int = 0) -> list[StreamRow]:
        """The stream's row, then its parent's, up to the root ([] if the stream is absent); with
        `start`, only up to the first stream whose own events begin at or below that offset (the
        streams holding the thread's offsets from `start` on)."""
        ...

    def streams(self, stored: bool = False, part: tuple[int, bool] | None = None, tops: bool = False,
                strays: bool = False) -> Iterator[StreamRow]:
        """Every stream, in creation order, streamed (a full verify reads them in bounded memory).
        With `stored`, in the order the backend keeps them, read without sorting them, and the
        same order on every call inside one read transaction (a backend with no such order
        gives creation order). With `part` (mid, later), only the streams one part of a split
        verify starts: those created after position `mid` when `later`, else the others (those
        created at or before it, and those whose created_position is no position). With `tops`,
        only the streams at the top of a fork tree: roots, and forks whose parent's row is not in
        the file (only raw SQL deletes one), as `tree` shows them. With `strays`, only the forks
        whose parent is not a stream written before them (SQLite: a lower rowid; PostgreSQL: a
        lower created_position): those whose parent's row is gone, and at least one of each
        cycle of parents, as a fork is written after its parent (only raw SQL makes either). Each
        parent is looked up by its id; in a file no one altered, none is given."""
        ...

    def stream_starts(self) -> list[int]:
        """Every stream's created_position (those that are integers), ascending: where a full
        verify cuts a large log in two (`splitscan`)."""
        ...

    def streams_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Stream ids that start with `prefix`, in order, at most `limit` (through the id index)."""
        ...

    def streams_held(self, stream_ids: Collection[str]) -> set[str]:
        """Of `stream_ids`, those a stream row has, looked up together through the id index."""
        ...

    def streams_with_prefix_after(self, prefix: str, after: int) -> list[StreamRow]:
        """Streams whose id starts with `prefix` and whose latest own event is past position
        `after` (created or appended to since), in id order."""
        ...

    def recent_streams(self, limit: int | None, before: int | None, forks: bool,
                       before_id: str | None = None) -> list[StreamRow]:
        """Streams by latest activity, newest first, streams of one `last_position` by id, the
        highest first (ids compared as UTF-8 bytes): (`last_position`, `id`) descending, a
        total order. Only those with `last_position` < `before` when given, or with
        `before_id` too, those after (`before`, `before_id`) in that order (the threads tied
        at `before` that a page ending with `before_id` did not reach); roots only unless
        `forks`; at most `limit`. Reads about `limit` rows through an index, however many
        streams there are (SQLite's index holds a coarser key: at most 1,024 rows more, see
        `sqlite.RECENCY_SHIFT`). A stream whose `last_position` is no position (only raw SQL
        writes one) is returned too by every page that reaches where the index holds it,
        whatever the bound, for the reader to refuse by name."""
        ...

    def last_title_event(self, stream_id: str, lo: int, hi: int | None) -> EventRow | None:
        """The stream's own `thread.created` or `title.set` with the highest offset in lo..hi-1,
        found through an index (not a scan of the stream)."""
        ...

    def count_type(self, stream_id: str, lo: int, hi: int | None, type_: str) -> int:
        """How many of the stream's own events in lo..hi-1 have this type."""
        ...

    def subtree(self, stream_id: str) -> list[StreamRow]:
        """The stream and every stream forked from it at any depth, in creation order."""
        ...

    def forks_at(self, stream_id: str, lo: int, hi: int, limit: int) -> list[tuple[StreamRow, int]]:
        """The streams forked from `stream_id` itself at fork points lo < offset <= hi, at most
        `limit` at each point in creation order, each with how many were forked at its point."""
        ...

    def insert_stream(self, row: StreamRow) -> None: ...

    def update_head(self, stream_id: str, head: int, head_hash: str, facts: str | None, first_message: int | None,
                    last_position: int, previous_position: Any = None) -> None:
        """Move the stream's head after an insert; `previous_position` is the `last_position` the
        stream's row had (as read in this transaction), for a backend that writes what changed."""
        ...

    # -- events

    def next_position(self, count: int = 1) -> int:
        """The first of the `count` positions the next insert takes; inside a write transaction."""
        ...

    def insert_events(self, rows: Iterable[EventValues]) -> None:
        """Insert rows of one stream, in order. `rows` may be an iterator that makes each row
        as it is asked for (the store hashes a batch's rows one after another): a backend
        that sends rows to a server sends the first while the rest are made. Every row is
        asked for before this returns, or it raises."""
        ...

    def events_by_id(self, event_ids: Sequence[str]) -> list[EventRow]: ...

    def event_at(self, stream_id: str, offset: int) -> EventRow | None:
        """The stream's own event at `offset`, if it has one."""
        ...

    def event_at_position(self, position: int) -> EventRow | None: ...

    def fork_points(self, created_after: int, upto: int) -> Iterator[tuple[str, int, int, str | bytes, str | None]]:
        """For each fork created after position `created_after` whose parent holds the event
        the fork chains to (at offset `parent_offset - 1`) at a position <= `upto`: (parent id,
        that offset, the event's position, its stored hash (a `tl2:` one may be its 32 bytes),
        its stored pending facts). A full verify's later part reads its forks' points at once."""
        ...

    def range(self, stream_id: str, lo: int, hi: int | None) -> Iterator[EventRow]:
        """The stream's own events with lo <= offset < hi (no bound if None), in offset order."""
        ...

    def range_data(self, stream_id: str, lo: int, hi: int | None) -> Iterator[DataRow]:
        """Like `range`, but only what a fold needs."""
        ...

    def all_events(self, after: int, limit: int | None, whole: bool = False) -> Iterator[EventRow]:
        """Every event with position > `after`, in position order, at most `limit`: those no
        later commit can come before (what a reader tailing the log may resume after), or,
        `whole` inside `read_transaction`, every one its snapshot holds (a backup, a verify:
        read beside the streams' rows of the same snapshot)."""
        ...

    def stored_events(self, after: int = 0, upto: int | None = None) -> Iterator[tuple[Any, ...]]:
        """Every event with `after` < position <= `upto` (no bound: None) in position order as
        `packing.StoredValues`: `EventRow`'s fields, but an id, hash, digest, type or time may
        be in its compact form (`packing.unpack_row` gives the `EventRow`). For a full scan
        that decodes only what it reads (`verify`); a backend that decodes in SQL anyway may
        return the text forms."""
        ...

    def redact(self, position: int, data: str, redacted_by: int) -> None:
        """Replace an event's data with what its redaction left, pointing at the redaction."""
        ...

    def set_facts(self, position: int, facts: str | None) -> None:
        """Store what is pending after an event (a restore that folded them again)."""
        ...

    def redacted_since(self, stream_id: str, lo: int, hi: int | None, after: int) -> tuple[int, int] | None:
        """(position, redacted_by) of an event of `stream_id` with lo <= offset < hi redacted by
        an `event.redacted` at a position > `after`, or None."""
        ...

    def last_position(self) -> int:
        """The highest position in the log (0 when it is empty)."""
        ...

    def first_position(self) -> int | None:
        """The lowest position any row holds, visible or not (None when there is none): below 1
        only when a row was written outside threadlog, where no scan of positions reads it."""
        ...

    def sequence_position(self) -> int | None:
        """The position the next write would take, read outside any write, where the backend
        keeps it apart from the rows (PostgreSQL: its sequence), or None where it is the
        largest stored plus one (SQLite) or this user may not read it."""
        ...

    def unseen_position(self) -> int | None:
        """The lowest position of an event readers tailing the log (`all_events` outside a
        view, so `follow` and the search index) will never return, though it is stored, or
        None: on PostgreSQL one whose transaction id no transaction has finished (an edit
        outside threadlog); SQLite returns every row it holds, so None."""
        ...

    def hashes(self, upto: int, after: int = 0) -> Iterator[tuple[int, str]]:
        """(position, hash) of every event with `after` < position <= `upto`, in position order."""
        ...

    def truncate_wal(self) -> None:
        """Leave no superseded page readable outside the database's own pages (SQLite: checkpoint
        and truncate the write-ahead log); `StoreError` if another reader prevents it."""
        ...

    def settle_wal(self) -> None:
        """Copy the pages committed so far into the database file, waiting on nobody (SQLite's
        `PASSIVE` checkpoint; nothing elsewhere): after a write of many pages that the writes
        after it should not carry (`textindex.catch_up`)."""
        ...

    def counts(self) -> tuple[int, int]:
        """(streams, events)."""
        ...

    def orphan_position(self) -> int | None:
        """The lowest position of an event whose stream does not exist, if any."""
        ...

    def misfiled_stream(self, ids: Collection[str] | None = None) -> tuple[str, Any, Any] | None:
        """(id, last_position, key) of a stream (of `ids`, or any) whose stored listing key
        disagrees with its `last_position`, if the backend lists streams by a key of its own;
        `threads()` would list such a stream out of order."""
        ...

    def damaged(self, *, beside: bool = False) -> str | None:
        """What the engine's own check of its files' structure finds wrong first (an index whose
        entries disagree with its table: reads through it miss or misplace rows while every
        row's hash still holds), or None. A full read of the files.

        With `beside`, it reads through a connection of its own, so another thread may run it
        while this backend reads, and raises `ReadersHeldOff` if that connection cannot begin
        to read soon (a writer waiting on this backend's own read may hold new readers off):
        the caller then runs it without `beside`, in its own read."""
        ...

    # -- the search index (derived from the log; never truth)

    def index_position(self) -> int:
        """The last position the search index covers (0: none)."""
        ...

    def index_last_docid(self) -> int:
        """The highest docid the index holds (-1: none); through its primary key. Each search
        asks it: an index found altered, by what costs little to check, is refused
        (`altered_index`)."""
        ...

    def check_index_count(self) -> None:
        """Refuse (`altered_index`) an index holding another number of documents than it wrote
        (removed or copied by raw SQL), however much counting them costs."""
        ...

    def index_docs(self, docs: Sequence[DocValues], upto: int) -> None:
        """Add documents (in docid order, above every docid stored) and record that the index
        covers every position <= `upto`; inside a write transaction."""
        ...

    def unindex(self, position: int) -> int:
        """Remove an event's documents from the index leaving no copy of their text in the
        index's storage; returns how many were removed. Inside a write transaction."""
        ...

    def clear_index(self) -> None:
        """Empty the index (it then covers no position); inside a write transaction."""
        ...

    def search(self, query: str, match: str, scope: Sequence[Scope] | None, role: str | None, tool: str | None,
               limit: int) -> list[HitRow]:
        """Documents matching `query`, best first. `match="query"`: the backend's query syntax,
        taken as plain words (all of them) when it is not valid; `"words"`: plain words, all of
        them; `"any"`: any of the words (`query_words`). `scope`: only events in these ranges."""
        ...

    def index_tools(self, scope: Sequence[Scope] | None) -> list[str]:
        """The tool names the index's documents carry (calls and their results), each once, in
        no order; `scope`: only events in these ranges."""
        ...

    def triggers(self) -> list[str]:
        """The names of code stored in the database that runs on writes (SQLite triggers):
        threadlog creates none, so any is foreign."""
        ...

    # -- snapshots (a cache of projection states, never truth)

    def save_snapshot(self, projection: str, version: int, stream_id: str, offset: int, state: str) -> None: ...

    def nearest_snapshot(self, projection: str, version: int, stream_id: str, lo: int, hi: int) -> SnapshotRow | None:
        """The stream's snapshot with the highest offset in lo..hi, as (offset, state)."""
        ...

    def drop_snapshots(self, projection: str | None = None, stream_id: str | None = None) -> int: ...

    def count_snapshots(self) -> int: ...

    def snapshots(self) -> Iterator[StoredSnapshot]:
        """Every cached state, by projection, version, stream and offset."""
        ...


@runtime_checkable
class Reopens(Protocol):
    """A backend holding one connection that serves one thread at a time, which can open another
    like it: a `Store` made from it opens one for each other thread that calls it
    (`eventstore/connections.py`). Both of threadlog's do; another backend object is shared."""

    def another(self) -> Backend:
        """A new connection to the same database, with this one's settings."""
        ...


@runtime_checkable
class AppendAtHead(Protocol):
    """A backend that can append one event in one round trip, against a head the store already
    knows (PostgreSQL, where every round trip is a wait). A `Store` on such a backend remembers,
    per stream, the head its own last write left, chains the event onto it, and sends it here;
    the backend writes it only if that is still the stream's stored head. SQLite reads a head
    in its own process, under its own lock: it has nothing to save and does not offer this."""

    def append_at(self, row: EventValues, head: int, head_hash: str, new_head: int, new_hash: str, facts: str | None,
                  first_message: int | None) -> int | None:
        """In a transaction of its own: lock the stream (`row`'s), and if its stored head and
        head hash are still `head` and `head_hash`, take a position, insert `row` at it (its
        own position is ignored) and move the head as `update_head` does. The position taken,
        or None when the head had moved: then nothing was written and no position taken.
        Refused if a write transaction is open."""
        ...


_WORD = re.compile(r"\w")


def query_words(text: str) -> list[str]:
    """A plain-words query's words, as every backend's `search` takes them: the distinct
    chunks holding a word character, separated by whitespace or U+0000 (which no text index
    holds: PostgreSQL's cannot, SQLite's FTS5 ends a query there), in order, at most 64."""
    return [chunk for chunk in dict.fromkeys(text.replace("\x00", " ").split()) if _WORD.search(chunk)][:64]
