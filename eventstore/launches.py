"""Which tool calls a sub-agent was launched from: the calls `report` answers.

A sub-agent `fan_out` made answers every call its parent waited on with the placeholder, in
the message after its fork event (`origin: primed`). One imported from another tool's session
was forked at the parent's Task call and holds its fork event alone: its calls are the ones
that fork left out (`dropped_tool_use_ids`).

A parent's next assistant message starts another turn: what it waits on then is that turn's,
even under an id an earlier call used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .content import tool_result_ids
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
