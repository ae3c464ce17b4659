"""Offsets and ranges: the logical history as segments, and the one check for range arguments."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard

from .errors import InvalidEvent, shown
from .recorded import ThreadInfo

Segment = tuple[str, int, int | None]  # (stream, lo, hi): the stream's own offsets lo..hi-1

# The largest offset, position or count an argument may name: SQLite stores 64-bit integers,
# and a larger Python int would fail deep in the driver (OverflowError) instead of here.
MAX_INDEX = 2**62


def is_index(value: Any, lo: int = 0, hi: int | None = None) -> TypeGuard[int]:
    """True for an int (not a bool) with lo <= value, and value <= hi when `hi` is given."""
    return (isinstance(value, int) and not isinstance(value, bool) and lo <= value <= MAX_INDEX
            and (hi is None or value <= hi))


def check_index(name: str, value: Any, lo: int = 0, hi: int | None = None, *, what: str = "an offset",
                where: str = "", optional: bool = False) -> None:
    """Refuse anything but an int in lo..hi (None too, when `optional`) for argument `name`.

    `where` names what the range belongs to in the message (e.g. "thread 'abc'").
    """
    if (optional and value is None) or is_index(value, lo, hi):
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidEvent(name, f"must be {what} (an integer), not {type(value).__name__} {shown(value)}")
    if hi is None and value > MAX_INDEX:
        raise InvalidEvent(name, f"{shown(value)} is too large: {what} is at most {MAX_INDEX}")
    if hi is None:
        raise InvalidEvent(name, f"must be {what} >= {lo}, not {shown(value)}")
    raise InvalidEvent(name, f"{shown(value)} is outside {where or 'the range'} ({lo}..{hi})")


def segments(ancestry: Sequence[ThreadInfo]) -> list[Segment]:
    """The logical history as (stream, lo, hi) ranges of own offsets, oldest first.

    `ancestry` runs from the thread up to its root. Each ancestor contributes its own
    events below the lowest fork point on the way down to the thread.
    """
    out: list[Segment] = []
    upper: int | None = None
    for info in ancestry:
        if upper is None or info.base < upper:
            out.append((info.id, info.base, upper))
        upper = info.base if upper is None else min(upper, info.base)
        if upper == 0:
            break
    out.reverse()
    return out


def clip(ranges: list[Segment], start: int, stop: int | None) -> Iterator[Segment]:
    """The segments' ranges narrowed to start..stop-1, empty ones skipped."""
    for stream_id, lo, hi in ranges:
        lo = max(lo, start)
        if stop is not None:
            hi = stop if hi is None else min(hi, stop)
        if hi is None or lo < hi:
            yield stream_id, lo, hi
