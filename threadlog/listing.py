"""One entry of the thread list (`threadlog ls`, the web viewer's threads page), and what
`threadlog tree` says of a sub-agent fork."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from eventstore import Store, ThreadInfo


def listing(store: Store, infos: Sequence[ThreadInfo]) -> list[dict[str, Any]]:
    """Each thread's row with its title, message count and last activity (a few indexed reads
    each; forks of one chain share what their histories share: `Store.titles`, `count_each`)."""
    titles, messages = store.titles(infos), store.count_each(infos, "message.appended")
    out = []
    for info in infos:
        last = next(store.read_all(after=info.last_position - 1, limit=1), None) if info.last_position else None
        out.append({**info.to_json(), "title": titles[info.id], "messages": messages[info.id], "last_activity": last.time if last else ""})
    return out


# What a sub-agent fork's metadata calls the agent and the tool call that started it (Claude
# Code's names, which its import keeps), under the names `tree --json` gives them.
_AGENT_KEYS = (("agent_id", "agentId"), ("tool_use_id", "parentToolUseID"))


def sub_agents(store: Store, infos: Iterable[ThreadInfo]) -> dict[str, dict[str, str | None]]:
    """Each thread's `agent_id` and `tool_use_id`: for a sub-agent fork, the agent and the call
    its fork's metadata names (the parallel calls of one response put their forks at one
    offset, where their ids alone told them apart), else None. One indexed read per sub-agent
    fork; a value that is no text is none."""
    out: dict[str, dict[str, str | None]] = {}
    for info in infos:
        metadata = _fork_metadata(store, info) if info.kind == "subagent" else {}
        out[info.id] = {key: value if isinstance(value := metadata.get(name), str) else None for key, name in _AGENT_KEYS}
    return out


def _fork_metadata(store: Store, info: ThreadInfo) -> dict[str, Any]:
    """The metadata a fork was made with (its `thread.forked` event's; `inherit`, `blank` or a
    redacted event give none)."""
    if info.parent_offset is None:
        return {}
    forked = store.event_at(info.id, info.parent_offset)
    options = forked.data.get("options") if forked.type == "thread.forked" else None
    metadata = options.get("metadata") if isinstance(options, dict) else None
    return metadata if isinstance(metadata, dict) else {}
