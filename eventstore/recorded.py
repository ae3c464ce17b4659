"""What reading the log gives back: `RecordedEvent`, and the stream metadata `ThreadInfo`."""

from __future__ import annotations

import json
from hashlib import sha256 as _sha256
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, NamedTuple

from .backend import EventRow, StreamRow
from .errors import StoreError, Unreadable, named
from .events import CATALOGUE, MAX_DEPTH, upcast


# `make_tuple(RecordedEvent, values)` builds a named tuple in C, without the Python-level
# `__new__` that `RecordedEvent(...)` runs: about half the cost, on the path of every event
# read and appended.
make_tuple: Callable[..., Any] = tuple.__new__


class RecordedEvent(NamedTuple):
    """One stored event, as `read`, `read_all` and `append` return it (an immutable named tuple)."""

    position: int
    stream_id: str
    offset: int
    event_id: str
    type: str
    data: dict[str, Any]
    meta: dict[str, Any]
    recorded_at: str
    hash: str
    schema_version: int
    data_digest: str
    redacted: bool = False

    @property
    def origin(self) -> str:
        """Where it came from: `live` (the default), `primed` (placed before any run) or `imported`."""
        return str(self.meta.get("origin") or "live")

    @property
    def time(self) -> str:
        """When it happened: the source's time for imported events, else when it was recorded."""
        return str(self.meta.get("occurred_at") or self.recorded_at)

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {
            "position": self.position,
            "stream_id": self.stream_id,
            "offset": self.offset,
            "event_id": self.event_id,
            "type": self.type,
            "schema_version": self.schema_version,
            "data": self.data,
            "meta": self.meta,
            "recorded_at": self.recorded_at,
            "data_digest": self.data_digest,
            "hash": self.hash,
            "redacted": self.redacted,
        }


def decode(type_: str, version: int, text: str, position: int | None = None) -> dict[str, Any]:
    """An event's data from its stored JSON, upcast to the current version if it is older.

    The one place the read path parses data: `read`, `read_data` and every fold use it.
    Data that is not a JSON object, or of a version this release cannot upcast, is refused
    as altered (appends never store either; raw SQL can, and the folds would then fail as
    AttributeError or KeyError wherever they first touch it). `position` names the event then.
    """
    try:
        data: dict[str, Any] = _loads(text)
    except (ValueError, TypeError) as error:  # not JSON, or not text: appends never store that
        raise altered(_which(position), error) from None
    if data.__class__ is not dict:
        raise altered(_which(position), f"its data is {type(data).__name__} JSON, not an object")
    current = current_version(type_, version)
    if version == current:
        return data
    if version.__class__ is not int or version < 1:  # a later version (not written by this release) reads as it is
        raise altered(_which(position), f"its schema_version is {short(version)}, not a version (an integer >= 1)")
    return upcast(type_, version, data)


# `json.loads` without its argument checks: what it calls for a str and no options.
_loads = json.JSONDecoder().decode


_VERSIONS: dict[Any, int] = {}  # model class -> its schema_version (a pydantic class attribute is slow to read)


def current_version(type_: str, default: int) -> int:
    """The schema version `type_`'s model is at now (`default` for a type not in the catalogue)."""
    model = CATALOGUE.get(type_)
    if model is None:
        return default
    version = _VERSIONS.get(model)
    if version is None:
        version = _VERSIONS[model] = model.schema_version
    return version


def from_row(row: EventRow) -> RecordedEvent:
    """Build from a stored row, upcasting old schema versions (on the path of every `read`)."""
    position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, digest, hash_, _, redacted_by = row
    # SQLite keeps a value of any kind in any column: only raw SQL stores one of another kind.
    # `_EVENT_KINDS`, spelled out as one expression: its loop would cost more on every read.
    if not (position.__class__ is int and stream_id.__class__ is str and offset.__class__ is int
            and event_id.__class__ is str and type_.__class__ is str and version.__class__ is int
            and data.__class__ is str and meta.__class__ is str and recorded_at.__class__ is str
            and hash_.__class__ is str and (digest is None or digest.__class__ is str)
            and (redacted_by is None or redacted_by.__class__ is int)):
        raise _altered_event(row)
    if digest is None:  # not stored: the digest of the data
        digest = _sha256(data.encode("utf-8")).hexdigest()
    try:
        parsed, meta_parsed = decode(type_, version, data, position), {} if meta == "{}" else json.loads(meta)
    except RecursionError:  # appends refuse it; an older release or a hand edit stored it
        raise too_deep(position) from None
    except (ValueError, TypeError) as error:  # the meta is not JSON, or not text
        raise altered(_which(position), error) from None
    if meta_parsed.__class__ is not dict:
        raise altered(_which(position), f"its meta is {type(meta_parsed).__name__} JSON, not an object")
    recorded: RecordedEvent = make_tuple(RecordedEvent, (
        position, stream_id, offset, event_id, type_, parsed, meta_parsed, recorded_at, hash_,
        current_version(type_, version), digest, redacted_by is not None,
    ))
    return recorded


