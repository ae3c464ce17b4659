"""`Store`: append, read, fork, fan out, verify and redact, over one SQLite file.

Validation, canonical JSON and digests are computed before the write lock is taken
(`prepare`); only the head check, the position, the hashes and the inserts happen inside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import integrity
from .errors import ConcurrencyError, ForkRefused, IntegrityError, InvalidEvent, StaleSnapshot, StoreError, ThreadNotFound
from .events import CATALOGUE, EventRedacted, ForkOptions, MessageAppended, ThreadCreated, check_depth, upcast
from .facts import Facts, advance, after_fork
from .prepare import META_KEYS, Pending, check_id, new_id, now, prepare
from .recorded import RecordedEvent, ThreadInfo, from_row, too_deep
from .sqlite import SQLiteBackend

DEFAULT_PLACEHOLDER = "Fork started — processing in background"

# type -> current schema version, for the read path's upcast check.
_CURRENT = {type_: model.schema_version for type_, model in CATALOGUE.items()}

# Events only the store itself writes, through the operation named.
_RESERVED = {"thread.forked": "fork() or fan_out()", "event.redacted": "redact()"}

Expect = str | int


def _check_expect(expect: Any) -> None:
    if isinstance(expect, bool) or not (
        expect in ("any", "no_stream", "stream_exists") or (isinstance(expect, int) and expect >= 0)
    ):
        raise InvalidEvent("expect", f"must be 'any', 'no_stream', 'stream_exists' or a head >= 0, not {expect!r}")


def _check_index(name: str, value: Any, what: str, optional: bool = False) -> None:
    """Refuse anything but an int >= 0 (or None, when `optional`) for a range argument."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidEvent(name, f"must be {what} >= 0, not {value!r}")


def _clip(ranges: list[tuple[str, int, int | None]], start: int, stop: int | None) -> Iterator[tuple[str, int, int | None]]:
    """The segments' ranges narrowed to start..stop-1, empty ones skipped."""
    for stream_id, lo, hi in ranges:
        lo = max(lo, start)
        if stop is not None:
            hi = stop if hi is None else min(hi, stop)
        if hi is None or lo < hi:
            yield stream_id, lo, hi


def segments(ancestry: Sequence[ThreadInfo]) -> list[tuple[str, int, int | None]]:
    """The logical history as (stream, lo, hi) ranges of own offsets, oldest first.

    `ancestry` runs from the thread up to its root. Each ancestor contributes its own
    events below the lowest fork point on the way down to the thread.
    """
    out: list[tuple[str, int, int | None]] = []
    upper: int | None = None
    for info in ancestry:
        if upper is None or info.base < upper:
            out.append((info.id, info.base, upper))
        upper = info.base if upper is None else min(upper, info.base)
        if upper == 0:
            break
    out.reverse()
    return out


