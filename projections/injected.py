"""Text a harness injected into the conversation, told apart from what the user typed.

An importer marks such a message `meta.source.flags.injected` (Claude Code's `isMeta`
lines, command output, skill bodies; pi's `!` commands). The model saw it, so the model
view (`thread_state`) keeps it as it was sent; display rows and transcripts say who wrote
it instead of presenting it as typed by the user. A message the user typed may hold blocks a
tool wrote before the typed text (`flags.injected_blocks`: Claude Code's IDE context): the
message is the user's, and those blocks are shown as the tool's.
"""

from __future__ import annotations

from typing import Any


def injected_by(meta: dict[str, Any]) -> str | None:
    """The tool that injected this message's text (`source.tool`, or "harness" when unnamed), or None."""
    flags = _flags(meta)
    return _tool(meta) if flags.get("injected") else None


def injected_blocks(meta: dict[str, Any]) -> dict[int, str]:
    """The blocks of a message the user typed that a tool wrote before what was typed
    (`flags.injected_blocks`, their indexes: an IDE's context leading a Claude Code prompt), each
    with that tool's name as `injected_by` gives it. The message is the user's, and starts its
    run; those blocks of it are shown as the tool's."""
    indexes = _flags(meta).get("injected_blocks")
    if not isinstance(indexes, list):
        return {}
    tool = _tool(meta)
    return {index: tool for index in indexes if isinstance(index, int) and not isinstance(index, bool)}


def _flags(meta: dict[str, Any]) -> dict[str, Any]:
    source = meta.get("source")
    flags = source.get("flags") if isinstance(source, dict) else None
    return flags if isinstance(flags, dict) else {}


def _tool(meta: dict[str, Any]) -> str:
    tool = meta["source"].get("tool")
    return tool if isinstance(tool, str) and tool else "harness"
