"""`verify`: every hash chain and every stored column that changes behaviour, recomputed.

A full verify reads the log once, in position order (one sequential scan, not one range
query per stream), keeping per stream only what its next event must match (`_Chain`). A
stream's chain is dropped when it reaches the stream's head, so memory grows with the number
of streams (a small tuple each: where it forks from), never with the number of events. A
fork's first event chains to its parent's event at offset k - 1, which the scan met earlier:
the fork points are known from the streams table before the scan starts, and the scan keeps
the hash and pending facts of exactly those events.

`verify(since=C)` checks only the events after checkpoint C's position, each chained onto
the stored event before it (cost proportional to the new events), and extends C over them:
the checkpoint it returns covers the whole log if C still does (`verify(checkpoint=C)`
proves that; this does not read what C covers).
"""

from __future__ import annotations

import json
import json.scanner
from hashlib import sha256 as _sha256
from sys import intern
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .backend import Backend, EventRow, StreamRow
from .errors import IntegrityError, InvalidEvent, StoreError
from .events import MAX_DEPTH
from .facts import NONE, Facts, advance, after_fork
from .packing import TYPE_CODES, unpack_hash, unpack_row
from .integrity import (GENESIS, HASH_TAG, canonical, chain_hash_in, digest, extend_log_digest, foreign_code,
                        format_checkpoint, legacy_chain_hash, parse_checkpoint)

# The JSON decoder's C scanner, without `decode`'s whitespace handling (stored data is
# canonical: no whitespace around it): (value, end), and `end` must be the text's length.
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value

Problem = tuple[int, str]  # (position, what is wrong)

_MESSAGE = TYPE_CODES["message.appended"]


@dataclass(frozen=True)
class VerifyReport:
    streams: int
    events: int
    redacted: int
    checkpoint: str | None = None  # the checkpoint proven, or (with `since`) the one extended to the log's end

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, "streams": self.streams, "events": self.events, "redacted": self.redacted}
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out


class _Lineage(NamedTuple):
    """What a stream's forks need of it: where it forks from and its derived columns."""

    parent_id: str | None
    base: int  # the offset of its first own event
    root_id: str
    depth: int
    first_message: int | None  # as stored


class _Point(NamedTuple):
    """A stored event a fork chains to: its hash (a `tl2:` one as its 32 bytes), the facts
    after it and its position."""

    hash: str | bytes
    facts: str | None
    position: int


