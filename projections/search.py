"""`search`: full-text search over every thread, or over one thread's logical history.

What an event contributes to the index is decided here (the store only keeps the index):

- a message: its text blocks (one document), each `tool_use` (the tool's name, then its
  input as `key: value` lines) and each `tool_result` (its text), with the message's role;
  a result names the tool of the call it answers. Thinking, images and documents are not
  indexed;
- a compaction's summary, and a thread's title (`thread.created`, `title.set`);
- nothing else (runs, interrupts, metadata, todos, forks), and nothing of a redacted event.

The index catches up before a search answers (in one write transaction, so a search sees
every committed event), which is also why a search needs a writable store when events were
appended since the last one. Ranking is BM25 over each document; ties go to the older one.
A query is SQLite FTS5 syntax (`"exact phrase"`, `a OR b`, `NOT`, `pre*`, `NEAR(a b)`); a
query that is not valid FTS5 (`"unbalanced`, `ferry OR`) is taken as plain words, its
operators left out (unless nothing else is left), all of which must match.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from eventstore import InvalidEvent, RecordedEvent, Store, StoreError, ThreadInfo, ThreadNotFound
from eventstore import textindex
from eventstore.backend import DOC_PIECE_CHARS, QUERY_OPERATORS, SNIPPET_MARKS, HitRow, Scope, doc_pieces
from eventstore.errors import Unreadable, altered_index, named, shown
from eventstore.recorded import decode
from eventstore.textindex import Doc, Extractor

ROLES = ("user", "assistant")
_FIRST_WINDOW = 16  # events read back first for the call a tool result answers, when not seen in this catch-up


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result. `thread` is the thread searched (or, searching everything, the thread
    that holds the event) and `title` its title; `stream` holds the event, at `offset` (its
    offset in `thread`'s history too) and global `position`. `kind` is text, tool_use,
    tool_result, summary or title; `snippet` marks the matches with `**`."""

    thread: str
    title: str | None
    stream: str
    offset: int
    position: int
    role: str | None
    kind: str
    tool: str | None
    time: str
    snippet: str
    score: float

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return asdict(self)


