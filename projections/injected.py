"""Text a harness injected into the conversation, told apart from what the user typed.

An importer marks such a message `meta.source.flags.injected` (Claude Code's `isMeta`
lines, command output, skill bodies; pi's `!` commands). The model saw it, so the model
view (`thread_state`) keeps it as it was sent; display rows and transcripts say who wrote
it instead of presenting it as typed by the user.
"""

from __future__ import annotations

from typing import Any


def injected_by(meta: dict[str, Any]) -> str | None:
    """The tool that injected this message's text (`source.tool`, or "harness" when unnamed), or None."""
    source = meta.get("source")
    if not isinstance(source, dict):
        return None
    flags = source.get("flags")
    if not isinstance(flags, dict) or not flags.get("injected"):
        return None
    tool = source.get("tool")
    return tool if isinstance(tool, str) and tool else "harness"
