"""Which tool calls a sub-agent was launched from, and which sub-agents a thread already
launched for the calls it waits on: `report` answers the first, and `fan_out` refuses to
launch the same calls twice from the second.

A sub-agent `fan_out` made answers every call its parent waited on with the placeholder, in
the message after its fork event (`origin: primed`). One imported from another tool's session
was forked at the parent's Task call and holds its fork event alone: its calls are the ones
that fork left out (`dropped_tool_use_ids`).

A parent's next assistant message starts another turn: what it waits on then is that turn's,
even under an id an earlier call used. So the sub-agents launched for the calls waiting at a
parent's head are those forked since its last assistant message. Of those, the ones a run
still open there made with `fan_out` are that run's own launches: in a live turn each
launching call's tool runs while the turn's run is open and fans out, and the sub-agent of the
first answers every call of the message, the second's with them (the fork sub-agent design
answers every call in each fork). A launch is a second one only when its calls already had
sub-agents from before that run, or imported ones (a session imported mid-turn leaves its run
open, and its sub-agents were launched by the tool that recorded it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from .content import tool_result_ids
from .ranges import MAX_INDEX
from .recorded import RecordedEvent, ThreadInfo

if TYPE_CHECKING:
    from .store import Store


class Launch(NamedTuple):
    """How a sub-agent was launched: its fork event, the message `fan_out` primed it with (None
    for one made otherwise), and the parent's tool calls it answers."""

    forked: RecordedEvent
    primed: RecordedEvent | None
    calls: list[str]


def launch(store: Store, subagent: ThreadInfo) -> Launch:
    """How `subagent` (a fork, with its parent and fork point) was launched; two events read."""
    assert subagent.parent_offset is not None
    at = subagent.parent_offset
    forked, *after = store.read(subagent.id, at, min(at + 2, subagent.head))
    primed = after[0] if after and after[0].meta.get("origin") == "primed" else None
    content = primed.data.get("content", []) if primed is not None else []
    imported = forked.meta.get("origin") == "imported"
    calls = tool_result_ids(content) or (list(forked.data.get("dropped_tool_use_ids", [])) if imported else [])
    return Launch(forked, primed, calls)


def took_turn(event: RecordedEvent) -> bool:
    """Whether `event` starts another turn of its thread: an assistant message."""
    return event.type == "message.appended" and event.data.get("role") == "assistant"


def launched(store: Store, thread: str, head: int, waiting: Sequence[str],
             runs: Sequence[str]) -> list[tuple[ThreadInfo, list[str]]]:
    """The sub-agents `thread` already launched for the calls it waits on at `head` (`waiting`,
    with `runs` open there), in the order they were forked, each with those of the calls it
    answers. Reads the events since its last assistant message, the forks made since, and two
    events of each."""
    since, own = _launch_points(store, thread, head, set(runs))
    found = []
    for row, _ in store.backend.forks_at(thread, since, head, MAX_INDEX):
        info = ThreadInfo.from_row(row)
        if info.kind != "subagent":
            continue
        made = launch(store, info)
        if made.primed is not None and info.parent_offset is not None and info.parent_offset > own:
            continue  # fanned out by the run still open: one launch per call of its turn
        answers = set(made.calls)
        calls = [call for call in waiting if call in answers]
        if calls:
            found.append((info, calls))
    return found


# The events read at a time going back from a head to its turn's assistant message: most turns
# are that message and a run's events, a few.
_PAGE = 16


def _launch_points(store: Store, thread: str, head: int, runs: set[str]) -> tuple[int, int]:
    """`(since, own)`: the sub-agents launched for the calls waiting at `head` are forked after
    `since`, the last assistant message; those `fan_out` made after `own` are the launches of
    a run open at `head` (all since the message when that run made it, those since its start
    when it started later; none when no run is open)."""
    own, started = head, set[str]()
    stop = head
    while stop > 0:
        start = max(stop - _PAGE, 0)
        for event in reversed(list(store.read(thread, start, stop))):
            if took_turn(event):
                return event.offset, event.offset if runs - started else own
            if event.type == "run.started" and event.data.get("run_id") in runs:
                started.add(event.data["run_id"])
                own = event.offset  # a fork at this point holds none of the run's events
        stop = start
    return 0, 0 if runs - started else own
