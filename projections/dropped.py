"""The tool calls a fork dropped (`unanswered="drop"`): which blocks of which messages.

A fork at offset f records the ids of the calls still waiting for results there
(`dropped_tool_use_ids`). The call it drops is, for each id, the last `tool_use` with that id
below f: an id may be used again once its result is back (eventstore/facts.py), and an
earlier call with the same id was answered, so it stays in the view with its result. They
are found by reading back from f, a few events first: the dropped call is nearly always in
the message just before the fork point, and the thread is never read whole for it. A
message that holds nothing but dropped calls is out of the view (`dropped_whole`): every
projection and the web viewer's live updates leave it out by that one rule.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore import Store

# (tool_use id, the offset of the fork that dropped it)
Drop = tuple[str, int]
# message offset -> the ids of its tool_use blocks that are dropped
Located = Mapping[int, frozenset[str]]

_FIRST_WINDOW = 8  # events read back from a fork point first; each further read is 8x wider


def fork_drops(data: dict[str, Any], offset: int) -> list[Drop]:
    """The drops a `thread.forked` event at `offset` records."""
    return [(tool_use_id, offset) for tool_use_id in data.get("dropped_tool_use_ids") or []]


def locate(store: Store, thread: str, drops: Iterable[Drop]) -> Located:
    """Where each drop's call is in `thread`'s history: message offset -> dropped ids."""
    wanted_at: dict[int, set[str]] = {}
    for tool_use_id, offset in drops:
        wanted_at.setdefault(offset, set()).add(tool_use_id)
    found: dict[int, set[str]] = {}
    for fork_offset, wanted in wanted_at.items():
        stop, width = fork_offset, _FIRST_WINDOW
        while wanted and stop > 0:
            start = max(0, stop - width)
            messages = [(offset, data) for offset, type_, data in store.read_data(thread, start, stop) if type_ == "message.appended"]
            for offset, data in reversed(messages):
                here = wanted.intersection(_tool_use_ids(data))
                if here:
                    found.setdefault(offset, set()).update(here)
                    wanted -= here
            stop, width = start, width * 8
    return {offset: frozenset(ids) for offset, ids in found.items()}


def calls_only(content: list[dict[str, Any]]) -> frozenset[str] | None:
    """The ids of the tool calls `content` holds when it holds nothing else, or None: a message
    a fork that drops every one of them leaves out of the view (`dropped_whole`). A dropped id
    is text (`dropped_tool_use_ids`), so a call whose id is not is none a fork drops: None."""
    ids = []
    for block in content:
        id_ = block.get("id")
        if block.get("type") != "tool_use" or not isinstance(id_, str):
            return None
        ids.append(id_)
    return frozenset(ids) if ids else None


def dropped_whole(content: list[dict[str, Any]], ids: Collection[str]) -> bool:
    """Whether a fork that dropped the calls `ids` leaves the message holding `content` out of
    the view: it holds tool calls alone (`calls_only`), every one of them dropped."""
    if not ids:
        return False  # read for every message of a view: most have no dropped call
    calls = calls_only(content)
    return calls is not None and calls.issubset(ids)


def _tool_use_ids(data: dict[str, Any]) -> set[Any]:
    content = data.get("content")
    if not isinstance(content, list):
        return set()
    return {block.get("id") for block in content if isinstance(block, dict) and block.get("type") == "tool_use"}
