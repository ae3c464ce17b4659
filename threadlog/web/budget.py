"""A page's budget: how much of the log one page (or one live update) shows as a whole.

Each string is clipped (`render.SHOWN_BYTES`) and each event shows `ROWS_PER_EVENT` rows, but a
page holds many of both: a thread of 5 messages of 200 blocks of 100 kB made a 66 MB thread
page in 5.7 s, which a browser tab chokes on. So a page renders its parts (rows, blocks) one
at a time and stops before the one that would take it past `PAGE_BYTES` of HTML or
`PAGE_ROWS` parts; the page then says where it stopped and links on from there. The first
part is always shown, so paging moves on; when it alone is larger than the budget, its stored
strings are cut to what the page has left, each saying how many bytes it leaves out.

The budget was measured against the real sessions gathered for the importers' tests (Claude
Code, pi, SWE-agent: 55 threads, 263 pages): the largest page held 400 kB and 202 rows, so a
page of ordinary data is not cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from markupsafe import Markup

from .render import markdown_budget, text_budget, visible

PAGE_BYTES = 2 * 1024 * 1024  # HTML a page shows of the log (five times the largest real page)
PAGE_ROWS = 1000  # rows or blocks a page shows (five times the most a real page held)

K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Filled(Generic[K, T]):
    """The parts a page shows, in the order they were offered, each with its key and HTML;
    `rest`: the key of the first part left for another page (None: every part is shown)."""

    shown: list[tuple[K, T, Markup]]
    rest: K | None


def fill(parts: Iterable[tuple[K, T]], render: Callable[[T], str], room: int = PAGE_BYTES, rows: int = PAGE_ROWS) -> Filled[K, T]:
    """Render `parts` (key, part) in order until the next would take the page past `room`
    bytes of HTML or `rows` parts. Parts are taken from `parts` only as they are rendered,
    plus the one that did not fit: a lazy iterable reads no further than the page."""
    shown: list[tuple[K, T, Markup]] = []
    used = 0
    with markdown_budget():
        for key, part in parts:
            if len(shown) == rows:
                return Filled(shown, key)
            with text_budget(room - used) as cut:
                html = visible(render(part))  # as the page shows it: a control character is 4 bytes of its escape
            size = len(html.encode("utf-8", "surrogatepass"))
            if shown and (cut.happened or used + size > room):
                return Filled(shown, key)
            shown.append((key, part, Markup(html)))
            used += size
    return Filled(shown, None)
