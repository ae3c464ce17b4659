"""Requests another site's pages make a browser send to the viewer are refused.

A page elsewhere, open in the same browser, cannot read the viewer's answers (the Host check
in `app.py` stops DNS rebinding, and no answer allows another origin to read it), but it could
still make the browser ask: open any number of live streams (each holds a server thread that
polls the log), load any page (a read of the database each), or learn from an `<img>` of
`/image` the size of a stored picture. Browsers say where a request comes from, and the
viewer answers 403, before any database work, on every route (static files too: a stylesheet
that loads tells another site the viewer runs), when:

- `Sec-Fetch-Site` is `cross-site` or `same-site`, but for a top-level navigation
  (`Sec-Fetch-Mode: navigate` and `Sec-Fetch-Dest: document`). A browser calls another port
  of 127.0.0.1 (or another name of the same domain) `same-site`: it is another origin, maybe
  another local tool showing pages it does not vouch for, and is refused alike. A browser
  that sends the header is taken at its word, whatever `Origin` says (a proxy in front may
  have rewritten the Host that Origin is compared with);
- without it (an older browser), `Origin` names another origin than the one the request is
  addressed to (`null` included: a sandboxed frame or a local file). Browsers send it on
  cross-origin fetches and EventSource streams.

What still works: the viewer's own pages and what they ask (`same-origin`: scripts, images,
updates, the shared stream's worker), an address typed or bookmarked (`none`), a link followed
from elsewhere (a chat, an issue tracker) to any page, whose own requests are then same-origin,
and clients that send neither header (curl, scripts, older browsers). A link followed into a
frame (`Sec-Fetch-Dest: iframe`) is refused: no page of the viewer may be framed anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The values of Sec-Fetch-Site that say the request comes from the viewer's own page, or from
# the user (the address bar, a bookmark).
OWN = {"same-origin", "none"}


def refusal(scope: Scope) -> str | None:
    """Why the request `scope` is refused, as its 403 says; None when it is served."""
    headers = Headers(scope=scope)
    site = headers.get("sec-fetch-site")
    if site is not None:  # the browser's own word, which no page can set: it decides alone
        if site in OWN:
            return None
        if headers.get("sec-fetch-mode") == "navigate" and headers.get("sec-fetch-dest") == "document":
            return None  # a link followed from elsewhere: the page loads, and its own requests are same-origin
        named = f" ({site})" if site in ("cross-site", "same-site") else ""
        return f"its Sec-Fetch-Site header{named} says a page of another site or port asked"
    origin = headers.get("origin")
    if origin is None:
        return None
    scheme, _, authority = origin.lower().partition("://")
    # The Host header names the origin a browser addressed (`TrustedHostMiddleware` has checked
    # it), with the port unless it is the scheme's default, as Origin does. The scheme is not
    # compared: behind a proxy that ends TLS the page is https and the viewer sees http, and
    # no other server can hold this host and port.
    if scheme not in ("http", "https") or authority != headers.get("host", "").lower():
        return "its Origin header names another site's page"
    return None


class SameOrigin:
    """Answers 403 to a request another site's page made (`refusal`), before the app sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        why = refusal(scope) if scope["type"] == "http" else None
        if why is None:
            await self.app(scope, receive, send)
            return
        text = f"refused: {why}; the viewer answers its own pages only (open it at its address, or follow a link to it)\n"
        # Not kept: the same address is served to the viewer's own page (a static file, which
        # the browser may otherwise keep).
        await PlainTextResponse(text, status_code=403, headers={"cache-control": "no-store"})(scope, receive, send)


class KnownHosts:
    """Starlette's Host check (`TrustedHostMiddleware`: a page elsewhere cannot reach the viewer
    through DNS rebinding), with a refusal that says which names it answers to and how to add
    one: it said `Invalid host header` alone, and `serve --host 0.0.0.0` opened at the machine's
    own address read as broken."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app, self.hosts = app, list(allowed_hosts)
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=self.hosts, www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["threadlog.known_host"] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = False

        async def answer(message: Message) -> None:
            nonlocal refused
            if scope.get("threadlog.known_host"):
                await send(message)
            elif not refused:  # the check's own refusal: this one goes in its place
                refused = True
                await self._refusal(scope)(scope, receive, send)

        await self.check(scope, receive, answer)

    def _refusal(self, scope: Scope) -> PlainTextResponse:
        host = Headers(scope=scope).get("host")
        named = "no Host header" if host is None else f"the Host header {host[:200]!r}"
        text = (f"refused: {named} names no address this viewer answers to ({', '.join(self.hosts)}), so that a page "
                "elsewhere cannot reach it through a name of its own; open it at one of those, or start it with "
                "`threadlog serve --allow-host NAME`\n")
        return PlainTextResponse(text, status_code=400, headers={"cache-control": "no-store"})
