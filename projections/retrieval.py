"""Retrieval for note forks: the parent history most relevant to a turn, as one marked block.

A `context="note"` fork carries only its fork note; with `retrieval="first_turn"` or
`"per_turn"` its request also carries, before the text of a user message that opens a turn
(the fork's first such message, or every one), the passages of the parent's history below
the fork point that the search index ranks best for that message's words (any of them,
BM25), within a byte budget. `"off"` adds nothing.

Where the block goes keeps the prompt cache: siblings share system, tools and the fork
note, which all come before it, and a block stays in its turn's message in every later
request, so each request starts with the previous one. The same thread, offset and index
content give the same bytes (passages are chosen by rank, ties by position, and written in
offset order); BM25 reads statistics of the whole index, so new events elsewhere can
change which passages rank best.

The block cannot be forged by what it quotes: its two marker lines start at column 0 and
every line of quoted text is indented by four spaces (as in the transcript).
"""

from __future__ import annotations

from typing import Any

from eventstore import InvalidEvent, Store, textindex
from eventstore.errors import shown
from eventstore.backend import HitRow

from .search import checked_search, update_index
from .state import Message
from .transcript import INDENT, _inline as inline, _text as indented, clip_middle

MODES = ("per_turn", "first_turn", "off")
BUDGET = 8 * 1024  # bytes of passages per block
PASSAGE = 2 * 1024  # bytes of one passage
_CANDIDATES = 24  # hits read before the budget picks

BEGIN = "[retrieval] Passages of the parent conversation that a search found relevant to this message"
END = "[end of retrieval]"

Json = dict[str, Any]


def check_mode(retrieval: Any) -> None:
    if retrieval not in MODES:
        raise InvalidEvent("retrieval", f"must be one of {', '.join(MODES)}, not {shown(retrieval)}")


def with_retrieval(store: Store, thread: str, view: list[Message], mode: str, parent_offset: int) -> list[Message]:
    """`view` with a retrieval block first in each user message that opens a turn after the
    fork point (only the first with `first_turn`); the same list when there is none."""
    if mode == "off":
        return view
    out = list(view)
    scope: list[tuple[str, int, int | None]] | None = None
    for index, message in enumerate(view):
        if message.kind != "message" or message.role != "user" or message.offset <= parent_offset:
            continue
        words = " ".join(b["text"] for b in message.content if b.get("type") == "text" and isinstance(b.get("text"), str))
        if not words.strip():
            continue  # tool results: the turn is already open
        if scope is None:
            update_index(store)
            scope = textindex.scope_of(store, thread, ancestors=True, stop=parent_offset)
        hits = checked_search(store, words, "any", scope, limit=_CANDIDATES)
        if hits:
            block = {"type": "text", "text": render(hits, parent_offset)}
            out[index] = Message(message.role, [block, *message.content], message.offset, message.kind)
        if mode == "first_turn":
            break
    return out


def render(hits: list[HitRow], parent_offset: int, budget: int = BUDGET) -> str:
    """The block: the best passages that fit in `budget` bytes, in offset order."""
    chosen: list[tuple[int, int, str]] = []
    used = 0
    for hit in hits:
        body = clip_middle(indented(hit.text).encode("utf-8"), PASSAGE, INDENT.encode()).decode("utf-8")
        what = hit.kind if hit.tool is None else f"{hit.kind} {inline(hit.tool)}"
        passage = f"### offset {hit.offset} · {inline(hit.role or '-')} · {what}\n\n{body}\n"
        size = len(passage.encode("utf-8"))
        if used + size > budget:
            continue
        chosen.append((hit.offset, hit.position, passage))
        used += size
    passages = "\n".join(p for _, _, p in sorted(chosen))
    return f"{BEGIN} (below offset {parent_offset}; excerpts, not the whole history):\n\n{passages}\n{END}"
