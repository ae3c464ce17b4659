"""Turning what callers pass into rows waiting to be numbered: validation, canonical JSON,
digests, event ids and timestamps, all done before the write lock is taken.

The commonest event, a plain text message, is validated without building pydantic models
(`_text_message`); everything else goes through the event models (`events.parse`).
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Iterable
import time
from hashlib import sha256 as _sha256
from json.encoder import encode_basestring  # what the canonical encoder writes for a str
from typing import Any, NamedTuple

from . import integrity
from .ids import check_id, event_id as new_event_id
from .errors import InvalidEvent, shown
from .events import CATALOGUE, MAX_DEPTH, MessageAppended, check_depth, parse, too_deep, unwritable_key
from .recorded import make_tuple

# The largest event payload (canonical JSON, in bytes) an append accepts. Nothing bigger
# could be sent to the model in one request anyway.
MAX_EVENT_BYTES = 32 * 1024 * 1024


def not_json(value: Any, field: str, error: ValueError | TypeError) -> InvalidEvent:
    """The refusal of `value` (at `field`), which canonical JSON could not encode (`error`): a
    key that is not text is named by its path (Python's own words were "'<' not supported
    between instances of 'int' and 'str'", canonical JSON sorting the keys)."""
    keyed = unwritable_key(value, field) if isinstance(error, TypeError) else None
    return keyed or InvalidEvent(field, f"not storable as UTF-8 JSON ({error})")


def storable_json(text: str) -> Any:
    """`json.loads` of `text`, refusing with `ValueError` what Python reads as numbers that no
    event can store: `NaN` and `Infinity` (no JSON at all) and a number past a float's range
    (`1e400`, read as infinity). Read plainly, they made the whole event refused (canonical JSON
    writes none of them) where the caller could have kept the text as it came."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of the range of a JSON number")
    return value


def check_encodable(field: str, name: str) -> None:
    """Refuse a name the store cannot hold (a lone surrogate: not text UTF-8 can encode),
    before anything is written, naming the argument instead of an event."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidEvent(field, f"{error.reason} at index {error.start} ({name[error.start]!r}): "
                                  "give a name of text UTF-8 can encode") from None


def check_text(field: str, value: Any, what: str) -> None:
    """Refuse a name looked up (`what`: a thread id, an event type) that is anything but text
    before it reaches a query, where an int past 2**63 failed in the driver (OverflowError)
    and a dict as a database error naming no argument."""
    if not isinstance(value, str):
        raise InvalidEvent(field, f"must be {what} (text), not {type(value).__name__}")


def check_thread(field: str, value: Any) -> None:
    """`check_text` for a thread's id."""
    check_text(field, value, "a thread id")


def check_thread_id(field: str, value: Any) -> str:
    """`check_id` for a new thread's id, which also may not start with `@`: those are kept for
    names that stand for a thread (`threadlog`'s `@last`), which a thread so named would
    shadow for every reader. Returns it."""
    check_id(field, value)
    if value.startswith("@"):
        raise InvalidEvent(field, f"{value!r} starts with '@', which is kept for names that stand for a thread "
                                  "(such as @last, the latest active thread); choose an id without it")
    return str(value)


def check_flag(field: str, value: Any) -> None:
    """Refuse a flag (`retry`, `stream`, `beta`) that is not a bool: `"no"` would read as true."""
    if not isinstance(value, bool):
        raise InvalidEvent(field, f"must be True or False, not {shown(value)}")


def check_items(field: str, given: Any, what: str) -> None:
    """Refuse `given` unless it is an iterable of items (`what` names them): one string was
    taken a character at a time, a dict a key at a time, and anything else failed in Python."""
    if isinstance(given, (str, bytes, dict)) or not isinstance(given, Iterable):
        raise InvalidEvent(field, f"must be {what}, not {type(given).__name__}")


def new_id() -> str:
    """A new thread id: 16 hex characters (64 random bits)."""
    return secrets.token_hex(8)


# The last whole second formatted, and its text: one tuple, replaced whole, so a thread
# never pairs one second with another's text.
_second: tuple[int, str] = (-1, "")


def now() -> str:
    """UTC now as `2026-01-31T12:00:00.123456Z` (the date part is formatted once a second)."""
    global _second
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{micros:06d}Z"


class PreparedEvent(NamedTuple):
    """One validated event, serialized, waiting for its position and hash (a named tuple:
    the write loop unpacks it once instead of reading a dozen attributes)."""

    type: str
    schema_version: int
    data: dict[str, Any]
    data_json: str
    data_digest: str
    meta: dict[str, Any]
    meta_json: str
    event_id: str
    explicit_id: bool
    plain: bool = False  # a text-only message: it changes no facts (runs, tool calls, interrupts)


_EVENT_KEYS = frozenset(("type", "data", "meta"))
META_KEYS = frozenset(("event_id", "actor", "origin", "causation_id", "correlation_id", "occurred_at", "source"))
_MESSAGE, _MESSAGE_VERSION = MessageAppended.type, MessageAppended.schema_version


