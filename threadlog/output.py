"""Where the CLI's text goes: escaped, paged on a terminal, coloured only where it may be.

Every line of text output passes through `render.safe` here, so nothing the store holds
(a title, a message, an id) can send a terminal control sequence.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

import click

from .render import safe


def color_allowed(stream: IO[Any]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return not os.environ.get("NO_COLOR") and stream.isatty()


def style(text: str, stream: IO[Any] | None = None, **styles: Any) -> str:
    return click.style(text, **styles) if color_allowed(stream or sys.stdout) else text


def lines(items: Iterable[str], pager: bool = False) -> None:
    """Print text lines, each escaped; through $PAGER when asked and stdout is a terminal."""
    escaped = (safe(line) + "\n" for line in items)
    if pager and sys.stdout.isatty():
        click.echo_via_pager(escaped, color=color_allowed(sys.stdout))
        return
    for line in escaped:
        click.echo(line, nl=False, color=color_allowed(sys.stdout))


def text(value: str, pager: bool = False) -> None:
    """Print a block of text (a transcript), escaped line by line, keeping its line breaks."""
    lines(_split(value), pager)


def _split(value: str) -> Iterator[str]:
    parts = value.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    yield from parts
