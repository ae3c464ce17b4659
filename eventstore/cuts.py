"""Where a compaction may cut a thread's history: never between tool calls and their results.

A `compaction.recorded` summary stands, in the model's view, for the messages below its
`through_offset`; the messages from there on are sent as they are. A request sends a
`tool_result` only in the message right after the one holding its call (the Messages API
refuses it anywhere else), so a cut between an assistant message's tool calls and the
message answering them sends the results without their calls, and the request leaves them
out: the tools' output, or a human's answer to an interrupt, would never reach the model.
Such a cut is refused when the compaction is appended (never when restored: a file an older
release wrote may hold one), naming the two cuts that keep the pair together.

Only the last message below the cut and the first at or after it are read (the facts say
which calls still wait, as for a fork): a call a fork dropped gets no result, so a cut
through it is taken. Only what the model view holds is judged: a `context="note"` fork's
view (and its own forks') starts from its note, so the parent's messages below it, a call
and its result among them, are no pair a cut there could split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .content import tool_result_ids, tool_use_ids
from .errors import InvalidEvent, named, shown
from .facts import Facts, advance
from .prepare import PreparedEvent

COMPACTION = "compaction.recorded"
MESSAGE = "message.appended"
FORKED = "thread.forked"

# Reads the stored events at offsets lo..hi-1 of the thread's history: (offset, type, data).
Stored = Callable[[int, int], Iterable[tuple[int, str, dict[str, Any]]]]

_SHOWN = 5  # the call ids a refusal names


def compacts(batch: Sequence[PreparedEvent]) -> bool:
    """Whether the batch holds a compaction (whose cut `check_cuts` must read around)."""
    return any(item.type == COMPACTION for item in batch)


def through_offset_problem(type_: str, data: dict[str, Any], offset: int) -> str | None:
    """What is wrong with the `through_offset` of the event at `offset` (of `type_`, `data`), a
    compaction, or None: it is no offset (a redacted one's skeleton, restored as the export gives
    it, is not validated), or it is past the compaction's own offset (summarising messages that
    come after it). None for any other event."""
    through = data.get("through_offset", 0) if type_ == COMPACTION else 0
    if isinstance(through, bool) or not isinstance(through, int):
        return f"must be an offset (an integer), not {type(through).__name__} {shown(through)}"
    if through > offset:
        return f"{through} is past the compaction's own offset {offset}"
    return None


def is_note(type_: str, data: dict[str, Any]) -> bool:
    """Whether the event is a `context="note"` fork's `thread.forked`: the model view of the fork,
    and of the forks made from it, starts from the note it stands for. Options that are no
    object (only raw SQL stores them) raise AttributeError, one of `errors.MISSHAPEN`, as the
    readers meet them."""
    return type_ == FORKED and data.get("options", {}).get("context") == "note"


def _in_batch(index: int) -> str:
    return f"events[{index}]"


def check_cuts(batch: Sequence[PreparedEvent], start: int, facts: Facts, stored: Stored,
               event: Callable[[int], str] = _in_batch, advice: str | None = None, *, view: int = 0) -> None:
    """Refuse (`InvalidEvent` naming the compaction's `through_offset`) a compaction of the
    batch whose cut falls between tool calls and their results. The batch is to be appended
    at offset `start`, onto a head whose pending facts are `facts`; `stored` reads the
    history below `start`; `event(index)` names an event of the batch in the refusal, which
    ends with `advice` when given (the offsets to compact through otherwise); `view` is the
    offset of the note a note fork's view starts from (0: the view holds the whole history).
    An import's plan checks each compaction so as it plans it, before anything is written."""
    for index, item in enumerate(batch):
        offset = start + index
        if item.type == COMPACTION:
            through = item.data.get("through_offset")
            if type(through) is int and 0 < through <= offset:
                _check_cut(f"{event(index)}.data.through_offset", through, offset, facts, _Events(batch, start, stored),
                           advice, view)
        try:
            facts = advance(facts, item.type, item.data)
        except InvalidEvent:
            return  # the write refuses the event, naming it where it is


class _Events:
    """The history as the batch will leave it: stored events below `start`, the batch's after."""

    def __init__(self, batch: Sequence[PreparedEvent], start: int, stored: Stored) -> None:
        self.batch, self.start, self.stored = batch, start, stored

    def between(self, lo: int, hi: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The events at offsets lo..hi-1, in order."""
        if lo < min(hi, self.start):
            yield from self.stored(lo, min(hi, self.start))
        for offset in range(max(lo, self.start), hi):
            item = self.batch[offset - self.start]
            yield offset, item.type, item.data

    def backwards(self, below: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The events below offset `below`, last first: read back a few at a time."""
        hi, step = below, 8
        while hi > 0:
            lo = max(hi - step, 0)
            yield from reversed(list(self.between(lo, hi)))
            hi, step = lo, step * 8


def _check_cut(field: str, through: int, offset: int, facts: Facts, events: _Events, advice: str | None,
               view: int) -> None:
    if through <= view:
        return  # at or below a note fork's note: the view holds no message below the cut
    # The assistant messages in a row that end last below the cut (a request merges them into
    # one, whose calls the user messages after it answer), and the results the user messages
    # after them (merged into one too) give below the cut; none below the note the view starts from.
    answered: set[str] = set()
    asked: dict[str, int] = {}  # call id -> the offset of the message holding it
    inside = True  # no user message between the cut and the assistant messages: the cut splits them
    seen = False  # an assistant message came (reading back): a user message before it ends the row
    for at, type_, data in events.backwards(through):
        if at <= view:
            break
        if type_ != MESSAGE:
            continue
        if data.get("role") == "assistant":
            seen = True
            asked.update((call, at) for call in tool_use_ids(_content(data)))
        elif seen:
            break
        else:
            inside = False
            answered.update(tool_result_ids(_content(data)))
    open_ = [call for call in asked if call not in answered]
    if not open_:
        return
    # The user messages from the cut on, up to the next answer: the results they give. An
    # assistant message right at a cut that splits a row of them is of the same message.
    late: dict[str, int] = {}
    went_on = False
    for at, type_, data in events.between(through, offset):
        if type_ != MESSAGE:
            continue
        if data.get("role") == "assistant":
            if inside:
                continue
            went_on = True
            break
        inside = False
        late.update((call, at) for call in tool_result_ids(_content(data)) if call in open_)
    cut = [call for call in open_ if call in late or (not went_on and call in facts.tools)]
    if not cut:
        return
    ids = ", ".join(named(call) for call in cut[:_SHOWN]) + (", …" if len(cut) > _SHOWN else "")
    called_at = min(asked[call] for call in cut)
    called = sorted(set(asked[call] for call in cut))
    if all(call in late for call in cut):
        where = f"their results at offset {', '.join(map(str, sorted(set(late[call] for call in cut))))}"
        instead = f"through {max(late[call] for call in cut) + 1} (after the results)"
    else:
        where = "their results, not all in yet"
        instead = "once the results are in, through an offset after them"
    if advice is None:
        advice = f"; compact through {called_at} (before the calls) or {instead}"
    raise InvalidEvent(field, f"{through} falls between the tool calls at offset {', '.join(map(str, called))} ({ids}) and "
                              f"{where}: the model would get the results without their calls, which a request leaves out"
                              f"{advice}")


def _content(data: dict[str, Any]) -> list[dict[str, Any]]:
    content = data.get("content")
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []
