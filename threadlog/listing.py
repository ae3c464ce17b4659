"""One entry of the thread list (`threadlog ls`, the web viewer's threads page), and what
`threadlog tree` says of a sub-agent fork."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from eventstore import Store, ThreadInfo
from eventstore.errors import Unreadable
from eventstore.content import tool_result_ids


def listing(store: Store, infos: Sequence[ThreadInfo]) -> list[dict[str, Any]]:
    """Each thread's row with its title, message count and last activity (a few indexed reads
    each; forks of one chain share what their histories share: `Store.titles`, `count_each`)."""
    titles, messages = store.titles(infos), store.count_each(infos, "message.appended")
    return [{**info.to_json(), "title": titles[info.id], "messages": messages[info.id], "last_activity": _last_activity(store, info)}
            for info in infos]


def _last_activity(store: Store, info: ThreadInfo) -> str:
    """When the thread's latest own event happened ("" when it has none). One that cannot be
    read (altered, nested too deeply) gives the time it was recorded: the whole list failed on
    it, where the thread's own page says what is wrong with it."""
    if not info.last_position:
        return ""
    try:
        last = next(store.read_all(after=info.last_position - 1, limit=1), None)
    except Unreadable:
        return store.recorded_at(info.last_position) or ""
    return last.time if last else ""


class SubAgent(NamedTuple):
    """What `tree` says of a sub-agent fork, to tell apart those one response launched at one
    offset: the agent and the call that started it, as the metadata of one imported from
    Claude Code names them, and the directive `fan_out` gave it. Each is None where the fork
    gives none (a plain fork: all of them)."""

    agent_id: str | None
    tool_use_id: str | None
    directive: str | None
    # Its fork event was redacted: the directive `fan_out` gave it is erased, not missing.
    directive_redacted: bool = False

    def to_json(self) -> dict[str, str | None]:
        """The fields `tree --json` adds to a thread (a redacted directive is null there)."""
        return {"agent_id": self.agent_id, "tool_use_id": self.tool_use_id, "directive": self.directive}


NO_SUB_AGENT = SubAgent(None, None, None)


def sub_agents(store: Store, infos: Iterable[ThreadInfo]) -> dict[str, SubAgent]:
    """Each thread's `SubAgent`: for a sub-agent fork, what its first events say of it (one
    indexed read of two events each), else none."""
    return {info.id: _sub_agent(store, info) if info.kind == "subagent" else NO_SUB_AGENT for info in infos}


def _sub_agent(store: Store, info: ThreadInfo) -> SubAgent:
    """A sub-agent fork's agent and call from its fork event's metadata (Claude Code's names,
    `agentId` and `parentToolUseID`, which its import keeps), else the call its primed message
    answers (`fan_out` writes it after the fork event: its placeholder results answer the calls
    the fork was launched from; one of several is no single call); and its directive. A value
    that is no text is none; a redacted fork event keeps none of them."""
    if info.parent_offset is None:
        return NO_SUB_AGENT
    forked, *after = store.read(info.id, info.parent_offset, min(info.parent_offset + 2, info.head))
    options = _mapping(forked.data.get("options")) if forked.type == "thread.forked" else {}
    metadata = _mapping(options.get("metadata"))
    primed = after[0] if after and after[0].type == "message.appended" and after[0].meta.get("origin") == "primed" else None
    content = primed.data.get("content") if primed is not None else None
    calls = tool_result_ids(content) if isinstance(content, list) else []
    call = _text(metadata.get("parentToolUseID")) or (calls[0] if len(calls) == 1 and isinstance(calls[0], str) else None)
    return SubAgent(_text(metadata.get("agentId")), call, _text(options.get("directive")),
                    directive_redacted=primed is not None and forked.redacted)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
