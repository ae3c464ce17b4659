"""Where a page cut by its budget (`budget`) starts or stops: a place between two items.

A `Cursor` is `(index, skip)`: before the `skip`-th item of event (or message) `index`. A page
runs from one cursor to the next, so the page after one cut short starts where it stopped and
the page before it ends where it starts: paging either way shows each item once. The thread
page's cursors count an event's items (its rows, then the redaction record it is, then the
card of the forks made after it); the replay's and the diff's count a message's blocks.

A page is read a few events at a time (1, 2, 4, … from where it starts), as far as it shows:
a page of five messages of 20 MB each read them all (0.65 s) to show a part of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from markupsafe import Markup

from eventstore import Store
from projections import Message

from .budget import PAGE_BYTES, PAGE_ROWS, fill
from .items import ROWS_PER_EVENT, Item, thread_items

Part = tuple[Message, Any]  # a message and one of its blocks (None: it has none; REFUSAL, CUT_SHORT: its card)
# The part after a refused answer's blocks that says it was refused, and after a cut-short
# one's that says why it stopped: not blocks, which a stored message could forge.
REFUSAL = object()
CUT_SHORT = object()


class Cursor(NamedTuple):
    entry: int  # an event's offset, a message's index
    skip: int = 0  # the items of it before this place


def keyed(items: list[Item]) -> list[tuple[Cursor, Item]]:
    """`items` (in page order), each with the cursor before it."""
    counts: dict[int, int] = {}
    out = []
    for item in items:
        seen = counts.get(item.offset, 0)
        counts[item.offset] = seen + 1
        out.append((Cursor(item.offset, seen), item))
    return out


def items_from(store: Store, thread: str, low: Cursor, stop: int, at: int | None) -> Iterator[tuple[Cursor, Item]]:
    """The items from `low` to offset `stop`, in order."""
    offset, step = low.entry, 1
    while offset < stop:
        upto = min(offset + step, stop)
        for cursor, item in keyed(thread_items(store, thread, offset, upto, at)):
            if cursor >= low:
                yield cursor, item
        offset, step = upto, step * 2


def items_back(store: Store, thread: str, low: Cursor, high: Cursor, at: int | None) -> Iterator[tuple[Cursor, Item]]:
    """The items from `low` to `high`, last first."""
    top, step = high.entry + (1 if high.skip else 0), 1
    while top > low.entry:
        bottom = max(low.entry, top - step)
        for cursor, item in reversed(keyed(thread_items(store, thread, bottom, top, at))):
            if low <= cursor < high:
                yield cursor, item
        top, step = bottom, step * 2


def blocks(messages: Sequence[Message], low: Cursor, high: Cursor, backward: bool = False) -> Iterator[tuple[Cursor, Part]]:
    """The (message, block) parts from `low` to `high` (of a replay or a diff side), each
    message's first `ROWS_PER_EVENT` blocks, then `REFUSAL` for an answer the model refused, or
    `CUT_SHORT` for one it did not end whole (as the thread page's refusal or cut-short row, past
    the cap); a message without parts is one, its block None."""
    places = []
    for index, message in enumerate(messages[low.entry:high.entry + 1], low.entry):  # one slice: a lazy view reads it at once
        ends = [REFUSAL] if message.refusal is not None else [CUT_SHORT] if message.cut_short is not None else []
        parts = list[Any]((message.content or [])[:ROWS_PER_EVENT]) + ends
        for skip, block in enumerate(parts or [None]):
            if low <= Cursor(index, skip) < high:
                places.append((Cursor(index, skip), (message, block)))
    return reversed(places) if backward else iter(places)


@dataclass(slots=True)
class Shown:
    """A message as a page shows it: `blocks` from its block `skip` on (those before are on
    the page before), `more`, its blocks past `ROWS_PER_EVENT` when the page shows its last,
    `refusal`, the card of a refused answer, and `cut_short`, that of one the model did not end
    whole, when the page reaches it."""

    index: int
    message: Message
    skip: int
    blocks: list[Markup] = field(default_factory=list)
    more: int = 0
    refusal: Markup | None = None
    cut_short: Markup | None = None


@dataclass(frozen=True, slots=True)
class MessagePage:
    """The messages a page shows from `low` to `high`; `cut`: where the budget cut it ("start"
    paging back, "end" paging on), else None."""

    low: Cursor
    high: Cursor
    messages: list[Shown]
    cut: str | None


def fill_messages(messages: Sequence[Message], low: Cursor, high: Cursor, backward: bool, render: Callable[[Part], str],
                  room: int = PAGE_BYTES, rows: int = PAGE_ROWS) -> MessagePage:
    """The blocks of `messages` from `low` to `high` a page shows within its budget, from
    `high` back when `backward` (the page then starts where the budget ran out)."""
    filled = fill(blocks(messages, low, high, backward), render, room, rows)
    parts = filled.shown[::-1] if backward else filled.shown
    cut = None
    if filled.rest is not None:
        low, high, cut = (parts[0][0], high, "start") if backward else (low, filled.rest, "end")
    shown: list[Shown] = []
    for cursor, (message, block), html in parts:
        if not shown or shown[-1].index != cursor.entry:
            shown.append(Shown(cursor.entry, message, cursor.skip))
        if block is REFUSAL:
            shown[-1].refusal = html
        elif block is CUT_SHORT:
            shown[-1].cut_short = html
        elif block is not None:
            shown[-1].blocks.append(html)
    for entry in shown:
        content = entry.message.content or []
        if entry.blocks and entry.skip + len(entry.blocks) >= min(len(content), ROWS_PER_EVENT):  # its last block is here
            entry.more = max(len(content) - ROWS_PER_EVENT, 0)
    return MessagePage(low, high, shown, cut)
