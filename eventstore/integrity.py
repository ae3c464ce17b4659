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
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from .backend import Backend, EventRow, StoredSnapshot
from .errors import IntegrityError, InvalidEvent, StoreError
from .events import MAX_DEPTH
from .facts import Facts, advance, after_fork
from .ranges import MAX_INDEX
from .recorded import ThreadInfo

GENESIS = ""


# One encoder for every call: `json.dumps` with these options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical(value: Any) -> str:
    """The one JSON spelling of a value: sorted keys, no spaces, UTF-8, no NaN."""
    return _CANONICAL(value)


def snapshot_json(state: Any) -> str:
    """A snapshot's stored form: its keys in the order the projection built them, not sorted,
    so a state read back gives the same bytes (`show --json`, a request and its digest) as one
    folded again; `check_snapshot` compares it byte for byte."""
    return json.dumps(state, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_of(row: EventRow) -> str:
    """A stored event's data digest: the one its row keeps, else the digest of its data."""
    return row.data_digest if row.data_digest is not None else digest(row.data)


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
    global _stream_field
    field = _stream_field
    if field[0] != stream_id:  # a batch hashes every event with the same one
        field = _stream_field = (stream_id, f"{len(stream_id)}:{stream_id}")
    return chain_hash_in(prev, field[1], offset, event_id, type_, schema_version, recorded_at, meta, data_digest)


# The last stream's id and its field, one tuple, replaced whole (so never mismatched).
_stream_field = ("", "0:")


def chain_hash_in(prev: str, stream_field: str, offset: int, event_id: str, type_: str, schema_version: int,
                  recorded_at: str, meta: str, data_digest: str) -> str:
    """`chain_hash` with the stream's field already written (`<length>:<stream id>`): a verify
    hashes every event of a stream with the same one."""
    o, v = str(offset), str(schema_version)
    try:
        header = _header(_LENGTHS, prev, stream_field, o, event_id, type_, v, recorded_at, meta, data_digest)
    except IndexError:  # a field of 1,024 characters or more (a long meta)
        header = _header(_Prefixes(), prev, stream_field, o, event_id, type_, v, recorded_at, meta, data_digest)
    return HASH_TAG + _sha256(header.encode("utf-8")).hexdigest()


def _header(n: list[str] | dict[int, str], prev: str, stream_field: str, o: str, event_id: str, type_: str, v: str, recorded_at: str,
            meta: str, data_digest: str) -> str:
    """The hashed text; `n[k]` is the prefix `<k>:` of a field of k characters."""
    return "".join(("tl2\n", n[len(prev)], prev, stream_field, n[len(o)], o, n[len(event_id)], event_id, n[len(type_)],
                    type_, n[len(v)], v, n[len(recorded_at)], recorded_at, n[len(meta)], meta, n[len(data_digest)],
                    data_digest))


class _Prefixes(dict[int, str]):
    """`<k>:` for any k."""

    def __missing__(self, length: int) -> str:
        return f"{length}:"


# `<k>:` for the lengths fields usually have, written once: formatting each length took a
# quarter of a chain hash's instructions. A list: indexing one is cheaper than a dict.
_LENGTHS = [f"{length}:" for length in range(1024)]


_sha256 = hashlib.sha256


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
        json.loads(row.state)
    except (ValueError, RecursionError):
        return f"{where} is not readable JSON"
    try:
        rebuilt = snapshot_json(refold(store, row.stream_id, row.offset))
    except StoreError as error:
        return f"{where} cannot be rebuilt from the events ({error})"
    if row.state != rebuilt:  # byte for byte: the order of its keys is printed too
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


_Row = TypeVar("_Row")


def counted(rows: Iterable[_Row], progress: Callable[[int, int], None], total: int,
            reach: Callable[[_Row], int] | None = None) -> Iterator[_Row]:
    """`rows`, telling `progress(done, total)` every 10,000 of them and at the end. `done` is the
    rows so far, or with `reach`, how far the last one reaches, as `total` is counted (positions:
    on PostgreSQL a refused write leaves some unused, and rows counted against positions ended
    a bar short of its end); all of them read, that is `total`."""
    done = 0
    for done, row in enumerate(rows, 1):
        yield row
        if done % 10_000 == 0:
            progress(done if reach is None else min(reach(row), total), total)
    progress(done if reach is None else total, total)


def extend_log_digest(value: str, rows: Iterable[tuple[int, str]]) -> str:
    """`log_digest` continued from `value` (a checkpoint's digest) over later rows: the digest
    a checkpoint taken after them would hold, if the log up to `value`'s position is unchanged."""
    sha256 = hashlib.sha256
    for position, hash_ in rows:
        value = sha256(f"{value}|{position}|{hash_}".encode()).hexdigest()
    return value


class Checkpoint(NamedTuple):
    """A checkpoint, parsed: the last position it covers, the digest of the log up to there,
    and `last`, a short digest of the event at that position (None in a checkpoint of the
    first form, which names none). `verify(since=...)` compares `last` with the log's own event
    there, one read: a checkpoint of another log, or of a log whose last covered event was
    removed or rewritten, is refused instead of extended (the digest itself needs every event
    it covers read again, which is `verify(checkpoint=...)`'s work)."""

    position: int
    digest: str
    last: str | None = None

    def __str__(self) -> str:
        text = f"{CHECKPOINT_TAG}:{self.position}:{self.digest}"
        return text if self.last is None else f"{text}:{self.last}"


def event_tag(position: int, hash_: str) -> str:
    """A checkpoint's `last`: 16 hex digits of the digest of the event at its position."""
    return hashlib.sha256(f"{position}|{hash_}".encode()).hexdigest()[:16]


def hash_at(backend: Backend, position: int) -> str | None:
    """The stored hash of the event at `position`, as `Backend.hashes` gives it (None if none is there)."""
    return next((hash_ for _, hash_ in backend.hashes(position, position - 1)), None) if position > 0 else None


def format_checkpoint(position: int, value: str, last_hash: str | None) -> str:
    """The checkpoint of a log whose digest up to `position` is `value` and whose event there
    has the hash `last_hash` (None: an empty log, position 0)."""
    return str(Checkpoint(position, value, None if last_hash is None else event_tag(position, last_hash)))


def parse_checkpoint(text: Any) -> Checkpoint:
    """The `Checkpoint` a string holds; `InvalidEvent` if it is not one, or is one no log can
    have (a position past `MAX_INDEX`, or at 0 with anything but an empty log's digest)."""
    parts = text.strip().split(":") if isinstance(text, str) else []
    if (
        len(parts) not in (3, 4)
        or parts[0] != CHECKPOINT_TAG
        or not (parts[1].isascii() and parts[1].isdigit())  # "²" is a digit to isdigit, not to int
        or not _hex(parts[2], 64)
        or (len(parts) == 4 and not _hex(parts[3], 16))
    ):
        raise _not_a_checkpoint(text, f" (expected {CHECKPOINT_TAG}:<position>:<64 hex digits>:<16 hex digits>, as "
                                      "`checkpoint` prints)")
    checkpoint = Checkpoint(_position(text, parts[1]), parts[2], parts[3] if len(parts) == 4 else None)
    if checkpoint.position == 0 and checkpoint[1:] != (_CHECKPOINT_START, None):
        raise _not_a_checkpoint(text, f": a checkpoint at position 0 (of an empty log) is {CHECKPOINT_TAG}:0:<64 zeros>, "
                                      "which names no event")
    return checkpoint


def _position(text: str, digits: str) -> int:
    """A checkpoint's position, written in `digits`, refused past the last a log can hold (an
    int of more than 4,300 digits is not even read: Python refuses it, with ValueError)."""
    significant = digits.lstrip("0")
    if len(significant) <= len(str(MAX_INDEX)) and int(significant or "0") <= MAX_INDEX:
        return int(significant or "0")
    past = f"its position {significant}" if len(significant) <= 30 else f"its position, of {len(significant):,} digits,"
    raise _not_a_checkpoint(text, f": {past} is past {MAX_INDEX} (2^62), the last position a log can hold")


def _not_a_checkpoint(text: Any, why: str) -> InvalidEvent:
    """The refusal of `text`, named (cut short when long), then `why` (" (expected ...)", ": ...")."""
    shown = (text if len(text) < 200 else f"{text[:60]}…") if isinstance(text, str) else type(text).__name__
    return InvalidEvent("checkpoint", f"{shown!r} is not a checkpoint{why}")


def _hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)