def search(
    store: Store,
    query: str,
    thread: str | None = None,
    ancestors: bool = True,
    role: str | None = None,
    tool: str | None = None,
    limit: int = 10,
    catch_up: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> list[SearchHit]:
    """The best `limit` matches of `query`, best first (see the module doc for the syntax).

    The index first catches up with the log (a write); `catch_up=False` searches what it
    already covers (`store.index_position()`), which a read-only store can always do.
    The first catch-up of a large log takes a while: `progress(done, total)` is told of each
    of its commits (interrupted, it keeps what it committed).

    With `thread`, only that thread's logical history: its own events and, with `ancestors`,
    its parent's events below the fork point (and so on up), never a sibling's nor the
    parent's after the fork. `role` keeps one role's messages; `tool` keeps the calls of
    that tool and their results.
    """
    if role is not None and role not in ROLES:
        raise InvalidEvent("role", f"must be 'user' or 'assistant', not {shown(role)}")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise InvalidEvent("tool", "must be a tool's name")
    textindex.check_search(store, query, "query", limit, tool)
    scope = textindex.scope_of(store, thread, ancestors) if thread is not None else None
    if catch_up:
        update_index(store, progress)
    rows = checked_search(store, query, "query", scope, role, tool, limit)
    titles: dict[str, str | None] = {}
    hits = []
    for row in rows:
        owner = thread if thread is not None else row.stream_id
        if owner not in titles:
            titles[owner] = store.title(owner)
        # FTS5's snippet of a text holding U+0000 drops the words around it, and one holding a
        # mark's character reads it as a mark: the text's own then.
        snippet = window(_stored(row.text), query) if row.snippet is None or _UNMARKABLE.search(row.text) \
            else clipped(row.snippet)
        hits.append(SearchHit(owner, titles[owner], row.stream_id, row.offset, row.position, row.role, row.kind,
                              row.tool, row.time, snippet, row.score))
    return hits


def tools_in_other_case(store: Store, tool: str, thread: str | None = None, ancestors: bool = True) -> list[str]:
    """The tool names of the indexed calls (in `thread`'s history, as `search` scopes it) that
    differ from `tool` only in case, when none is `tool` itself; sorted. `search`'s `tool`
    matches a name exactly, as the log stores it, so `bash` finds no call of `Bash`: this is
    for the hint a search that found nothing gives. Reads every document in scope (no index
    covers tool names), and only what the index covers: search first, which catches it up."""
    scope = textindex.scope_of(store, thread, ancestors) if thread is not None else None
    names = textindex.tools(store, scope)
    if tool in names:
        return []
    folded = tool.casefold()
    return sorted(name for name in names if name.casefold() == folded)


# A snippet of a document too long for the engine's own (`ENGINE_SNIPPET_CHARS`), and every
# snippet on PostgreSQL: about as many words as FTS5 shows, from a few before the first word
# of the query found.
SNIPPET_WORDS = 16
_BEFORE = 3  # words shown before the first match
LONGEST_RUN = 64  # characters of one word (or run of other text) a snippet shows before "…"
_TOKEN = re.compile(r"[^\W_]+")  # a word, as the index splits text: letters and digits
_RUN = re.compile(rf"\S{{{LONGEST_RUN + 1},}}")
_SPACES = re.compile(r"\s+")
_OPEN, _CLOSE = SNIPPET_MARKS
_UNMARKED = re.compile(f"([{_OPEN}{_CLOSE}])")
_ESCAPED = re.compile(r"[\\*]")
_UNESCAPE = re.compile(r"\\([\\*])")
_UNMARKABLE = re.compile(f"[\x00{_OPEN}{_CLOSE}]")


def window(text: str, query: str) -> str:
    """The snippet of a long document: a few words before the first word of `query` found in
    it (the text's start when none is found as written: the index also folds diacritics),
    then the rest of `SNIPPET_WORDS` words, the query's words between `**` (`markdown`). Costs one search
    up to that word and a fixed window after it, however long the text and however many times
    the word occurs (the engines' snippets grow with the square of the matches)."""
    text = _UNMARKED.sub("\ufffd", text)  # the marks' own characters are text's no more
    words = [w for w in re.findall(r"[^\W_]+\*?", query) if w not in QUERY_OPERATORS]
    exact = {w.casefold() for w in words if not w.endswith("*")}
    prefixes = tuple(w[:-1].casefold() for w in words if w.endswith("*"))
    alternatives = [re.escape(w) + r"(?![^\W_])" for w in exact] + [re.escape(p) for p in prefixes]
    found = re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + ")", re.IGNORECASE).search(text) if alternatives else None
    start = found.start() if found is not None else 0
    # Near the text's end, more words before: a text of up to `SNIPPET_WORDS` words shows whole.
    after = sum(1 for _ in itertools.islice(_TOKEN.finditer(text, start), SNIPPET_WORDS))
    wanted = max(_BEFORE, SNIPPET_WORDS - after)
    lo = max(0, start - wanted * LONGEST_RUN)
    before = [m.start() for m in _TOKEN.finditer(text, lo, start)][-wanted:]
    begin = before[0] if before else start
    first = _TOKEN.search(text)
    if first is not None and first.start() == begin:  # from the text's first word: what is before it too ("## ")
        begin = 0
    out, end = ["…"] if begin > 0 else [], begin
    for count, token in enumerate(_TOKEN.finditer(text, begin)):
        if count == SNIPPET_WORDS:
            break
        out.append(_gap(text, end, token.start()))
        word = token.group()
        folded = word.casefold()
        shown = _clip(word)
        out.append(f"{_OPEN}{shown}{_CLOSE}" if folded in exact or folded.startswith(prefixes) else shown)
        end = token.end()
    else:  # every word shown: the text's last characters too (a full stop), unless they run on
        if len(text) - end <= LONGEST_RUN:
            out.append(_gap(text, end, len(text)))
            end = len(text)
    if end < len(text):
        out.append("…")
    return markdown("".join(out).strip())


def _gap(text: str, start: int, stop: int) -> str:
    """What a snippet shows of the text between two words (or after the last)."""
    return _clip(_SPACES.sub(" ", text[start:min(stop, start + 4 * LONGEST_RUN)]))


def clipped(snippet: str) -> str:
    """An engine's snippet (its matches between `SNIPPET_MARKS`) as a hit gives it: each run of
    whitespace one space, as in a snippet `window` cuts (SQLite's own kept the text's newlines
    and tabs, PostgreSQL's hits and SQLite's of a long text did not), each run of other text
    longer than `LONGEST_RUN` cut there, its marks kept, then as `markdown`."""
    spaced = _SPACES.sub(" ", snippet).strip()
    return markdown(_RUN.sub(lambda run: "".join(part if part in SNIPPET_MARKS else _clip(part)
                                                 for part in _UNMARKED.split(run.group())), spaced))


