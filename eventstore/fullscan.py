"""A full verify's one pass over the log (`FullScan`).

It reads the log once, in position order (one sequential scan, not one range query per
stream), keeping per stream only what its next event must match (`chaincheck.Chain`). A
stream's chain is dropped when it reaches the stream's head, so memory follows the streams
being written at once, not the number of events or of streams. A fork's first event chains
to its parent's event at offset k - 1, which the scan met earlier: the fork points are known
from the streams table before the scan starts, and the scan keeps the hash and pending facts
of those events until the last fork chaining to each has started (at most `KEPT_POINTS` of
them; a fork past those reads its point from the file). On a file of 2.2M events and 202,000
streams, 200,000 of them forks, the peak fell from 166 MB to 77 MB when the scan stopped
keeping every stream's lineage and every point to the end, and kept most points as one
bytes object.
"""

from __future__ import annotations

from hashlib import sha256 as _sha256
from sys import intern
from collections.abc import Callable
from typing import Any, NamedTuple

from .backend import Backend, EventRow, StreamRow
from .chaincheck import (UNREADABLE, Chain, Lineage, Point, Problem, check_stream, lineage, missing_parent_event, no_tool_blocks,
                         not_an_offset, owner_of, unreadable)
from .errors import IntegrityError, StoreError
from .events import CATALOGUE
from .facts import NONE, Facts
from .integrity import GENESIS, HASH_TAG, Checkpoint, event_tag, extend_log_digest
from .packing import TYPE_CODES, unpack_hash, unpack_row

_MESSAGE = TYPE_CODES["message.appended"]
# The header fields of a message's type and schema version, as `chain_hash_in` writes them: a
# message of an older version (stored before its model changed) is left to `Chain.step`.
_MESSAGE_VERSION = CATALOGUE["message.appended"].schema_version
_MESSAGE_FIELDS = f"16:message.appended{len(str(_MESSAGE_VERSION))}:{_MESSAGE_VERSION}"
KEPT_POINTS = 250_000  # fork points a full verify keeps in memory (~140 bytes each): see `FullScan`
_CACHED_LINEAGES = 10_000


