"""The hash chain, `verify`, which recomputes it, and checkpoints, which pin the whole log.

Each event's hash covers its header (stream, offset, event id, type, schema version,
time, meta) and the SHA-256 digest of its data, chained to the hash of the previous event
in the thread's logical history. A fork's first event chains to the parent's event at
offset k - 1, so the chains form a Merkle DAG, as in git: a fork can be verified without
trusting anything its parent did after the fork point. Hashes are tagged with their
layout (`tl2:`); untagged ones were written by the first layout and verify under it.

Because the chain covers the data's digest rather than the data, `redact` can erase a
payload and every hash still holds. What is left in its place (a skeleton keeping only the
ids the history's structure needs) is bound by the digest its `event.redacted` records,
and the pending facts are recomputed from it like any other row's.

A chain proves each thread's history up to its head, but not that a whole thread (or a
thread's tail) is still there: whoever can write the file can delete a fork, or cut and
re-chain a tail. `checkpoint` folds every event's position and hash into one short string
to keep elsewhere; `verify(checkpoint=C)` proves the log still holds all of it, unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from .backend import Backend, StoredSnapshot
from .errors import IntegrityError, InvalidEvent, StoreError
from .events import MAX_DEPTH
from .facts import Facts, advance, after_fork
from .recorded import ThreadInfo

GENESIS = ""


# One encoder for every call: `json.dumps` with these options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical(value: Any) -> str:
    """The one JSON spelling of a value: sorted keys, no spaces, UTF-8, no NaN."""
    return _CANONICAL(value)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# The tag every hash of the current layout starts with. A hash without a tag was written by
# the first layout (`legacy_chain_hash`) and keeps verifying under it.
HASH_TAG = "tl2:"


def chain_hash(
    prev: str,
    stream_id: str,
    offset: int,
    event_id: str,
    type_: str,
    schema_version: int,
    recorded_at: str,
    meta: str,
    data_digest: str,
) -> str:
    """`tl2:` + SHA-256 of the event's header, each field written as `<length>:<value>`.

    The length prefixes make the encoding injective: no choice of ids, type or meta can
    move a boundary between fields and keep the hash. The global position is not hashed,
    so a thread exported from one database and restored into another keeps its hashes;
    positions are bound by the order checks of `verify` and by `checkpoint`.
    """
    o, v = str(offset), str(schema_version)
    header = (
        f"tl2\n{len(prev)}:{prev}{len(stream_id)}:{stream_id}{len(o)}:{o}{len(event_id)}:{event_id}"
        f"{len(type_)}:{type_}{len(v)}:{v}{len(recorded_at)}:{recorded_at}{len(meta)}:{meta}"
        f"{len(data_digest)}:{data_digest}"
    )
    return HASH_TAG + hashlib.sha256(header.encode("utf-8")).hexdigest()


def legacy_chain_hash(
    prev: str,
    position: int,
    stream_id: str,
    offset: int,
    event_id: str,
    type_: str,
    schema_version: int,
    recorded_at: str,
    meta: str,
    data_digest: str,
) -> str:
    """The first layout: fields joined by newlines (ambiguous when a field holds one).

    Only `verify` uses it, for events stored before the tagged layout; nothing new is
    hashed this way.
    """
    header = f"{prev}\n{position}\n{stream_id}\n{offset}\n{event_id}\n{type_}\n{schema_version}\n{recorded_at}\n{meta}\n{data_digest}"
    return hashlib.sha256(header.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class VerifyReport:
    streams: int
    events: int
    redacted: int
    checkpoint: str | None = None  # the checkpoint proven, when one was given

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, "streams": self.streams, "events": self.events, "redacted": self.redacted}
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out


@dataclass
class _Stream:
    """A stream's stored row, as verify needs it, and what its events say it should be."""

    info: ThreadInfo
    facts: str | None
    first_message: int | None