class _Chain:
    """One stream's own events, checked in order: what the next must be, and what they said."""

    __slots__ = ("row", "prev", "facts", "facts_json", "expected", "start", "last_position", "forked_after",
                 "first_position", "first_message", "kind", "count", "redacted", "partial", "stream_field", "head",
                 "fork_offset", "points")

    def __init__(self, row: StreamRow, prev: str, facts: Facts, facts_json: str | None, expected: int,
                 forked_after: int, partial: bool = False) -> None:
        self.row = row
        self.prev, self.facts, self.facts_json = prev, facts, facts_json
        self.expected = self.start = expected
        self.last_position = 0
        self.forked_after = forked_after  # its first event must come after the parent event it chains to
        self.first_position: int | None = None
        self.first_message: int | None = None
        self.kind = "thread"
        self.count = self.redacted = 0
        self.partial = partial  # checking from the middle (since a checkpoint): no first event to see
        self.stream_field = f"{len(row.id)}:{row.id}"  # the stream's part of every header it hashes
        self.head = row.head
        self.fork_offset = row.parent_offset
        self.points: dict[int, _Point | None] | None = None  # a full verify's: its events that forks chain to

    def step(self, backend: Backend, row: EventRow) -> Problem | None:
        """Check one event (the stream's next); the problem, or None. A stored value of a
        kind the checks cannot read (a blob for text, an unknown type code, JSON that does
        not parse: raw SQL wrote it) is a problem of that event, not an exception."""
        try:
            return self._step(backend, row)
        except _UNREADABLE as error:
            return row.position, f"{row.stream_id} offset {row.offset}: {_unreadable(error)}"

    def _step(self, backend: Backend, row: EventRow) -> Problem | None:
        position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, data_digest, hash_, row_facts, \
            redacted_by = row
        info = self.row
        self.count += 1
        if offset != self.expected:
            gap = "an event before it is missing" if offset > self.expected else "offset out of sequence"
            return position, f"{stream_id} offset {offset}: expected offset {self.expected} ({gap})"
        if offset >= info.head:  # name the extra event itself, not the position after the last one
            return position, f"{stream_id} offset {offset}: beyond the stream's head {info.head} (an event was added or the head lowered)"
        if position <= self.last_position:
            return position, f"{stream_id} offset {offset}: positions out of order"
        if position <= self.forked_after:
            return position, (f"{stream_id} offset {offset}: the fork starts at position {position}, before the parent's event at position "
                              f"{self.forked_after} that it chains to")
        trust_facts = False
        recorded_facts: Facts | None = None
        stored_digest = data_digest
        if data_digest is None:  # not stored: the digest of the data, computed once here
            data_digest = _sha256(data.encode("utf-8")).hexdigest()
        if redacted_by is not None:
            self.redacted += 1
            skeleton_digest, recorded_facts, why = _check_redaction(backend, redacted_by, position)
            if why:
                return position, why
            if skeleton_digest is None:  # an early redaction, recorded without the skeleton's digest
                trust_facts = True
            elif digest(data) != skeleton_digest:
                return position, f"{stream_id} offset {offset}: the redacted row does not match the skeleton its event.redacted recorded"
        elif stored_digest is not None and digest(data) != stored_digest:
            return position, f"{stream_id} offset {offset}: data does not match its digest"
        prev = self.prev
        if hash_.startswith(HASH_TAG):
            computed = chain_hash_in(prev, self.stream_field, offset, event_id, type_, version, recorded_at, meta, data_digest)
        elif prev.startswith(HASH_TAG):
            return position, f"{stream_id} offset {offset}: an untagged (first-layout) hash follows a {HASH_TAG} one"
        else:
            computed = legacy_chain_hash(prev, position, stream_id, offset, event_id, type_, version, recorded_at, meta,
                                         data_digest)
        if computed != hash_:
            return position, (f"{stream_id} offset {offset}: hash does not match its header, its data's digest and its chain "
                              "(the data, the header or the chain was altered)")
        try:
            parsed, end = _scan(data, 0)
            if end != len(data):
                raise ValueError("extra data after the JSON value")
        except StopIteration:
            return position, f"{stream_id} offset {offset}: data is not readable JSON"
        except RecursionError:  # appends refuse it; an older release or a hand edit stored it
            return position, (f"{stream_id} offset {offset}: data nested too deeply to parse (appends refuse more than "
                              f"{MAX_DEPTH} levels); redact it")
        except ValueError:
            return position, f"{stream_id} offset {offset}: data is not readable JSON"
        if not isinstance(parsed, dict):
            return position, f"{stream_id} offset {offset}: data is not a JSON object"
        facts = self.facts
        if offset == info.parent_offset or (offset == 0 and info.parent_id is None):
            self.first_position = position
            bad_start = _check_first(info, type_, parsed)
            if bad_start:
                return position, bad_start
            if info.parent_id:
                facts = after_fork(facts, parsed)
                self.kind = parsed["options"].get("kind", "fork")
            else:
                facts = NONE
        elif recorded_facts is not None:  # too deep to read when redacted: its event.redacted says
            facts = recorded_facts
        elif trust_facts:  # its payload is gone and nothing chained says what it held
            facts = Facts.load(row_facts)
        elif type_ == "message.appended" and "tool_" not in data and "\\u" not in data \
                and isinstance(parsed.get("content"), list) and parsed.get("role") in ("user", "assistant"):
            # No tool_use or tool_result block: each names its type, which the text would spell
            # out unless written with \u escapes (appends never write them; a hand edit may).
            pass
        else:
            try:
                facts = advance(facts, type_, parsed)
            except (InvalidEvent, KeyError, TypeError, AttributeError):
                return position, f"{stream_id} offset {offset}: event contradicts the history before it"
        if facts is not self.facts:
            self.facts, self.facts_json = facts, facts.dump()
        if row_facts != self.facts_json and Facts.load(row_facts) != facts:
            return position, f"{stream_id} offset {offset}: stored pending facts were altered"
        if self.first_message is None and type_ == "message.appended":
            self.first_message = offset
        self.prev, self.last_position, self.expected = hash_, position, offset + 1
        return None

    def finish(self, parent: _Lineage | None) -> Problem | None:
        """Compare the stream's row with what its events said; the problem, or None."""
        try:
            return self._finish(parent)
        except _UNREADABLE as error:
            return self.last_position or self.row.created_position, f"{self.row.id}: the stream's row {_unreadable(error)}"

    def _finish(self, parent: _Lineage | None) -> Problem | None:
        info = self.row
        if self.expected != info.head:
            return (self.last_position + 1 if self.last_position else info.created_position,
                    f"{info.id}: head says {info.head} events but the log ends at {self.expected} "
                    f"(events missing after position {self.last_position})")
        if self.prev != info.head_hash or (info.facts != self.facts_json and Facts.load(info.facts) != self.facts):
            return (self.last_position or info.created_position,
                    f"{info.id}: the stream's head hash or pending facts disagree with its last event "
                    f"(offset {self.expected - 1})")
        bad = self._columns(parent)
        return (self.first_position or info.created_position, f"{info.id}: {bad}") if bad else None

    def _columns(self, parent: _Lineage | None) -> str | None:
        """The first derived column of the stream's row that disagrees with its events, or None."""
        info = self.row
        first_message = self.first_message
        stored = info.first_message_offset
        if self.partial and stored is not None and stored < self.start:  # set before the events checked: it stands
            first_message = stored
        if parent is not None:
            inherited = parent.first_message
            base = info.parent_offset or 0
            if inherited is not None and inherited < base:
                first_message = inherited
            root_id, depth = parent.root_id, parent.depth + 1
        else:
            root_id, depth = info.id, 0
        # last_position orders `threads()` (what `threadlog ls` and `@last` pick), so it is checked too.
        expected: tuple[tuple[str, Any], ...] = (("root_id", root_id), ("depth", depth), ("last_position", self.last_position))
        if not self.partial:  # set once, by the first event, which a partial check does not see
            expected += (("created_position", self.first_position), ("kind", self.kind))
        for column, value in expected:
            if getattr(info, column) != value:
                return f"stored {column} {getattr(info, column)!r} disagrees with the events ({value!r})"
        if info.first_message_offset != first_message:
            return f"stored first_message_offset {info.first_message_offset!r} disagrees with the events ({first_message!r})"
        return None