# What each column of an event's row holds when threadlog wrote it (as `EVENT_COLUMNS` decodes it).
_EVENT_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "position": ((int,), "a position"), "stream_id": ((str,), "text"), "offset": ((int,), "an offset"),
    "event_id": ((str,), "text"), "type": ((str,), "an event type"), "schema_version": ((int,), "a version"),
    "data": ((str,), "JSON text"), "meta": ((str,), "JSON text"), "recorded_at": ((str,), "a time"),
    "data_digest": ((str, type(None)), "a digest or NULL"), "hash": ((str,), "a hash"),
    "redacted_by": ((int, type(None)), "a position or NULL"),
}


def _which(position: Any) -> str:
    return f"the event at position {position}" if position.__class__ is int else "an event"


def _altered_event(row: EventRow) -> Unreadable:
    """What a reader raises for an event row holding a value of another kind, naming it."""
    which = _which(row.position)
    for column, (kinds, expected) in _EVENT_KINDS.items():
        value = getattr(row, column)
        if value.__class__ not in kinds:
            return Unreadable(f"{which} cannot be read: its {column} is {short(value)}, not {expected}; the row was "
                              "altered outside threadlog, and `threadlog verify` names it")
    return Unreadable(f"{which} cannot be read: the row was altered outside threadlog, and `threadlog verify` names it")