def _text_message(event: Any) -> tuple[str, str] | None:
    """(role, text) when `event` is the commonest kind, validated without pydantic models.

    Only a plain dict `{"type": "message.appended", "data": {"role": "user" | "assistant",
    "content": "<text>"}}` with no (or an empty) `meta` qualifies, or the same with the text
    in one text block, `"content": [{"type": "text", "text": "<text>"}]` (what a model's reply
    of text alone is, and what an export holds of every text message): for it the model's
    validation amounts to checking the role and wrapping the text in one text block (15 µs of
    it, against under 2 µs here). Anything else (other blocks, a block's other keys,
    optional fields, meta, subclasses of dict, list or str) returns None and takes the full
    validation. tests/test_append_fast_path.py holds what `prepare` makes of it equal to what
    the full validation makes of the same event.
    """
    if type(event) is not dict or event.get("type") != "message.appended" or event.get("meta") not in (None, {}):
        return None
    data = event.get("data")
    # Its keys are "type", "data" and at most an empty "meta" (counted: a keys view costs more).
    if type(data) is not dict or len(data) != 2 or not (len(event) == 2 or (len(event) == 3 and "meta" in event)):
        return None
    role, content = data.get("role"), data.get("content")
    if type(role) is not str or role not in ("user", "assistant"):
        return None
    if type(content) is list and len(content) == 1:
        block = content[0]
        if type(block) is not dict or len(block) != 2 or type(kind := block.get("type")) is not str or kind != "text":
            return None
        content = block.get("text")
    return (role, content) if type(content) is str else None


def _name(field: str | int) -> str:
    return f"events[{field}]" if isinstance(field, int) else field


def _check_size(data_json: str, field: str) -> None:
    if len(data_json) > MAX_EVENT_BYTES // 4 and (size := len(data_json.encode("utf-8"))) > MAX_EVENT_BYTES:
        raise InvalidEvent(f"{field}.data", f"is {size} bytes of JSON; an event holds at most {MAX_EVENT_BYTES} "
                           "(32 MiB, the Messages API's request limit); keep large files outside and refer to them")


def prepare_text(role: str, text: str, field: str | int, event_id: str) -> PreparedEvent:
    """`prepare` of a text message with no meta, given its role ("user" or "assistant", not
    checked here) and its text: the same steps, knowing the shape (two levels deep: no depth
    check). For `prepare` once `_text_message` said yes, and for `Store.append_message`."""
    # `integrity.canonical` of the data, spelled out: keys in sorted order.
    data_json = '{"content":[{"text":' + encode_basestring(text) + ',"type":"text"}],"role":"' + role + '"}'
    try:
        data_digest = _sha256(data_json.encode("utf-8")).hexdigest()  # integrity.digest
    except ValueError as error:  # lone surrogates
        raise InvalidEvent(f"{_name(field)}.data", f"not storable as UTF-8 JSON ({error})") from None
    if len(data_json) > MAX_EVENT_BYTES // 4:
        _check_size(data_json, _name(field))
    values: tuple[Any, ...] = (_MESSAGE, _MESSAGE_VERSION, {"role": role, "content": [{"type": "text", "text": text}]},
                              data_json, data_digest, {}, "{}", event_id, False, True)
    prepared: PreparedEvent = make_tuple(PreparedEvent, values)
    return prepared


def prepare(event: Any, field: str | int, event_id: str | None = None, restoring: bool = False) -> PreparedEvent:
    """Validate and serialize one event; `event_id` is used unless its meta names one
    (`restoring`: see `events.parse`).

    `field` names the event in error messages; an int i stands for `events[i]` (the
    string is only built when there is an error to report).
    """
    plain = _text_message(event)
    if plain is not None:
        return prepare_text(plain[0], plain[1], field, event_id or new_event_id())
    field = _name(field)
    type_, data, meta = parse(event, field, restoring)
    try:
        data_json = integrity.canonical(data)
        data_digest = integrity.digest(data_json)
    except (ValueError, TypeError) as error:  # NaN, lone surrogates, non-JSON values
        raise not_json(data, f"{field}.data", error) from None
    except RecursionError:
        raise too_deep(data, f"{field}.data") from None
    # Nesting: JSON n levels deep holds at least n brackets, so counting them (in C) spares
    # nearly every event the walk; strings' brackets only make the count safely high.
    # A restore takes what an older release stored deeper (verify and the readers do too).
    if data_json.count("{") + data_json.count("[") > MAX_DEPTH and not restoring:
        check_depth(data, f"{field}.data")
    try:
        meta_json = integrity.canonical(meta)
        meta_json.encode("utf-8")  # the hash and the insert need UTF-8: a lone surrogate cannot be
    except (ValueError, TypeError) as error:
        raise not_json(meta, f"{field}.meta", error) from None
    _check_size(data_json, field)
    if len(meta_json) > MAX_EVENT_BYTES // 4 and not restoring and (size := len(meta_json.encode("utf-8"))) > MAX_EVENT_BYTES:
        # Its export line must stay one an import reads (`importers/events.py`'s line limit).
        raise InvalidEvent(f"{field}.meta", f"is {size} bytes of JSON; an event's meta holds at most {MAX_EVENT_BYTES} (32 MiB)")
    explicit = "event_id" in meta
    event_id = check_id(f"{field}.meta.event_id", meta["event_id"]) if explicit else event_id or new_event_id()
    return PreparedEvent(type_, CATALOGUE[type_].schema_version, data, data_json, data_digest, meta, meta_json, event_id, explicit)
