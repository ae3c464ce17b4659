"""Query parameters: every page and the live stream read their numbers and thread ids through here.

A number is checked before it reaches a library call: a negative, non-decimal or huge one
(past what SQLite and `itertools.islice` take, or too long for `int()` to parse) is a 400
page saying what to pass, not a server error.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request

from eventstore.errors import shown

LARGEST = 2**62  # above any position, offset or count a store holds; below SQLite's and islice's limits


def whole_number(request: Request, name: str, low: int = 0) -> int | None:
    """The optional integer query parameter `name`, from `low` to `LARGEST`; None when absent."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and low <= int(text) <= LARGEST):
        raise HTTPException(400, f"{name} must be a whole number from {low} to {LARGEST}, not {shown(text)}")
    return int(text)


def thread_param(request: Request, name: str = "id") -> str:
    """The thread query parameter `name`, which every page of one thread needs."""
    value = request.query_params.get(name)
    if not value:
        raise HTTPException(400, f"no thread given: pass ?{name}=THREAD_ID")
    return value
