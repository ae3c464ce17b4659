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
from collections.abc import Sequence
from typing import Any, TypeVar

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
# The types a file may hold by name: written before they had a code. Every other type of the
# catalogue has been stored as its code since types had codes.
NAMED_BEFORE_CODED = frozenset({"langgraph.checkpoint", "langgraph.writes", "langgraph.deleted"})

HASH_TAG = "tl2:"  # integrity.HASH_TAG (not imported: integrity imports the backend layer)

_Blob = TypeVar("_Blob", bytes, bytearray)


def pack_id(value: str) -> str | bytes:
    return _id(value, bytes)


def _id(value: str, kind: type[_Blob]) -> _Blob | str:
    return _hex(value, kind) if len(value) == 32 else value


def _hex(text: str, kind: type[_Blob]) -> _Blob | str:
    """`text` as bytes (of `kind`) when it is exactly the lowercase hex of them, else `text`."""
    try:
        packed = kind.fromhex(text)
    except ValueError:
        return text
    return packed if packed.hex() == text else text  # not for uppercase digits or spaces


def unpack_id(value: str | bytes) -> str:
    return value.hex() if isinstance(value, bytes) else value


def pack_hash(value: str) -> str | bytes:
    return _hash(value, bytes)


def _hash(value: str, kind: type[_Blob]) -> _Blob | str:
    if len(value) != 68 or not value.startswith(HASH_TAG):
        return value
    packed = _hex(value[4:], kind)
    return value if packed.__class__ is str else packed


def unpack_hash(value: str | bytes) -> str:
    return HASH_TAG + value.hex() if isinstance(value, bytes) else value


def pack_digest(value: str) -> str | bytes:
    """A digest kept because it cannot be recomputed (a restored redaction's)."""
    return _hex(value, bytes) if len(value) == 64 else value


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


def pack_appended(rows: Sequence[EventValues]) -> tuple[bool, list[tuple[Any, ...]]] | None:
    """`pack_row` for appended rows (no `data_digest`, no `redacted_by`: None if a row has
    one), without those two columns, and without `pending` when no row has facts, as
    (whether `pending` is kept, rows): the SQLite backend writes what is left out as NULL
    literals (`sqlite.INSERT_APPENDED`). Ids and hashes are bytearrays, the driver's cheapest
    BLOB: Python's `sqlite3` binds bytes, and None, only after looking for an adapter for them
    (an attribute lookup that fails and formats an AttributeError it drops), about 3,000
    instructions a value (callgrind, Python 3.11), more than the rest of the binding."""
    codes = _CODES
    if len(rows) == 1:  # a single append: the commonest, spared the loops below
        p, s, o, e, t, v, d, m, r, digest, h, f, redacted = rows[0]
        if digest is not None or redacted is not None:
            return None
        e_, h_ = _hex(e, bytearray) if len(e) == 32 else e, _hash(h, bytearray)  # `_id`, inline
        if f is None:
            return False, [(p, s, o, e_, codes.get(t, t), v, d, m, r, h_)]
        return True, [(p, s, o, e_, codes.get(t, t), v, d, m, r, h_, f)]
    pending = False
    for row in rows:
        if row[9] is not None or row[12] is not None:
            return None
        if row[11] is not None:
            pending = True
    ids, hashes = pack_ids_and_hashes(rows)
    if pending:
        return True, [(p, s, o, e_, codes.get(t, t), v, d, m, r, h_, f)
                      for (p, s, o, _, t, v, d, m, r, _, _, f, _), e_, h_ in zip(rows, ids, hashes)]
    return False, [(p, s, o, e_, codes.get(t, t), v, d, m, r, h_)
                   for (p, s, o, _, t, v, d, m, r, _, _, _, _), e_, h_ in zip(rows, ids, hashes)]


def pack_ids_and_hashes(rows: Sequence[EventValues]) -> tuple[list[str | bytearray], list[str | bytearray]]:
    """The rows' event ids (`pack_id`) and hashes (`pack_hash`) as bytearrays where they pack,
    else as they are: a batch's generated ids and its hashes converted together (`_blobs`)."""
    ids = _blobs([row[3] for row in rows], "") or [_id(row[3], bytearray) for row in rows]
    hashes = _blobs([row[10] for row in rows], HASH_TAG) or [_hash(row[10], bytearray) for row in rows]
    return ids, hashes


def _blobs(values: list[str], tag: str) -> list[str | bytearray] | None:
    """Every value packed, when every one is `tag` and lowercase hex digits (32 for ids, 64
    after `tl2:` for hashes), as a batch's generated ids and its hashes are: checked and
    converted with a few passes over them joined, in C, instead of a round trip each (or a
    regular expression, ten times slower). None when some value is not (pack them one by one)."""
    digits = 64 if tag else 32
    width, count = len(tag) + digits, len(values)
    if set(map(len, values)) != {width}:
        return None
    joined = "".join(values)
    if tag:
        if any(joined[i::width] != char * count for i, char in enumerate(tag)):
            return None  # some value does not start with the tag
        joined = joined.replace(tag, "")
        if len(joined) != digits * count:
            return None  # some value holds it again further on
    try:
        packed = bytearray.fromhex(joined)
    except ValueError:
        return None
    if packed.hex() != joined:  # uppercase digits or spaces
        return None
    size = digits // 2
    return [packed[start:start + size] for start in range(0, len(packed), size)]


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
