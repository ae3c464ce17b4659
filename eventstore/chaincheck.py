"""One stream's hash chain, checked event by event (`Chain`): what its next event must be,
and, when it reaches its head, whether the stream's row agrees with what its events said.

`verify` runs it three ways: over the whole log in one pass (`eventstore.fullscan`), over a
few named streams (`check_stream`, one range read each), and from the middle of a stream for
the events after a checkpoint (`chain_from`).
"""

from __future__ import annotations

import json
import json.scanner
from hashlib import sha256 as _sha256
from sys import intern
from collections.abc import Callable
from typing import Any, NamedTuple

from .backend import Backend, EventRow, StreamRow
from .cuts import through_offset_problem
from .errors import InvalidEvent, StoreError, named, path_key, shown
from .events import CATALOGUE, MAX_DEPTH, UPCASTERS, upcast, validate_data
from .facts import NONE, Facts, advance, after_fork
from .integrity import GENESIS, HASH_TAG, canonical, chain_hash_in, digest, legacy_chain_hash
from .ranges import MAX_INDEX, is_index
from .skeleton import is_skeleton

# The JSON decoder's C scanner, without `decode`'s whitespace handling (stored data is
# canonical: no whitespace around it): (value, end), and `end` must be the text's length.
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads(text: str) -> Any:
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


Problem = tuple[int, str]  # (position, what is wrong)

# A redacted row holding more than a skeleton: a forged `event.redacted` can name any payload's
# digest, so the digest alone let a "redaction" put words of its own in a covered event.
NOT_A_SKELETON = ("the redacted row holds more than a redaction keeps (its text is not '[redacted]', or it keeps "
                  "what a skeleton drops): it was written outside threadlog")


def first_problem(problems: list[Problem]) -> tuple[int | None, str]:
    """The problem at the lowest position, as `IntegrityError` takes it. A position that is no
    integer (a stream row's own created_position, altered: no event to name) comes last, as
    None (the database)."""
    position, why = min(problems, key=lambda p: (0, p[0], p[1]) if p[0].__class__ is int else (1, 0, p[1]))
    return (position if position.__class__ is int else None), why


class Lineage(NamedTuple):
    """What a stream's forks need of it: where it forks from and its derived columns."""

    parent_id: str | None
    base: int  # the offset of its first own event
    root_id: str
    depth: int
    first_message: int | None  # as stored


# Only a record of the first hash layout's releases names no skeleton digest; its row's pending
# facts are then taken as stored. A tagged record without one would let them say anything.
NO_SKELETON_DIGEST = (f"records no skeleton digest, as every redaction hashed with {HASH_TAG} does: it was written outside "
                      "threadlog (and its row's pending facts would go unchecked)")


def unbound(record: EventRow) -> bool:
    """Whether an `event.redacted` of the tagged layout names no skeleton digest (only an edit
    outside threadlog writes one; the caller has found none in its data)."""
    return record.hash.__class__ is str and record.hash.startswith(HASH_TAG)


class Point(NamedTuple):
    """A stored event a fork chains to: its hash (a `tl2:` one as its 32 bytes), the facts
    after it and its position."""

    hash: str | bytes
    facts: str | None
    position: int


