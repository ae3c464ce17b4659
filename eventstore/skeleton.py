"""What a redaction keeps of an event's payload: its skeleton.

Only what keeps the history well-formed stays: the ids its pairing and the pending facts rest
on, a message's role, a fork's parent and offset. `Store.redact` writes it; a restore that
carries a redaction over onto an event this database stores computes it again from the stored
payload, and takes no other.
"""

from __future__ import annotations

import json
from typing import Any

from . import integrity


def skeleton_of(type_: str, text: str) -> tuple[str, bool]:
    """The canonical skeleton of a stored payload (`text`, its JSON), and whether the payload
    was too deeply nested to read: then only the role stays, guessed from the text (an older
    release stored such payloads; appends refuse them)."""
    try:
        return integrity.canonical(_skeleton(type_, json.loads(text))), False
    except RecursionError:
        role = "assistant" if text.rfind('"role":"assistant"') > text.rfind('"role":"user"') else "user"
        return _unreadable(type_, role), True


def left_by_earlier(type_: str, text: str) -> bool:
    """Whether `text` (canonical JSON) is a skeleton an earlier release's redaction left of an
    event of `type_` where this one keeps more: a compaction's kept no `through_offset`. A
    backup holding one carries its redaction over as it was made."""
    return type_ == "compaction.recorded" and text == integrity.canonical({"redacted": True})


def may_hide_ids(type_: str, text: str) -> bool:
    """Whether a redacted row's skeleton (`text`, canonical JSON) is the one a payload too deep
    to read leaves: then the tool calls, runs or interrupts it opened may be gone with it, and
    only its `event.redacted` (`pending`) says what was pending after it. A redacted text
    message leaves the same skeleton, so this says "may", not "does"."""
    return text == _unreadable(type_, "assistant") or text == _unreadable(type_, "user")


def _unreadable(type_: str, role: str) -> str:
    """The canonical skeleton of a payload too deep to read: only its role stays."""
    return integrity.canonical(_skeleton(type_, {"role": role}))


def is_skeleton(type_: str, text: Any) -> bool:
    """Whether a redacted row's payload (`text`) is what a redaction leaves: its own skeleton,
    as every skeleton any release wrote is. A row holding more (words of its own where the
    skeleton has `[redacted]`, a tool's input, a directive) was written outside threadlog."""
    if text.__class__ is not str:
        return False
    try:
        return integrity.canonical(_skeleton(type_, json.loads(text))) == text
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # not a payload a redaction leaves
        return False


def _skeleton(type_: str, data: dict[str, Any]) -> dict[str, Any]:
    """What stays of a redacted payload: only what keeps the history well-formed.

    A message keeps its role and the ids its tool calls and results pair up by (so the
    pending facts and a model request built from it stay the same shape); runs and
    interrupts keep the ids their pairing needs. Everything else is gone.
    """
    if type_ == "message.appended":
        role = data.get("role", "user")
        results, calls = [], []
        for block in data.get("content") or ():
            if block.get("type") == "tool_use":
                calls.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
            elif block.get("type") == "tool_result":
                result = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": "[redacted]"}
                if block.get("is_error"):
                    result["is_error"] = True
                results.append(result)
        # A user turn answers its calls first, as the Messages API wants; a call ends its turn.
        content = [*results, {"type": "text", "text": "[redacted]"}, *calls]
        skeleton = {"role": role, "content": content, "redacted": True}
        item = data.get("item")
        if isinstance(item, dict):  # an agent framework's item: its kind and the ids it pairs by
            skeleton["item"] = {key: item[key] for key in _ITEM_KIND if isinstance(item.get(key), str) and len(item[key]) <= 200}
        return skeleton
    if type_ == "thread.forked":
        # A fork keeps where it starts and what its first event does to the pending facts;
        # the text a caller gave it (a sub-agent's directive, explicit metadata or todos, the
        # transcript's path, its own configuration) is erased, and its metadata and todos then
        # read as blank. So does a configuration it gave itself: the parent's system prompt and
        # tools, which the fork was re-framed not to have, do not come back with the erasure.
        options = data.get("options") or {}
        kept = {key: options[key] for key in _FORK_MODES if key in options}
        kept.update({key: options[key] for key in ("todos", "metadata") if options.get(key) in ("blank", "inherit")})
        if options.get("config") is not None:
            kept["config"] = {"blank": True}
        return {**{key: data[key] for key in _FORK_FIELDS if key in data}, "options": kept, "redacted": True}
    keep = _STRUCTURAL.get(type_, ())
    return {**{key: data[key] for key in keep if key in data}, "redacted": True}


# What a redacted `thread.forked` keeps: the fork point, what its facts and row rest on.
_FORK_FIELDS = ("parent_id", "parent_offset", "dropped_tool_use_ids", "demoted_interrupt_ids")
_FORK_MODES = ("context", "retrieval", "unanswered", "kind")

# The fields of each non-message event that its pairing (and the pending facts) rest on.
# What a redacted message keeps of the item it stands for (`MessageAppended.item`): what kind
# of item it was (an Agents SDK `function_call_output` must not come back as a user message)
# and the call it pairs with, as a message keeps its tool blocks' ids and names.
_ITEM_KIND = ("type", "role", "call_id", "name")

_STRUCTURAL = {
    "run.started": ("run_id",),
    "run.finished": ("run_id", "status"),
    "interrupt.raised": ("interrupt_id", "tool_use_id"),
    "interrupt.resolved": ("interrupt_id",),
    "interrupt.cancelled": ("interrupt_id",),  # its reason is free text
    # Where the model's view restarts: the summary stands, `[redacted]`, for the messages below
    # it still (a skeleton an earlier release wrote kept nothing, and reads as no compaction).
    "compaction.recorded": ("through_offset",),
}
