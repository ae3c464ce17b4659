"""The full-text index's upkeep: catch up by position, rebuild, query within segments.

The index is derived from the log and kept off its append path: no append writes to it.
It records the last position it covers; `catch_up` indexes every event after that, a few
thousand events to a write transaction, until none is left, so a search that catches up
first sees every committed event, and a crash or Ctrl-C mid-way keeps what the committed
transactions indexed: the next catch-up goes on from there. What text an event contributes is not decided
here but by the caller's `Extractor` (the projections own that); this module numbers the
parts and hands them to the backend. Redacted events contribute nothing, and `Store.redact`
removes an indexed event's documents (the backend erases them; see `sqlite.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .backend import DOC_PARTS, MAX_INDEXED_POSITION, DocValues, HitRow, Scope
from .errors import InvalidEvent, StoreError, altered_index, unsendable
from .ranges import check_index, clip, segments
from .recorded import decode, from_row

if TYPE_CHECKING:
    from .store import Store


class Doc(NamedTuple):
    """One searchable part of an event: `kind` is text, tool_use, tool_result, summary or title."""

    kind: str
    role: str | None
    tool: str | None
    text: str


# (stream_id, offset, type, data) -> the event's documents. One extractor serves one catch-up,
# in position order, so it may remember what it saw (a tool call's name, for its result). It is
# called for a redacted event too, with what the redaction kept (a call keeps its name), and
# whatever it gives for one is dropped: nothing of a redacted event is indexed.
Extractor = Callable[[str, int, str, dict[str, Any]], Iterable[Doc]]

MATCHES = ("query", "words", "any")
# The longest query in the index's syntax a search takes, in characters and in
# whitespace-separated terms (a plain-words query keeps its first 64 distinct words:
# `backend.query_words`).
MAX_QUERY_CHARS = 2000
MAX_QUERY_TERMS = 128
_BATCH = 2000
_COMMIT_EVENTS = 20_000  # events a catch-up indexes in one write transaction (about a second's work)
Progress = Callable[[int, int], None]  # (events indexed so far, events it had to index), after each commit


def check_extractor(extractor: Any) -> None:
    """Refuse an extractor maker that is no function: it failed only once the catch-up ran
    (TypeError: 'int' object is not callable), and not at all while the index was current."""
    if not callable(extractor):
        raise InvalidEvent("extractor", "must be a function that makes an extractor (projections.search.extractor(store) "
                                        f"gives one), not {type(extractor).__name__}")


def _made(extractor: Callable[[], Extractor]) -> Extractor:
    """`extractor()`, refused unless it made a function (inside the caller's transaction, before
    anything is written)."""
    extract = extractor()
    if not callable(extract):
        raise InvalidEvent("extractor", f"returned {type(extract).__name__}, not an extractor (a function of (stream_id, "
                                        "offset, type, data) giving an event's documents)")
    return extract


def catch_up(store: Store, extractor: Callable[[], Extractor], progress: Progress | None = None) -> int:
    """Index every event after the index's position, `_COMMIT_EVENTS` to a write transaction,
    until none is left; returns how many events were read. Costs one read when the index is
    current (no transaction then). Interrupted, it keeps the transactions it committed.
    `progress(done, total)` is called after each commit, both counted in positions (`total` grows
    if events are appended meanwhile): on PostgreSQL a refused write leaves positions unused, so
    events read, counted against positions to read, never reached the total, and a catch-up in
    one commit seemed unfinished. What it wrote is then copied into the database file
    (`settle_wal`): left in SQLite's write-ahead log, the index's pages were carried by the
    appends after it, which read past them and checkpointed them (single appends after each
    search that caught up cost 1.07x-1.16x those of a store never indexed; 0.93x so)."""
    check_extractor(extractor)
    backend = store.backend
    covered, last = backend.index_position(), backend.last_position()
    if not 0 <= covered <= last:  # no log shrinks: raw SQL set it, and searches would miss what follows
        raise altered_index(f"it says it covers positions up to {covered}, and the log goes to {last}")
    if covered == last:
        return 0
    if getattr(backend, "read_only", False):
        raise StoreError(f"{backend.path}: the search index covers positions up to {covered} but the log goes to {last}, "
                         "and this store is open read-only so it cannot catch up; open it writable once "
                         "(`threadlog index`) and search again")
    seen, extract, upto, start = 0, None, -1, None
    while True:
        with backend.transaction():
            covered = backend.index_position()
            start = covered if start is None else start
            # Documents above what it covers (its progress moved back, or a document added, by raw
            # SQL) would collide with the ones this catch-up writes: SQLite's "UNIQUE constraint failed".
            if (past := backend.index_last_docid() // DOC_PARTS) > covered:
                raise altered_index(f"it holds documents of position {past} and says it covers positions up to {covered}")
            if covered != upto:  # another catch-up indexed events in between: what this extractor saw has a gap
                extract = _made(extractor)
            assert extract is not None
            read, upto = _index_from(store, covered, extract, _COMMIT_EVENTS)
            last = backend.last_position()
        seen += read
        if read == 0:
            if seen:
                backend.settle_wal()
            return seen
        if progress is not None:
            progress(upto - start, last - start)
        if upto >= last:  # it read to the end its transaction saw: another would take the write lock to find nothing
            backend.settle_wal()
            return seen


def rebuild(store: Store, extractor: Callable[[], Extractor], progress: Progress | None = None) -> int:
    """Empty the index and index the whole log again, in one write transaction (interrupted,
    the index is as it was). `progress(done, total)` is called after each batch, in positions:
    a rebuild of 2.2M events takes most of a minute."""
    check_extractor(extractor)
    with store.backend.transaction():
        extract = _made(extractor)
        store.backend.clear_index()
        last = store.backend.last_position()
        return _index_from(store, 0, extract, reached=None if progress is None else lambda upto: progress(upto, last))[0]


def _index_from(store: Store, after: int, extract: Extractor, most: int | None = None,
                reached: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Index the events after position `after` (the first `most` or so of them, whole batches);
    returns how many were read and the position the index then covers, told to `reached`
    after each batch."""
    backend = store.backend
    seen = 0
    while True:
        rows = list(backend.all_events(after, _BATCH)) if most is None or seen < most else []
        if not rows:
            return seen, after
        docs: list[DocValues] = []
        for row in rows:
            try:
                data = decode(row.type, row.schema_version, row.data, row.position)
            except RecursionError:  # nested too deeply to read: nothing to index (redact it to read past it)
                continue
            found = extract(row.stream_id, row.offset, row.type, data)
            if row.redacted_by is not None:  # its skeleton was seen (a call's name), none of its documents is kept
                continue
            if row.position.__class__ is not int or not 0 < row.position <= MAX_INDEXED_POSITION:
                raise StoreError(f"the event at position {row.position!r} cannot be indexed: the index numbers positions from 1 to "
                                 f"{MAX_INDEXED_POSITION} (the row was restored by an older release, which kept positions up to "
                                 "2^62, or altered outside threadlog)")
            base = row.position * DOC_PARTS
            for part, doc in enumerate(found):
                if part < DOC_PARTS:
                    docs.append((base + part, row.position, row.stream_id, row.offset, *doc))
        seen += len(rows)
        after = rows[-1].position
        backend.index_docs(docs, after)
        if reached is not None:
            reached(after)