class Chain:
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
        self.points: dict[int, Point | bytes | None] | None = None  # a full verify's: its events that forks chain to

    def step(self, backend: Backend, row: EventRow) -> Problem | None:
        """Check one event (the stream's next); the problem, or None. A stored value of a
        kind the checks cannot read (a blob for text, an unknown type code, JSON that does
        not parse: raw SQL wrote it) is a problem of that event, not an exception."""
        try:
            return self._step(backend, row)
        except UNREADABLE as error:
            return row.position, f"{row.stream_id} offset {row.offset}: {unreadable(error)}"

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
            if not is_skeleton(type_, data):
                return position, f"{stream_id} offset {offset}: {NOT_A_SKELETON}"
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
        if ("\\ud" in data or "\\uD" in data) and not _utf8(parsed):  # only an escape spells one in UTF-8 text
            return position, (f"{stream_id} offset {offset}: data holds a lone surrogate (a \\ud800-\\udfff escape no "
                              "other pairs with), which is not UTF-8 text and no append stores: the row was altered")
        unwritten = _unwritten(type_, version, parsed, data, offset, redacted_by is None)
        if unwritten:
            return position, f"{stream_id} offset {offset}: {unwritten}"
        if type_ == "event.redacted":
            not_erased = erased_by(backend, position, parsed)
            if not_erased is not None:
                return not_erased
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
        elif type_ == "message.appended" and no_tool_blocks(data) \
                and isinstance(parsed.get("content"), list) and parsed.get("role") in ("user", "assistant"):
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

    def finish(self, parent: Lineage | None) -> Problem | None:
        """Compare the stream's row with what its events said; the problem, or None."""
        try:
            return self._finish(parent)
        except UNREADABLE as error:
            return self.last_position or self.row.created_position, f"{self.row.id}: the stream's row: {unreadable(error)}"

    def _finish(self, parent: Lineage | None) -> Problem | None:
        info = self.row
        if self.expected != info.head:
            return (self.last_position + 1 if self.last_position else info.created_position,
                    f"{info.id}: head says {info.head} events but the log ends at {self.expected} "
                    f"(events missing after position {self.last_position})")
        if self.first_position is None and not self.partial:  # head at its start: no event of its own
            first = "thread.forked" if info.parent_id is not None else "thread.created"
            return info.created_position, f"{info.id}: the stream's row has no first event ({first}); it was added outside threadlog"
        if self.prev != info.head_hash or (info.facts != self.facts_json and Facts.load(info.facts) != self.facts):
            return (self.last_position or info.created_position,
                    f"{info.id}: the stream's head hash or pending facts disagree with its last event "
                    f"(offset {self.expected - 1})")
        bad = self._columns(parent)
        return (self.first_position or info.created_position, f"{info.id}: {bad}") if bad else None

    def _columns(self, parent: Lineage | None) -> str | None:
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


