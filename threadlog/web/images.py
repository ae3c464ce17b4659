"""The images messages hold (a pasted screenshot, a tool's picture), served so a page can show them.

`/image?id=THREAD&offset=N&sha256=HEX` is the image of the message at offset N whose data
has that digest: a block of its content or a part of one of its tool results. Found by its
digest, not its index, so a page built from a model view (where a dropped tool call moves
the blocks after it) names the same image. Only an image the message holds itself is served
(its `source` is base64 data) and only in the four types the Messages API takes, with
`nosniff`: stored bytes are never served as a page or a script. An image that names a URL is
never fetched: the page links to it, as Markdown images are linked (`markdown.py`). Nothing
is cached, so a redacted image is gone from the next page load.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from eventstore.content import image_media_types

from .query import thread_param, whole_number
from .render import link
from .viewer import viewer

# The longest image address a page links to (browsers and servers take about 2,000 characters):
# a longer one is shown cut short, not linked. A page put each whole in its link, and one
# message of 1 MB addresses made a page of as many megabytes.
LINKED_URL_CHARS = 2048

# An image opened on its own is shown in the browser's own view, which styles itself inline:
# the pages' policy refused that (an error in the console each time). Nothing in an image
# response can run or style anything (its body is an image type, with nosniff), so its view
# may style itself; it loads nothing else and runs nothing.
CSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"


def url_of(block: Any) -> str | None:
    """The address an image block names instead of holding its data, or None."""
    src = _source(block)
    return src["url"] if src is not None and src.get("type") == "url" and isinstance(src.get("url"), str) else None


def image_link(block: Any, thread: str, offset: int) -> str | None:
    """The viewer's link to the stored image `block` (the message at `offset` of `thread`
    holds it), or None when it serves no such image."""
    data = _data(block)
    return None if data is None else link("/image", id=thread, offset=offset, sha256=_digest(data))


def image(request: Request) -> Response:
    """The bytes of one stored image; 404 when the message holds none with that digest."""
    thread = thread_param(request)
    offset, wanted = whole_number(request, "offset"), request.query_params.get("sha256", "")
    if offset is None or not wanted:
        raise HTTPException(400, "pass ?id=THREAD&offset=N&sha256=DIGEST (the thread page's image links have them)")
    with viewer(request).open() as store:
        store.ancestry(thread)  # a thread whose first events are gone: refused as its pages are
        event = store.event_at(thread, offset)
    for block in _images(event.data.get("content") if event.type == "message.appended" else None):
        data = _data(block)
        if data is not None and _digest(data) == wanted:
            body = _decoded(data)
            if body is None:
                raise HTTPException(404, f"the image at offset {offset} of {thread} holds data that is not base64: "
                                         "there is no picture to show")
            return Response(body, media_type=block["source"]["media_type"],
                            headers={"content-disposition": "inline", "content-security-policy": CSP})
    raise HTTPException(404, f"offset {offset} of {thread} holds no stored image with that digest")


def _decoded(data: str) -> bytes | None:
    """The bytes `data` encodes, or None when it is not base64. Line breaks and spaces in it
    are passed over (`base64` and MIME wrap their output in lines of 76)."""
    try:
        return base64.b64decode(data.encode("ascii").translate(None, b" \t\n\r\f\v"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None


def _images(content: Any) -> Iterator[Any]:
    """The blocks of `content` and the parts of its tool results."""
    for block in content if isinstance(content, list) else ():
        yield block
        if isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            yield from block["content"]


def _data(block: Any) -> str | None:
    """The base64 data of an image this viewer serves (stored in it, of a type it serves)."""
    src = _source(block)
    ok = (src is not None and src.get("type") == "base64" and src.get("media_type") in image_media_types()
          and isinstance(src.get("data"), str))
    return src["data"] if src is not None and ok else None


def _source(block: Any) -> dict[str, Any] | None:
    """An image block's `source`, or None for any other block."""
    source = block.get("source") if isinstance(block, dict) and block.get("type") == "image" else None
    return source if isinstance(source, dict) else None


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]
