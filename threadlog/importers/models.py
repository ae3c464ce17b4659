"""The model an imported thread takes: one the Messages API serves, or none.

A thread's model is what every request of it, and of a fork continued live, sends. Agents
that run on many providers write their names: SWE-agent LiteLLM's (`gpt-4o`,
`anthropic/claude-...`), pi its own with the provider beside it, and Claude Code, run through
a proxy to another provider, that provider's (`glm-4.6`). A thread that took
another provider's model made requests the API refuses (no such model); one with no model
asks for `--model` (`model=`) instead, the name kept in its metadata.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def api_model(name: str) -> str | None:
    """`name` as the Messages API names the model (LiteLLM's `anthropic/` prefix removed), or
    None for another provider's."""
    name = name.removeprefix("anthropic/")
    return name if name.startswith("claude-") else None


def give_model(created: dict[str, Any], named: Iterable[str | None], key: str = "model") -> None:
    """Give the `thread.created` data `created` its model: the first Claude model of the names
    (the one the history began with first; a None is no name); with none, the first name is
    kept as metadata `key` (pi's own `modelId`) and the thread has no model."""
    names = [name for name in named if name is not None]
    model = next((found for found in map(api_model, names) if found is not None), None)
    if model is not None:
        created["model"] = model
    elif names:
        created["metadata"].setdefault(key, names[0])