def verify(backend: Backend, progress: Callable[[int, int], None] | None = None,
           only: Collection[str] | None = None) -> VerifyReport:
    """Recompute every chain and every stored column that changes behaviour; raise
    `IntegrityError` naming the lowest bad position.

    `progress(done, total)` is called after each stream with the events checked so far.
    Streams are visited in creation order, so a fork's parent is checked before it.
    `only` checks those streams' own events and rows (a restore checks what it wrote).
    """
    foreign = foreign_code(backend)
    if foreign is not None:
        raise IntegrityError(None, foreign)
    streams = {row.id: _Stream(ThreadInfo.from_row(row), row.facts, row.first_message_offset) for row in backend.streams()}
    problems: list[tuple[int, str]] = []
    checked = redacted = 0
    _, total = backend.counts()
    for stream in streams.values():
        if only is not None and stream.info.id not in only:
            continue
        found = _verify_stream(backend, streams, stream)
        checked += found[0]
        redacted += found[1]
        if found[2]:
            problems.append(found[2])
        if progress is not None:
            progress(checked, total)
    if only is None and total != checked:
        orphan = backend.orphan_position()
        if orphan is not None:
            problems.append((orphan, "event belongs to no known stream"))
    if problems:
        position, why = min(problems)
        raise IntegrityError(position, why)
    return VerifyReport(len(streams), checked, redacted)


def foreign_code(backend: Backend) -> str | None:
    """What is wrong when the file holds triggers, or None. Threadlog creates none; one planted
    in the file runs inside every append and redaction (it could keep a copy of an erased
    payload, or alter what is written), and no chain can see what it does."""
    names = backend.triggers()
    if not names:
        return None
    shown = ", ".join(repr(name) for name in names[:3])
    return (f"the file holds trigger {shown}, which threadlog does not create: it runs inside threadlog's writes "
            "(and could keep a copy of what redact erases); inspect it, then DROP TRIGGER it")


def _owner(streams: dict[str, _Stream], stream_id: str, offset: int) -> str | None:
    stream = streams.get(stream_id)
    info = stream.info if stream else None
    while info is not None and offset < info.base:
        parent = streams.get(info.parent_id or "")
        info = parent.info if parent else None
    return info.id if info is not None else None


