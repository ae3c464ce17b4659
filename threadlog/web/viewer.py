"""What every handler needs: the file, the templates and the integrity badge."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse

from eventstore import Store, StoreError
from eventstore.urls import safe_url
from projections import Message
from projections.stops import blank_text

from .cursor import CUT_SHORT, REFUSAL
from .integrity import Integrity
from .items import ROWS_PER_EVENT, Item
from .render import markdown_budget, visible

# A stored event the viewer cannot read (raw SQL, an older release or a hand edit wrote it):
# the request was fine and the server did not fail; the thread as stored cannot be shown
# until the row is mended or redacted, as the page says. It was a 500, which tells a reader
# the viewer broke, and a RecursionError (an event nested deep enough to parse but not to
# print) Starlette's bare "Internal Server Error".
UNREADABLE_STATUS = 409
# The database cannot be opened (removed, made unreadable or replaced while the server runs;
# for a URL, its server down): the request was fine and the viewer did not fail, it cannot
# reach the database now, and serves it again once it can. It was a 500, which says the
# viewer broke.
UNAVAILABLE_STATUS = 503


class Unavailable(StoreError):
    """The viewer's database cannot be opened now: what the store said of why, and that the
    viewer keeps running."""

    def __init__(self, error: StoreError) -> None:
        super().__init__(f"the database cannot be opened now: {error}. The viewer is still running: reload this page "
                         "once the database is back")


@dataclass
class Viewer:
    """What every handler needs: the file, the templates, the integrity badge; `stopping` is
    set when the server shuts down, and ends the live streams."""

    path: str
    env: Environment
    integrity: Integrity
    stopping: threading.Event = field(default_factory=threading.Event)
    streams: int = 0  # live streams open now (`live.STREAMS` at most)

    def open(self) -> Store:
        try:
            return Store(self.path, read_only=True)
        except StoreError as error:
            raise Unavailable(error) from None

    def item(self, item: Item, thread: str) -> str:
        """One item of a thread page as its `<li>` (the page and the live updates show it so)."""
        return self.env.get_template("_item.html").render(item=item, thread=thread, rows_per_event=ROWS_PER_EVENT)

    def blocks(self, thread: str) -> Callable[[tuple[Message, Any]], str]:
        """What renders one part of a message of `thread` (a replay's, a diff side's) as its HTML:
        a block, or the card of an answer refused or cut short (whose blank text shows nothing, as
        on the thread page)."""
        macros = self.env.get_template("_block.html").make_module({"rows_per_event": ROWS_PER_EVENT})
        block, refused, cut = getattr(macros, "block"), getattr(macros, "refusal"), getattr(macros, "cut_short")

        def render(part: tuple[Message, Any]) -> str:
            message, content = part
            if content is REFUSAL:
                return str(refused(message.refusal))
            if content is CUT_SHORT:
                return str(cut(message.cut_short))
            if content is None or ((message.refusal is not None or message.cut_short is not None) and blank_text(content)):
                return ""
            return str(block(content, thread, message.offset))

        return render

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        # The database's name as pages show it: a URL's password left out (it was on every page).
        with markdown_budget():
            html = self.env.get_template(template).render(request=request, path=safe_url(self.path),
                                                          rows_per_event=ROWS_PER_EVENT, **context)
        return HTMLResponse(visible(html), status_code=status)


def viewer(request: Request) -> Viewer:
    found: Viewer = request.app.state.viewer
    return found
