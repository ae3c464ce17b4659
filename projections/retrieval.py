"""Retrieval for note forks: the parent history most relevant to a turn, as one marked block.

A `context="note"` fork carries only its fork note; with `retrieval="first_turn"` or
`"per_turn"` its request also carries, before the text of a user message that opens a turn
(the fork's first such message, or every one), the passages of the parent's history below
the fork point that the search index ranks best for that message's words (any of them,
BM25), within a byte budget. `"off"` adds nothing.

Where the block goes keeps the prompt cache: siblings share system, tools and the fork
note, which all come before it, and a block stays in its turn's message in every later
request, so each request starts with the previous one.

A ranking is not a fact of the log: BM25 reads statistics of the whole index, so messages
written anywhere later (another thread, a redaction, the fork's own later turns) can change
which passages rank best. So the passages are searched for once per turn message, and a live
turn records which it sent: `passages` in its answer's `meta.request`, the `(offset, part)`
of each (the event in the thread's history, and which of its documents, `search.documents`),
by the offset of the user message. A request reads its blocks from those records, where the
thread has one (the first), and searches only for a turn message without; `check_request`
passes the record of the answer it checks. A passage is rendered from its event, never from
the index, so a record rebuilds the same bytes whatever the index holds, and a passage whose
event was redacted since is left out (the history changed). The record holds positions only:
no text the log could not erase. A fork that holds a note fork's turns (`inherited`) shows the
blocks those turns recorded, and searches for none.

The block cannot be forged by what it quotes: its two marker lines start at column 0 and
every line of quoted text is indented by four spaces (as in the transcript).
"""

from __future__ import annotations

from typing import Any

from eventstore import InvalidEvent, Store, textindex
from eventstore.errors import shown
from eventstore.backend import DOC_PARTS, HitRow
from eventstore.ranges import segments
from eventstore.textindex import Doc

from .search import checked_search, documents, parts_of, update_index
from .state import Message
from .transcript import INDENT, _inline as inline, _text as indented, clip_middle

MODES = ("per_turn", "first_turn", "off")
BUDGET = 8 * 1024  # bytes of passages per block
PASSAGE = 2 * 1024  # bytes of one passage
_CANDIDATES = 24  # hits read before the budget picks

BEGIN = "[retrieval] Passages of the parent conversation that a search found relevant to this message"
END = "[end of retrieval]"

Json = dict[str, Any]
Part = tuple[int, int]  # (offset in the thread's history, index in its event's documents)


def check_mode(retrieval: Any) -> None:
    if retrieval not in MODES:
        raise InvalidEvent("retrieval", f"must be one of {', '.join(MODES)}, not {shown(retrieval)}")


def with_retrieval(store: Store, thread: str, view: list[Message], mode: str, parent_offset: int,
                   passages: Any = None) -> tuple[list[Message], Json]:
    """`view` with a retrieval block first in each user message that opens a turn after the
    fork point (only the first with `first_turn`), and the passages searched for (those no
    record held), as a live turn records them (`{"<user offset>": [[offset, part], ...]}`).

    `passages` holds records in that form that come first (the answer `check_request` checks
    recorded them); a record of the thread's that is not in that form is passed over."""
    given = _records(passages, parent_offset, strict=True)
    if mode == "off":
        return view, {}
    out = list(view)
    recorded: dict[int, list[Part]] | None = None
    searched: Json = {}
    scope: list[tuple[str, int, int | None]] | None = None
    for index, message in enumerate(view):
        if message.kind != "message" or message.role != "user" or message.offset <= parent_offset:
            continue
        words = _words(message)
        if not words.strip():
            continue  # tool results: the turn is already open
        if recorded is None:
            recorded = _recorded(store, thread, parent_offset) | given
            docs = _recorded_documents(store, thread, view[index:], recorded)
        parts = recorded.get(message.offset)
        if parts is not None:
            chosen = _chosen(parts, docs)
        else:
            if scope is None:
                update_index(store)
                scope = textindex.scope_of(store, thread, ancestors=True, stop=parent_offset)
            chosen = _fitting(_candidates(store, thread, checked_search(store, words, "any", scope, limit=_CANDIDATES)))
            searched[str(message.offset)] = [list(part) for part, _ in chosen]
        if chosen:
            out[index] = _with_block(message, chosen, parent_offset)
        if mode == "first_turn":
            break
    return out, searched


