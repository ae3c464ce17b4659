"""An answer the model refused (`stop_reason: refusal`), and what it said of why.

The Messages API ends such an answer with `stop_details`, its `category` and `explanation`;
the answer itself often holds one empty text block. Rows, transcripts, `show` and the
viewer's pages say it was refused, with those words, instead of showing that empty text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def stop_details_said(data: Mapping[str, Any]) -> str:
    """The category and explanation an answer's `stop_details` give (a refusal's), joined by
    `: `; empty when it gives neither."""
    details = data.get("stop_details")
    return ": ".join(str(details[key]) for key in ("category", "explanation") if isinstance(details, dict) and details.get(key))


def refusal(data: Mapping[str, Any]) -> str | None:
    """What a message (its event's data) said when the model refused it, `category:
    explanation` ("" when it said nothing); None for a message not refused."""
    return stop_details_said(data) if data.get("stop_reason") == "refusal" else None


def blank_text(block: Mapping[str, Any]) -> bool:
    """Whether `block` is text with nothing to show: a refused answer's often is, and shows
    as its refusal instead of an empty bubble."""
    return block.get("type") == "text" and not str(block.get("text", "")).strip()