class FullScan:
    """A full verify: the streams table read twice (fork points first, then rows in creation
    order, merged with the events), the events once, in position order.

    Its memory follows the streams being checked at once and the fork points not yet taken,
    not every stream of the file: a stream's lineage (what its forks need of its row) is read
    when a fork needs it and kept in a bounded cache (`lineage`), and a fork point is dropped
    once the last fork chaining to it has started. At most `kept_points` points are kept (the
    first forks read: those created first, in a table that keeps creation order); a fork past
    those reads its point from the file when it starts (`read_point`, an index lookup: ~20-40
    µs against ~1 µs, so only for files of that many forks). tests/test_verify_fork_points.py holds the two ways to the same verdicts.
    """

    def __init__(self, backend: Backend, kept_points: int = KEPT_POINTS, part: Part | None = None) -> None:
        self.backend = backend
        self.part = part
        self.lineages: dict[str, Lineage] = {}  # a cache: see `lineage`
        # The events forks chain to, by owner and offset; filled in as the scan meets them, and
        # dropped when taken. `sharing` counts the forks beyond the first that chain to one.
        self.points: dict[str, dict[int, Point | bytes | None]] = {}
        self.sharing: dict[tuple[str, int], int] = {}
        kept = 0
        # Streams whose created_position is no position (altered: NULL, text), which cannot
        # take their turn in the scan: each is failed before it starts, named as a check of
        # that stream alone names it.
        self.unplaced: list[StreamRow] = []
        # Read in the order the backend keeps them (no sort: SQLite's sort of 202,000 streams
        # took 0.45-0.9 s, and each part of a split verify sorted them twice). When that is
        # creation order, as appends leave it, `run` reads them that way again (`in_order`).
        self.in_order = True
        last: tuple[Any, Any] | None = None
        for row in backend.streams(stored=True, part=part):
            if self.in_order:
                key = (row.created_position, row.id)
                try:
                    self.in_order = last is None or key > last
                except TypeError:  # a value of another kind (altered): `run` has the backend sort them
                    self.in_order = False
                last = key
            if not _placed(row):
                self.unplaced.append(row)
                continue
            if row.parent_id is not None and row.parent_offset:
                offset = row.parent_offset - 1
                owner = owner_of(self.lineage, row.parent_id, offset)
                if owner is not None:
                    wanted = self.points.setdefault(owner, {})
                    if offset in wanted:
                        self.sharing[(owner, offset)] = self.sharing.get((owner, offset), 0) + 1
                    elif kept < kept_points:
                        wanted[offset] = None
                        kept += 1
        self.streams = 0
        self.chains: dict[str, Chain] = {}
        # Streams with a problem: their later events are not checked. Each with how far its events
        # were checked (the offset its chain expected next when the problem was found).
        self.broken: dict[str, int] = {}
        self.early: set[str] = set()  # streams met before their created_position
        self.problems: list[Problem] = []
        self.redacted = 0
        # A part's streams begun in the part before (`Part`): each stream's state where this
        # part took it up (`Resumed`), and the chains of those that reached the end of this part.
        self.resumed: dict[str, Resumed] = {}
        self.handed_on: dict[str, Chain] = {}

    def mine(self, row: StreamRow) -> bool:
        """Whether this scan starts the stream (a part starts those created in its range; the
        first part also those whose created_position is no position): the streams the backend
        gives it (`Backend.streams(part=...)`), for a stream met otherwise."""
        part = self.part
        if part is None:
            return True
        if row.created_position.__class__ is not int:
            return not part.later
        return (row.created_position > part.mid) == part.later

    def run(self, fold: Fold, progress: Callable[[int, int], None] | None, counts: tuple[int, int] | None = None) -> int:
        """Check every event, in position order; the number checked. `counts` are the log's
        (streams, events) when the caller read them already in this read transaction (counting
        2.7M events takes ~0.8 s).

        Most events of a log are plain messages (text blocks only), and the loop checks those
        itself, on the row as stored, without decoding it first: this shortcut is what brings a
        full verify near its budget of 5 µs an event. It takes a row only when its checks pass
        and leaves every other row (any other type, a first event, a redacted row or one whose
        digest is stored, a value of another kind, a hash that does not match, any doubt) to
        `Chain.step`, which names the problem; tests/test_verify_plain.py holds the two to the
        same verdicts. Its header is `chain_hash_in`'s, field for field, with the type's field
        written out (the row's type code is a message's).

        It does not parse the data, because nothing it checks needs the parse: the row's hash
        matched, and the hash covers the data's digest, so the data is, byte for byte, what
        was hashed when the event was appended (an append refuses a payload that is not a valid
        message). What the parse gives `step` is the pending facts after the event, and a
        message changes them only through a `tool_use` or `tool_result` block, whose type the
        text spells out (no "tool_" and no \\u escape in it: no such block, the facts stay);
        a message's first-message offset needs only its type. A payload that does not parse
        and still matches its hash was hashed by whoever stored it, which is a rewrite of the
        chain: `verify` passes a consistent rewrite anyway, and a checkpoint catches it.
        """
        backend, chains = self.backend, self.chains
        self.streams, total = backend.counts() if counts is None else counts
        for row in self.unplaced:
            self.fail(row.id, (row.created_position, _unplaced(row)))
        # In creation order: a stream starts at its created_position.
        waiting = (row for row in backend.streams(stored=self.in_order, part=self.part) if _placed(row))
        upcoming = next(waiting, None)
        due = upcoming.created_position if upcoming is not None else _NEVER
        checked = 0
        folding = fold.value is not None
        sha256, tag, message, message_version, message_fields = _sha256, HASH_TAG, _MESSAGE, _MESSAGE_VERSION, _MESSAGE_FIELDS
        part = self.part
        if part is not None and part.later:
            self.take_points(part.mid)
        events = backend.stored_events() if part is None else (
            backend.stored_events(part.mid) if part.later else backend.stored_events(0, part.mid))
        for values in events:
            position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, data_digest, hash_, row_facts, \
                redacted_by = values
            if folding:
                fold.add(position, unpack_hash(hash_))
            if due <= position:
                while upcoming is not None and upcoming.created_position <= position:
                    self.start(upcoming)
                    upcoming = next(waiting, None)
                due = upcoming.created_position if upcoming is not None else _NEVER
            chain = chains.get(stream_id)
            if chain is None:
                chain = self.orphan(unpack_row(values))
                if chain is None:
                    continue
            checked += 1
            computed = None
            if (type_ == message and offset == chain.expected and data_digest is None and redacted_by is None
                    and offset < chain.head and position > chain.last_position and position > chain.forked_after
                    and offset != chain.fork_offset and offset != 0 and row_facts == chain.facts_json
                    and meta.__class__ is str and recorded_at.__class__ is str and version == message_version):
                try:
                    prev, o, e = chain.prev, str(offset), event_id.hex()
                    computed = sha256(
                        f"tl2\n{len(prev)}:{prev}{chain.stream_field}{len(o)}:{o}{len(e)}:{e}{message_fields}"
                        f"{len(recorded_at)}:{recorded_at}{len(meta)}:{meta}64:{sha256(data.encode()).hexdigest()}".encode()
                    ).digest()
                except (AttributeError, ValueError):  # an id or data of another kind, text that does not encode
                    pass
            if computed is not None and computed == hash_ and no_tool_blocks(data):
                chain.count += 1
                if chain.first_message is None:
                    chain.first_message = offset
                chain.prev, chain.last_position, chain.expected = tag + computed.hex(), position, offset + 1
            else:
                problem = chain.step(backend, unpack_row(values))
                if problem is not None:
                    self.fail(stream_id, problem)
                    continue
            wanted = chain.points
            if wanted is not None and offset in wanted:
                wanted[offset] = _point(position, hash_, row_facts)
            if chain.expected == chain.head:
                self.finish(chain)
            if progress is not None and checked % 10_000 == 0:
                progress(checked, total)
        while upcoming is not None:  # streams whose first event never came
            self.start(upcoming)
            upcoming = next(waiting, None)
        if part is None or part.later:  # the first part's chains go on in the next (`splitscan`)
            for chain in list(chains.values()):
                self.finish(chain)
        if progress is not None:
            progress(checked, total)
        if not self.problems and (part is None or part.later):  # the first part's fold goes on past the cut
            fold.check()
        return checked

    def start(self, row: StreamRow) -> None:
        """Begin checking a stream whose first event is due (at its created_position)."""
        if row.id in self.early:  # met before its turn (its row says it was created later)
            self.early.discard(row.id)
            return
        if row.parent_id is None:
            chain = Chain(row, GENESIS, NONE, None, 0, 0)
        else:
            base = row.parent_offset or 0
            owner = owner_of(self.lineage, row.parent_id, base - 1)
            points = self.points.get(owner) if owner is not None else None
            kept = points is not None and base - 1 in points
            if points is not None and kept and (points[base - 1] is not None or self.part is None):
                point = points[base - 1]
            else:  # not kept, or (in a later part) met by the part before
                point = self.read_point(owner, base - 1, row.created_position) if owner is not None else None
            if point is None:
                self.fail(row.id, (row.created_position, missing_parent_event(row, owner, base - 1)))
                return
            if kept:
                self.taken(owner or "", base - 1)
            if isinstance(point, bytes):
                point = Point(point[8:], None, int.from_bytes(point[:8], "big", signed=True))
            prev = HASH_TAG + point.hash.hex() if isinstance(point.hash, bytes) else point.hash
            try:
                facts = Facts.load(point.facts)
            except UNREADABLE as error:  # altered by hand: the check of that event names it too
                self.fail(row.id, (row.created_position, f"fork {row.id}, the event it forks from: {unreadable(error)}"))
                return
            chain = Chain(row, prev, facts, point.facts, base, point.position)
        chain.points = self.points.get(row.id)
        self.chains[row.id] = chain

    def take_points(self, mid: int) -> None:
        """A later part's kept fork points in the part before, read at once (each would be an
        index lookup when its fork starts: `read_point`). The part before checks those events."""
        for owner, offset, position, hash_, facts in self.backend.fork_points(mid, mid):
            wanted = self.points.get(owner)
            if wanted is not None and offset in wanted and wanted[offset] is None:
                wanted[offset] = _point(position, hash_, facts)

    def taken(self, owner: str, offset: int) -> None:
        """A fork started from `owner`'s event at `offset`: drop the point if no other fork needs it."""
        others = self.sharing.pop((owner, offset), 0)
        if others:
            self.sharing[(owner, offset)] = others - 1
        else:
            del self.points[owner][offset]

    def read_point(self, owner: str, offset: int, before: int) -> Point | None:
        """The point of a fork the scan kept none for, read from the file, if the scan has checked
        that event (what a kept point holds; else None: the fork points at a missing event)."""
        chain = self.chains.get(owner)
        if (chain is not None and chain.expected <= offset) or self.broken.get(owner, _NEVER) <= offset:
            return None  # not reached, or its stream went bad before it
        row = self.backend.event_at(owner, offset)
        if row is None or row.position >= before:  # not met yet: its stream has not started
            return None
        return Point(row.hash, row.facts, row.position)  # checked: its text is the chain's

    def lineage(self, stream_id: str) -> Lineage | None:
        """What forks need of a stream's row (None if there is no such stream), read when first
        needed and cached: most forks of a file chain to a few threads."""
        found = self.lineages.get(stream_id)
        if found is None:
            row = self.backend.stream(stream_id)
            if row is None:
                return None
            if len(self.lineages) >= _CACHED_LINEAGES:
                self.lineages.clear()
            found = self.lineages[intern(stream_id)] = lineage(row)
        return found

    def orphan(self, row: EventRow) -> Chain | None:
        """An event of no stream being checked: one past a finished stream's head, one of a
        stream already found bad, of no stream at all, or of a stream created later. In a
        later part, one of a stream the part before began: its chain, taken up, to check it."""
        stream_id = row.stream_id
        if stream_id in self.broken:
            return None
        stream = self.backend.stream(stream_id)
        if stream is None:
            self.fail(stream_id, (row.position, "event belongs to no known stream"))
            return None
        part = self.part
        if (part is not None and part.later and stream_id not in self.resumed and not self.mine(stream)
                and stream.created_position.__class__ is int):
            return self.resume(stream, row)
        if stream.created_position.__class__ is not int:  # altered: the first part fails the stream (`unplaced`)
            return None
        if stream_id in self.early or stream.created_position <= row.position:  # started, and not broken: finished
            self.fail(stream_id, (row.position, f"{stream_id} offset {row.offset}: beyond the stream's head {stream.head} "
                                                "(an event was added or the head lowered)"))
            return None
        self.start(stream)  # its row says it was created later: check it from here
        self.early.add(stream_id)
        chain = self.chains.get(stream_id)
        if chain is not None:
            problem = chain.step(self.backend, row)
            if problem is not None:
                self.fail(stream_id, problem)
        return None

    def fail(self, stream_id: str, problem: Problem) -> None:
        """Record a stream's problem, as a check of that stream alone names it: in offset order,
        which is what "first" means within a thread (the scan met it in position order)."""
        try:
            problem = check_stream(self.backend, stream_id)[1] or problem
        except StoreError:  # the stream holds a row reads refuse (text that is not UTF-8): the scan's problem names it
            pass
        self.problems.append(problem)
        chain = self.chains.pop(stream_id, None)
        if chain is not None:
            self.redacted += chain.redacted
        self.broken[stream_id] = chain.expected if chain is not None else 0

    def resume(self, stream: StreamRow, row: EventRow) -> Chain | None:
        """Take up, in a later part, a stream the part before began, at `row`: from its stored
        event before `row` (which the part before checks), or from its start if it had none
        there. The chain, for `row` to be checked next; None if it cannot be taken up."""
        offset, stream_id = row.offset, stream.id
        start = (stream.parent_offset or 0) if stream.parent_id is not None else 0
        if offset == start:
            self.start(stream)
            chain = self.chains.get(stream_id)
            if chain is None:
                return None  # the start failed
            self.resumed[stream_id] = Resumed(offset, chain.prev, chain.facts_json, 0)
            return chain
        before = self.backend.event_at(stream_id, offset - 1)
        if before is None or before.position > self.part.mid:  # type: ignore[union-attr]
            self.fail(stream_id, (row.position, f"{stream_id} offset {offset}: no event before it in the part before"))
            return None
        try:
            facts = Facts.load(before.facts)
        except UNREADABLE as error:  # altered by hand: the part before checks that event and names it
            self.fail(stream_id, (before.position, f"{stream_id} offset {before.offset}: {unreadable(error)}"))
            return None
        chain = Chain(stream, before.hash, facts, before.facts, offset, 0)
        chain.last_position = before.position
        chain.points = self.points.get(stream_id)
        self.chains[stream_id] = chain
        self.resumed[stream_id] = Resumed(offset, before.hash, before.facts, before.position)
        return chain

    def finish(self, chain: Chain) -> None:
        info = chain.row
        del self.chains[info.id]
        if info.id in self.resumed:  # the part before saw its start: `splitscan` finishes it
            self.handed_on[info.id] = chain
            return
        self.redacted += chain.redacted
        parent = self.lineage(info.parent_id) if info.parent_id is not None else None
        problem = chain.finish(parent)
        if problem is not None:
            self.fail(info.id, problem)


