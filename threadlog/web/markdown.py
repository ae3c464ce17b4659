"""Markdown to HTML for stored text, which is untrusted: rendered, then sanitised.

Two layers, so a mistake in one is caught by the other. markdown-it renders with raw HTML
off (a `<script>` in a message is text, escaped) and refuses `javascript:`, `vbscript:` and
`data:` link targets; nh3 (the Rust `ammonia` sanitiser) then keeps only the tags a chat
message needs, with no attribute that runs code, and only http, https and mailto links.
The page's Content-Security-Policy is the third: it forbids inline script anyway.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

_RENDERER = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table").enable("strikethrough")

_TAGS = {
    "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li", "a", "img",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
}
_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str) -> Markup:
    """`text` as sanitised HTML, safe to put in a page as it is."""
    html = _RENDERER.render(text)
    return Markup(nh3.clean(html, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes=_SCHEMES,
                            link_rel="noopener noreferrer nofollow"))
