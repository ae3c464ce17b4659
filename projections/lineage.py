"""Provenance: `lineage` (the fork tree around a thread), `blame` (where each message the
model sees came from) and `diff` (two threads from their common ancestor).

Offsets are logical: a fork at k shares offsets 0..k-1 with its parent, so two threads
agree up to the first offset where their segments come from different streams. `diff`
finds that point from the two ancestries alone (O(depth)), without reading events below it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from eventstore import RecordedEvent, Store, StoreError, ThreadInfo, segments
from eventstore.ranges import check_index
from eventstore.recorded import Altered, decode

from .dropped import Located, dropped_whole, locate
from .state import fold_state
from .stops import cut_short


@dataclass(frozen=True, slots=True)
class LineageEntry:
    """One thread of the tree: `relation` is `ancestor`, `self` or `descendant`."""

    id: str
    relation: str
    parent_id: str | None
    parent_offset: int | None
    depth: int
    kind: str
    head: int

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return asdict(self)


def _entry(info: ThreadInfo, relation: str) -> LineageEntry:
    return LineageEntry(info.id, relation, info.parent_id, info.parent_offset, info.depth, info.kind, info.head)


def lineage(store: Store, thread: str) -> list[LineageEntry]:
    """The root down to `thread` (each with the offset it was forked at), then every
    descendant of `thread`, depth first in creation order."""
    chain = store.ancestry(thread)
    out = [_entry(info, "ancestor") for info in reversed(chain[1:])]
    out.append(_entry(chain[0], "self"))
    kids: dict[str | None, list[ThreadInfo]] = {}
    for info in store.subtree(thread)[1:]:
        kids.setdefault(info.parent_id, []).append(info)
    stack = list(reversed(kids.get(thread, [])))
    while stack:
        info = stack.pop()
        out.append(_entry(info, "descendant"))
        stack.extend(reversed(kids.get(info.id, [])))
    return out


@dataclass(frozen=True, slots=True)
class BlameEntry:
    """Where one message of the model view came from. `kind` is `message`, `summary` (from
    a compaction event) or `fork_note` (from a thread.forked event)."""

    index: int
    kind: str
    role: str
    stream_id: str
    offset: int
    position: int
    time: str
    actor: str | None
    origin: str
    inherited: bool

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return asdict(self)


def iter_blame(store: Store, thread: str, at: int | None = None, start: int = 0) -> Iterator[BlameEntry]:
    """`blame` one entry at a time, in memory that does not grow with the thread; from entry
    `start` on.

    The fold runs without message bodies (it gives the fork note, the compaction and the
    dropped tool calls); the messages of the view are then streamed from the store: those
    at or after the compaction point (and the fork note), less any whose every block is a
    tool call a fork dropped, as `thread_state(...).messages` holds them. The messages before
    `start` are counted from their stored rows, unread: a page of the last entries of a thread
    of 100,000 events decoded every one before it (4.9 s).
    """
    check_index("start", start)
    _, fold, at = fold_state(store, thread, at, bodies=False)
    index = 0
    lo = 0
    if fold.note is not None:
        if index >= start:
            yield _blame_entry(index, "fork_note", "user", _event(store, thread, fold.note.offset), thread)
        index, lo = index + 1, fold.note.offset
    if fold.compaction is not None:
        if index >= start:
            yield _blame_entry(index, "summary", "user", _event(store, thread, fold.compaction["offset"]), thread)
        index, lo = index + 1, max(lo, fold.compaction["through_offset"])
    dropped = locate(store, thread, fold.dropped) if fold.dropped else {}
    lo, index = _counted(store, thread, lo, at, dropped, index, start)
    for event in store.read(thread, lo, at):
        if event.type != "message.appended":
            continue
        if event.offset in dropped and dropped_whole(event.data.get("content") or [], dropped[event.offset]):
            continue  # a fork dropped every block of it: not in the view
        yield _blame_entry(index, "message", event.data.get("role", "user"), event, thread)
        index += 1


def _counted(store: Store, thread: str, lo: int, at: int, dropped: Located, index: int, start: int) -> tuple[int, int]:
    """(the offset of the message of the view at entry `start`, or `at`; the entry it is): the
    messages from offset `lo` (entry `index`) counted from their stored rows. Only one a fork
    dropped a tool call of is decoded (it is out of the view when it holds nothing else)."""
    for offset, type_, version, text in store.read_raw(thread, lo, at):
        if type_ != "message.appended":
            continue
        if index >= start:
            return offset, index
        if offset in dropped:
            try:
                data = decode(type_, version, text)
            except (RecursionError, Altered) as error:  # named by its position, as the readers name it
                raise store.unreadable(thread, offset, error) from None
            if dropped_whole(data.get("content") or [], dropped[offset]):
                continue
        index += 1
    return at, index


def blame(store: Store, thread: str, at: int | None = None) -> list[BlameEntry]:
    """For each message `thread_state(...).messages` holds: its event's stream, offset,
    global position, time, actor and origin; `inherited` when a parent's stream holds it.
    `iter_blame` gives the same entries without holding them all."""
    return list(iter_blame(store, thread, at))


def _event(store: Store, thread: str, offset: int) -> RecordedEvent:
    """The event the view took a fork note or summary from. The view may come from a snapshot,
    which still holds an event that rows altered outside threadlog no longer lead to (a fork's
    parent renamed): refused by name, where `next` raised StopIteration out of a generator."""
    for event in store.read(thread, offset, offset + 1):
        return event
    raise StoreError(f"thread {thread!r} has no event at offset {offset}, which its state shows: the file was altered "
                     "outside threadlog; `threadlog verify` names where")


def _blame_entry(index: int, kind: str, role: str, event: RecordedEvent, thread: str) -> BlameEntry:
    return BlameEntry(index, kind, role, event.stream_id, event.offset, event.position, event.time,
                      event.meta.get("actor"), event.origin, event.stream_id != thread)


@dataclass(frozen=True, slots=True)
class DiffSide:
    """One thread of a `Diff`: its id, its length, and its messages past the fork point."""

    thread: str
    head: int
    # {offset, stream_id, role, content} of messages past the fork point, and the `stop_reason` and
    # `stop_details` of an answer that has them (a refused answer's say why it was refused)
    messages: list[dict[str, Any]]
    # Whether messages follow those it holds (a `limit` left them out): not in `Diff.to_json`.
    more: bool = field(default=False, compare=False)

    def cut_short(self, index: int) -> str | None:
        """What `messages[index]` says after its blocks when it was cut short
        (`projections.stops.cut_short`): a paused answer only as its thread's last message,
        never as the last one a `limit` kept."""
        return cut_short(self.messages[index], last=not self.more and index == len(self.messages) - 1)


@dataclass(frozen=True, slots=True)
class Diff:
    """`common_ancestor` holds the last event both threads share (None when they share
    none); both histories agree on offsets 0..`fork_offset`-1."""

    common_ancestor: str | None
    fork_offset: int
    a: DiffSide
    b: DiffSide

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        fields = asdict(self)
        for side in ("a", "b"):
            del fields[side]["more"]
        return fields


def common_prefix(a: list[ThreadInfo], b: list[ThreadInfo]) -> tuple[str | None, int]:
    """(the stream holding the last shared event, how many leading events are shared)."""
    seg_a, seg_b = segments(a), segments(b)
    owner, shared = None, 0
    for (sa, lo_a, hi_a), (sb, _, hi_b) in zip(seg_a, seg_b):
        if sa != sb:
            break
        end_a = a[0].head if hi_a is None else hi_a
        end_b = b[0].head if hi_b is None else hi_b
        end = min(end_a, end_b)
        if end > lo_a:
            owner, shared = sa, end
        if end_a != end_b:
            break
    return owner, shared


# What a diff side keeps of how an answer ended, beside its content.
_STOPPED = ("stop_reason", "stop_details")


def _side(store: Store, thread: str, head: int, start: int, limit: int | None) -> DiffSide:
    messages = (
        {"offset": e.offset, "stream_id": e.stream_id, "role": e.data.get("role"), "content": e.data.get("content"),
         **{key: e.data[key] for key in _STOPPED if key in e.data}}
        for e in store.read(thread, start)
        if e.type == "message.appended"
    )
    kept = list(itertools.islice(messages, None if limit is None else limit + 1))  # one more: whether any follow
    return DiffSide(thread, head, kept[:limit], limit is not None and len(kept) > limit)


def diff(store: Store, a: str, b: str, limit: int | None = None) -> Diff:
    """Compare two threads: their common ancestor and fork point, then each side's own
    messages (the events at or after the fork point); with `limit`, only the first `limit`
    messages of each side are read (a fork of a long thread otherwise reads all of it)."""
    check_index("limit", limit, what="a count", optional=True)
    chain_a, chain_b = store.ancestry(a), store.ancestry(b)
    owner, shared = common_prefix(chain_a, chain_b)
    return Diff(owner, shared, _side(store, a, chain_a[0].head, shared, limit),
                _side(store, b, chain_b[0].head, shared, limit))