def markdown(marked: str) -> str:
    """A snippet whose matches are between `SNIPPET_MARKS` as Markdown: `**` around each match,
    and the text's own `*` and `\\` escaped with `\\` (a text's `**bold**` read as more marks:
    `****ferry****`, and the viewer marked `**ferry`)."""
    return _ESCAPED.sub(r"\\\g<0>", marked).replace(_OPEN, "**").replace(_CLOSE, "**")


def plain(snippet: str) -> str:
    """A hit's snippet with its escapes undone, its matches still between `**` (a line of text
    for a person, where a text's own asterisks read as they are written)."""
    return _UNESCAPE.sub(r"\1", snippet)


def _clip(text: str) -> str:
    return text if len(text) <= LONGEST_RUN else text[:LONGEST_RUN] + "…"


def checked_search(store: Store, query: str, match: str, scope: Sequence[Scope] | None, role: str | None = None,
                   tool: str | None = None, limit: int = 10) -> list[HitRow]:
    """`textindex.search`'s hits, `checked`, the query and the reads of its hits' events in one
    read transaction: a redaction another connection commits between them is no altered index."""
    with store.consistent():
        return checked(store, textindex.search(store, query, match, scope, role, tool, limit))


def checked(store: Store, rows: list[HitRow]) -> list[HitRow]:
    """`rows`, once each document is one its event gives now, a call's tool label too; else
    `StoreError`. A label holding a space is given back as the log names the tool: on
    PostgreSQL the index holds a space where a name holds U+0000, and a hit named `Ba sh` the
    tool `Ba\\x00sh` that a search on SQLite names as it is.

    The index is a cache of the log that raw SQL can rewrite, and a hit's text is what a user
    reads as the event's and what retrieval sends the model: a document its event does not
    give (rewritten, moved to another event, or kept for an event redacted since) is refused
    (a long text may be indexed in its `doc_pieces`: each is one its event gives)
    as an altered index, as `verify` refuses a snapshot that differs from its events. So is a
    call's label that is not the tool the log gives. Costs one read of each hit's event. A
    result's label is not checked: its call may be any distance back (a catch-up reads back to
    it once; each search would again). (A document removed or copied is refused where the
    index's count of its documents is checked: each search on SQLite, `threadlog index` on
    PostgreSQL.)
    A hit on one of a long text's pieces is given the whole text, as SQLite gives it: a snippet
    cut from the piece began at it with no "…", as if it were the whole text.
    """
    named = []
    # Hits among the blocks of one message: it is read, and its documents made, once.
    read: dict[tuple[Any, Any], RecordedEvent | None] = {}  # (stream, offset) -> its event
    made: dict[int, list[Doc]] = {}  # position -> its event's documents
    for row in rows:
        if (row.stream_id, row.offset) not in read:
            try:
                read[row.stream_id, row.offset] = next(iter(store.read(row.stream_id, row.offset, row.offset + 1)), None)
            except ThreadNotFound:  # no such thread: the hit's event may be in the log all the same
                _check_thread_gone(store, row)
                read[row.stream_id, row.offset] = None
            except InvalidEvent:  # an offset no event has (-1)
                read[row.stream_id, row.offset] = None
        event = read[row.stream_id, row.offset]
        if event is None or event.position != row.position:
            docs = []
        elif event.position in made:
            docs = made[event.position]
        else:
            docs = made[event.position] = documents(store, event, read_back=False)
        same = [docs[part] for part in parts_of(docs, row)]
        if not same:
            raise altered_index(f"the document of position {row.position} is not text its event holds")
        if row.kind != "tool_result" and not any(_stored(doc.tool) == _stored(row.tool) for doc in same):
            raise StoreError(f"the search index labels the {row.kind} at position {row.position} with tool {row.tool!r}, "
                             f"but the log gives {same[0].tool!r}: the index was altered outside threadlog; rebuild it "
                             "from the log with `threadlog index --rebuild`")
        if event is not None and row.tool is not None and " " in row.tool:
            row = row._replace(tool=_logged_tool(store, event, row))
        if not any(_stored(doc.text) == _stored(row.text) for doc in same):
            row = row._replace(text=same[0].text)  # one piece of a long text: the hit's snippet is cut from the whole
        named.append(row)
    return named


