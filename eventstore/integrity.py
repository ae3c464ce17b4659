"""The hash chain, and `verify`, which recomputes it.

Each event's hash covers its header (position, stream, offset, event id, type, schema
version, time, meta) and the SHA-256 digest of its data, chained to the hash of the
previous event in the thread's logical history. A fork's first event chains to the
parent's event at offset k - 1, so the chains form a Merkle DAG, as in git: a fork can be
verified without trusting anything its parent did after the fork point.

Because the chain covers the data's digest rather than the data, `redact` can erase a
payload and every hash still holds; the row then points at the `event.redacted` event that
says who erased it and why, and `verify` checks that pointer instead of the digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import Backend
from .errors import IntegrityError, InvalidEvent
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


def chain_hash(
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
    header = f"{prev}\n{position}\n{stream_id}\n{offset}\n{event_id}\n{type_}\n{schema_version}\n{recorded_at}\n{meta}\n{data_digest}"
    return hashlib.sha256(header.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class VerifyReport:
    streams: int
    events: int
    redacted: int

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, "streams": self.streams, "events": self.events, "redacted": self.redacted}


def verify(backend: Backend, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Recompute every chain; raise `IntegrityError` naming the lowest bad position.

    `progress(done, total)` is called after each stream with the events checked so far.
    """
    streams = {row.id: (ThreadInfo.from_row(row), row.facts) for row in backend.streams()}
    problems: list[tuple[int, str]] = []
    checked = redacted = 0
    _, total = backend.counts()
    for info, stored_facts in streams.values():
        found = _verify_stream(backend, streams, info, stored_facts)
        checked += found[0]
        redacted += found[1]
        if found[2]:
            problems.append(found[2])
        if progress is not None:
            progress(checked, total)
    if total != checked:
        orphan = backend.orphan_position()
        if orphan is not None:
            problems.append((orphan, "event belongs to no known stream"))
    if problems:
        position, why = min(problems)
        raise IntegrityError(position, why)
    return VerifyReport(len(streams), checked, redacted)


def _owner(streams: dict[str, tuple[ThreadInfo, Any]], stream_id: str, offset: int) -> str | None:
    info = streams.get(stream_id, (None,))[0]
    while info is not None and offset < info.base:
        info = streams.get(info.parent_id or "", (None,))[0]
    return info.id if info is not None else None


def _verify_stream(
    backend: Backend, streams: dict[str, tuple[ThreadInfo, Any]], info: ThreadInfo, stored_facts: str | None
) -> tuple[int, int, tuple[int, str] | None]:
    """(events checked, redacted, first problem) for one stream's own events."""
    prev, facts = GENESIS, Facts()
    if info.parent_id is not None:
        owner = _owner(streams, info.parent_id, info.base - 1)
        parent_row = backend.event_at(owner, info.base - 1) if owner else None
        if parent_row is None:
            return 0, 0, (info.created_position, f"fork {info.id} points at a missing parent event")
        prev, facts = parent_row.hash, Facts.load(parent_row.facts)
    expected, last_position, count, redacted = info.base, 0, 0, 0
    for row in backend.range(info.id, -(2**62), None):
        position, _, offset, event_id, type_, version, data, meta, recorded_at, data_digest, hash_, row_facts, redacted_by = row
        count += 1
        if offset != expected:
            gap = "an event before it is missing" if offset > expected else "offset out of sequence"
            return count, redacted, (position, f"{info.id} offset {offset}: expected offset {expected} ({gap})")
        if offset >= info.head:  # name the extra event itself, not the position after the last one
            return count, redacted, (position, f"{info.id} offset {offset}: beyond the stream's head {info.head} "
                                               "(an event was added or the head lowered)")
        if position <= last_position:
            return count, redacted, (position, f"{info.id} offset {offset}: positions out of order")
        if redacted_by is not None:
            redacted += 1
            bad_redaction = _check_redaction(backend, redacted_by, position)
            if bad_redaction:
                return count, redacted, (position, bad_redaction)
        elif hashlib.sha256(data.encode("utf-8")).hexdigest() != data_digest:
            return count, redacted, (position, f"{info.id} offset {offset}: data does not match its digest")
        if chain_hash(prev, position, info.id, offset, event_id, type_, version, recorded_at, meta, data_digest) != hash_:
            return count, redacted, (position, f"{info.id} offset {offset}: hash does not match its header and chain")
        parsed = json.loads(data) if redacted_by is None else None
        if offset == info.base:
            bad_start = _check_first(info, type_, parsed)
            if bad_start:
                return count, redacted, (position, bad_start)
            facts = after_fork(facts, parsed) if info.parent_id and parsed else Facts()
        elif parsed is None:  # redacted: its payload is gone, so trust the facts stored with it
            facts = Facts.load(row_facts)
        else:
            try:
                facts = advance(facts, type_, parsed)
            except (InvalidEvent, KeyError):
                return count, redacted, (position, f"{info.id} offset {offset}: event contradicts the history before it")
        if redacted_by is None and Facts.load(row_facts) != facts:
            return count, redacted, (position, f"{info.id} offset {offset}: stored pending facts were altered")
        prev, last_position, expected = hash_, position, offset + 1
    if expected != info.head:
        return count, redacted, (
            last_position + 1 if last_position else info.created_position,
            f"{info.id}: head says {info.head} events but the log ends at {expected} (events missing after position {last_position})",
        )
    if prev != info.head_hash or Facts.load(stored_facts) != facts:
        return count, redacted, (
            last_position or info.created_position,
            f"{info.id}: the stream's head hash or pending facts disagree with its last event (offset {expected - 1})",
        )
    return count, redacted, None


def _check_first(info: ThreadInfo, type_: str, data: dict[str, Any] | None) -> str | None:
    if info.parent_id is None:
        return None if type_ == "thread.created" else f"{info.id} does not start with thread.created"
    if type_ != "thread.forked" or data is None:
        return f"fork {info.id} does not start with thread.forked"
    if data.get("parent_id") != info.parent_id or data.get("parent_offset") != info.parent_offset:
        return f"fork {info.id}: the streams table disagrees with its thread.forked event"
    return None


def _check_redaction(backend: Backend, redacted_by: int, position: int) -> str | None:
    row = backend.event_at_position(redacted_by)
    if row is None or row.type != "event.redacted" or json.loads(row.data).get("position") != position:
        return f"payload erased without a matching event.redacted (claimed position {redacted_by})"
    return None
