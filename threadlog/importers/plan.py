"""An import's plan: the streams one source file (or session) becomes, checked before any write.

Importers build a `Plan` in memory: each `PlannedStream` is a root thread or a fork of an
earlier stream after a named event, with its events in order. `add` validates each event
(`prepare`) and folds the same pending facts the store folds (`facts.advance`), so a file
the store would refuse is refused here, before anything is written: a refused file leaves
the database exactly as it was. The prepared events go to `Store.append_prepared`, so the
canonical JSON and digests are computed once per event, not once here and again in the
store.

Ids are deterministic (derived from the source's own ids), which makes writing
idempotent: `write_plan` skips the events a stream already holds, so re-importing adds
nothing and a file that has grown adds only its new events. If a write fails half-way
(the process is killed), importing again completes it.

A stream may also hold events no source line made: `redact` appends an `event.redacted` to
the erased event's stream. Such a record is not a source event: stored events are lined up
with planned ones by event id (which a redaction keeps, with the rest of `meta`) with the
records left out, and a plan made for a store (`Plan(store=...)`) passes over the offsets
they take, so what it plans after one (a fork point, a compaction's `through_offset`, the
head a write expects) is the offset it will have in the store. The erased event itself is
never written again: it is held, and the store refuses its id with other content.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from eventstore import InvalidEvent, Store, StoreError, ThreadNotFound
from eventstore.cuts import COMPACTION, check_cuts
from eventstore.facts import Facts, advance, after_fork
from eventstore.prepare import PreparedEvent, prepare

from ..signals import deferred
from .lines import Seen, real_path
from .summary import ImportSummary, note_written

BATCH = 1000
REDACTION = "event.redacted"  # a stored event no source line made (`Store.redact` appends one)

S = TypeVar("S")  # a source: a session, a file
B = TypeVar("B")  # a branch of a source's tree still to write


def depth_first(first: Iterable[B], grow: Callable[[B], Iterable[B]]) -> None:
    """Call `grow` on each of `first`'s branches and, before the next, on each branch it
    returns, depth first: the order a recursive walk takes, kept on a stack of its own (a
    session rewound inside its rewinds thousands of times over would exceed Python's)."""
    stack = [iter(first)]
    while stack:
        for branch in stack[-1]:  # the next branch of the innermost walk, then its own
            stack.append(iter(grow(branch)))
            break
        else:
            stack.pop()


def stable_id(*parts: str) -> str:
    """A thread id (16 hex characters, like `new_id`) derived from the source's ids."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


class ImportConflict(StoreError):
    """The database holds a stream under the same id whose events the file no longer has."""


# What a refused compaction says of the session: the offsets `threadlog emit` is told to compact
# through are of a thread not written yet, which no line of the file names.
_CUT_IN_SESSION = ": the compaction keeps the session's messages from a point between tool calls and their results"


@dataclass
class PlannedStream:
    id: str
    kind: str  # thread | fork | subagent
    first: dict[str, Any]  # the prepared thread.created and its meta, or the fork's options and meta
    parent: PlannedStream | None = None
    at: int = 0  # the offset of the stream's first own event (a fork's parent offset)
    events: list[PreparedEvent] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    open_run: str | None = None
    history: list[Facts] = field(default_factory=list)  # facts after each own offset, the first event's included
    records: frozenset[int] = frozenset()  # the offsets of the stored stream's redaction records (`Plan.attach`)
    offsets: list[int] = field(default_factory=list)  # the offset each planned event gets, past the records
    ids: set[str] = field(default_factory=set)  # the event ids its plan gives, shared by the plan's streams (`Plan.attach`)
    store: Store | None = None  # its plan's (`Plan.attach`): what an earlier import stored is not checked again

    def __post_init__(self) -> None:
        self.history.append(self.facts)

    @property
    def offset(self) -> int:
        """The logical offset the next event gets."""
        return self.at + len(self.history)

    @property
    def next_offset(self) -> int:
        """The offset the next event gets in the store: `offset`, past the redaction records there."""
        offset = self.offset
        while offset in self.records:
            offset += 1
        return offset

    def check(self, type_: str, data: dict[str, Any], meta: dict[str, Any]) -> tuple[PreparedEvent, Facts]:
        """The event `add` would add next, and the facts after it; `InvalidEvent` if the store would refuse it."""
        prepared = prepare({"type": type_, "data": data, "meta": meta}, "event")
        facts = advance(self.facts, prepared.type, prepared.data, "event.data")
        # Refused by the store only once the events before it were written; one an earlier release
        # stored (before cuts were checked) is never written again, and the store keeps it.
        if prepared.type == COMPACTION and (self.store is None or self.store.event(prepared.event_id) is None):
            check_cuts([prepared], self.next_offset, self.facts, self.between, lambda _: "event", _CUT_IN_SESSION)
        return prepared, facts

    def between(self, lo: int, hi: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The planned events at offsets lo..hi-1 of this stream's history, its ancestors' below
        its fork point included, in order: (offset, type, data)."""
        segments: list[list[tuple[int, str, dict[str, Any]]]] = []
        stream: PlannedStream | None = self
        while stream is not None and lo < hi:
            first, last = bisect.bisect_left(stream.offsets, max(lo, stream.at)), bisect.bisect_left(stream.offsets, hi)
            segments.append([(stream.offsets[i], stream.events[i].type, stream.events[i].data) for i in range(first, last)])
            hi, stream = min(hi, stream.at), stream.parent
        for segment in reversed(segments):
            yield from segment

    def add(self, type_: str, data: dict[str, Any], meta: dict[str, Any], where: Callable[[str], StoreError]) -> None:
        """Validate one event and fold its facts; `where(why)` names the source line in errors
        (raised with nothing added: the stream is as it was)."""
        try:
            prepared, facts = self.check(type_, data, meta)
        except InvalidEvent as error:
            raise where(str(error)) from None
        _add_id(self.ids, prepared.event_id, where)
        self.facts = facts
        if type_ == "run.started":
            self.open_run = data["run_id"]
        elif type_ == "run.finished":
            self.open_run = None
        while self.offset in self.records:  # the store holds a redaction record here: the event comes after it
            self.history.append(self.facts)  # (an event.redacted changes no facts)
        self.offsets.append(self.offset)
        self.events.append(prepared)
        self.history.append(self.facts)

    def message_before(self, at: int) -> bool:
        """Whether the first `at` events of this stream's history hold a message: a fork at `at`
        needs one (a branch leaving before the first message has nothing to inherit)."""
        stream: PlannedStream | None = self
        while stream is not None:
            if any(event.type == "message.appended" for event, offset in zip(stream.events, stream.offsets) if offset < at):
                return True
            at, stream = stream.at, stream.parent  # a fork's history before its own events is its parent's
        return False

    def facts_at(self, at: int) -> Facts:
        """What is pending after this stream's first `at` events (a fork at `at` starts from it)."""
        return self.history[at - self.at - 1]

    def fork(self, stream_id: str, kind: str, meta: dict[str, Any], at: int | None = None, **options: Any) -> PlannedStream:
        """A planned fork inheriting this stream's first `at` events (default: all so far).

        Tool calls still waiting at `at` are dropped from the fork's view (`unanswered="drop"`),
        unless `options` keep them waiting (`unanswered="keep"`: the branch answers them), and
        a run in progress there is not inherited, as `write_plan` asks the store.
        """
        at = self.offset if at is None else at
        facts = self.facts_at(at)
        forked: dict[str, Any] = {"options": options}
        if facts.tools and options.get("unanswered") != "keep":
            forked["dropped_tool_use_ids"] = list(facts.tools)
        return PlannedStream(stream_id, kind, {"meta": meta, "options": options}, self, at, facts=after_fork(facts, forked))


@dataclass
class Plan:
    """The streams a source becomes; with `store`, planned at the offsets they will have there
    (past the redaction records its streams hold: module doc)."""

    streams: list[PlannedStream] = field(default_factory=list)
    store: Store | None = None
    ids: set[str] = field(default_factory=set)  # every event id planned so far: each one once
    changed: list[tuple[str, int]] = field(default_factory=list)  # found by `write_plan`: the source lines (file, line)
    # of stored events the source now gives otherwise (kept as stored)
    gone: int = 0  # found by `write_plan`: stored events of its streams the source no longer gives (kept as stored)
    # event id -> the data an earlier release gave the event, where this one keeps more of its source
    # line (a response's other fields): a stored event holding that is no change of the source.
    formerly: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The events `write_plan` has added so far: each write commits as it goes, so what it added
    # before a write that failed (another writer's lock held too long) stays stored.
    written: int = 0
    # The path `file` recorded for each source file -> the path the import was given it by: what
    # the import prints (a changed line, a conflict) names the file as the user did, as a bad line does.
    given: dict[str, str] = field(default_factory=dict)

    def file(self, path: Path) -> str:
        """The path an event or a thread of this plan records for its source file `path`: the
        file's real path (`real_path`), which names it wherever it is read from."""
        recorded = real_path(path)
        self.given.setdefault(recorded, str(path))
        return recorded

    def named(self, recorded: str) -> str:
        """A source file as an event of this plan records it (`file`), named as the import was given it."""
        return self.given.get(recorded, recorded)

    def root(self, stream_id: str, created: dict[str, Any], meta: dict[str, Any], where: Callable[[str], StoreError]) -> PlannedStream:
        """A root thread; its `thread.created` event is checked now, as `add` checks the others."""
        try:
            prepared = prepare({"type": "thread.created", "data": created, "meta": meta}, "event")
        except InvalidEvent as error:
            raise where(str(error)) from None
        return self.attach(PlannedStream(stream_id, "thread", {"prepared": prepared, "meta": meta}), where)

    def drops_at_fork(self, stream_id: str) -> bool:
        """Whether the store holds `stream_id` as a fork that dropped the tool calls waiting at
        its point (`dropped_tool_use_ids`): an import made before forks could keep them. Its
        branch goes on as stored: a result for a dropped call stays left out."""
        if self.store is None:
            return False
        try:
            info = self.store.thread(stream_id)
        except ThreadNotFound:
            return False
        first = next(self.store.read(stream_id, start=info.base, stop=info.base + 1), None)
        return first is not None and bool(first.data.get("dropped_tool_use_ids"))

    def attach(self, stream: PlannedStream, where: Callable[[str], StoreError]) -> PlannedStream:
        """Add a stream (before any of its events): it learns where the store holds records in it,
        and shares the plan's event ids, so that one given twice is refused by `where` (the
        store would refuse it only after writing what came before it)."""
        if self.store is not None:
            stream.records = _records(self.store, stream.id)
        stream.ids, stream.store = self.ids, self.store
        _add_id(self.ids, _first_event_id(stream), where)
        self.streams.append(stream)
        return stream


def _add_id(ids: set[str], event_id: str, where: Callable[[str], StoreError]) -> None:
    """Add `event_id` to a plan's `ids`, refusing one it gives already."""
    if event_id in ids:
        raise where(f"meta.event_id: {event_id!r} is the id of another event of this source")
    ids.add(event_id)


def stored_sources(store: Store, root: str, events: dict[str, str] | None = None, *,
                   titles: bool = True) -> dict[str, str]:
    """Source entry id (`meta.source.uuid`) -> the stream an earlier import of the source wrote
    it into, over the thread `root` and its forks (empty when it was never imported): a
    session rewound after its import goes on along the branch the store holds. `events`, when
    given, gets each entry's event, named by the first entry it stands for (merged entries
    share one). `titles=False` leaves `title.set` events out: a source whose title names the
    message it titles (Claude Code's `leafUuid`), which may be on another branch."""
    try:
        streams = store.subtree(root)
    except ThreadNotFound:
        return {}
    out: dict[str, str] = {}
    for info in streams:
        for event in store.read(info.id, start=info.base):
            source = event.meta.get("source")
            if not isinstance(source, dict) or (not titles and event.type == "title.set"):
                continue
            first, merged = source.get("uuid"), source.get("uuids")  # the others one event stands for (merged tool
            for uuid in [first, *(merged if isinstance(merged, list) else ())]:  # results, a response's lines)
                if isinstance(uuid, str) and isinstance(first, str):
                    out.setdefault(uuid, info.id)
                    if events is not None:
                        events.setdefault(uuid, first)
    return out


def _first_event_id(stream: PlannedStream) -> str:
    return str(stream.first["meta"]["event_id"])


def _stored(store: Store, plan: Plan, stream: PlannedStream) -> int | None:
    """How many of the stream's planned events the store holds (None: not the stream itself).
    A source that is an older copy (the session as it was, a prefix of what is stored) holds
    nothing new: all of its events are stored."""
    own = _own_events(store, stream.id)
    return None if own is None else _held(plan, stream, list(own.digests), own.appended)


class _Own(NamedTuple):
    """A stored thread's own events, its first one first (redaction records left out: they
    are no source's)."""

    digests: dict[str, str]  # event id -> data digest, in order
    imported: frozenset[str]  # the ids of those an import wrote, not a caller's own appends to the thread
    appended: dict[str, tuple[int, str]]  # the caller's own appends: event id -> offset and type


def _own_events(store: Store, thread: str) -> _Own | None:
    """The thread's own events, each with its data digest, and which an import wrote (None: no
    such thread)."""
    try:
        info = store.thread(thread)
    except ThreadNotFound:
        return None
    events = [event for event in store.read(thread, start=info.base) if event.type != REDACTION]
    imported = frozenset(event.event_id for event in events if event.meta.get("origin") == "imported")
    return _Own({event.event_id: event.data_digest for event in events}, imported,
                {event.event_id: (event.offset, event.type) for event in events[1:] if event.event_id not in imported})


def _records(store: Store, thread: str) -> frozenset[int]:
    """The offsets of the thread's own redaction records (none: no such thread). Most threads
    hold none: counted first (an index lookup), the thread is read only when it holds some."""
    try:
        info = store.thread(thread)
    except ThreadNotFound:
        return frozenset()
    if store.count(thread, REDACTION, start=info.base) == 0:  # its own events only: a fork's ancestors are not read
        return frozenset()
    return frozenset(offset for offset, type_, _, _ in store.read_raw(thread, start=info.base) if type_ == REDACTION)


def _held(plan: Plan, stream: PlannedStream, ids: list[str], appended: dict[str, tuple[int, str]] | None = None) -> int:
    """`_stored`, given the ids of the stream's own events as stored (its first one first) and,
    when known, which of them the caller appended (their offsets and types)."""
    if not ids or ids[0] != _first_event_id(stream):
        if ids and ids[0].rsplit(":", 1)[0] == _first_event_id(stream).rsplit(":", 1)[0]:  # cc:KEY:created, cc:KEY:fork
            raise ImportConflict(f"thread {stream.id!r} was imported from this source as it was then, and is now "
                                 f"planned to start otherwise ({ids[0]!r}, now {_first_event_id(stream)!r}: a sub-agent "
                                 "taken as a thread of its own while it ran, before its session named it); import into "
                                 "another database, and follow a live session with --follow")
        raise ImportConflict(f"thread {stream.id!r} exists but was not imported from this source; "
                             "import into another database")
    planned = [event.event_id for event in stream.events]
    stored = min(len(ids) - 1, len(planned))  # an older copy of the source holds fewer: all of them stored, none to add
    if ids[1:stored + 1] != planned[:stored]:
        # A turn taken on the imported thread (`append`, `ask`) sits where the source's next line
        # would go: say so, since the file itself is sound and the fix is a fork, not the file.
        index, first = next((index, stored_id) for index, (stored_id, planned_id) in enumerate(zip(ids[1:], planned))
                            if stored_id != planned_id)
        if appended and first in appended:
            offset, type_ = appended[first]
            raise ImportConflict(f"thread {stream.id!r} holds an event no import wrote at offset {offset} ({type_}: "
                                 "appended by hand or by a live turn), where the source's later lines would go, so "
                                 "they cannot follow it; to go on from an imported session, fork it "
                                 f"(`threadlog fork {stream.id}`), which a later import leaves as it is; to import "
                                 "what the source added since, import it into another database")
        # Named by the first line the source now gives otherwise: in a session of thousands of
        # lines, the thread's id and the file's name left the user to find what changed.
        file, line = _source_line(plan, stream.events[index])
        where = f"{file}:{line}: " if line else ""
        raise ImportConflict(f"{where}thread {stream.id!r} holds events the source no longer has in that order "
                             f"{'from this line on ' if line else ''}(the file was rewritten, or a plain import took it "
                             "while it was being written: follow a file still being written with --follow); import it "
                             "into another database")
    return stored


def _not_elsewhere(store: Store, plan: Plan, unwritten: Iterable[tuple[PlannedStream, int | None]]) -> None:
    """Refuse `plan` if it gives an event the store holds in another thread, naming its source
    line (`Plan.named`): `unwritten` is the streams it writes, each past the `held` events the
    store holds of it (None: not even its first). Lines changed or skipped (`--skip-bad`) since
    an import may place an entry elsewhere in the tree (a branch that was a thread of its own is
    now a fork): the store refused the event only once the streams before it were written, a
    partly written import."""
    planned: dict[str, tuple[PlannedStream, dict[str, Any]]] = {}
    for stream, held in unwritten:
        if held is None:
            planned[_first_event_id(stream)] = stream, stream.first["meta"]
        planned.update((event.event_id, (stream, event.meta)) for event in stream.events[held or 0:])
    for event_id, thread in store.threads_holding(list(planned)).items():
        stream, meta = planned[event_id]
        if thread != stream.id:
            source = meta.get("source") or {}
            raise ImportConflict(f"{plan.named(str(source.get('file')))}:{source.get('line')}: its event {event_id!r} is stored in thread "
                                 f"{thread!r} and now planned in {stream.id!r}: the source's lines form another tree than "
                                 "when it was imported (a line changed, or skipped as bad); import it into another database")


def _checked(store: Store, plan: Plan, pending: dict[str, list[str]], sources: dict[str, dict[str, str]]) -> None:
    """Check `plan` against the store as the sources checked before it would leave it: `pending`
    holds the ids of the events each stream they plan would then hold, and `sources`, by root
    thread, the stream each of their source lines would be in (both updated with this plan's)."""
    unwritten: list[tuple[PlannedStream, int | None]] = []
    for stream in plan.streams:
        ids = pending.get(stream.id)
        appended = None
        if ids is None:
            own = _own_events(store, stream.id)
            ids, appended = (list(own.digests), own.appended) if own else ([], None)
        unwritten.append((stream, _held(plan, stream, ids, appended) if ids else None))
        planned = [_first_event_id(stream), *(event.event_id for event in stream.events)]
        pending[stream.id] = planned if len(planned) > len(ids) else ids
        root = stream
        while root.parent is not None:
            root = root.parent
        lines = sources.setdefault(root.id, {})
        for meta in (stream.first["meta"], *(event.meta for event in stream.events)):
            source = meta.get("source")
            if isinstance(source, dict) and isinstance(source.get("uuid"), str):
                lines.setdefault(source["uuid"], stream.id)
    _not_elsewhere(store, plan, unwritten)


def parents_first(keys: Sequence[str], parents: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    """`keys` (a file's lines, in its order) with each after its parent (`parents`: a key's,
    None for a root or a parent not among `keys`), and the keys where a cycle of parents was
    cut: of each cycle, the line first in the file, which is then taken as a root. A file in
    order comes back as it is. A line written before its parent was placed by the file's
    order: the importers took it for a root of its own, or hung it on the line before it."""
    position = {key: index for index, key in enumerate(keys)}
    placed: set[str] = set()
    ordered: list[str] = []
    cut: list[str] = []
    for key in keys:
        while True:
            chain: list[str] = []
            walked: set[str] = set()
            current: str | None = key  # None, or a key not among `keys`: no parent to place first
            while current is not None and current in parents and current not in placed and current not in walked:
                chain.append(current)
                walked.add(current)
                current = None if current in cut else parents[current]
            if current is None or current not in walked:
                break
            cycle = chain[chain.index(current):]
            cut.append(min(cycle, key=position.__getitem__))  # and walk again, it a root
        placed.update(chain)
        ordered.extend(reversed(chain))
    return ordered, cut


def _name(error: Exception, noun: str, name: str) -> None:
    """Name the source on `error`, unless its message does already (a bad line names its file
    and line: `F:1: …; the file is F` said the file twice)."""
    if name not in str(error):
        error.add_note(f"the {noun} is {name}")


def import_sources(store: Store, sources: Sequence[S], plan_one: Callable[[S, ImportSummary, dict[str, dict[str, str]], Seen], Plan],
                   size: Callable[[S], int], *, strict: bool, progress: Callable[[int, int], None] | None,
                   noun: str, name: Callable[[S], str] = str, summary: ImportSummary | None = None,
                   finished: bool = False) -> ImportSummary:
    """Plan and write each source (a session, a file) in turn; returns what they hold and added.

    `strict` (a bad line refuses the import) with more than one source: each is first planned
    and checked against the store with nothing written, as the sources before it would leave
    it (two copies of one session name the same threads), so a bad line or a conflict in any
    of them leaves the database exactly as it was; each is then planned again as it is written
    (a plan is several times its source's size: keeping them all would hold the whole import
    in memory). `plan_one(source, summary, earlier, seen)` is given, while checking, the stream
    each source line the sources before it hold would be written to (root thread -> source
    uuid -> stream; empty when writing: the store holds them then), and reads its files
    through `seen`: the writing pass reads the bytes the check read, however a file grew
    meanwhile (a session still being written; the next import reads the rest).
    A conflict with what the store holds, or an event it refuses, names the source
    (`name(source)`): the thread's id alone did not say which file was rewritten.
    `progress(done, total)` counts bytes of source (as they were when the import began), the
    checking pass too. A write the store refuses afterwards (another process changed a stream
    meanwhile) stops the import with a note on the error saying what the sources before it
    wrote.

    What is imported is counted into `summary` (a new one when None), which is returned. When
    the import raises, `summary` holds what was added before the error, the source being
    written included: its writes commit as they go, and stay (a follower counted none of a
    session whose import lost the write lock partway, and its total fell short).
    `finished` reads every file as one no program is writing (`Seen`), however recently it changed.
    """
    checked = strict and len(sources) > 1
    sizes = [size(source) for source in sources]
    total = sum(sizes) * (2 if checked else 1)
    done = 0
    seen = Seen(finished)
    pending: dict[str, list[str]] = {}  # what the sources checked so far would leave in each stream they name
    earlier: dict[str, dict[str, str]] = {}
    for source, read in zip(sources, sizes) if checked else ():
        try:
            _checked(store, plan_one(source, ImportSummary(), earlier, seen), pending, earlier)
        except ImportConflict as error:
            _name(error, noun, name(source))
            raise
        done += read
        if progress is not None:
            progress(done, total)
    pending.clear()
    earlier.clear()
    summary = ImportSummary() if summary is None else summary
    for number, (source, read) in enumerate(zip(sources, sizes)):
        part = ImportSummary()
        plan = Plan()  # written nothing yet, should planning fail
        counted = False

        def count_written() -> None:  # what its writes committed before an error stays, and is counted
            nonlocal counted
            if not counted:
                summary.added += plan.written
                counted = True

        try:
            try:
                plan = plan_one(source, part, {}, seen)
                part.events = sum(len(s.events) + 1 for s in plan.streams)
                part.added = write_plan(store, plan)
                part.changed, part.changed_lines = len(plan.changed), plan.changed
                part.gone = plan.gone
                with deferred():  # a signal handler raising mid-merge left the source counted in part
                    summary.merge(part)
                    counted = True
            except StoreError as error:  # named: an event the store refused ("not pending") said not which file gave it
                _name(error, noun, name(source))
                # Its writes before the refused one are committed (a full disk stops a file partway):
                # the refusal's own "nothing was written" is of that write alone.
                note_written(error, summary, f"{number} {noun}(s)", (name(source), plan.written), refused=True)
                raise
            except KeyboardInterrupt as error:  # Ctrl-C: what the writes committed before it stays
                note_written(error, summary, f"{number} {noun}(s)", (name(source), plan.written))
                raise
            finally:
                with deferred():  # (a follower's total fell short of what it wrote)
                    count_written()
        finally:  # a signal that landed as the count above began: counted after it
            count_written()
        done += read
        if progress is not None:
            progress(done, total)
    return summary


def _source_line(plan: Plan, event: PreparedEvent) -> tuple[str, int]:
    """The file (named as the import was given it) and line an imported event came from (its
    meta's `source`)."""
    source = event.meta.get("source") or {}
    return plan.named(str(source.get("file", ""))), int(source.get("line", 0))


def _as_formerly(plan: Plan, event: PreparedEvent, stored_digest: str) -> bool:
    """Whether the store holds `event` as an earlier release gave it (`Plan.formerly`)."""
    earlier = plan.formerly.get(event.event_id)
    return earlier is not None and prepare({"type": event.type, "data": earlier, "meta": event.meta},
                                           "event").data_digest == stored_digest


def write_plan(store: Store, plan: Plan) -> int:
    """Write the events that the store does not hold yet; returns how many were added.

    Every stream is checked against the store before the first write, so a conflict
    refuses the whole plan with nothing written. Another import of the same source may
    write a stream between that check and this write (two `threadlog import` runs at
    once): a write the store then refuses is checked again, and what the other import
    wrote is skipped, as a later import would skip it.
    """
    owned = [_own_events(store, stream.id) for stream in plan.streams]
    stored = [None if own is None else _held(plan, stream, list(own.digests), own.appended)
              for stream, own in zip(plan.streams, owned)]
    _not_elsewhere(store, plan, zip(plan.streams, stored))
    # Events the store holds with other content (by id, their data digests compared): the source
    # was edited after it was imported. Counted, and kept as stored.
    plan.changed = [_source_line(plan, event) for stream, own in zip(plan.streams, owned) if own for event in stream.events
                    if own.digests.get(event.event_id, event.data_digest) != event.data_digest
                    and not _as_formerly(plan, event, own.digests[event.event_id])]
    # Events an import wrote to its streams that the source no longer gives: a file cut shorter,
    # rotated, or an older copy of it (a caller's own appends to an imported thread are no source's).
    # Counted, and kept as stored.
    planned = {_first_event_id(stream) for stream in plan.streams} | {event.event_id for stream in plan.streams
                                                                      for event in stream.events}
    plan.gone = sum(1 for own in owned if own for event_id in own.imported if event_id not in planned)
    for stream, held in zip(plan.streams, stored):
        while True:
            try:
                for written in _write_stream(store, stream, held):
                    with deferred():  # both or neither, as the count below after a Ctrl-C reads them
                        plan.written += written
                        held = (held if held is not None else -1) + written
                break
            except KeyboardInterrupt:
                # A Ctrl-C as a write commits (its wait for the disk) surfaces once the commit has
                # returned: what that write stored is counted too, as the store holds it.
                with contextlib.suppress(StoreError):
                    now = _stored(store, plan, stream)
                    plan.written += (-1 if now is None else now) - (-1 if held is None else held)
                raise
            except StoreError:
                now = _stored(store, plan, stream)
                if now is None or (held is not None and now <= held):
                    raise  # no other import of this source moved the stream: the refusal stands
                held = now
    return plan.written


def _write_stream(store: Store, stream: PlannedStream, held: int | None) -> Iterator[int]:
    """Write `stream` past the `held` events the store holds (None: not even its first);
    yields how many events each write added."""
    if held is None:
        if stream.parent is None:
            # Not as retries: what another import of the source wrote first is refused, and skipped
            # by `write_plan`, instead of counted as added here.
            store.append_prepared(stream.id, [stream.first["prepared"]], expect="no_stream", retry=False)  # create_thread's
        else:
            store.fork(
                stream.parent.id, stream.at, fork_id=stream.id, kind=stream.kind, busy="allow", retry=False,
                **{"unanswered": "drop", **stream.first["options"]}, **stream.first["meta"],
            )
        yield 1
        held = 0
    # Each batch expects the offset planned for its first event: a redaction recorded in the
    # stream since it was planned would shift the offsets the plan wrote into its events
    # (a compaction's `through_offset`), so the write is refused instead.
    for start in range(held, len(stream.events), BATCH):
        batch = stream.events[start:start + BATCH]
        store.append_prepared(stream.id, batch, expect=stream.offsets[start], retry=False)
        yield len(batch)
