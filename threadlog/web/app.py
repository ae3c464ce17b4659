"""The web application: its routes, the headers every response carries, and how a request
reaches the store.

Starlette, because it is small, typed, well kept and runs plain functions in a thread pool
(the store's calls are synchronous); Jinja2 templates, server-rendered, so every page works
without JavaScript. Each request opens the file read-only (about a millisecond) and closes
it when done: a `Store` holds one connection for one thread, and a read-only connection can
never write, whatever a handler does. Only GET routes exist.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from eventstore import InvalidEvent, Store, StoreError, ThreadNotFound
from eventstore.errors import UNREADABLE, unreadable

from . import images, live, pages
from .integrity import Integrity
from .origin import KnownHosts, SameOrigin
from .render import environment
from .viewer import UNAVAILABLE_STATUS, UNREADABLE_STATUS, Unavailable, Viewer, viewer

STATIC = Path(__file__).resolve().parent / "static"

# No inline script or style, nothing from another origin, no plugins, no framing: stored
# text that slips past escaping and sanitising still cannot run.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
# Pages, the live stream and stored images are not kept by the browser: one shown again from
# its cache (Back) would show text a redaction has erased since. The static files (script,
# style) hold no stored text.
NO_STORE = (b"cache-control", b"no-store")


class SecurityHeaders:
    """Adds the Content-Security-Policy and its companions to every response (and `NO_STORE`
    to every one but a static file's), but a header the response sets itself (an image's own
    policy, `images.CSP`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        added = HEADERS if str(scope.get("path", "")).startswith("/static/") else [*HEADERS, NO_STORE]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                own = list(message.get("headers", []))
                named = {name.lower() for name, _ in own}
                message["headers"] = [*own, *(header for header in added if header[0] not in named)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


# The methods every route answers: the viewer only reads.
SERVED = ("GET", "HEAD")


def _error(status: int) -> Callable[[Request, Exception], Response]:
    def handle(request: Request, error: Exception) -> Response:
        if isinstance(error, HTTPException):
            status_code, message, headers = error.status_code, str(error.detail), dict(error.headers or {})
        else:
            status_code, message, headers = status, str(unreadable(error)), {}
        if status_code == 405:  # it said `Method Not Allowed`, without the Allow header a 405 must send
            message = f"{request.method} is not served here: the viewer is read-only, and answers {' and '.join(SERVED)} only"
            headers["allow"] = ", ".join(SERVED)
        page = viewer(request).render(request, "error.html", status=status_code, message=message, status_code=status_code)
        page.headers.update(headers)
        return page

    return handle


def _no_icon(request: Request) -> Response:
    return Response(status_code=204)


def create_app(path: str, hosts: list[str] | None = None) -> Starlette:
    """The viewer of the store at `path`, a SQLite file or a `postgresql://` URL (opened read-only per request).

    `hosts`: the Host header values accepted (default: 127.0.0.1 and localhost), so a web
    page elsewhere cannot read the store through DNS rebinding; what a page elsewhere makes the
    browser ask is refused too (`origin.py`).
    """
    app = Starlette(
        routes=[
            Route("/", pages.threads_page),
            Route("/thread", pages.thread_page),
            Route("/replay", pages.replay_page),
            Route("/tree", pages.tree_page),
            Route("/blame", pages.blame_page),
            Route("/diff", pages.diff_page),
            Route("/image", images.image),
            Route("/live", live.events),
            Route("/live/log", live.log),
            Route("/live/rows", live.rows),
            Route("/favicon.ico", _no_icon),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(KnownHosts, allowed_hosts=hosts or ["127.0.0.1", "localhost"]),
            Middleware(SameOrigin),  # after the Host check: it compares Origin with Host
        ],
        exception_handlers={
            ThreadNotFound: _error(404),
            InvalidEvent: _error(400),
            StoreError: _error(500),
            Unavailable: _error(UNAVAILABLE_STATUS),
            HTTPException: _error(400),
            **dict.fromkeys(UNREADABLE, _error(UNREADABLE_STATUS)),
        },
    )
    env = environment()
    env.globals["image_link"], env.globals["image_url"] = images.image_link, images.url_of
    env.globals["longest_link"] = images.LINKED_URL_CHARS
    app.state.viewer = Viewer(path, env, Integrity(lambda: Store(path, read_only=True)))
    return app