def _verify_stream(backend: Backend, streams: dict[str, _Stream], stream: _Stream) -> tuple[int, int, tuple[int, str] | None]:
    """(events checked, redacted, first problem) for one stream's own events."""
    info = stream.info
    prev, facts = GENESIS, Facts()
    forked_after = 0  # a fork's first event must come after the parent event it chains to
    if info.parent_id is not None:
        owner = _owner(streams, info.parent_id, info.base - 1)
        parent_row = backend.event_at(owner, info.base - 1) if owner else None
        if parent_row is None:
            return 0, 0, (info.created_position, f"fork {info.id} points at a missing parent event")
        prev, facts = parent_row.hash, Facts.load(parent_row.facts)
        forked_after = parent_row.position
    expected, last_position, count, redacted = info.base, 0, 0, 0
    first_position: int | None = None
    first_message: int | None = None
    kind = "thread"
    for row in backend.range(info.id, -(2**62), None):
        position, _, offset, event_id, type_, version, data, meta, recorded_at, data_digest, hash_, row_facts, redacted_by = row
        count += 1
        where = f"{info.id} offset {offset}"
        if offset != expected:
            gap = "an event before it is missing" if offset > expected else "offset out of sequence"
            return count, redacted, (position, f"{where}: expected offset {expected} ({gap})")
        if offset >= info.head:  # name the extra event itself, not the position after the last one
            return count, redacted, (position, f"{where}: beyond the stream's head {info.head} "
                                               "(an event was added or the head lowered)")
        if position <= last_position:
            return count, redacted, (position, f"{where}: positions out of order")
        if position <= forked_after:
            return count, redacted, (position, f"{where}: the fork starts at position {position}, before the parent's "
                                               f"event at position {forked_after} that it chains to")
        trust_facts = False
        recorded_facts: Facts | None = None
        if redacted_by is not None:
            redacted += 1
            skeleton_digest, recorded_facts, why = _check_redaction(backend, redacted_by, position)
            if why:
                return count, redacted, (position, why)
            if skeleton_digest is None:  # an early redaction, recorded without the skeleton's digest
                trust_facts = True
            elif digest(data) != skeleton_digest:
                return count, redacted, (position, f"{where}: the redacted row does not match the skeleton its event.redacted recorded")
        elif digest(data) != data_digest:
            return count, redacted, (position, f"{where}: data does not match its digest")
        if hash_.startswith(HASH_TAG):
            computed = chain_hash(prev, info.id, offset, event_id, type_, version, recorded_at, meta, data_digest)
        elif prev.startswith(HASH_TAG):
            return count, redacted, (position, f"{where}: an untagged (first-layout) hash follows a {HASH_TAG} one")
        else:
            computed = legacy_chain_hash(prev, position, info.id, offset, event_id, type_, version, recorded_at, meta, data_digest)
        if computed != hash_:
            return count, redacted, (position, f"{where}: hash does not match its header, its data's digest and its chain "
                                               "(the data, the header or the chain was altered)")
        try:
            parsed = json.loads(data)
        except RecursionError:  # appends refuse it; an older release or a hand edit stored it
            return count, redacted, (position, f"{where}: data nested too deeply to parse "
                                     f"(appends refuse more than {MAX_DEPTH} levels); redact it")
        except ValueError:
            return count, redacted, (position, f"{where}: data is not readable JSON")
        if not isinstance(parsed, dict):
            return count, redacted, (position, f"{where}: data is not a JSON object")
        if offset == info.base:
            first_position = position
            bad_start = _check_first(info, type_, parsed)
            if bad_start:
                return count, redacted, (position, bad_start)
            if info.parent_id:
                facts = after_fork(facts, parsed)
                kind = parsed["options"].get("kind", "fork")
            else:
                facts = Facts()
        elif recorded_facts is not None:  # too deep to read when redacted: its event.redacted says
            facts = recorded_facts
        elif trust_facts:  # its payload is gone and nothing chained says what it held
            facts = Facts.load(row_facts)
        else:
            try:
                facts = advance(facts, type_, parsed)
            except (InvalidEvent, KeyError, TypeError, AttributeError):
                return count, redacted, (position, f"{where}: event contradicts the history before it")
        if Facts.load(row_facts) != facts:
            return count, redacted, (position, f"{where}: stored pending facts were altered")
        if first_message is None and type_ == "message.appended":
            first_message = offset
        prev, last_position, expected = hash_, position, offset + 1
    if expected != info.head:
        return count, redacted, (
            last_position + 1 if last_position else info.created_position,
            f"{info.id}: head says {info.head} events but the log ends at {expected} (events missing after position {last_position})",
        )
    if prev != info.head_hash or Facts.load(stream.facts) != facts:
        return count, redacted, (
            last_position or info.created_position,
            f"{info.id}: the stream's head hash or pending facts disagree with its last event (offset {expected - 1})",
        )
    bad_column = _check_columns(streams, stream, first_position, first_message, kind, last_position)
    if bad_column:
        return count, redacted, (first_position or info.created_position, f"{info.id}: {bad_column}")
    return count, redacted, None