def _owner(lineages: dict[str, _Lineage], stream_id: str, offset: int) -> str | None:
    """The stream (of `stream_id`'s ancestry) that holds `offset` as its own event."""
    lineage = lineages.get(stream_id)
    while lineage is not None and offset < lineage.base:
        stream_id = lineage.parent_id or ""
        lineage = lineages.get(stream_id)
    return stream_id if lineage is not None else None


def _lineage(row: StreamRow) -> _Lineage:
    # Ids interned: a file's ids repeat (a parent's in each fork, a root's in every stream of
    # its tree), and a full verify holds one lineage per stream.
    parent_id = intern(row.parent_id) if row.parent_id is not None else None
    return _Lineage(parent_id, row.parent_offset or 0, intern(row.root_id), row.depth, row.first_message_offset)


def verify(backend: Backend, progress: Callable[[int, int], None] | None = None,
           only: Collection[str] | None = None, checkpoint: tuple[int, str] | None = None) -> VerifyReport:
    """Recompute every chain and every stored column that changes behaviour; raise
    `IntegrityError` naming the lowest bad position.

    `progress(done, total)` is called as events are checked. `only` checks those streams'
    own events and rows (a restore checks what it wrote). `checkpoint` (position, digest)
    is folded during the same scan: the log must still hold what it covered.
    """
    foreign = foreign_code(backend)
    if foreign is not None:
        raise IntegrityError(None, foreign)
    if only is not None:
        return _verify_streams(backend, only)
    scan = _Scan(backend)
    checked = scan.run(_Fold(checkpoint), progress)
    if scan.problems:
        position, why = min(scan.problems)
        raise IntegrityError(position, why)
    return VerifyReport(len(scan.lineages), checked, scan.redacted)


# What reading a value of the wrong kind raises (ValueError covers JSON that does not parse
# and text that does not decode).
_UNREADABLE = (TypeError, AttributeError, ValueError, KeyError)


def _unreadable(error: Exception) -> str:
    return (f"a stored value cannot be read ({type(error).__name__}: {str(error)[:200]}); "
            "the row was altered outside threadlog")


