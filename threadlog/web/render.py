"""The Jinja environment: the templates, their filters, and the links between pages.

Autoescaping is on for every template: a stored string is text unless it goes through
`markdown` (rendered and sanitised). Links carry thread ids in the query string, quoted,
so an id with `/`, `?` or `<` in it is still one id.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from projections.search import plain
from projections.transcript import clip_middle

from ..render import INVISIBLE, REORDERING, activity_time
from .markdown import preformatted, render_markdown

TEMPLATES = Path(__file__).resolve().parent / "templates"


# Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) reorder the
# characters around them where a browser shows them: a stored string could show an auditor
# another text than the one stored (`invoice\u202egpj.exe` reads as `invoiceexe.jpg`). The
# control characters but the tab and the line breaks (C0, DEL, C1) show as nothing, or NUL as
# U+FFFD, so a stored `\x1b[31m` or `\x00` was not seen at all; nor a zero-width space, a word
# joiner or a byte order mark (`abc` and `ab\u200bc` looked like one id). The pages show each as its
# escape, as the CLI does (`threadlog.render.safe`). The marks (U+200E, U+200F, U+061C), which
# RTL text uses, only set the direction of what is neutral.
_UNSHOWN = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{REORDERING}{INVISIBLE}]")
_UNSHOWN_RUNS = re.compile(f"{_UNSHOWN.pattern}{_UNSHOWN.pattern}*")  # as `X+`, scanned three times as fast


@functools.lru_cache(maxsize=1024)
def _escaped(run: str) -> str:
    return run.encode("unicode_escape").decode("ascii")


def visible(html: str) -> str:
    """A page (or a part of one) with every reordering or control character shown as its escape.
    A run of them is escaped at once, and the escapes of the last few runs kept: a page of 2 MB
    of `\x01` took 4 s, as many calls as characters."""
    return _UNSHOWN_RUNS.sub(lambda found: _escaped(found.group()), html)


def sent(value: Any) -> Markup:
    """`value` for a form field the browser sends back (not one it shows): escaped, with each
    reordering or control character as a character reference, which `visible` leaves alone
    and the browser sends as the character itself (an id holding one came back as its escape
    text)."""
    return Markup(_UNSHOWN.sub(lambda found: f"&#x{ord(found.group()):x};", str(escape(value))))


def link(path: str, **params: Any) -> str:
    """A URL of the viewer: `path` with its query (None values left out)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{path}?{query}" if query else path


def event_link(thread: str, offset: int) -> str:
    """The thread page that starts at event `offset`, scrolled to it (a search hit's, a blame
    row's, a fork's link to its parent). A page starting earlier, for context, may stop short
    of it (`budget`): a few huge events before it filled the page and the link landed nowhere."""
    return f"{link('/thread', id=thread, start=max(offset, 0))}#o-{offset}"


def _short(value: str | None, size: int = 16) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= size else text[: size - 1] + "…"


# The most of one stored string a page shows: head and tail around `… N bytes elided …`, as
# transcripts do. An event may hold 32 MiB; a 30 MB message made a 30 MB page in 3 s.
SHOWN_BYTES = 64 * 1024


