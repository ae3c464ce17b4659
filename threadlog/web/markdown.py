"""Markdown to HTML for stored text, which is untrusted: rendered, then sanitised.

Two layers, so a mistake in one is caught by the other. markdown-it renders with raw HTML
off (a `<script>` in a message is text, escaped) and refuses `javascript:`, `vbscript:` and
`data:` link targets; nh3 (the Rust `ammonia` sanitiser) then keeps only the tags a chat
message needs, with no attribute that runs code, and only http, https and mailto links.
The page's Content-Security-Policy is the third: it forbids inline script anyway.

A link is kept only when it names its scheme: a relative one would open one of the viewer's
own URLs (`_absolute_links`). An image is shown as a link to it (`image: ALT`), never
loaded: a page would request every image a stored message names as it opened, and one
naming the viewer's own pages (a search of many terms, a live stream) would have it do that
work for whoever wrote the message.
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import Markup, escape

# `breaks`: a line break is kept (CommonMark makes it a space), as chat apps show a message: an
# issue's title and body, or a command's output lines, ran together in one line.
_RENDERER = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True}) \
    .enable("table").enable("strikethrough")


def _image_as_link(self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    return f'<a href="{escapeHtml(str(token.attrGet("src") or ""))}">image: {escapeHtml(alt)}</a>'


_RENDERER.add_render_rule("image", _image_as_link)

_TAGS = {
    "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li", "a",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
}
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
_SCHEMES = {"http", "https", "mailto"}
_ABSOLUTE = re.compile(f"(?:{'|'.join(sorted(_SCHEMES))}):", re.IGNORECASE)  # a link naming its scheme: `_absolute_links`


def _absolute_links(tag: str, attribute: str, value: str) -> str | None:
    """A link's target when it names its scheme, else None (the text is shown, not linked). A
    relative target (`[README](README.md)`, `/?q=...`, `//host`, `#top`) was the viewer's own
    URL: an imported message's link to a file of its project opened a page that is not there,
    and one to the viewer's pages (a costly search, a live stream) had a reader's click run it."""
    if attribute == "href" and not _ABSOLUTE.match(value):
        return None
    return value


# One line of prose that no Markdown rule can act on: letters, digits, spaces and inert
# punctuation, no markup character, not starting with a digit, a space, `+` or `-` (lists,
# headings, code), and no `](`, `]:`, `][` or `[]` (links, link definitions). Rendering it
# is escaping it in a paragraph: the shortcut `plain_html` takes, held equal to markdown-it's
# output by a hypothesis test (tests/test_web_markdown.py). A page of 100 ordinary
# messages renders about 10x faster.
_PLAIN = re.compile(r"(?![0-9 +\-])(?!.*\](?:[(:\[]))(?!.*\[\])[A-Za-z0-9 ,.;:'\"?/%=+@\-\[\]]*[A-Za-z0-9,.;:'\"?/%=+@\-\]]")


def plain_html(text: str) -> str | None:
    """markdown-it's HTML for `text` when it is plain prose (see `_PLAIN`), else None."""
    if not _PLAIN.fullmatch(text):
        return None
    return "<p>" + text.replace('"', "&quot;") + "</p>\n"


def preformatted(text: str) -> Markup:
    """`text` escaped, as it is, in a `<pre>` (which drops a first line break: one is put before it)."""
    return Markup(f"<pre>\n{escape(text)}</pre>")


def _too_deep(tokens: list[Token]) -> bool:
    """Whether markdown-it reached its nesting limit in `tokens`' blocks: past it, it drops the
    rest of the text without a word (a message of 25 `>` then a line showed as an empty row)."""
    deepest = _RENDERER.options["maxNesting"] - 1
    return any(token.nesting == 1 and token.level >= deepest for token in tokens)


def render_markdown(text: str) -> Markup:
    """`text` as sanitised HTML, safe to put in a page as it is; preformatted when quotes or
    lists nest too deep for markdown-it to render it all."""
    html = plain_html(text)
    if html is None:
        tokens = _RENDERER.parse(text)
        if _too_deep(tokens):
            return preformatted(text)
        html = _RENDERER.renderer.render(tokens, _RENDERER.options, {})
    return Markup(nh3.clean(html, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes=_SCHEMES, attribute_filter=_absolute_links,
                            link_rel="noopener noreferrer nofollow"))