class _Scan:
    """A full verify: the streams table read twice (lineages first, then rows in creation
    order, merged with the events), the events once, in position order."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.lineages: dict[str, _Lineage] = {}
        forks: list[tuple[str, int]] = []
        for row in backend.streams():
            self.lineages[intern(row.id)] = _lineage(row)
            if row.parent_id is not None and row.parent_offset:
                forks.append((row.parent_id, row.parent_offset - 1))
        # The events forks chain to, by owner and offset; filled in as the scan meets them.
        self.points: dict[str, dict[int, _Point | None]] = {}
        for parent_id, offset in forks:
            owner = _owner(self.lineages, parent_id, offset)
            if owner is not None:
                self.points.setdefault(owner, {})[offset] = None
        self.chains: dict[str, _Chain] = {}
        self.finished: set[str] = set()  # streams checked to their head
        self.broken: set[str] = set()  # streams with a problem: their later events are not checked
        self.early: set[str] = set()  # streams met before their created_position
        self.problems: list[Problem] = []
        self.redacted = 0

    def run(self, fold: _Fold, progress: Callable[[int, int], None] | None) -> int:
        """Check every event, in position order; the number checked.

        Most events of a log are plain messages (text blocks only), and the loop checks those
        itself, on the row as stored, without decoding it first: this shortcut is what brings a
        full verify near its budget of 5 µs an event. It takes a row only when its checks pass
        and leaves every other row (any other type, a first event, a redacted row or one whose
        digest is stored, a value of another kind, a hash that does not match, any doubt) to
        `_Chain.step`, which names the problem; tests/test_verify_plain.py holds the two to the
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
        _, total = backend.counts()
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
            chain = _Chain(row, GENESIS, NONE, None, 0, 0)
        else:
            base = row.parent_offset or 0
            owner = _owner(self.lineages, row.parent_id, base - 1)
            points = self.points.get(owner) if owner is not None else None
            point = points.get(base - 1) if points is not None else None
            if point is None:
                self.fail(row.id, (row.created_position, f"fork {row.id} points at a missing parent event"))
                return
            prev = HASH_TAG + point.hash.hex() if isinstance(point.hash, bytes) else point.hash
            chain = _Chain(row, prev, Facts.load(point.facts), point.facts, base, point.position)
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
                problem = _check_stream(self.backend, stream_id)[1] or problem
            except StoreError:  # the stream holds a row reads refuse (text that is not UTF-8): the scan's problem names it
                pass
        self.problems.append(problem)
        chain = self.chains.pop(stream_id, None)
        if chain is not None:
            self.redacted += chain.redacted
        self.broken.add(stream_id)

    def finish(self, chain: _Chain) -> None:
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


def _point(values: tuple[Any, ...]) -> _Point:
    """The `_Point` of a stored row a fork chains to, its hash kept as 32 bytes when it is a `tl2:` one."""
    hash_ = values[10]
    if hash_.__class__ is not bytes:
        hash_ = unpack_hash(hash_)
        hash_ = bytes.fromhex(hash_[4:]) if hash_.startswith(HASH_TAG) else hash_
    return _Point(hash_, values[11], values[0])


class _Fold:
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


def _verify_streams(backend: Backend, only: Collection[str]) -> VerifyReport:
    """Check the named streams whole, each with one range read (a restore's few)."""
    problems: list[Problem] = []
    checked = redacted = 0
    for stream_id in only:
        chain, problem = _check_stream(backend, stream_id)
        if chain is not None:
            checked += chain.count
            redacted += chain.redacted
        if problem is not None:
            problems.append(problem)
    if problems:
        position, why = min(problems)
        raise IntegrityError(position, why)
    return VerifyReport(len(only), checked, redacted)


def _check_stream(backend: Backend, stream_id: str) -> tuple[_Chain | None, Problem | None]:
    """One stream's own events, read in offset order, and its row: (the chain, its problem)."""
    rows = backend.ancestry(stream_id)
    if not rows:
        return None, None
    chain = _chain_from(backend, rows, rows[0].parent_offset or 0)
    if isinstance(chain, tuple):
        return None, chain
    for row in backend.range(stream_id, -(2**62), None):
        problem = chain.step(backend, row)
        if problem is not None:
            return chain, problem
    return chain, chain.finish(_lineage(rows[1]) if len(rows) > 1 else None)


def _chain_from(backend: Backend, ancestry: list[StreamRow], offset: int) -> _Chain | Problem:
    """A chain for `ancestry[0]`'s own events from `offset`, starting from the stored event
    before it (its own, or for a fork's first event its parent's)."""
    row = ancestry[0]
    base = row.parent_offset or 0
    if offset == 0:
        return _Chain(row, GENESIS, NONE, None, 0, 0)
    lineages = {r.id: _lineage(r) for r in ancestry}
    owner = _owner(lineages, row.id if offset > base else (row.parent_id or ""), offset - 1)
    before = backend.event_at(owner, offset - 1) if owner is not None else None
    if before is None:
        return (row.created_position, f"fork {row.id} points at a missing parent event") if offset == base else \
            (row.created_position, f"{row.id}: the event before offset {offset} is missing")
    try:
        facts = Facts.load(before.facts)
    except _UNREADABLE as error:  # altered by hand: the check of that event names it too
        return before.position, f"{before.stream_id} offset {before.offset}: {_unreadable(error)}"
    chain = _Chain(row, before.hash, facts, before.facts, offset, before.position if offset == base else 0,
                   partial=offset > base)
    if offset > base:
        chain.last_position = before.position
    return chain