def short(value: Any) -> str:
    """`repr(value)`, cut to 60 characters (an altered value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Altered(Unreadable):
    """An event whose stored data or meta does not parse (`altered`); `why` says how."""

    def __init__(self, which: str, why: str) -> None:
        self.why = why
        super().__init__(f"{which} cannot be read: {why}; the row was altered outside threadlog, and `threadlog verify` "
                         "names it")


def altered(which: str, error: Exception | str) -> Altered:
    """What a reader raises for an event whose stored data or meta does not parse: only an
    edit of the file outside threadlog stores one (`verify` names every such row)."""
    why = error if isinstance(error, str) else (f"its stored data or meta is not JSON text ({type(error).__name__}: "
                                                f"{str(error)[:200]})")
    return Altered(which, why)


def too_deep(position: int) -> Unreadable:
    """What a reader raises for an event whose JSON is nested too deeply for Python to handle.

    Appends refuse JSON nested more than `MAX_DEPTH` levels, so only an older release or a
    hand edit of the file can have stored one; near 1,000 levels `json` and every recursive
    walk raise RecursionError, which readers turn into this error naming the event.
    """
    return Unreadable(
        f"the event at position {position} holds JSON nested too deeply to read (appends refuse more than "
        f"{MAX_DEPTH} levels; an older release or a hand edit stored it); redact that position to read past it"
    )


def _count(value: Any, lo: int) -> bool:
    return value.__class__ is int and value >= lo


def _wrong_column(row: StreamRow) -> tuple[str, str] | None:
    """(the column, what it should hold) of the first value of another kind in a stream row, or None."""
    if row.id.__class__ is not str:
        return "id", "text"
    if row.parent_id is not None and row.parent_id.__class__ is not str:
        return "parent_id", "text or NULL"
    if row.parent_offset is not None and not _count(row.parent_offset, 1):  # a fork inherits thread.created
        return "parent_offset", "a fork point (an offset >= 1) or NULL"
    if row.root_id.__class__ is not str:
        return "root_id", "text"
    # A row added by hand with no events (head 0, created_position NULL, last_position 0) reads
    # as an empty thread, as such a row always did: verify names it (tests/test_verify_agreement.py).
    if not _count(row.head, 0):
        return "head", "a length (an integer >= 0)"
    if row.parent_offset is not None and row.parent_offset > row.head:  # the fork's own events would read as none
        return "parent_offset", f"a fork point at or below its head {row.head}"
    if not _count(row.depth, 0):  # no bound: forks at offset 1 of forks at offset 1 nest without growing
        return "depth", "a depth (an integer >= 0)"
    if row.created_position is not None and not _count(row.created_position, 1):
        return "created_position", "a position or NULL"
    if row.kind.__class__ is not str:
        return "kind", "text"
    if row.head_hash.__class__ is not str:
        return "head_hash", "text"
    if row.facts is not None and row.facts.__class__ is not str:
        return "facts", "text or NULL"
    if row.first_message_offset is not None and not _count(row.first_message_offset, 0):
        return "first_message_offset", "an offset or NULL"
    if not _count(row.last_position, 0):
        return "last_position", "a position"
    return None


def altered_stream(row: StreamRow, column: str, expected: str, value: Any = None) -> Unreadable:
    """What a reader raises for a stream row holding a value of another kind (`_wrong_column`):
    its `column`, or a column the row does not carry (SQLite's listing key), given as `value`."""
    value = short(getattr(row, column) if column in row._fields else value)
    if row.id.__class__ is str:
        which = f"the stream row of {row.id!r}"
    else:
        created = row.created_position
        which = "a stream row" + (f" (created at position {created})" if created.__class__ is int else "")
    return Unreadable(f"{which} was altered outside threadlog: its {column} is {value}, not {expected}; "
                      "`threadlog verify` names where")


def acyclic(rows: list[StreamRow]) -> list[StreamRow]:
    """An ancestry as `Backend.ancestry` reads it, refused when its last row's parent is a row
    already in it: a cycle of parents, which only raw SQL writes (`backend.chain_order`)."""
    last = rows[-1] if rows else None
    if last is not None and last.parent_id is not None and any(row.id == last.parent_id for row in rows):
        whose = "itself" if last.parent_id == last.id else f"{short(last.parent_id)}, which is forked from it"
        raise StoreError(f"the stream row of {short(last.id)} was altered outside threadlog: its parent_id names {whose} "
                         "(a cycle of forks); `threadlog verify` names where")
    return rows


def unbroken(chain: list[ThreadInfo], start: int = 0) -> list[ThreadInfo]:
    """An ancestry (the thread first) read for the history from offset `start` on, refused when
    that history reaches offsets no stream holds: below the first own event of its last
    stream, a fork whose parent's row is gone (`parent_gone`), or between a parent's last
    event and the fork point of its child on the chain, a parent holding fewer events than
    that (`_parent_short`). Only raw SQL writes either: those events are in no thread the file
    holds. The offsets the file holds are read as asked. It reads nothing: the ancestry query
    stops at a missing parent as at the stream holding `start`."""
    for at, (child, parent) in enumerate(zip(chain, chain[1:])):
        if parent.head < child.base:  # each stream on the chain begins past `start`: the gap is read
            raise Unreadable(_parent_short(chain[:at + 2]))
    top = chain[-1]
    if top.parent_id is None or top.base <= start:
        return chain
    # The chain is whole up to `top` (each stream on it begins past `start`).
    raise Unreadable(parent_gone(chain))


def _parent_short(chain: list[ThreadInfo]) -> str:
    """What is missing from the thread of `chain`, an ancestry whose last stream holds fewer
    events than the fork point of the one before it (only raw SQL writes that: a fork's
    parent_id or parent_offset altered, or its parent's row): the offsets between."""
    fork, parent = chain[-2], chain[-1]
    whose = _descent(chain, fork)
    held = "1 event" if parent.head == 1 else f"{parent.head} events"
    gap = its_offsets(parent.head, fork.base)
    return (f"thread {named(chain[0].id)} {whose} {named(parent.id)} at offset {fork.base}, which holds only {held}: {gap} "
            "cannot be read (a stream row was altered outside threadlog); `threadlog verify` names where")


def its_offsets(lo: int, hi: int) -> str:
    """The offsets lo..hi-1 of a thread, as a refusal names them missing."""
    return f"its event at offset {lo}" if hi - lo == 1 else f"its events at offsets {lo}..{hi - 1}"


def _descent(chain: list[ThreadInfo], fork: ThreadInfo) -> str:
    """How the thread of `chain` comes from the parent of `fork`, a stream on it, in a refusal's
    words: forked from it, or descended from `fork`, a fork of it."""
    return "is forked from" if fork is chain[0] else f"descends from {named(fork.id)}, a fork of"


def parent_gone(chain: list[ThreadInfo]) -> str:
    """What is missing from the thread of `chain`, an ancestry ending at a fork whose parent's
    row is gone: which thread is gone, and how many of the thread's first events cannot be
    read (those below the lowest fork point on the chain, every one the missing parent's).
    The rows alone cannot tell how: the parent's row deleted (its events are then left without
    their thread), or the fork's parent_id altered to name a thread that never was (`verify`
    then names the fork); either is said, and `verify` names which."""
    top = chain[-1]
    whose = _descent(chain, top)
    missing = min(info.base for info in chain)
    first = "its first event" if missing == 1 else f"its first {missing} events"
    return (f"thread {named(chain[0].id)} {whose} {named(top.parent_id)}, which is not in the file: {first} cannot be read "
            "(that thread's row was deleted, or the fork's parent_id altered, outside threadlog); `threadlog verify` names "
            "where")


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A stream's row: where it forks from and how long its logical history is."""

    id: str
    parent_id: str | None
    parent_offset: int | None
    root_id: str
    depth: int
    head: int
    created_position: int
    kind: str
    head_hash: str
    last_position: int = 0  # the position of its latest own event (its last activity)

    @classmethod
    def from_row(cls, row: StreamRow) -> ThreadInfo:
        """The row as read; a value of another kind in it (only raw SQL stores one: SQLite keeps
        what it is given, even NULL in a TEXT PRIMARY KEY) is refused, naming the row and
        column, instead of failing later as a TypeError in whatever compares or formats it."""
        wrong = _wrong_column(row)
        if wrong is not None:
            raise altered_stream(row, *wrong)
        return cls(row.id, row.parent_id, row.parent_offset, row.root_id, row.depth, row.head, row.created_position,
                   row.kind, row.head_hash, row.last_position)

    @property
    def base(self) -> int:
        """The offset of this stream's first own event."""
        return self.parent_offset or 0

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "parent_offset": self.parent_offset,
            "root_id": self.root_id,
            "depth": self.depth,
            "head": self.head,
            "kind": self.kind,
            "created_position": self.created_position,
            "head_hash": self.head_hash,
            "last_position": self.last_position,
        }