def inherited(store: Store, thread: str, view: list[Message]) -> list[Message]:
    """`view` of a fork (`context="full"`) that holds a note fork's turns, its first message
    that fork's note: with the blocks the note fork's live turns recorded (below this fork's
    point), as the note fork sent them, so the fork's model sees the history its parent's did
    and its requests start as the parent's. Records only: a turn message none holds (appended
    by hand, or answered past this fork's point) gets no block, and none is searched for."""
    note_at = view[0].offset
    segment = next(((stream, hi) for stream, lo, hi in segments(store.ancestry(thread)) if lo == note_at), None)
    if segment is None:
        return view
    stream, hi = segment
    recorded = _recorded(store, stream, note_at, hi)
    # The note fork's own mode, as its requests follow it (a turn that overrode it recorded a
    # block its later requests do not show); a redaction keeps a fork event's options.
    mode = store.event_at(stream, note_at).data.get("options", {}).get("retrieval", "off")
    if not recorded or mode == "off":
        return view
    docs = _recorded_documents(store, stream, view, recorded)
    out = list(view)
    for index, message in enumerate(view):
        if message.kind != "message" or message.role != "user" or not _words(message).strip():
            continue  # as in with_retrieval: tool results open no turn
        parts = recorded.get(message.offset) if hi is None or message.offset < hi else None
        if parts and (chosen := _chosen(parts, docs)):
            out[index] = _with_block(message, chosen, note_at)
        if mode == "first_turn":
            break
    return out


def _words(message: Message) -> str:
    """A message's text, what a search for its turn is made of."""
    return " ".join(b["text"] for b in message.content if b.get("type") == "text" and isinstance(b.get("text"), str))


def _with_block(message: Message, chosen: list[tuple[Part, Doc]], parent_offset: int) -> Message:
    return message._replace(content=[{"type": "text", "text": render(chosen, parent_offset)}, *message.content])


def _recorded_documents(store: Store, thread: str, view: list[Message], recorded: dict[int, list[Part]]) -> dict[int, list[Doc]]:
    """The documents of the events the records of `view`'s user messages name."""
    wanted = [part for m in view if m.kind == "message" and m.role == "user" for part in recorded.get(m.offset, ())]
    return _documents(store, thread, sorted({offset for offset, _ in wanted}))


def _chosen(parts: list[Part], docs: dict[int, list[Doc]]) -> list[tuple[Part, Doc]]:
    """A record's passages that their events still give (a redacted one gives none)."""
    return [((offset, part), own[part]) for offset, part in parts if part < len(own := docs.get(offset, []))]


def _records(value: Any, parent_offset: int, strict: bool) -> dict[int, list[Part]]:
    """The records in `value` (`{"<user offset>": [[offset, part], ...]}`): `InvalidEvent`
    naming what is wrong when `strict`, else nothing for a value not in that form."""
    if value is None:
        return {}
    try:
        if not isinstance(value, dict):
            raise ValueError(f"must be a dict of user message offsets to [offset, part] pairs, not {shown(value)}")
        out: dict[int, list[Part]] = {}
        for key, parts in value.items():
            if not (isinstance(key, str) and key.isdigit() and key.isascii() and int(key) > parent_offset):
                raise ValueError(f"key {shown(key)} is not the offset of a message after the fork point ({parent_offset})")
            if not (isinstance(parts, list) and len(parts) <= _CANDIDATES and all(_is_part(p, parent_offset) for p in parts)):
                raise ValueError(f"[{key!r}] must be at most {_CANDIDATES} [offset, part] pairs, each an offset below "
                                 f"{parent_offset} and a part below {DOC_PARTS}, not {shown(parts)}")
            out[int(key)] = [(p[0], p[1]) for p in parts]
        return out
    except ValueError as error:
        if strict:
            raise InvalidEvent("passages", str(error)) from None
        return {}


