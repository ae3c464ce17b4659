"""Offsets and ranges: the logical history as segments, each read whole, and the one check for range arguments."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard, TypeVar

from .errors import InvalidEvent, Unreadable, named, shown
from .events import MAX_INDEX as MAX_INDEX
from .recorded import ThreadInfo, its_offsets

Row = TypeVar("Row", bound=tuple[Any, ...])
Segment = tuple[str, int, int | None]  # (stream, lo, hi): the stream's own offsets lo..hi-1


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


def whole(rows: Iterator[Row], thread: str, stream_id: str, lo: int, end: int, at: int) -> Iterator[Row]:
    """A segment's rows (the offset of each at index `at`), refused where one is missing: every
    offset lo..end-1 must come, in order (later ones too, a newer append's). Only raw SQL
    deletes an event or moves a fork point: read without this check, the history would come
    back shorter, or with another thread's events in its place, and nothing would say so."""
    expected = lo
    for row in rows:
        if row[at] != expected:
            if row[at].__class__ is not int:  # SQLite keeps a number of any kind: 2.5 sorts between 2 and 3
                raise Unreadable(f"thread {named(thread)} cannot be read whole: the event after offset {expected - 1} of "
                                 f"{named(stream_id)} is stored at offset {shown(row[at])}, not an offset (an integer); the "
                                 "row was altered outside threadlog, and `threadlog verify` names where")
            raise missing(thread, stream_id, expected, row[at])
        expected += 1
        yield row
    if expected < end:
        raise missing(thread, stream_id, expected, end)


def missing(thread: str, stream_id: str, lo: int, hi: int) -> Unreadable:
    """The refusal of a read of `thread` whose offsets lo..hi-1, stored in `stream_id`, are not in the file."""
    one = hi - lo == 1
    where = "" if stream_id == thread else f" ({'it belongs' if one else 'they belong'} to {named(stream_id)}, a thread it is forked from)"
    return Unreadable(f"thread {named(thread)} cannot be read whole: {its_offsets(lo, hi)} {'is' if one else 'are'} missing from "
                      f"the file{where}; only an edit outside threadlog removes one (an event deleted, or a fork point "
                      "moved), and `threadlog verify` names where")