def _utf8(value: Any) -> bool:
    """Whether a parsed value's text (keys too) is all UTF-8: JSON reads an escaped lone
    surrogate (`"\\ud800"`) into a str no append can store."""
    try:
        canonical(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unwritten(type_: str, version: int, data: dict[str, Any], text: str, offset: int, whole: bool) -> str | None:
    """Why neither an append nor a restore would store this event as it is, or None: a type
    this release does not know, a schema version it neither writes nor upcasts from (an older
    release's, `UPCASTERS`), or (`whole`: a payload no redaction erased) data of another shape
    than its type's, as a restore checks it (a message's is checked apart, by the facts its
    blocks give, at no cost to the plain ones). Re-chaining hides an edit from the hashes, not
    from this: the readers refuse such an event naming `verify`, and a restore refuses the
    backup `export` writes of it."""
    model = CATALOGUE.get(type_)
    if model is None:
        return f"unknown event type {named(type_)}: this release writes none (the row was altered, or a newer release wrote it)"
    current = model.schema_version
    if not 1 <= version <= current or any((type_, older) not in UPCASTERS for older in range(version, current)):
        return (f"schema_version {version!r} of {type_} is not one this release reads ({current}, the one it writes, or an "
                "older one it upcasts): the row was altered, or a newer release wrote it")
    if not whole or type_ == "message.appended":
        return None
    if version < current:  # read as the current shape, as every reader reads it
        data = upcast(type_, version, data)
    try:
        validated = validate_data(model, data, restoring=True)
    except InvalidEvent as error:
        return f"not a {type_} an append stores ({error.field}: {error.why})"
    written = canonical(validated)
    if written != text and written != canonical(data):  # the stored text is canonical, but for an early release's
        return f"not a {type_} as an append stores it ({_difference(data, validated, 'data')})"
    problem = through_offset_problem(type_, data, offset)
    return f"data.through_offset: {problem}" if problem else None


def _difference(stored: Any, written: Any, field: str) -> str:
    """Where a stored value first differs from what an append writes of it (`written`, its
    validated form), and how: the path and the two values, cut short."""
    if isinstance(stored, dict) and isinstance(written, dict):
        for key in sorted({*stored, *written}):
            if key not in written:
                return f"{field}.{path_key(key)}: {shown(stored[key])} where an append writes no such field"
            if key not in stored:
                return f"{field}.{path_key(key)}: missing, where an append writes {shown(written[key])}"
            if canonical(stored[key]) != canonical(written[key]):
                return _difference(stored[key], written[key], f"{field}.{path_key(key)}")
    if isinstance(stored, list) and isinstance(written, list) and len(stored) == len(written):
        for index, (item, kept) in enumerate(zip(stored, written)):
            if canonical(item) != canonical(kept):
                return _difference(item, kept, f"{field}[{index}]")
    return f"{field}: {shown(stored)} where an append writes {shown(written)}"


def no_tool_blocks(data: str) -> bool:
    """Whether a message's stored JSON holds no tool_use or tool_result block: each names its
    type, which the text would spell out unless written with \\u escapes (appends never write
    them; a hand edit may). The one-character searches go first: `in` finds a character with
    memchr (~45 ns in 370 characters of text) and "tool_" or "\\u" ~7x slower, so most text,
    with no "_" and no backslash in it, is cleared at a fifth of the cost of the two."""
    return ("_" not in data or "tool_" not in data) and ("\\" not in data or "\\u" not in data)


def not_an_offset(row: StreamRow) -> str:
    """What a check names for a fork row whose parent_offset is of another kind (altered by hand)."""
    return f"{row.id}: stored parent_offset {row.parent_offset!r} is not an offset"


def missing_parent_event(row: StreamRow, owner: str | None, offset: int) -> str:
    """What a check names for a fork whose parent event (the one its first event chains to) is
    gone: the fork, and the stream and offset where that event should be, as the event's own
    thread shows no gap when it was its last."""
    where = f"{owner!r} offset {offset}" if owner is not None else f"its parent {row.parent_id!r} (no such stream)"
    return f"fork {row.id} points at a missing parent event: {where}"


def owner_of(lineage_of: Callable[[str], Lineage | None], stream_id: str, offset: int) -> str | None:
    """The stream (of `stream_id`'s ancestry) that holds `offset` as its own event; `lineage_of`
    gives a stream's lineage by id (None if there is no such stream, or the parents run in a
    cycle: only raw SQL writes one, and the walk would never end)."""
    known = lineage_of(stream_id)
    seen: set[str] = set()
    while known is not None and offset < known.base:
        if stream_id in seen:
            return None
        seen.add(stream_id)
        stream_id = known.parent_id or ""
        known = lineage_of(stream_id)
    return stream_id if known is not None else None


def lineage(row: StreamRow) -> Lineage:
    # Ids interned: a file's ids repeat (a parent's in each fork, a root's in every stream of
    # its tree), and a full verify caches many lineages. A value of another kind (a blob
    # written by hand) is kept as it is, for the checks to name.
    parent_id, root_id, base = row.parent_id, row.root_id, row.parent_offset
    # A base of another kind (altered) is failed in the stream's own check; 0 keeps its forks' lookups going.
    return Lineage(intern(parent_id) if parent_id.__class__ is str else parent_id, base if base.__class__ is int else 0,
                   intern(root_id) if root_id.__class__ is str else root_id, row.depth, row.first_message_offset)


# What reading a stored value raises when an edit outside threadlog wrote it: the wrong kind
# (ValueError covers JSON that does not parse and text that does not decode), or JSON nested
# past what Python reads (threadlog writes neither).
UNREADABLE = (TypeError, AttributeError, ValueError, KeyError, RecursionError)


def unreadable(error: Exception) -> str:
    """What an `UNREADABLE` error met, in the user's words, not Python's (an exception's
    name and text said which line of threadlog read it, not what the file holds)."""
    if isinstance(error, json.JSONDecodeError):
        what = f"text that is not JSON: {error.msg.lower()} at character {error.pos}"
    elif isinstance(error, UnicodeDecodeError):
        what = "text that is not UTF-8"
    elif isinstance(error, RecursionError):
        what = "JSON nested deeper than can be read"
    else:
        what = "a value of another kind than threadlog writes there"
    return f"a stored value cannot be read ({what}); the row was altered outside threadlog"


# Every offset a stored row can hold (64-bit integers) but the two extremes: a range reads
# lo <= offset < hi, and PostgreSQL's compares with lo - 1.
_LOWEST, _HIGHEST = -(2**63) + 1, 2**63 - 1


def check_stream(backend: Backend, stream_id: str) -> tuple[Chain | None, Problem | None]:
    """One stream's own events, read in offset order, and its row: (the chain, its problem)."""
    rows = fork_point_ancestry(backend, stream_id)
    if not rows:  # no such stream: any event naming it belongs to none (the full verify's verdict)
        orphans = [row.position for row in backend.range(stream_id, _LOWEST, _HIGHEST)]
        return None, (min(orphans), "event belongs to no known stream") if orphans else None
    chain = chain_from(backend, rows, rows[0].parent_offset or 0)
    if isinstance(chain, tuple):
        return None, chain
    for row in backend.range(stream_id, _LOWEST, _HIGHEST):
        problem = chain.step(backend, row)
        if problem is not None:
            return chain, problem
    return chain, chain.finish(lineage(rows[1]) if len(rows) > 1 else None)


def fork_point_ancestry(backend: Backend, stream_id: str) -> list[StreamRow]:
    """The stream's row, then the streams up to the one holding the event its first chains to
    (for a fork at its parent's head, the parent alone): what `chain_from` and `Chain.finish`
    read of the ancestry. Two small reads, where the whole ancestry would cost each stream of a
    chain of forks its depth (a restore checks every stream it wrote). A row whose fork point
    is no offset (altered) gets the whole ancestry, as before."""
    rows = backend.ancestry(stream_id, MAX_INDEX)  # its own row alone
    if not rows or rows[0].parent_id is None:
        return rows
    base = rows[0].parent_offset
    return backend.ancestry(stream_id, base - 1 if is_index(base, 1) else 0)


def chain_from(backend: Backend, ancestry: list[StreamRow], offset: int, position: int | None = None) -> Chain | Problem:
    """A chain for `ancestry[0]`'s own events from `offset`, starting from the stored event
    before it (its own, or for a fork's first event its parent's). `position` is the stored
    position of the event at `offset`, named when the event before it is missing (as a full
    verify names the event after a gap); a fork's missing parent event is named at the fork."""
    row = ancestry[0]
    base = row.parent_offset or 0
    if offset.__class__ is not int:  # altered by hand: no event before it to look up
        return (position if position is not None else row.created_position,
                f"{row.id} offset {offset!r}: a stored value cannot be read (an offset that is no integer); "
                "the row was altered outside threadlog")
    if base.__class__ is not int:  # altered by hand (as the full verify names it)
        return position if position is not None else row.created_position, not_an_offset(row)
    if offset == 0:
        return Chain(row, GENESIS, NONE, None, 0, 0)
    lineages = {r.id: lineage(r) for r in ancestry}
    owner = owner_of(lineages.get, row.id if offset > base else (row.parent_id or ""), offset - 1)
    try:
        before = backend.event_at(owner, offset - 1) if owner is not None else None
    except StoreError:  # its text is not UTF-8: that row's own check names it (at a lower position)
        return (position if position is not None else row.created_position,
                f"{row.id} offset {offset}: the event before it cannot be read (text that is not UTF-8); "
                "the row was altered outside threadlog")
    if before is None:
        return (row.created_position, missing_parent_event(row, owner, offset - 1)) if offset == base else \
            (position if position is not None else row.created_position, f"{row.id}: the event before offset {offset} is missing")
    try:
        facts = Facts.load(before.facts)
    except UNREADABLE as error:  # altered by hand: the check of that event names it too
        return before.position, f"{before.stream_id} offset {before.offset}: {unreadable(error)}"
    chain = Chain(row, before.hash, facts, before.facts, offset, before.position if offset == base else 0,
                   partial=offset > base)
    if offset > base:
        chain.last_position = before.position
    return chain


def erased_by(backend: Backend, position: int, data: dict[str, Any]) -> Problem | None:
    """An `event.redacted` (at `position`, with `data`) erased the row it names: that row must
    point back at it. A row holding its payload again (put back with its original data, which
    still matches the chain) contradicts the record."""
    target = data.get("position")
    if not isinstance(target, int) or isinstance(target, bool):
        return None  # not one this release wrote; its row's own check names what is wrong there
    try:
        erased = backend.event_at_position(target)
    except StoreError:  # its text is not UTF-8: that row's own check names it
        return None
    if erased is None or erased.redacted_by != position:
        return position, f"the event.redacted at position {position} names position {target}, which it did not erase"
    return None


def check_start(backend: Backend, info: StreamRow, start: int) -> Problem | None:
    """A stream's row against its first event, for a check that began after it (`verify
    --since`) at offset `start`: where it forks from, its kind and where it was created (one
    event read), and a root's first message when it came before `start` (the events up to it)."""
    base = info.parent_offset if info.parent_id is not None else 0
    if base.__class__ is not int:
        return info.created_position, not_an_offset(info)
    first = backend.event_at(info.id, base)
    if first is None:
        return info.created_position, f"{info.id}: the stream's row names no first event of its own at offset {base}"
    if first.redacted_by is not None:
        return None  # its payload is gone: the full verify checks what the redaction recorded
    try:
        data = json.loads(first.data)
        bad = _check_first(info, first.type, data)
        kind = data["options"].get("kind", "fork") if info.parent_id is not None else "thread"
    except UNREADABLE:
        return first.position, f"{info.id}: its first event's data cannot be read"
    if bad is None and info.kind != kind:
        bad = f"{info.id}: stored kind {info.kind!r} disagrees with the events ({kind!r})"
    if bad is None and info.created_position != first.position:
        bad = f"{info.id}: stored created_position {info.created_position!r} disagrees with the events ({first.position})"
    if bad is None and info.parent_id is None:
        bad = _first_message_before(backend, info, start)
    return (first.position, bad) if bad else None


def _first_message_before(backend: Backend, info: StreamRow, start: int) -> str | None:
    """A root's stored first message offset below `start`, where a check from `start` took it
    as it stood: the event there must be a message, and none before it (forks may start only
    after it). Reads the events up to it, a thread's first few. A stored offset at or past
    `start` is the chain's to compare; none (no message before `start`) would cost every event
    before it to prove, and is left to the full verify."""
    stored = info.first_message_offset
    if not isinstance(stored, int) or not 0 <= stored < start:
        return None
    for row in backend.range(info.id, 0, stored + 1):
        if row.type == "message.appended":
            if row.offset == stored:
                return None
            return (f"{info.id}: stored first_message_offset {stored} disagrees with the events "
                    f"(the first message is at offset {row.offset})")
    first = next((row.offset for row in backend.range(info.id, stored + 1, start) if row.type == "message.appended"), None)
    where = f"the first is at {first}" if first is not None else f"none before offset {start}"
    return f"{info.id}: stored first_message_offset {stored} disagrees with the events (no message at offset {stored}; {where})"


def _check_first(info: StreamRow, type_: str, data: dict[str, Any]) -> str | None:
    if info.parent_id is None:
        if info.parent_offset is not None:
            return f"{info.id}: the streams table gives a root thread the fork point {info.parent_offset!r}"
        return None if type_ == "thread.created" else f"{info.id} does not start with thread.created"
    if type_ != "thread.forked":
        return f"fork {info.id} does not start with thread.forked"
    if data.get("parent_id") != info.parent_id or data.get("parent_offset") != info.parent_offset:
        return f"fork {info.id}: the streams table disagrees with its thread.forked event"
    return None


def _check_redaction(backend: Backend, redacted_by: int, position: int) -> tuple[str | None, Facts | None, str | None]:
    """(the skeleton digest the redaction recorded, or None for an early one; the pending
    facts it recorded, for a payload too deep to read, or None; a problem, or None)."""
    try:
        row = backend.event_at_position(redacted_by)
    except StoreError:  # its text is not UTF-8: the scan names that row too
        return None, None, f"payload erased by the event.redacted at position {redacted_by}, whose text is not UTF-8 (altered)"
    try:
        data = json.loads(row.data) if row is not None and row.type == "event.redacted" else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict) or data.get("position") != position:
        return None, None, f"payload erased without a matching event.redacted (claimed position {redacted_by})"
    skeleton_digest = data.get("skeleton_digest")
    if not isinstance(skeleton_digest, str) and row is not None and unbound(row):
        return None, None, f"payload erased by the event.redacted at position {redacted_by}, which {NO_SKELETON_DIGEST}"
    pending = data.get("pending")
    facts = Facts.load(canonical(pending)) if isinstance(pending, dict) else None
    return (skeleton_digest if isinstance(skeleton_digest, str) else None), facts, None
