"""An answer's top-level fields besides its blocks, as a `message.appended` records them.

The Messages API returns more than a message's role and content: the stop sequence met, a
refusal's details, the code execution container, a beta's context management, and fields
added to the API since this release. A live turn (`live.py`) and the Claude Code importer,
which reads the responses Claude Code wrote, record them alike: each field the event names
under its own name, any other in `extra_fields`. One the log cannot store (of another type
than its field holds, nested deeper than the log takes, a lone surrogate) is left out, so
that the answer it came with is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventstore import InvalidEvent
from eventstore.events import MessageAppended
from eventstore.prepare import prepare

# An answer's fields the caller records itself (`id` as message_id), or never: `type` is always
# "message", `role` always "assistant".
WRITTEN = frozenset(("id", "type", "role", "content", "model", "stop_reason", "usage"))
# The other fields a `message.appended` names, each kept under its name.
NAMED = frozenset(MessageAppended.model_fields) - WRITTEN - {"message_id", "item", "extra_fields"}
# The data fields `returned_fields` may give: those named, and `extra_fields` for the rest.
RETURNED = NAMED | {"extra_fields"}


def returned_fields(fields: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """An answer's top-level `fields` (JSON-ready, as returned) as `message.appended` data,
    those in `WRITTEN` and nulls left out; and the names of those left out because the log
    cannot store them, each checked on its own."""
    data: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    refused: list[str] = []
    for name, value in fields.items():
        if name in WRITTEN or value is None:
            continue
        field, kept = (name, value) if name in NAMED else ("extra_fields", {name: value})
        try:
            prepare({"type": "message.appended", "data": {"role": "assistant", "content": [{"type": "text", "text": ""}],
                                                          field: kept}}, "answer")
        except InvalidEvent:
            refused.append(name)
            continue
        (data if field == name else extra)[name] = value
    if extra:
        data["extra_fields"] = extra
    return data, refused