def _check_thread_gone(store: Store, row: HitRow) -> None:
    """Refuse hit `row` when the log holds its event at its position in the thread it names,
    whose row is gone (only raw SQL deletes one): the index is not altered, it indexed an event
    left without its thread (a rebuild indexes it again), which no thread's history shows."""
    stored = next(store.read_all_raw(row.position - 1, 1), None) if row.position.__class__ is int and row.position > 0 else None
    if stored is not None and stored.position == row.position and stored.stream_id == row.stream_id:
        raise Unreadable(f"a match is the event at position {row.position} of thread {named(row.stream_id)}, which is not in "
                         "the file (that thread's row was deleted, or the event's stream_id altered, outside threadlog): no thread's "
                         "history shows it; `threadlog verify` names the first event left without its thread")


def _logged_tool(store: Store, event: RecordedEvent, row: HitRow) -> str | None:
    """The tool of hit `row` as its event's documents name it (a result's read back from its
    call), when they name one tool that the index stores as `row.tool`; else `row.tool`."""
    docs = documents(store, event)
    logged = [tool for tool in {docs[part].tool for part in parts_of(docs, row)} if tool is not None and _stored(tool) == row.tool]
    return logged[0] if len(logged) == 1 else row.tool


def documents(store: Store, event: RecordedEvent, read_back: bool = True) -> list[Doc]:
    """The documents the index holds for `event`, in order (none for a redacted one). A tool
    result is labelled with its call's tool, read back in its history however far
    (`read_back=False`: with None, as no call was seen)."""
    if event.redacted:
        return []
    return _Extractor(store, read_back)(event.stream_id, event.offset, event.type, event.data)


def parts_of(docs: list[Doc], row: HitRow) -> list[int]:
    """Which of its event's `docs` (`documents`) the hit `row` can be: same kind, role and text,
    as both backends store it (a long text may be indexed in its `doc_pieces`)."""
    text = _stored(row.text)
    return [part for part, doc in enumerate(docs) if doc.kind == row.kind and doc.role == row.role and (
            _stored(doc.text) == text or (len(doc.text) > DOC_PIECE_CHARS and text in map(_stored, doc_pieces(doc.text))))]


_Text = TypeVar("_Text", str, str | None)


def _stored(text: _Text) -> _Text:
    """A document's text (or tool) as both backends compare it: PostgreSQL text holds no U+0000 (a space)."""
    return text.replace("\x00", " ") if text is not None else text


def update_index(store: Store, progress: Callable[[int, int], None] | None = None) -> int:
    """Bring the search index up to date (a search does this itself); returns events read.
    `progress(done, total)` is told of each of its commits."""
    return store.update_index(extractor(store), progress)


def rebuild_index(store: Store, progress: Callable[[int, int], None] | None = None) -> int:
    """Rebuild the search index from the whole log; returns events read. `progress(done,
    total)` is told of each batch (the rebuild commits once, at its end)."""
    return store.rebuild_index(extractor(store), progress)


def extractor(store: Store) -> Callable[[], Extractor]:
    """What `Store.update_index` takes: a maker of this module's extractor."""
    return lambda: _Extractor(store)


