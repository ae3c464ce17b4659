"""A full verify's one pass over the log (`FullScan`).

It reads the log once, in position order (one sequential scan, not one range query per
stream), keeping per stream only what its next event must match (`chaincheck.Chain`). A
stream's chain is dropped when it reaches the stream's head, so memory grows with the number
of streams (a small tuple each: where it forks from), never with the number of events. A
fork's first event chains to its parent's event at offset k - 1, which the scan met earlier:
the fork points are known from the streams table before the scan starts, and the scan keeps
the hash and pending facts of exactly those events.
"""

from __future__ import annotations

from hashlib import sha256 as _sha256
from sys import intern
from collections.abc import Callable
from typing import Any

from .backend import Backend, EventRow, StreamRow
from .chaincheck import Chain, Lineage, Point, Problem, check_stream, lineage, owner_of
from .errors import IntegrityError, StoreError
from .facts import NONE, Facts
from .integrity import GENESIS, HASH_TAG, extend_log_digest, format_checkpoint
from .packing import TYPE_CODES, unpack_hash, unpack_row

_MESSAGE = TYPE_CODES["message.appended"]


class FullScan:
    """A full verify: the streams table read twice (lineages first, then rows in creation
    order, merged with the events), the events once, in position order."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.lineages: dict[str, Lineage] = {}
        forks: list[tuple[str, int]] = []
        for row in backend.streams():
            self.lineages[intern(row.id)] = lineage(row)
            if row.parent_id is not None and row.parent_offset:
                forks.append((row.parent_id, row.parent_offset - 1))
        # The events forks chain to, by owner and offset; filled in as the scan meets them.
        self.points: dict[str, dict[int, Point | None]] = {}
        for parent_id, offset in forks:
            owner = owner_of(self.lineages.get, parent_id, offset)
            if owner is not None:
                self.points.setdefault(owner, {})[offset] = None
        self.streams = 0
        self.chains: dict[str, Chain] = {}
        self.finished: set[str] = set()  # streams checked to their head
        self.broken: set[str] = set()  # streams with a problem: their later events are not checked
        self.early: set[str] = set()  # streams met before their created_position
        self.problems: list[Problem] = []
        self.redacted = 0

    def run(self, fold: Fold, progress: Callable[[int, int], None] | None) -> int:
        """Check every event, in position order; the number checked.

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
        self.streams, total = backend.counts()
        waiting = iter(backend.streams())  # in creation order: a stream starts at its created_position
        upcoming = next(waiting, None)
        due = upcoming.created_position if upcoming is not None else _NEVER
        checked = 0
        folding = fold.value is not None
        sha256, tag, message = _sha256, HASH_TAG, _MESSAGE
        for values in backend.stored_events():
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
                self.orphan(unpack_row(values))
                continue
            checked += 1
            computed = None
            if (type_ == message and offset == chain.expected and data_digest is None and redacted_by is None
                    and offset < chain.head and position > chain.last_position and position > chain.forked_after
                    and offset != chain.fork_offset and offset != 0 and row_facts == chain.facts_json
                    and meta.__class__ is str and recorded_at.__class__ is str):
                try:
                    prev, o, v, e = chain.prev, str(offset), str(version), event_id.hex()
                    computed = sha256(
                        f"tl2\n{len(prev)}:{prev}{chain.stream_field}{len(o)}:{o}{len(e)}:{e}16:message.appended{len(v)}:{v}"
                        f"{len(recorded_at)}:{recorded_at}{len(meta)}:{meta}64:{sha256(data.encode('utf-8')).hexdigest()}"
                        .encode("utf-8")).digest()
                except (AttributeError, ValueError):  # an id or data of another kind, text that does not encode
                    pass
            if computed is not None and computed == hash_ and "tool_" not in data and "\\u" not in data:
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
                wanted[offset] = _point(values)
            if chain.expected == chain.head:
                self.finish(chain)
            if progress is not None and checked % 10_000 == 0:
                progress(checked, total)
        while upcoming is not None:  # streams whose first event never came
            self.start(upcoming)
            upcoming = next(waiting, None)
        for chain in list(chains.values()):
            self.finish(chain)
        if progress is not None:
            progress(checked, total)
        if not self.problems:
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
            owner = owner_of(self.lineages.get, row.parent_id, base - 1)
            points = self.points.get(owner) if owner is not None else None
            point = points.get(base - 1) if points is not None else None
            if point is None:
                self.fail(row.id, (row.created_position, f"fork {row.id} points at a missing parent event"))
                return
            prev = HASH_TAG + point.hash.hex() if isinstance(point.hash, bytes) else point.hash
            chain = Chain(row, prev, Facts.load(point.facts), point.facts, base, point.position)
        chain.points = self.points.get(row.id)
        self.chains[row.id] = chain

    def orphan(self, row: EventRow) -> None:
        """An event of no stream being checked: one past a finished stream's head, one of a
        stream already found bad, of no stream at all, or of a stream created later."""
        stream_id = row.stream_id
        if stream_id in self.broken:
            return
        if stream_id in self.finished:
            stream = self.backend.stream(stream_id)
            head = stream.head if stream is not None else "?"
            self.fail(stream_id, (row.position, f"{stream_id} offset {row.offset}: beyond the stream's head {head} "
                                                "(an event was added or the head lowered)"))
            return
        stream = self.backend.stream(stream_id) if stream_id in self.lineages else None
        if stream is None:
            self.fail(stream_id, (row.position, "event belongs to no known stream"))
            return
        self.start(stream)  # its row says it was created later: check it from here
        self.early.add(stream_id)
        chain = self.chains.get(stream_id)
        if chain is not None:
            problem = chain.step(self.backend, row)
            if problem is not None:
                self.fail(stream_id, problem)

    def fail(self, stream_id: str, problem: Problem) -> None:
        """Record a stream's problem, as a check of that stream alone names it: in offset order,
        which is what "first" means within a thread (the scan met it in position order)."""
        if stream_id in self.lineages:
            try:
                problem = check_stream(self.backend, stream_id)[1] or problem
            except StoreError:  # the stream holds a row reads refuse (text that is not UTF-8): the scan's problem names it
                pass
        self.problems.append(problem)
        chain = self.chains.pop(stream_id, None)
        if chain is not None:
            self.redacted += chain.redacted
        self.broken.add(stream_id)

    def finish(self, chain: Chain) -> None:
        info = chain.row
        del self.chains[info.id]
        self.redacted += chain.redacted
        parent = self.lineages.get(info.parent_id) if info.parent_id is not None else None
        problem = chain.finish(parent)
        if problem is not None:
            self.fail(info.id, problem)
        else:
            self.finished.add(intern(info.id))