class Store:
    """An event-sourced conversation store in one SQLite file (or `":memory:"`).

    A `Store` holds one connection and is meant for one thread at a time; open one per
    thread or process. Every write runs in `BEGIN IMMEDIATE`, so several processes can
    share a file safely (writers queue on SQLite's lock for up to `timeout` seconds).
    `synchronous="FULL"` makes each commit durable across power loss; the default
    `"NORMAL"` (in WAL mode) is durable across a process crash but may lose the last
    commits on power loss.
    """

    def __init__(self, path: str | Path = "threadlog.db", synchronous: str = "NORMAL", timeout: float = 30.0) -> None:
        self.backend = SQLiteBackend(path, synchronous=synchronous, timeout=timeout)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.backend.path

    @property
    def synchronous(self) -> str:
        return self.backend.synchronous

    @property
    def journal_mode(self) -> str:
        return self.backend.journal_mode

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- threads ------------------------------------------------------------------------------

    def thread(self, thread: str) -> ThreadInfo:
        row = self.backend.stream(thread)
        if row is None:
            raise ThreadNotFound(thread)
        return ThreadInfo.from_row(row)

    def threads(self) -> list[ThreadInfo]:
        """Every stream, in creation order."""
        return [ThreadInfo.from_row(row) for row in self.backend.streams()]

    def children(self, thread: str) -> list[ThreadInfo]:
        return [ThreadInfo.from_row(row) for row in self.backend.children(thread)]

    def subtree(self, thread: str) -> list[ThreadInfo]:
        """The thread and every fork below it, at any depth, in creation order."""
        rows = self.backend.subtree(thread)
        if not rows:
            raise ThreadNotFound(thread)
        return [ThreadInfo.from_row(row) for row in rows]

    def ancestry(self, thread: str) -> list[ThreadInfo]:
        """The thread, its parent, … up to its root."""
        rows = self.backend.ancestry(thread)
        if not rows:
            raise ThreadNotFound(thread)
        return [ThreadInfo.from_row(row) for row in rows]

    def head(self, thread: str) -> int:
        """The thread's logical length: the offset its next event will get."""
        return self.thread(thread).head

    def create_thread(
        self,
        title: str | None = None,
        system: str | list[dict[str, Any]] | None = None,
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        **meta: Any,
    ) -> str:
        """Start a root thread with its `thread.created` event; returns the thread id."""
        thread_id = new_id() if thread_id is None else check_id("thread_id", thread_id)
        data = {"title": title, "system": system, "model": model, "tools": tools, "metadata": metadata}
        event = {"type": ThreadCreated.type, "data": {k: v for k, v in data.items() if v is not None}, "meta": meta}
        self.append(thread_id, [event], expect="no_stream")
        return thread_id

    # -- append -------------------------------------------------------------------------------

    def append(self, thread: str, events: Iterable[Any], expect: Expect = "any") -> list[RecordedEvent]:
        """Append a batch atomically; returns the recorded events.

        `expect` is `"any"`, `"no_stream"` (the batch creates the thread and must start with
        `thread.created`), `"stream_exists"`, or the exact head the caller last saw; a
        mismatch raises `ConcurrencyError` and writes nothing. Re-appending events whose
        `meta.event_id`s are all already stored in this thread returns the original
        records and writes nothing, whatever `expect` says: retries are safe.
        """
        _check_expect(expect)
        if isinstance(events, (dict, str, bytes)):
            raise InvalidEvent("events", "must be a list of events")
        events = list(events)
        fresh = os.urandom(16 * len(events)).hex()  # one call instead of one per event
        batch = [prepare(event, i, fresh[32 * i:32 * i + 32]) for i, event in enumerate(events)]
        if not batch:
            raise InvalidEvent("events", "the batch is empty")
        if expect == "no_stream":
            check_id("thread", thread)
        elif not isinstance(thread, str) or not thread:
            raise InvalidEvent("thread", "must be a non-empty string")
        explicit = False
        for i, item in enumerate(batch):
            if item.plain:
                continue  # a text message: no meta, neither reserved nor thread.created
            explicit = explicit or item.explicit_id
            if item.type in _RESERVED:
                raise InvalidEvent(f"events[{i}].type", f"{item.type} is written by {_RESERVED[item.type]} only")
            if item.type == ThreadCreated.type and not (i == 0 and expect == "no_stream"):
                raise InvalidEvent(f"events[{i}].type", "thread.created only starts a thread (expect='no_stream')")
        # Only ids the caller chose can repeat (generated ones are 128 random bits).
        if explicit and len({item.event_id for item in batch}) != len(batch):
            raise InvalidEvent("meta.event_id", "the batch repeats an event_id")
        with self.backend.transaction():
            if explicit:
                stored = self._already_stored(thread, batch)
                if stored is not None:
                    return stored
            row, position = self.backend.stream_for_append(thread)
            if row is None:
                if expect != "no_stream":
                    raise ThreadNotFound(thread)
                if batch[0].type != ThreadCreated.type:
                    raise InvalidEvent("events[0].type", "a new thread must start with thread.created")
                return self._write(thread, None, batch, position=position)
            head = row[5]
            if expect == "no_stream" or (isinstance(expect, int) and expect != head):
                raise ConcurrencyError(thread, expect, head)
            return self._write(thread, row, batch, position=position)

    def append_message(self, thread: str, role: str, content: str | list[dict[str, Any]], expect: Expect = "any", **fields: Any) -> RecordedEvent:
        """Append one `message.appended`. `content` is text or a list of content blocks.

        Keyword arguments go to the event's data (`message_id`, `model`, `stop_reason`,
        `usage`) or, for `event_id`, `actor`, `origin`, `causation_id`, `correlation_id`
        and `occurred_at`, to its meta.
        """
        meta = {k: v for k, v in fields.items() if k in META_KEYS} if fields else {}
        data = {"role": role, "content": content, **{k: v for k, v in fields.items() if k not in META_KEYS}} if fields else {"role": role, "content": content}
        return self.append(thread, [{"type": MessageAppended.type, "data": data, "meta": meta}], expect=expect)[0]

    def _already_stored(self, thread: str, batch: list[Pending]) -> list[RecordedEvent] | None:
        rows = self.backend.events_by_id([item.event_id for item in batch])
        if not rows:
            return None
        if len(rows) != len(batch):
            raise InvalidEvent("meta.event_id", f"{len(rows)} of the batch's {len(batch)} event ids are already stored; "
                               "a retry must resend the same batch")
        by_id = {row[3]: row for row in rows}
        for item in batch:
            row = by_id[item.event_id]
            if row[1] != thread:
                raise InvalidEvent("meta.event_id", f"event id {item.event_id!r} is already used in thread {row[1]!r}")
            if (row[4], row[9], row[7]) != (item.type, item.data_digest, item.meta_json):
                raise InvalidEvent(
                    "meta.event_id",
                    f"event id {item.event_id!r} is already stored at position {row[0]} with different content; "
                    "a retry must resend the same event, and a new event needs a new id",
                )
        return [from_row(by_id[item.event_id]) for item in batch]

    def _write(
        self,
        thread: str,
        row: tuple[Any, ...] | None,
        batch: Sequence[Pending],
        start: tuple[int, str, Facts, int | None] | None = None,
        fork_of: ThreadInfo | None = None,
        position: int | None = None,
    ) -> list[RecordedEvent]:
        """Number, chain and insert a batch (inside the caller's transaction).

        `row` is the stream's row, or None for a new stream; a new fork passes `start`
        (its base offset, the parent's hash at base - 1, the parent's facts there and its
        first message offset) and `fork_of`, the parent. `position` is the next position
        when the caller already read it in this transaction.
        """
        if row is not None:
            head, prev, facts, first_message = row[5], row[8], Facts.load(row[9]), row[10]
        elif start is not None:
            head, prev, facts, first_message = start
        else:
            head, prev, facts, first_message = 0, integrity.GENESIS, Facts(), None
        if position is None:
            position = self.backend.next_position()
        first_position = position
        recorded_at = now()
        inserts, recorded = [], []
        chain_hash = integrity.chain_hash
        pending = facts.dump()
        offset = head
        for type_, version, data, data_json, digest, meta, meta_json, event_id, _, plain in batch:
            if plain:
                pass  # text only: no tool call, result, run or interrupt to track
            elif type_ == "thread.forked":
                facts = after_fork(facts, data)
                pending = facts.dump()
            else:
                after = advance(facts, type_, data, f"events[{offset - head}].data")
                if after is not facts:  # `advance` returns the same object when nothing changes
                    facts, pending = after, after.dump()
                if type_ == "compaction.recorded" and data["through_offset"] > offset:
                    raise InvalidEvent(f"events[{offset - head}].data.through_offset", f"{data['through_offset']} is past the compaction's own offset {offset}")
            if first_message is None and type_ == "message.appended":
                first_message = offset
            hash_ = chain_hash(prev, thread, offset, event_id, type_, version, recorded_at, meta_json, digest)
            inserts.append((position, thread, offset, event_id, type_, version, data_json, meta_json, recorded_at, digest, hash_, pending))
            recorded.append(RecordedEvent(position, thread, offset, event_id, type_, data, meta, recorded_at, hash_, version, digest))
            prev = hash_
            position += 1
            offset += 1
        new_head = head + len(batch)
        if row is None:
            parent = fork_of
            self.backend.insert_stream((
                thread,
                parent.id if parent else None,
                head if parent else None,
                parent.root_id if parent else thread,
                parent.depth + 1 if parent else 0,
                new_head,
                first_position,
                batch[0].data["options"]["kind"] if parent else "thread",
                prev,
                facts.dump(),
                first_message,
            ))
            self.backend.insert_events(inserts)
        else:
            self.backend.insert_events(inserts)
            self.backend.update_head(thread, new_head, prev, facts.dump(), first_message)
        return recorded

    # -- read ---------------------------------------------------------------------------------

    def read(self, thread: str, start: int = 0, stop: int | None = None) -> Iterator[RecordedEvent]:
        """The thread's logical history (ancestor segments first), offsets start..stop-1.

        One indexed range scan per ancestor segment; nothing is copied. The thread's
        existence is checked when called, the rows are streamed as you iterate.
        """
        _check_index("start", start, "an offset")
        _check_index("stop", stop, "an offset", optional=True)
        ranges = segments(self.ancestry(thread))
        return self._read_segments(ranges, start, stop)

    def _read_segments(self, ranges: list[tuple[str, int, int | None]], start: int, stop: int | None) -> Iterator[RecordedEvent]:
        for stream_id, lo, hi in _clip(ranges, start, stop):
            for row in self.backend.range(stream_id, lo, hi):
                yield from_row(row)

    def read_all(self, after: int = 0, limit: int | None = None) -> Iterator[RecordedEvent]:
        """Every event with position > `after`, in global (commit) order."""
        _check_index("after", after, "a position")
        _check_index("limit", limit, "a count", optional=True)
        return (from_row(row) for row in self.backend.all_events(after, limit))

    def read_data(self, thread: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The logical history as lean (offset, type, data) tuples, for projections that fold.

        Same range as `read`, but skips meta, hashes and `RecordedEvent` construction: the
        events were validated when appended (and `verify` checks their digests), so a fold
        needs only the data, upcast to the current version.
        """
        rows = self.read_raw(thread, start, stop)
        return _parsed(rows, lambda offset: self.unreadable(thread, offset))

    def read_raw(self, thread: str, start: int = 0, stop: int | None = None) -> Generator[tuple[int, str, int, str], None, None]:
        """(offset, type, schema_version, data as JSON text): `read_data` before parsing.

        For folds that need only some events' data: they parse (and `upcast`) those alone.
        A fold that stops early should `close()` it (`contextlib.closing`) while the store
        is open; left to the garbage collector it may close after the store did.
        """
        _check_index("start", start, "an offset")
        _check_index("stop", stop, "an offset", optional=True)
        return self._read_raw(segments(self.ancestry(thread)), start, stop)

    def _read_raw(self, ranges: list[tuple[str, int, int | None]], start: int, stop: int | None) -> Generator[tuple[int, str, int, str], None, None]:
        for stream_id, lo, hi in _clip(ranges, start, stop):
            yield from self.backend.range_data(stream_id, lo, hi)

    # -- snapshots (a cache, never truth) -------------------------------------------------------

    def save_snapshot(
        self, projection: str, version: int, thread: str, offset: int, state: dict[str, Any], as_of: int | None = None
    ) -> None:
        """Cache `projection`'s state after the first `offset` events of `thread`'s history.

        Projections decide what a state is; the store only keeps it. Dropping every snapshot
        must change no answer, and `redact` drops them all (a cached state may hold the
        erased payload). `as_of` is the log's `last_position()` read before the fold began:
        if an event the state covers was redacted after that, the state may hold the erased
        payload and the save is refused (`StaleSnapshot`); fold again and retry. Without
        `as_of`, a state covering any redacted event is refused.
        """
        _check_index("as_of", as_of, "a position", optional=True)
        try:
            text = integrity.canonical(state)
            text.encode("utf-8")
        except (ValueError, TypeError, RecursionError) as error:
            raise InvalidEvent("state", f"a snapshot must be JSON without NaN or infinities ({error})") from None
        with self.backend.transaction():
            ancestry = self.ancestry(thread)
            head = ancestry[0].head
            if not isinstance(offset, int) or isinstance(offset, bool) or not 1 <= offset <= head:
                raise InvalidEvent("offset", f"{offset!r} is outside thread {thread!r} (1..{head})")
            for stream_id, lo, hi in _clip(segments(ancestry), 0, offset):
                redaction = self.backend.redacted_since(stream_id, lo, hi, as_of or 0)
                if redaction is not None:
                    raise StaleSnapshot(
                        f"snapshot of {thread!r} at offset {offset} not saved: position {redaction[0]} in its range was "
                        f"redacted at position {redaction[1]}, after the fold began; fold again and save that"
                    )
            self.backend.save_snapshot(projection, version, thread, offset, text)

    def last_position(self) -> int:
        """The highest position in the log (0 when empty): a mark to pass as `as_of`."""
        return self.backend.last_position()

    def nearest_snapshot(self, projection: str, version: int, thread: str, at: int) -> tuple[int, dict[str, Any]] | None:
        """The cached state with the highest offset <= `at` that covers a prefix of `thread`'s
        history, as (offset, state): the thread's own snapshots, or an ancestor's taken at or
        below the fork point (the histories agree there). None when there is none."""
        best: tuple[int, str] | None = None
        for stream_id, _, hi in segments(self.ancestry(thread)):
            limit = at if hi is None else min(hi, at)
            found = self.backend.nearest_snapshot(projection, version, stream_id, 1, limit)
            if found is not None and (best is None or found[0] > best[0]):
                best = found
        return (best[0], json.loads(best[1])) if best else None

    def drop_snapshots(self, projection: str | None = None) -> int:
        """Delete every cached snapshot (of one projection, if named); returns how many."""
        with self.backend.transaction():
            return self.backend.drop_snapshots(projection)

    def unreadable(self, thread: str, offset: int) -> StoreError:
        """The error a reader raises when the event at `offset` of `thread` holds JSON nested too
        deeply to parse (RecursionError): it names the event's position, found without its data."""
        return too_deep(int(self._row_of(thread, offset)[0]))

    def event_at(self, thread: str, offset: int) -> RecordedEvent:
        """The event at one logical offset of a thread."""
        return from_row(self._row_of(thread, offset))

    def _row_of(self, thread: str, offset: int) -> tuple[Any, ...]:
        info = self.thread(thread)
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < info.head:
            raise InvalidEvent("offset", f"{offset!r} is outside thread {thread!r} (0..{info.head - 1})")
        return self._row_at(self.ancestry(thread), offset)

    def _row_at(self, ancestry: list[ThreadInfo], offset: int) -> tuple[Any, ...]:
        for stream_id, lo, hi in segments(ancestry):
            if lo <= offset and (hi is None or offset < hi):
                row = self.backend.event_at(stream_id, offset)
                if row is None:
                    raise StoreError(f"event at offset {offset} of {stream_id!r} is missing; run verify")
                return row
        raise StoreError(f"offset {offset} is in no segment of {ancestry[0].id!r}; run verify")

    # -- fork ---------------------------------------------------------------------------------

    def fork(
        self,
        thread: str,
        at: int | None = None,
        *,
        todos: Any = "blank",
        metadata: Any = "blank",
        context: str = "full",
        retrieval: str = "off",
        unanswered: str = "refuse",
        transcript: str | None = None,
        fork_id: str | None = None,
        kind: str = "fork",
        busy: str = "refuse",
        **meta: Any,
    ) -> str:
        """Fork `thread` at `at` (default: its head): one `streams` row, one event, O(1).

        Refuses (`ForkRefused.reason`) an offset outside 1..head, a history with no message
        below `at` (`empty`), a run in progress at `at` (`busy`), and tool calls without
        results (`unanswered_tool_calls`, with `tool_use_ids`) unless `unanswered="drop"`
        records them for the projections to filter. `metadata={"keep": [keys]}` keeps
        those keys; any other dict is the fork's metadata. Pending interrupts are demoted.
        `kind="subagent"` marks a sub-agent's fork; `busy="allow"` forks where a run is in
        progress (the fork starts idle): for histories imported as they happened, where a
        sub-agent or a retried answer branched mid-turn.
        """
        if busy not in ("refuse", "allow"):
            raise InvalidEvent("busy", f"must be 'refuse' or 'allow', not {busy!r}")
        options = _options(todos=todos, metadata=metadata, context=context, retrieval=retrieval, unanswered=unanswered, transcript=transcript, kind=kind)
        fork_id = new_id() if fork_id is None else check_id("fork_id", fork_id)
        with self.backend.transaction():
            return self._fork(thread, at, options, fork_id, meta, [], allow_busy=busy == "allow")

    def _fork(self, thread: str, at: Any, options: ForkOptions, fork_id: str, meta: dict[str, Any], then: list[Pending], fan_out: bool = False, allow_busy: bool = False) -> str:
        rows = self.backend.ancestry(thread)
        if not rows:
            raise ThreadNotFound(thread)
        ancestry = [ThreadInfo.from_row(row) for row in rows]
        parent, parent_facts, first_message = ancestry[0], rows[0][9], rows[0][10]
        if at is None:
            at = parent.head
        if not isinstance(at, int) or isinstance(at, bool) or not 1 <= at <= parent.head:
            raise ForkRefused("offset_out_of_range", f"cannot fork {thread!r} at {at!r}: it holds offsets 0..{parent.head - 1}, so at must be 1..{parent.head}")
        if first_message is None or first_message >= at:
            raise ForkRefused("empty", f"cannot fork {thread!r} at {at}: there is no message before that offset")
        if at == parent.head:
            prev_hash, facts = parent.head_hash, Facts.load(parent_facts)
        else:
            row = self._row_at(ancestry, at - 1)
            prev_hash, facts = row[10], Facts.load(row[11])
        if facts.runs and not (fan_out or allow_busy):
            raise ForkRefused("busy", f"cannot fork {thread!r} at {at}: run {facts.runs[-1]!r} is in progress there; fork after it finishes or at an earlier offset")
        dropped: list[str] = []
        if facts.tools and options.context == "full" and not fan_out:
            if options.unanswered == "refuse":
                raise ForkRefused(
                    "unanswered_tool_calls",
                    f"cannot fork {thread!r} at {at}: tool calls without results: {', '.join(facts.tools)}; "
                    "fork at an earlier offset or pass unanswered='drop'",
                    list(facts.tools),
                )
            dropped = list(facts.tools)
        if self.backend.stream(fork_id) is not None:
            raise InvalidEvent("fork_id", f"thread {fork_id!r} already exists")
        data: dict[str, Any] = {"parent_id": thread, "parent_offset": at, "options": options.model_dump(exclude_none=True)}
        if dropped:
            data["dropped_tool_use_ids"] = dropped
        if facts.interrupts:
            data["demoted_interrupt_ids"] = list(facts.interrupts)
        forked = prepare({"type": "thread.forked", "data": data, "meta": meta}, "fork")
        self._write(fork_id, None, [forked, *then], (at, prev_hash, facts, first_message), parent)
        return fork_id

    def fan_out(
        self,
        thread: str,
        directives: Sequence[str],
        placeholder: str = DEFAULT_PLACEHOLDER,
        *,
        todos: Any = "blank",
        metadata: Any = "blank",
        **meta: Any,
    ) -> list[str]:
        """Launch one sub-agent fork per directive from a parent in mid-turn, atomically.

        The parent's head must be waiting on `tool_use` results. Each fork gets the parent's
        full history and one primed user message: a `tool_result` with the same
        `placeholder` text for every pending `tool_use`, then its own directive, so the
        forks' requests are byte-identical up to the directive (prompt-cache hits). A
        sub-agent fork, or any fork below one, cannot fan out again (`recursion`).
        """
        if isinstance(directives, str) or not isinstance(directives, Sequence):
            raise InvalidEvent("directives", "must be a list of strings")
        if not directives:
            raise ForkRefused("no_directives", "fan_out needs at least one directive")
        if not all(isinstance(d, str) and d.strip() for d in directives):
            raise InvalidEvent("directives", "every directive must be non-empty text")
        if not isinstance(placeholder, str) or not placeholder:
            raise InvalidEvent("placeholder", "must be non-empty text")
        ids = [new_id() for _ in directives]
        with self.backend.transaction():
            ancestry = self.ancestry(thread)
            nested = next((a.id for a in ancestry if a.kind == "subagent"), None)
            if nested:
                where = "a sub-agent fork" if nested == thread else f"inside sub-agent fork {nested!r}"
                raise ForkRefused("recursion", f"{thread!r} is {where}; sub-agents cannot fan out again")
            pending = Facts.load(self.backend.stream(thread)[9]).tools  # type: ignore[index]
            if not pending:
                raise ForkRefused("no_pending_tool_use", f"{thread!r} has no tool_use waiting for a result at its head; fan_out launches sub-agents from an assistant tool call")
            for fork_id, directive in zip(ids, directives):
                options = _options(todos=todos, metadata=metadata, kind="subagent", directive=directive)
                content = [{"type": "tool_result", "tool_use_id": tid, "content": placeholder} for tid in pending]
                content.append({"type": "text", "text": directive})
                primed = prepare({"type": "message.appended", "data": {"role": "user", "content": content}, "meta": {**meta, "origin": "primed"}}, "fan_out")
                self._fork(thread, None, options, fork_id, meta, [primed], fan_out=True)
        return ids

    # -- integrity ------------------------------------------------------------------------------

    def verify(self, progress: Callable[[int, int], None] | None = None, checkpoint: str | None = None) -> integrity.VerifyReport:
        """Recompute every hash chain and every stored column that changes behaviour;
        raises `IntegrityError` naming the first bad position.

        With `checkpoint` (a string `checkpoint()` returned earlier), also prove that the log
        still holds every event the checkpoint covered, unchanged, at the same positions: a
        deleted thread, a cut-and-re-chained tail or a rewritten event then fails too.
        `progress(done, total)`, if given, is called as streams are checked (events so far).
        """
        wanted = integrity.parse_checkpoint(checkpoint) if checkpoint is not None else None
        with self.backend.read_transaction():  # one consistent view; writers carry on meanwhile
            report = integrity.verify(self.backend, progress)
            if wanted is None:
                return report
            upto, value = wanted
            last = self.backend.last_position()
            if last < upto:
                raise IntegrityError(last + 1, f"the log no longer matches checkpoint {checkpoint}: it ends at position {last}, "
                                     f"below the checkpoint's {upto} (events were removed)")
            if integrity.log_digest(self.backend.hashes(upto), upto) != value:
                raise IntegrityError(None, f"the log no longer matches checkpoint {checkpoint}: an event at or below "
                                     f"position {upto} was removed, added or rewritten")
        return integrity.VerifyReport(report.streams, report.events, report.redacted, checkpoint)

    def checkpoint(self) -> str:
        """One short string covering every event in the log now (position and hash).

        Keep it somewhere the file's writers cannot reach; `verify(checkpoint=C)` later
        proves that nothing it covers was removed, added or changed. Reads every event's hash
        once (one sequential scan).
        """
        with self.backend.read_transaction():
            last = self.backend.last_position()
            return integrity.format_checkpoint(last, integrity.log_digest(self.backend.hashes(last), last))

    def redact(self, position: int, reason: str, actor: str) -> RecordedEvent:
        """Erase one event's payload in place, recording who and why in an `event.redacted`.

        What stays is a skeleton with only the ids that keep the history well-formed: a
        message keeps its role, its `tool_use` blocks' `id` and `name` (input emptied) and its
        `tool_result` blocks' `tool_use_id` (content replaced), so a model request built from
        the history stays valid; its text becomes `[redacted]`. Runs and interrupts keep
        their ids. The `event.redacted` records the skeleton's digest, so the skeleton is
        chained too. Hashes, offsets and fork references stay valid, because the chain
        covers the data's digest.

        No copy of the payload stays in the file: snapshots are dropped, freed space is
        zeroed (`secure_delete`) and the write-ahead log is checkpointed and truncated before
        this returns. If another connection is reading at that moment, the WAL cannot be
        truncated and `StoreError` says so (the redaction itself is committed; `purge()`
        retries the truncation).
        """
        if not isinstance(position, int) or isinstance(position, bool) or position < 1:
            raise InvalidEvent("position", f"must be a position >= 1, not {position!r}")
        with self.backend.transaction():
            row = self.backend.event_at_position(position)
            if row is None:
                raise InvalidEvent("position", f"no event at position {position}")
            if row[4] in ("thread.forked", "event.redacted"):
                raise InvalidEvent("position", f"a {row[4]} event is structural and cannot be redacted")
            if row[12] is not None:
                raise InvalidEvent("position", f"position {position} is already redacted (by position {row[12]})")
            data = {"position": position, "reason": reason, "actor": actor}
            try:
                skeleton = integrity.canonical(_skeleton(row[4], json.loads(row[6])))
                data["skeleton_digest"] = integrity.digest(skeleton)
            except RecursionError:
                # Too deep to parse (an older release stored it): keep only the role. Its
                # tool ids are unknowable, so verify trusts the row's stored facts, as for
                # an early redaction, and no skeleton digest is recorded.
                role = "assistant" if row[6].rfind('"role":"assistant"') > row[6].rfind('"role":"user"') else "user"
                skeleton = integrity.canonical(_skeleton(row[4], {"role": role}))
            event = prepare({"type": EventRedacted.type, "data": data, "meta": {"actor": actor}}, "redact")
            stream_row = self.backend.stream(row[1])
            recorded = self._write(row[1], stream_row, [event])[0]
            self.backend.redact(position, skeleton, recorded.position)
            self.backend.drop_snapshots()  # a cached state may hold the erased payload
        self.purge()
        return recorded

    def purge(self) -> None:
        """Copy the write-ahead log into the database file and truncate it, so that no old
        page (an erased payload's among them) stays in the WAL; `redact` does this itself.

        Raises `StoreError` when another connection's open read keeps the WAL in use.
        """
        self.backend.truncate_wal()


def _parsed(rows: Iterator[tuple[int, str, int, str]], unreadable: Callable[[int], StoreError]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Parse (and upcast) raw rows; an event nested too deeply to parse raises `unreadable(offset)`."""
    loads = json.loads
    offset = -1
    try:
        for offset, type_, version, text in rows:
            if version == _CURRENT.get(type_, version):
                yield offset, type_, loads(text)
            else:
                yield offset, type_, upcast(type_, version, loads(text))
    except RecursionError:
        raise unreadable(offset) from None


def _skeleton(type_: str, data: dict[str, Any]) -> dict[str, Any]:
    """What stays of a redacted payload: only what keeps the history well-formed.

    A message keeps its role and the ids its tool calls and results pair up by (so the
    pending facts and a model request built from it stay the same shape); runs and
    interrupts keep the ids their pairing needs. Everything else is gone.
    """
    if type_ == "message.appended":
        role = data.get("role", "user")
        results, calls = [], []
        for block in data.get("content") or ():
            if block.get("type") == "tool_use":
                calls.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
            elif block.get("type") == "tool_result":
                result = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": "[redacted]"}
                if block.get("is_error"):
                    result["is_error"] = True
                results.append(result)
        # A user turn answers its calls first, as the Messages API wants; a call ends its turn.
        content = [*results, {"type": "text", "text": "[redacted]"}, *calls]
        return {"role": role, "content": content, "redacted": True}
    keep = _STRUCTURAL.get(type_, ())
    return {**{key: data[key] for key in keep if key in data}, "redacted": True}


# The fields of each non-message event that its pairing (and the pending facts) rest on.
_STRUCTURAL = {
    "run.started": ("run_id",),
    "run.finished": ("run_id", "status"),
    "interrupt.raised": ("interrupt_id", "tool_use_id"),
    "interrupt.resolved": ("interrupt_id",),
    "interrupt.cancelled": ("interrupt_id", "reason"),
}


def _options(**fields: Any) -> ForkOptions:
    check_depth(fields, "")  # names the option: `metadata`, `todos`
    retrieval = fields.get("retrieval")
    if isinstance(retrieval, str):
        fields["retrieval"] = retrieval.replace("-", "_")
    try:
        return ForkOptions.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "options"
        raise InvalidEvent(field, f"{first['msg']} (got {fields.get(field)!r})") from None
