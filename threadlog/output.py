"""Where the CLI's text goes: escaped, paged on a terminal, coloured only where it may be.

Every line of text output passes through `render.safe` here, so nothing the store holds
(a title, a message, an id) can send a terminal control sequence.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

import click

from .render import safe


def stand_in_for_closed_streams() -> None:
    """Give stdin and stdout, when the command started with one closed (`<&-`, `>&-`), a stand-in
    whose every read (or write) fails with EBADF, as a closed descriptor's does: /dev/null opened
    the other way. Python leaves a closed one None, and reading or printing raised AttributeError,
    which the CLI took for a stored event of the wrong shape ("altered outside threadlog"); an
    `append` whose message was committed then exited 1, as if nothing had been written."""
    if sys.stdin is None:
        sys.stdin = open(os.open(os.devnull, os.O_WRONLY), encoding="utf-8")
    if sys.stdout is None:
        # Unbuffered: a write that failed leaves nothing for Python's exit to flush again (and report).
        sys.stdout = io.TextIOWrapper(io.FileIO(os.open(os.devnull, os.O_RDONLY), "w"), encoding="utf-8", write_through=True)


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
