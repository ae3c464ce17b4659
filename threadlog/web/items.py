"""What a thread page shows for a range of offsets: the display rows, each with the
provenance of its event, and the cards the rows do not hold (a fork made at an offset of
this page, a redaction record).

A page reads its own events twice (the rows, then their provenance) and nothing else of
the thread, except to find who redacted an event on it: the `event.redacted` record
follows it in its own stream, looked for only when the page holds a redacted event, in one
forward read per stream that holds one, stopping once every record is found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eventstore import RecordedEvent, Store, ThreadInfo
from eventstore.cuts import is_note

from projections import Row, display_rows


# The forks one card names (the fork tree has them all): a thread forked 10,000 times made a
# 1.1 MB page of fork cards, 250 forks an offset.
CARD_FORKS = 20
ROWS_PER_EVENT = 200  # rows a page shows of one event (a message's blocks)
_ENDS = ("refusal", "cut_short")  # the row after an answer's blocks that says how it ended


@dataclass(frozen=True, slots=True)
class Redaction:
    position: int
    actor: str
    reason: str

    @classmethod
    def of(cls, data: dict[str, Any]) -> Redaction:
        """The record an `event.redacted` event's data holds."""
        return cls(data.get("position", 0), str(data.get("actor", "")), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a row came from: its event's stream, offset, position, time, actor and origin."""

    stream_id: str
    offset: int
    position: int
    time: str
    actor: str | None
    origin: str
    redaction: Redaction | None = None
    redacted: bool = False


@dataclass(slots=True)
class Item:
    """One entry of the page: `kind` is a row's kind, `fork_here` (forks made at this point,
    in `forks`) or `redaction` (an `event.redacted` record, in `redaction`)."""

    id: str
    kind: str
    offset: int
    row: Row | None = None
    provenance: Provenance | None = None
    block: dict[str, Any] | None = None  # the content block a message row shows (tool results' content)
    data: dict[str, Any] = field(default_factory=dict)  # the event's data (compaction summaries, fork options)
    forks: list[ThreadInfo] = field(default_factory=list)
    more_forks: int = 0  # forks made at this point that the card does not name
    redaction: Redaction | None = None


def thread_items(store: Store, thread: str, start: int, stop: int, at: int | None = None) -> list[Item]:
    """The items of offsets start..stop-1 of `thread` as of its first `at` events."""
    rows = display_rows(store, thread, at, start=start, stop=stop)
    events = {event.offset: event for event in store.read(thread, start, stop)}
    redactions = _redactions(store, [event for event in events.values() if event.redacted])
    items = _capped([_item(row, events.get(row.offset), redactions) for row in rows])
    for event in events.values():
        if event.type == "event.redacted":
            items.append(Item(f"e-{event.event_id}", "redaction", event.offset, provenance=_provenance(event, None),
                              redaction=Redaction.of(event.data)))
    forks: dict[int, tuple[list[ThreadInfo], int]] = {}
    for info, total in store.forks_at(thread, start, stop, CARD_FORKS):  # the thread's subtree made a page of a
        forks.setdefault(info.parent_offset or 0, ([], total))[0].append(info)  # thread of 100,000 forks take 2 s
    for offset, (infos, total) in forks.items():
        items.append(Item(f"forks-{offset}", "fork_here", offset - 1, forks=infos, more_forks=total - len(infos)))
    order = {"fork_here": 2, "redaction": 1}
    items.sort(key=lambda item: (item.offset, order.get(item.kind, 0)))
    return items


def view_start(store: Store, chain: list[ThreadInfo], low: int, end: int) -> int | None:
    """Where the rows of a thread's first `end` events start over, when that is at or after
    offset `low`: the ⑃ card of the nearest `context="note"` fork in its line (`chain`, as
    `ancestry` gives it), whose rows begin there. None when the rows below `low` are the view's.

    Only the forks made at `low` or later are read (by position, one event each), so the
    latest page of a thread deep in a chain of forks reads about a page of them."""
    for info in chain:
        if info.parent_id is None or info.parent_offset is None or info.parent_offset < low:
            return None
        if info.parent_offset >= end:  # forked past what the page shows as of `end`
            continue
        # Its parent's card is in the view only if made before this fork's point: a fork of a
        # note fork made at the note fork's own point holds the messages before the card, not it.
        end = info.parent_offset
        forked = next(store.read_all(after=info.created_position - 1, limit=1), None)
        if forked is not None and forked.stream_id == info.id and is_note(forked.type, forked.data):
            return info.parent_offset
    return None


def _capped(items: list[Item]) -> list[Item]:
    """At most `ROWS_PER_EVENT` rows of one event, then one `more_rows` item counting the rest: a
    page is `PAGE` events, and one message of 50,000 blocks made a 28 MB page. A refusal or
    cut-short row is not one of them: it is what the answer ended with, and follows the count."""
    out: list[Item] = []
    count: dict[int, int] = {}
    for item in items:
        if item.kind in _ENDS:
            out.append(item)
            continue
        seen = count[item.offset] = count.get(item.offset, 0) + 1
        if seen <= ROWS_PER_EVENT:
            out.append(item)
        elif seen == ROWS_PER_EVENT + 1:
            out.append(Item(f"more-{item.offset}", "more_rows", item.offset))
    for item in out:
        if item.kind == "more_rows":
            item.data = {"count": count[item.offset] - ROWS_PER_EVENT}
    return out


def row_item_id(row: Row) -> str:
    """The id of the item a display row is on a page (a block's and an event's rows apart)."""
    return f"r-{row.id}"


def _item(row: Row, event: RecordedEvent | None, redactions: dict[int, Redaction]) -> Item:
    block = None
    if event is not None and ":" in row.id and event.type == "message.appended":
        content = event.data.get("content") or []
        index = int(row.id.rsplit(":", 1)[1])
        block = content[index] if index < len(content) else None
    provenance = _provenance(event, redactions.get(event.position)) if event is not None else None
    return Item(row_item_id(row), row.kind, row.offset, row=row, provenance=provenance, block=block,
                data=event.data if event is not None and row.kind in ("compaction", "fork") else {})


def _provenance(event: RecordedEvent, redaction: Redaction | None) -> Provenance:
    actor = event.meta.get("actor")
    return Provenance(event.stream_id, event.offset, event.position, event.time, None if actor is None else str(actor),
                      event.origin, redaction, event.redacted)


def _redactions(store: Store, redacted: list[RecordedEvent]) -> dict[int, Redaction]:
    """Who erased each of these events and why, by position: the `event.redacted` records
    after them, in one forward read of each stream that holds one of them."""
    wanted = {event.position for event in redacted}
    first: dict[str, int] = {}
    for event in redacted:
        first[event.stream_id] = min(first.get(event.stream_id, event.offset), event.offset)
    found: dict[int, Redaction] = {}
    for stream_id, offset in first.items():
        for _, type_, _, text in store.read_raw(stream_id, offset + 1):
            if type_ == "event.redacted":
                data = json.loads(text)
                if data.get("position") in wanted:
                    found[data["position"]] = Redaction.of(data)
                    if len(found) == len(wanted):
                        return found
    return found