def _is_part(value: Any, parent_offset: int) -> bool:
    return (isinstance(value, list) and len(value) == 2 and all(type(n) is int for n in value)
            and 0 <= value[0] < parent_offset and 0 <= value[1] < DOC_PARTS)


def _recorded(store: Store, thread: str, parent_offset: int, stop: int | None = None) -> dict[int, list[Part]]:
    """The passages the thread's answers recorded, by user message offset (the first record of each).
    An answer redacted since keeps its record (its meta, positions only): erasing the answer's
    text does not change the block of the message before it."""
    found: dict[int, list[Part]] = {}
    for event in store.read(thread, parent_offset + 1, stop):
        request = event.meta.get("request") if event.type == "message.appended" else None
        if isinstance(request, dict) and "passages" in request:
            for key, parts in _records(request["passages"], parent_offset, strict=False).items():
                found.setdefault(key, parts)  # the first record of each message stands (a merge per answer copied them all)
    return found


def _documents(store: Store, thread: str, offsets: list[int]) -> dict[int, list[Doc]]:
    """The documents of the events at these (sorted) offsets of the thread's history (none for
    a redacted one), read in one range per run of offsets close together."""
    out: dict[int, list[Doc]] = {}
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][-1] <= _GAP:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    for run in runs:
        wanted = set(run)
        for event in store.read(thread, run[0], run[-1] + 1):
            if event.offset in wanted:
                out[event.offset] = documents(store, event)
    return out


_GAP = 16  # events read past between two passages rather than read apart


def _candidates(store: Store, thread: str, hits: list[HitRow]) -> list[tuple[Part, Doc]]:
    """The hits as (offset, part) and the document their event gives, best first, each once
    (PostgreSQL may find two pieces of one long text)."""
    out: dict[Part, Doc] = {}
    for hit in hits:
        event = next(iter(store.read(thread, hit.offset, hit.offset + 1)), None)
        docs = [] if event is None else documents(store, event)
        for index in parts_of(docs, hit):
            out.setdefault((hit.offset, index), docs[index])
            break
    return list(out.items())


def _fitting(candidates: list[tuple[Part, Doc]], budget: int = BUDGET) -> list[tuple[Part, Doc]]:
    """The best candidates whose passages fit in `budget` bytes together, in offset order, and
    the passages of one event in the order of their text (as releases before the records
    rendered them, so a request one of them sent, searched for again, rebuilds the same)."""
    chosen: list[tuple[Part, Doc]] = []
    used = 0
    for part, doc in candidates:
        size = len(_passage(part, doc).encode("utf-8"))
        if used + size <= budget:
            chosen.append((part, doc))
            used += size
    return sorted(chosen, key=lambda c: (c[0][0], _passage(*c)))


def render(chosen: list[tuple[Part, Doc]], parent_offset: int) -> str:
    """The block of the chosen passages, in the order given."""
    passages = "\n".join(_passage(part, doc) for part, doc in chosen)
    return f"{BEGIN} (below offset {parent_offset}; excerpts, not the whole history):\n\n{passages}\n{END}"


def _passage(part: Part, doc: Doc) -> str:
    body = clip_middle(indented(doc.text).encode("utf-8"), PASSAGE, INDENT.encode()).decode("utf-8")
    what = doc.kind if doc.tool is None else f"{doc.kind} {inline(doc.tool)}"
    return f"### offset {part[0]} · {inline(doc.role or '-')} · {what}\n\n{body}\n"