_NEVER = float("inf")


def _point(values: tuple[Any, ...]) -> Point:
    """The `Point` of a stored row a fork chains to, its hash kept as 32 bytes when it is a `tl2:` one."""
    hash_ = values[10]
    if hash_.__class__ is not bytes:
        hash_ = unpack_hash(hash_)
        hash_ = bytes.fromhex(hash_[4:]) if hash_.startswith(HASH_TAG) else hash_
    return Point(hash_, values[11], values[0])


class Fold:
    """A checkpoint's digest, folded over (position, hash) as the scan goes."""

    __slots__ = ("upto", "wanted", "value", "last")

    def __init__(self, checkpoint: tuple[int, str] | None) -> None:
        self.upto, self.wanted = checkpoint if checkpoint is not None else (0, "")
        self.value: str | None = None if checkpoint is None else _START
        self.last = 0

    def add(self, position: int, hash_: str) -> None:
        if self.value is not None and position <= self.upto:
            self.value = extend_log_digest(self.value, ((position, hash_),))
            self.last = position

    def check(self) -> None:
        if self.value is None:
            return
        shown = format_checkpoint(self.upto, self.wanted)
        if self.last < self.upto:
            raise IntegrityError(self.last + 1, f"the log no longer matches checkpoint {shown}: it ends at position "
                                 f"{self.last}, below the checkpoint's {self.upto} (events were removed)")
        if self.value != self.wanted:
            raise IntegrityError(None, f"the log no longer matches checkpoint {shown}: an event at or below "
                                 f"position {self.upto} was removed, added or rewritten")


_START = "0" * 64