def scope_of(store: Store, thread: str, ancestors: bool = True, stop: int | None = None) -> list[Scope]:
    """The ranges a search of `thread` reads: its logical history (every ancestor below each
    fork point), or only its own events with `ancestors=False`; below offset `stop` if given."""
    # Its own events alone are read from its row: those of a fork whose parent's row is gone are
    # in the file, where its whole history is refused (`Store.ancestry`).
    ranges: list[Scope] = segments(store.ancestry(thread)) if ancestors else [(thread, store.thread(thread).base, None)]
    return list(clip(ranges, 0, stop))


def check_search(store: Store, query: str, match: str = "query", limit: int = 10, tool: str | None = None) -> None:
    """Refuse a search's arguments before anything is read or written: a search that
    catches the index up first, then refused them, left the file changed."""
    if not isinstance(query, str):
        raise InvalidEvent("query", f"must be text, not {type(query).__name__}")
    if match not in MATCHES:
        raise InvalidEvent("match", f"must be one of {', '.join(MATCHES)}, not {match!r}")
    # An index search scores and quotes every matching document once per term, and its cost grew
    # with the square of the terms: ORed terms on a 27-event file, 128 in 0.09 s, 1,000 in 5.2 s.
    # (Plain words are cut to their first 64 distinct: a message's text can be a retrieval's query.)
    if match == "query":
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidEvent("query", f"is {len(query):,} characters; a search takes at most {MAX_QUERY_CHARS:,}")
        if (terms := len(query.split())) > MAX_QUERY_TERMS:
            raise InvalidEvent("query", f"holds {terms:,} terms; a search takes at most {MAX_QUERY_TERMS} (AND, OR and NOT count)")
    check_index("limit", limit, 1, what="a count")
    try:  # text that is not UTF-8 (a lone surrogate) cannot be sent: refused now, not by the query
        query.encode("utf-8")
        if tool is not None:
            tool.encode("utf-8")
    except UnicodeEncodeError as error:
        raise unsendable(error, store.path) from None


def search(store: Store, query: str, match: str = "query", scope: Sequence[Scope] | None = None,
           role: str | None = None, tool: str | None = None, limit: int = 10) -> list[HitRow]:
    """The index's best documents for `query` (see `Backend.search` for `match`), without
    catching up first."""
    check_search(store, query, match, limit, tool)
    hits = store.backend.search(query, match, scope, role, tool, limit)
    for hit in hits:  # values of another kind only raw SQL stores: shown or sent as JSON, they fail later
        if hit.time is None:  # no event holds its position (the backend joins them to read the event's time)
            if hit.position.__class__ is int and hit.position > 0:  # or one does, whose time was removed by hand:
                for row in store.backend.all_events(hit.position - 1, 1, whole=True):  # reading it names it
                    if row.position == hit.position:
                        from_row(row)
            raise altered_index(f"a document names position {hit.position!r}, where no event is")
        if not (hit.position.__class__ is int and hit.stream_id.__class__ is str and hit.offset.__class__ is int
                and hit.kind.__class__ is str and (hit.role is None or hit.role.__class__ is str)
                and (hit.tool is None or hit.tool.__class__ is str) and hit.text.__class__ is str):
            raise altered_index(f"the document of position {hit.position!r} holds a value of another kind")
    return hits


def tools(store: Store, scope: Sequence[Scope] | None = None) -> set[str]:
    """The tool names of the index's documents in `scope` (None: all), without catching up
    first; a name of another kind (only raw SQL stores one) is left out. Reads every document
    in scope: no index covers the column."""
    return {name for name in store.backend.index_tools(scope) if name.__class__ is str}