_NEVER = float("inf")


def _placed(row: StreamRow) -> bool:
    """Whether the scan can place the stream: an id, a position to start it at and, for a fork,
    an offset to chain it at (altered values of another kind are failed before the scan)."""
    return (row.id.__class__ is str and row.created_position.__class__ is int
            and (row.parent_offset is None or row.parent_offset.__class__ is int))


def _unplaced(row: StreamRow) -> str:
    """What keeps the scan from placing the stream (`_placed`)."""
    if row.id.__class__ is not str:  # SQLite lets a TEXT PRIMARY KEY hold NULL, or any other kind
        return f"a stream row's id is {row.id!r}, not text (the row was altered outside threadlog)"
    if row.created_position.__class__ is not int:
        return f"{row.id}: stored created_position {row.created_position!r} is not a position"
    return not_an_offset(row)


def _point(position: int, hash_: Any, facts: str | None) -> Point | bytes:
    """What a fork needs of the stored row it chains to: its position and the 32 bytes of its
    `tl2:` hash in one bytes object when nothing is pending after it (most: a third of the
    memory of a `Point`, and a file of forks keeps one per fork), else a `Point`."""
    if hash_.__class__ is bytes and facts is None and -(2**63) <= position < 2**63:
        packed: bytes = position.to_bytes(8, "big", signed=True) + hash_
        return packed
    if hash_.__class__ is not bytes:
        hash_ = unpack_hash(hash_)
        hash_ = bytes.fromhex(hash_[4:]) if hash_.startswith(HASH_TAG) else hash_
    return Point(hash_, facts, position)