class _Extractor:
    """The documents of each event, in position order. A tool result is labelled with the name of
    the call it answers: the latest `tool_use` with its id in the result's own history (its
    thread, then each ancestor below the fork point), as `read` gives it. The facts refuse a
    result for an id that is not pending and a second call with a pending id, so that call is
    the one it answers, and no later one can come between. Ids repeat: across threads (`call_0`
    numbers each turn's calls) and within one once answered; so a call is remembered per stream.

    The calls seen in this catch-up answer most results, in the result's stream or, below each
    fork point, in an ancestor whose own events this catch-up saw from their first; a result
    whose call is older (an earlier catch-up's) reads its history back for it, however far.
    Either way the label is what the log gives, so a rebuild labels as the catch-ups did."""

    def __init__(self, store: Store, read_back: bool = True) -> None:
        self.store = store
        self.read_back = read_back  # False: a result whose call was not seen here is labelled None
        # (stream, tool_use id) -> (offset, name) of the stream's latest call with the id seen here
        self.calls: dict[tuple[str, str], tuple[int, str]] = {}
        self.first_seen: dict[str, int] = {}  # stream -> the offset of its first own event seen here
        self.streams: dict[str, ThreadInfo] = {}  # the streams' rows read here (where each forks from)
        self.older: dict[str, _Older] = {}  # thread -> the calls read back in its history

    def __call__(self, stream_id: str, offset: int, type_: str, data: dict[str, Any]) -> list[Doc]:
        self.first_seen.setdefault(stream_id, offset)
        if type_ == "message.appended":
            return self._message(stream_id, offset, data)
        if type_ in ("thread.created", "title.set"):
            return _doc("title", None, None, data.get("title"))
        if type_ == "compaction.recorded":
            return _doc("summary", None, None, data.get("summary"))
        return []

    def _message(self, stream_id: str, offset: int, data: dict[str, Any]) -> list[Doc]:
        role = data.get("role")
        content = data.get("content")
        if isinstance(content, str):
            return _doc("text", role, None, content)
        texts: list[str] = []
        docs: list[Doc] = []
        for block in content if isinstance(content, list) else ():
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                name = str(block.get("name", ""))
                self.calls[stream_id, str(block.get("id"))] = (offset, name)
                docs += _doc("tool_use", role, name, name + "\n" + _arguments(block.get("input")))
            elif kind == "tool_result":
                tool_use_id = str(block.get("tool_use_id"))
                seen, tool = self._seen(tool_use_id, stream_id, offset)
                if not seen and self.read_back:
                    tool = self._read_back(tool_use_id, stream_id, offset)
                docs += _doc("tool_result", role, tool, _result_text(block.get("content")))
        return _doc("text", role, None, "\n".join(texts)) + docs

    def _seen(self, tool_use_id: str, stream_id: str, offset: int) -> tuple[bool, str | None]:
        """(True, its name) for the latest call with this id in the history below `offset` of
        `stream_id`, when the calls seen here decide it; (False, None) when only a read back
        can: a stream whose own events were not all seen here may hold it unseen, and a later
        call with the id in one stream hides an earlier one. Walks up the fork points, each
        stream's row read once per catch-up (a chain of forks costs a step per link)."""
        stream, bound = stream_id, offset
        while True:
            hit = self.calls.get((stream, tool_use_id))
            if hit is not None:
                return (True, hit[1]) if hit[0] < bound else (False, None)
            info = self.streams.get(stream)
            if info is None:
                info = self.streams[stream] = self.store.thread(stream)
            if self.first_seen.get(stream) != info.base or info.parent_id is None or info.parent_offset is None:
                return False, None
            stream, bound = info.parent_id, min(bound, info.parent_offset)  # a fork below the parent's own events

    def _read_back(self, tool_use_id: str, thread: str, offset: int) -> str | None:
        """The name of the latest call with this id in the thread's history below `offset`; None
        when there is none. The history is read back in windows that double, and what a
        window holds is kept: a later result of the thread that misses too has its call below
        the first one's (its own events above that one were seen in this catch-up), so each
        thread's history is read back once, however many calls were pending when it stopped.
        A redacted call keeps its name (its skeleton); an event too deeply nested to read is
        passed over, as a catch-up passes over it."""
        older = self.older.get(thread)
        if older is None:
            older = self.older[thread] = _Older(offset)
        while tool_use_id not in older.calls and older.start > 0:
            start = max(0, older.start - max(_FIRST_WINDOW, older.top - older.start))  # as much again as was read
            window: dict[str, str] = {}
            for _, type_, version, text in self.store.read_raw(thread, start, older.start):
                if type_ != "message.appended":
                    continue
                try:
                    content = decode(type_, version, text).get("content")
                except RecursionError:
                    continue
                for block in content if isinstance(content, list) else ():
                    if block.get("type") == "tool_use":
                        window[str(block.get("id"))] = str(block.get("name", ""))
            older.calls = window | older.calls  # a later call with the id, read before, stays
            older.start = start
        return older.calls.get(tool_use_id)


class _Older:
    """The calls a catch-up read back in one thread's history: the latest with each id at
    offsets `start` up to `top`, the first of its results whose call it had not seen."""

    __slots__ = ("top", "start", "calls")

    def __init__(self, top: int) -> None:
        self.top = self.start = top
        self.calls: dict[str, str] = {}


def _doc(kind: str, role: str | None, tool: str | None, text: Any) -> list[Doc]:
    return [Doc(kind, role, tool, text)] if isinstance(text, str) and text.strip() else []


def _arguments(value: Any) -> str:
    """A tool call's input as text: `key: value` lines (strings as they are)."""
    if not isinstance(value, dict):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "\n".join(f"{key}: {item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)}"
                     for key, item in value.items())


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""
