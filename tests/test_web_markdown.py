"""Markdown for the web viewer: the plain-prose shortcut equals markdown-it's rendering, and
what is rendered never keeps a script, an event handler or a javascript: link."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import example, given, settings, strategies as st
from markdown_it import MarkdownIt

pytest.importorskip("nh3")

from threadlog.web.markdown import _RENDERER, plain_html, render_markdown  # noqa: E402

ALPHABET = "aZ09 ,.;:'\"?/%=+@-[]()!*_#<>&\\`|~\n"


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
@example("[12] The 08:04 from Paris Gare de Lyon reaches Lyon Part-Dieu at 10:02; a second train leaves at 08:58.")
@example("[a]: b")
@example("a [b](c)")
@example("1. one")
@example("a -")
def test_the_plain_shortcut_renders_as_markdown_it_does(text: str) -> None:
    fast = plain_html(text)
    if fast is not None:
        assert fast == _RENDERER.render(text)


def test_the_shortcut_takes_ordinary_prose() -> None:
    assert plain_html("[12] The 08:04 from Paris reaches Lyon Part-Dieu at 10:02; ok?") is not None
    assert plain_html("**bold**") is None


@pytest.mark.parametrize("text", [
    "<script>window.x=1</script>",
    "<img src=x onerror=alert(1)>",
    "[a](javascript:alert(1))",
    "[a](JAVASCRIPT:alert(1))",
    "![a](javascript:alert(1))",
    '<a href="javascript:alert(1)">x</a>',
    "[a](data:text/html,<script>alert(1)</script>)",
    "<svg onload=alert(1)>",
], ids=["script", "img-onerror", "js-link", "js-link-upper", "js-image", "raw-anchor", "data-url", "svg"])
def test_nothing_rendered_can_run(text: str) -> None:
    tags = _Tags()
    tags.feed(str(render_markdown(text)))
    for tag, attrs in tags.seen:
        assert tag not in ("script", "svg", "iframe", "object", "embed")
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            assert not (value or "").strip().lower().startswith(("javascript:", "data:", "vbscript:")), (tag, name, value)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, attrs))


def test_markdown_is_rendered() -> None:
    assert str(render_markdown("**b** and [site](https://example.org)")) == (
        '<p><strong>b</strong> and <a href="https://example.org" rel="noopener noreferrer nofollow">site</a></p>\n')
    assert isinstance(MarkdownIt, type)


def test_an_image_is_a_link_to_it_never_loaded() -> None:
    """A page would request every image a message names as it opened, the viewer's own pages
    too (a costly search, a live stream): images are shown as links."""
    html = str(render_markdown("![chart <b>](https://example.org/c.png?q=a%20OR%20b) ![x](https://example.org/x.png)"))
    assert "<img" not in html
    assert html == ('<p><a href="https://example.org/c.png?q=a%20OR%20b" rel="noopener noreferrer nofollow">image: chart '
                    '&lt;b&gt;</a> <a href="https://example.org/x.png" rel="noopener noreferrer nofollow">image: x</a></p>\n')


@pytest.mark.parametrize("target", ["README.md", "src/app.py#L10", "/?q=a%20OR%20b", "/live?id=t", "//example.org/x", "#top",
                                    "?q=x", "./a%20b.md"])
def test_a_link_that_names_no_scheme_is_shown_as_its_text(target: str) -> None:
    """A relative target is the viewer's own URL: an imported message's link to a file of its
    project (`[README](README.md)`) opened a page that is not there, and one to the viewer's
    pages (a costly search, a live stream) had a reader's click run it for whoever wrote it."""
    for text in (f"see [the file]({target}) now", f"see ![the file]({target}) now", f"see [the file][r] now\n\n[r]: {target}"):
        html = str(render_markdown(text))
        assert "href" not in html, (text, html)
        assert "the file" in html, (text, html)
    linked = str(render_markdown(f"[a](https://example.org/{target.lstrip('/#?.')}) [b](mailto:a@example.org)"))
    assert linked.count("href=") == 2, linked


def test_a_line_break_in_a_message_is_kept() -> None:
    """A single line break was a space, as CommonMark renders it: an issue's title and body, a
    command's output lines or a user's list typed line by line ran together in one line."""
    html = str(render_markdown("ISSUE:\nTimeDelta serialization precision\nHi there!\n\nThanks"))
    assert html == "<p>ISSUE:<br>\nTimeDelta serialization precision<br>\nHi there!</p>\n<p>Thanks</p>\n"