class Part(NamedTuple):
    """One of two parts of a full verify run in two processes (`eventstore.splitscan`): the
    events at positions up to `mid` and the streams created there, or (`later`) those after."""

    mid: int
    later: bool


class Resumed(NamedTuple):
    """Where a later part took up a stream the part before began: the offset of its first event
    there, and the hash, pending facts and position of the stored event before it (0 if none),
    which the part before must have checked and ended with."""

    offset: int
    prev: str
    facts: str | None
    position: int


class Fold:
    """A checkpoint's digest, folded over (position, hash) as the scan goes."""

    __slots__ = ("given", "upto", "wanted", "value", "last", "last_hash")

    def __init__(self, checkpoint: Checkpoint | None) -> None:
        self.given = checkpoint
        self.upto, self.wanted = (checkpoint.position, checkpoint.digest) if checkpoint is not None else (0, "")
        self.value: str | None = None if checkpoint is None else _START
        self.last = 0
        self.last_hash = ""

    def add(self, position: int, hash_: str) -> None:
        if self.value is not None and position <= self.upto:
            self.value = extend_log_digest(self.value, ((position, hash_),))
            self.last, self.last_hash = position, hash_

    def add_after(self, backend: Backend, after: int) -> None:
        """Fold the stored hashes after position `after`, up to the checkpoint's (a split verify's
        later part: `splitscan`)."""
        if self.value is not None:
            for position, hash_ in backend.hashes(self.upto, after):
                self.add(position, hash_)

    def check(self) -> None:
        if self.value is None or self.given is None:
            return
        shown = self.given
        if self.last < self.upto:
            # `last` is the last position folded, at or below the checkpoint's: the log may go on past it.
            raise IntegrityError(self.last + 1, f"the log no longer matches checkpoint {shown}: it holds no event after "
                                 f"position {self.last} up to the checkpoint's {self.upto} (events were removed)")
        if self.value != self.wanted:
            raise IntegrityError(None, f"the log no longer matches checkpoint {shown}: an event at or below "
                                 f"position {self.upto} was removed, added or rewritten")
        if self.given.last is not None and event_tag(self.upto, self.last_hash) != self.given.last:
            raise IntegrityError(None, f"checkpoint {shown} does not hold together: the log matches its digest, and its last "
                                 f"part names another event than the one at position {self.upto} (the checkpoint was altered)")


_START = "0" * 64
