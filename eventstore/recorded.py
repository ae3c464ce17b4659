"""What reading the log gives back: `RecordedEvent`, and the stream metadata `ThreadInfo`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import StoreError
from .events import CATALOGUE, MAX_DEPTH, upcast


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
        return str(self.meta.get("origin") or "live")

    @property
    def time(self) -> str:
        """When it happened: the source's time for imported events, else when it was recorded."""
        return str(self.meta.get("occurred_at") or self.recorded_at)

    def to_json(self) -> dict[str, Any]:
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


def from_row(row: tuple[Any, ...]) -> RecordedEvent:
    """Build from a row in `sqlite.EVENT_COLUMNS` order, upcasting old schema versions."""
    position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, digest, hash_, _, redacted_by = row
    try:
        parsed = json.loads(data)
        meta_parsed = {} if meta == "{}" else json.loads(meta)
    except RecursionError:
        raise too_deep(position) from None
    model = CATALOGUE.get(type_)
    if model is not None and version != model.schema_version:
        parsed = upcast(type_, version, parsed)
        version = model.schema_version
    return RecordedEvent(
        position, stream_id, offset, event_id, type_, parsed, meta_parsed, recorded_at,
        hash_, version, digest, redacted_by is not None,
    )


def too_deep(position: int) -> StoreError:
    """What a reader raises for an event whose JSON is nested too deeply for Python to handle.

    Appends refuse JSON nested more than `MAX_DEPTH` levels, so only an older release or a
    hand edit of the file can have stored one; near 1,000 levels `json` and every recursive
    walk raise RecursionError, which readers turn into this error naming the event.
    """
    return StoreError(
        f"the event at position {position} holds JSON nested too deeply to read (appends refuse more than "
        f"{MAX_DEPTH} levels; an older release or a hand edit stored it); redact that position to read past it"
    )


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

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ThreadInfo:
        return cls(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8])

    @property
    def base(self) -> int:
        """The offset of this stream's first own event."""
        return self.parent_offset or 0

    def to_json(self) -> dict[str, Any]:
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
        }