def _check_columns(
    streams: dict[str, _Stream], stream: _Stream, first_position: int | None, first_message: int | None, kind: str,
    last_position: int,
) -> str | None:
    """Compare the stream row's derived columns with what its events (and its parent's row,
    verified on its own) say they must be; the name of the first that differs, or None."""
    info = stream.info
    parent = streams.get(info.parent_id or "")
    if parent is not None:
        inherited = parent.first_message
        if inherited is not None and inherited < info.base:
            first_message = inherited
        expected = {"root_id": parent.info.root_id, "depth": parent.info.depth + 1}
    else:
        expected = {"root_id": info.id, "depth": 0}
    # last_position orders `threads()` (what `threadlog ls` and `@last` pick), so it is checked too.
    expected.update(created_position=first_position, kind=kind, last_position=last_position)
    for column, value in expected.items():
        if getattr(info, column) != value:
            return f"stored {column} {getattr(info, column)!r} disagrees with the events ({value!r})"
    if stream.first_message != first_message:
        return f"stored first_message_offset {stream.first_message!r} disagrees with the events ({first_message!r})"
    return None


def _check_first(info: ThreadInfo, type_: str, data: dict[str, Any]) -> str | None:
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


# -- snapshots ------------------------------------------------------------------------------

# A snapshot is a cache, but readers resume from it: a forged one changes what `thread_state`
# and `anthropic_request` say (a system prompt, a title, which messages there are) while every
# chain holds. Projections register how to fold a state from the events alone, so that
# `verify` can compare every snapshot it can rebuild. (Registered by the projection that
# owns it when imported: eventstore imports no projection.)
Refold = Callable[[Any, str, int], Any]  # (store, stream id, offset) -> the state, JSON-ready
_REFOLDS: dict[tuple[str, int], Refold] = {}


def register_refold(projection: str, version: int, refold: Refold) -> None:
    """Let `verify` rebuild `projection`'s snapshots of `version` from the events."""
    _REFOLDS[(projection, version)] = refold


def check_snapshot(store: Any, row: StoredSnapshot) -> str | None:
    """Why the cached state differs from the events' (None when it matches, or when no
    registered projection can rebuild it: this release never reads such a state)."""
    refold = _REFOLDS.get((row.projection, row.version))
    if refold is None:
        return None
    where = f"the {row.projection} snapshot of {row.stream_id!r} at offset {row.offset}"
    try:
        cached = canonical(json.loads(row.state))
    except (ValueError, RecursionError):
        return f"{where} is not readable JSON"
    try:
        rebuilt = canonical(refold(store, row.stream_id, row.offset))
    except StoreError as error:
        return f"{where} cannot be rebuilt from the events ({error})"
    if cached != rebuilt:
        return f"{where} disagrees with the events it caches"
    return None


# -- checkpoints ------------------------------------------------------------------------------

CHECKPOINT_TAG = "tlc1"
_CHECKPOINT_START = "0" * 64


def log_digest(rows: Iterable[tuple[int, str]], upto: int) -> str:
    """Fold (position, hash) pairs, in position order, into one digest: every event up to
    `upto` with its position. Removing, adding, reordering or rewriting any of them changes it."""
    value = _CHECKPOINT_START
    sha256 = hashlib.sha256
    for position, hash_ in rows:
        if position > upto:
            break
        value = sha256(f"{value}|{position}|{hash_}".encode()).hexdigest()
    return value


def format_checkpoint(position: int, value: str) -> str:
    return f"{CHECKPOINT_TAG}:{position}:{value}"


def parse_checkpoint(text: Any) -> tuple[int, str]:
    """(position, digest) from a checkpoint string; `InvalidEvent` if it is not one."""
    parts = text.strip().split(":") if isinstance(text, str) else []
    if (
        len(parts) != 3
        or parts[0] != CHECKPOINT_TAG
        or not parts[1].isdigit()
        or len(parts[2]) != 64
        or any(c not in "0123456789abcdef" for c in parts[2])
    ):
        shown = text if isinstance(text, str) and len(text) < 200 else type(text).__name__
        raise InvalidEvent(
            "checkpoint", f"{shown!r} is not a checkpoint (expected {CHECKPOINT_TAG}:<position>:<64 hex digits>, as `checkpoint` prints)"
        )
    return int(parts[1]), parts[2]