def verify_since(backend: Backend, checkpoint: str) -> VerifyReport:
    """Check every event after the checkpoint's position, chained onto the stored events
    before it, and the rows of the streams they belong to; return the checkpoint extended
    over them. Reads only the new events (and one stored event per stream they touch)."""
    upto, value = parse_checkpoint(checkpoint)
    foreign = foreign_code(backend)
    if foreign is not None:
        raise IntegrityError(None, foreign)
    last = backend.last_position()
    if last < upto:
        raise IntegrityError(last + 1, f"the log ends at position {last}, below checkpoint {checkpoint}'s {upto} "
                             "(events were removed)")
    problems: list[Problem] = []
    chains: dict[str, _Chain | None] = {}
    ancestries: dict[str, list[StreamRow]] = {}
    checked = redacted = 0
    new: list[tuple[int, str]] = []
    for row in backend.all_events(upto, None):
        new.append((row.position, row.hash))
        if row.type == "event.redacted":
            erased = _check_redacted_target(backend, row)
            if erased is not None:
                problems.append(erased)
        stream_id = row.stream_id
        if stream_id not in chains:
            ancestry = backend.ancestry(stream_id)
            if not ancestry:
                problems.append((row.position, "event belongs to no known stream"))
                chains[stream_id] = None
                continue
            ancestries[stream_id] = ancestry
            start = _chain_from(backend, ancestry, row.offset)
            if isinstance(start, tuple):
                problems.append(start)
                chains[stream_id] = None
                continue
            chains[stream_id] = start
        chain = chains[stream_id]
        if chain is None:
            continue
        problem = chain.step(backend, row)
        checked += 1
        if problem is not None:
            problems.append(problem)
            chains[stream_id] = None
    for stream_id, chain in chains.items():
        if chain is None:
            continue
        redacted += chain.redacted
        ancestry = ancestries[stream_id]
        problem = chain.finish(_lineage(ancestry[1]) if len(ancestry) > 1 else None)
        if problem is not None:
            problems.append(problem)
    if problems:
        position, why = min(problems)
        raise IntegrityError(position, why)
    extended = format_checkpoint(last, extend_log_digest(value, new))
    return VerifyReport(len(chains), checked, redacted, extended)


def _check_redacted_target(backend: Backend, row: EventRow) -> Problem | None:
    """A new `event.redacted` erased an older event: that row must point back at it."""
    try:
        data = _loads(row.data)
        target = data.get("position") if isinstance(data, dict) else None
    except (ValueError, RecursionError):
        return None  # the chain check reports unreadable data
    if not isinstance(target, int):
        return None
    erased = backend.event_at_position(target)
    if erased is None or erased.redacted_by != row.position:
        return row.position, f"the event.redacted at position {row.position} names position {target}, which it did not erase"
    skeleton = data.get("skeleton_digest")
    if isinstance(skeleton, str) and digest(erased.data) != skeleton:
        return target, "the redacted row does not match the skeleton its event.redacted recorded"
    return None


def _check_first(info: StreamRow, type_: str, data: dict[str, Any]) -> str | None:
    if info.parent_id is None:
        return None if type_ == "thread.created" else f"{info.id} does not start with thread.created"
    if type_ != "thread.forked":
        return f"fork {info.id} does not start with thread.forked"
    if data.get("parent_id") != info.parent_id or data.get("parent_offset") != info.parent_offset:
        return f"fork {info.id}: the streams table disagrees with its thread.forked event"
    return None


def _check_redaction(backend: Backend, redacted_by: int, position: int) -> tuple[str | None, Facts | None, str | None]:
    """(the skeleton digest the redaction recorded, or None for an early one; the pending
    facts it recorded, for a payload too deep to read, or None; a problem, or None)."""
    row = backend.event_at_position(redacted_by)
    try:
        data = json.loads(row.data) if row is not None and row.type == "event.redacted" else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict) or data.get("position") != position:
        return None, None, f"payload erased without a matching event.redacted (claimed position {redacted_by})"
    skeleton_digest = data.get("skeleton_digest")
    pending = data.get("pending")
    facts = Facts.load(canonical(pending)) if isinstance(pending, dict) else None
    return (skeleton_digest if isinstance(skeleton_digest, str) else None), facts, None