class Cut:
    """Whether a part rendered within `text_budget` had a string cut short of `SHOWN_BYTES` to fit."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.happened = False


# The bytes of stored text the part being rendered may still show (`budget.fill` sets it to
# what its page has left); None outside a page's budget: each string is then clipped alone.
_text_left: ContextVar[Cut | None] = ContextVar("text_left", default=None)


@contextlib.contextmanager
def text_budget(room: int) -> Iterator[Cut]:
    """Render one part within `room` bytes of (escaped) stored text: each string past what is
    left is cut to it, around the mark that says how many bytes it leaves out."""
    cut = Cut(max(room, 0))
    token = _text_left.set(cut)
    try:
        yield cut
    finally:
        _text_left.reset(token)


def _fitted(text: str, limit: int) -> str:
    """`text` itself when it fits in `limit` bytes, else its head and tail around the elision mark."""
    if len(text) <= limit // 4:  # fits whatever its characters
        return text
    raw = text.encode("utf-8", "surrogatepass")
    return text if len(raw) <= limit else clip_middle(raw, limit).decode("utf-8", "replace")


def _escaped_size(text: str) -> int:
    """The bytes `text` takes on the page: escaped, each unshown character as its escape (`visible`)."""
    return len(visible(str(escape(text))).encode("utf-8", "surrogatepass"))


def clip(value: Any) -> str:
    """`value` as text, at most `SHOWN_BYTES` of it, and within a page's budget what it has left."""
    text = "" if value is None else str(value)
    budget = _text_left.get()
    if budget is None:
        return _fitted(text, SHOWN_BYTES)
    limit = min(SHOWN_BYTES, budget.room)
    shown = _fitted(text, limit)
    size = _escaped_size(shown)
    if size > budget.room:  # escaping grew it (`<` shows as 4 bytes, `\x01` as 4): cut it by as much again
        shown = _fitted(text, limit * budget.room // size)
        size = _escaped_size(shown)
    if shown is not text and limit < SHOWN_BYTES:  # cut shorter than the string's own bound
        budget.happened = True
    budget.room = max(budget.room - size, 0)
    return shown


# Markdown costs markdown-it up to ~13 µs a character on text made of its markup (`![![![…`),
# against a fraction of that on prose and code (100 messages of 1.7 kB prose: 33 ms; 20 kB of
# fenced code: 1 ms): a page of 100 such 64 kB messages took 86 s. What it costs follows the
# markup characters (`MARKUP`) a text holds, so those are counted: a string holding more than
# `MARKDOWN_CHARS` of them, or more than a page (or live update) has left of `MARKDOWN_PAGE`,
# is shown as it is, preformatted.
MARKUP = "[]()!*_`<"
MARKDOWN_CHARS = 16 * 1024
MARKDOWN_PAGE = 128 * 1024
_markdown_left: ContextVar[int] = ContextVar("markdown_left", default=MARKDOWN_PAGE)


@contextlib.contextmanager
def markdown_budget() -> Iterator[None]:
    """Render one page (or one live update) within `MARKDOWN_PAGE` characters of Markdown."""
    token = _markdown_left.set(MARKDOWN_PAGE)
    try:
        yield
    finally:
        _markdown_left.reset(token)


def _markdown(value: Any) -> Markup:
    text = visible(clip(value))  # before the renderer, which makes NUL U+FFFD
    markup = sum(map(text.count, MARKUP))
    if markup:
        left = _markdown_left.get()
        if markup > MARKDOWN_CHARS or markup > left:
            return preformatted(text)
        _markdown_left.set(left - markup)
    return render_markdown(text)


_MATCH = re.compile(r"\\([\\*])|\*\*((?:\\[\\*]|[^*\\])+)\*\*")  # an escape, or a match (`_marked`)


def _marked(snippet: Any) -> Markup:
    """A search hit's snippet (Markdown: its matches between `**`, the text's own `*` and `\\`
    escaped, as `SearchHit.snippet` gives it) with its matches as `<mark>` and its escapes
    undone: the page showed the asterisks, and a text's own `**bold**` as more marks."""

    def part(found: re.Match[str]) -> str:
        literal, match = found.groups()
        return literal if literal is not None else f"<mark>{plain(match)}</mark>"

    return Markup(_MATCH.sub(part, str(escape(clip(snippet)))))


def _pretty(value: Any) -> str:
    """`value` as indented JSON, at most `SHOWN_BYTES` of it (and within a page's budget what
    it has left), encoded only that far (a tool input of 3 million numbers took 0.9 s to
    encode whole before it was cut)."""
    budget = _text_left.get()
    limit = SHOWN_BYTES if budget is None else min(SHOWN_BYTES, budget.room)
    pieces: list[str] = []
    size = 0
    for piece in json.JSONEncoder(indent=2, ensure_ascii=False, default=str).iterencode(value):
        pieces.append(piece)
        size += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
        if size > limit:
            head = "".join(pieces).encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")
            if budget is not None:
                budget.happened = budget.happened or limit < SHOWN_BYTES
                budget.room = max(budget.room - _escaped_size(head), 0)
            return f"{head}\n… (cut: the rest is not shown)"
    text = "".join(pieces)
    if budget is not None:
        budget.room = max(budget.room - _escaped_size(text), 0)
    return text


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"], default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["markdown"] = _markdown
    env.filters["clip"] = clip
    env.filters["marked"] = _marked
    env.filters["short"] = _short
    env.filters["pretty"] = _pretty
    env.filters["sent"] = sent
    env.filters["activity"] = activity_time  # as `threadlog ls` shows it: one function for both
    env.globals["link"] = link
    env.globals["event_link"] = event_link
    return env
