"""The compact forms of an event's columns in storage (schema 5), and back.

Above the storage interface every value is text: an event id, a `tl2:` hash, a hex digest,
an ISO time, a type name. Stored as text they are most of a row (a 2,000,000-event file was
2.26x the size of a lean table of the same messages, and its inserts slowed down as the
file grew). A backend stores each one compactly when, and only when, the compact form gives
back exactly the same text; anything else (a caller's own id, a first-layout hash, a time
in another format) is stored as the text it is. So nothing hashed can change in storage:

| column | compact form | when |
|---|---|---|
| event_id | 16 bytes | 32 lowercase hex digits (every generated id) |
| hash | 32 bytes | `tl2:` and 64 lowercase hex digits |
| data_digest | absent (NULL) | it is the digest of the stored data: read as None, recomputed by who needs it |
| data_digest | 32 bytes | a redacted row's (the erased payload's digest) |
| type | a small integer (`TYPE_CODES`) | a type of the catalogue |

`unpack_*` are the inverses, for backends that decode in Python; the SQLite backend decodes
in SQL (`eventstore/sqlite.py`), and tests hold the two to the same answers.

Times are text (`2026-01-31T12:00:00.123456Z`, 27 bytes). Schema 5 packed them as integer
microseconds (`pack_time`; such rows read back the same), 19 bytes less a row, but reading
one back cost more than the rest of the row:
SQLite's `strftime` took ~3 µs a row in a full scan, Python ~1 µs (against 0 for text), on
the read path of every event and of `verify`, whose budget is 5 µs an event.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from .backend import EventRow, EventValues
from .recorded import make_tuple

# The last whole second parsed, as (text, seconds since 1970).
_second: tuple[str, int] = ("", 0)

# Stored in files: never renumber. A new type takes the next number.
TYPE_CODES: dict[str, int] = {
    "thread.created": 1,
    "message.appended": 2,
    "run.started": 3,
    "run.finished": 4,
    "interrupt.raised": 5,
    "interrupt.resolved": 6,
    "interrupt.cancelled": 7,
    "thread.forked": 8,
    "compaction.recorded": 9,
    "metadata.set": 10,
    "todos.set": 11,
    "title.set": 12,
    "event.redacted": 13,
    # Files written before these had codes store them as text: a query by type matches both.
    "langgraph.checkpoint": 14,
    "langgraph.writes": 15,
    "langgraph.deleted": 16,
}
TYPE_NAMES: dict[int, str] = {code: name for name, code in TYPE_CODES.items()}

HASH_TAG = "tl2:"  # integrity.HASH_TAG (not imported: integrity imports the backend layer)



def pack_id(value: str) -> str | bytes:
    if len(value) != 32:
        return value
    try:
        packed = bytes.fromhex(value)
    except ValueError:
        return value
    return packed if packed.hex() == value else value  # not for uppercase digits or spaces


def unpack_id(value: str | bytes) -> str:
    return value.hex() if isinstance(value, bytes) else value


def pack_hash(value: str) -> str | bytes:
    if len(value) != 68 or not value.startswith(HASH_TAG):
        return value
    try:
        packed = bytes.fromhex(value[4:])
    except ValueError:
        return value
    return packed if packed.hex() == value[4:] else value


def unpack_hash(value: str | bytes) -> str:
    return HASH_TAG + value.hex() if isinstance(value, bytes) else value


def pack_digest(value: str) -> str | bytes:
    """A digest kept because it cannot be recomputed (a restored redaction's)."""
    if len(value) != 64:
        return value
    try:
        packed = bytes.fromhex(value)
    except ValueError:
        return value
    return packed if packed.hex() == value else value


def unpack_digest(value: str | bytes) -> str:
    return value.hex() if isinstance(value, bytes) else value


def pack_time(value: str) -> str | int:
    """Microseconds since 1970 when that gives `value` back exactly (see `unpack_time`), else
    `value`. Schema 5 stored times so; nothing packs them since (see the module doc)."""
    global _second
    if len(value) != 27 or value[19] != "." or value[26] != "Z":
        return value
    fraction = value[20:26]
    if not (fraction.isascii() and fraction.isdigit()):
        return value
    text = value[:19]
    cached = _second
    if cached[0] != text:
        try:
            seconds = calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return value
        if seconds < 0 or time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) != text:
            return value  # before 1970, or a leap second: kept as text
        cached = _second = (text, seconds)
    return cached[1] * 1_000_000 + int(fraction)


def unpack_time(value: str | int) -> str:
    if isinstance(value, str):
        return value
    seconds, micros = divmod(value, 1_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{micros:06d}Z"


def pack_type(value: str) -> str | int:
    return TYPE_CODES.get(value, value)


def unpack_type(value: str | int) -> str:
    return TYPE_NAMES.get(value, str(value)) if isinstance(value, int) else value


# An event row as stored: `EventValues` with the compact columns.
StoredValues = tuple[int, str, int, str | bytes, str | int, int, str, str, str, str | bytes | None, str | bytes,
                     str | None, int | None]


def pack_row(row: EventValues) -> StoredValues:
    """A row to insert, compacted. A `data_digest` of None (the digest of the row's data, which
    reads recompute) stays None; one given is kept (a restored redaction's skeleton)."""
    position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, digest, hash_, facts, redacted_by = row
    return (position, stream_id, offset, pack_id(event_id), _CODES.get(type_, type_), version, data, meta, recorded_at,
            None if digest is None else pack_digest(digest), pack_hash(hash_), facts, redacted_by)


_CODES = TYPE_CODES


def unpack_row(row: tuple[Any, ...]) -> EventRow:
    """The `EventRow` of a row as stored (`StoredValues`), decoded as the SQLite backend's SQL
    decodes it: a value of a kind no packing writes (a hand edit's) is passed on as it is, for
    the reader's checks to name, never an exception here."""
    position, stream_id, offset, event_id, type_, version, data, meta, recorded_at, digest, hash_, facts, redacted_by = row
    decoded: EventRow = make_tuple(EventRow, (
        position, stream_id, offset, event_id.hex() if event_id.__class__ is bytes else event_id, TYPE_NAMES.get(type_, type_),
        version, data, meta, unpack_time(recorded_at) if recorded_at.__class__ is int else recorded_at,
        digest.hex() if digest.__class__ is bytes else digest, HASH_TAG + hash_.hex() if hash_.__class__ is bytes else hash_,
        facts, redacted_by,
    ))
    return decoded
