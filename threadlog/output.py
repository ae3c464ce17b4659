"""Where the CLI's text goes: escaped, paged on a terminal, coloured only where it may be.

Every line of text output passes through `render.safe` here, so nothing the store holds
(a title, a message, an id) can send a terminal control sequence.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, cast

import click

from eventstore import StoreError

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
    if pager and sys.stdout.isatty() and _paged(escaped):
        return
    for line in escaped:
        click.echo(line, nl=False, color=color_allowed(sys.stdout))


def _paged(text: Iterator[str]) -> bool:
    """Show `text` through the pager click's `echo_via_pager` would choose ($PAGER, else `less`;
    none when stdin is not a terminal or TERM is dumb), and say whether one ran: False leaves
    `text` unread, for stdout. Run here, not by click, which ignores the pager's exit status:
    `PAGER=false` showed nothing and the command exited 0.

    A pager that cannot be started is said on stderr and the text printed without it, as git
    does. One that exits non-zero fails the command, naming PAGER: how much of the text it
    showed is unknown, and the text, printed as it is read, cannot be printed again. One that
    the user quits before the end (`q` in less) exits 0: the rest is left unprinted, quietly."""
    import subprocess  # here: a command that prints no page (a hook's `append`) starts without it
    if not sys.stdin.isatty() or os.environ.get("TERM") in ("dumb", "emacs"):
        return False
    given = os.environ.get("PAGER", "")
    try:
        command = shlex.split(given) or ["less"]
    except ValueError as error:  # an unclosed quote
        return _unpaged(given, str(error))
    program = shutil.which(command[0])
    if program is None:
        return _unpaged(given, "not found, or not executable")
    try:
        pager = subprocess.Popen([program, *command[1:]], stdin=subprocess.PIPE, text=True, errors="replace")
    except OSError as error:  # a script whose interpreter is missing, a file no system runs
        return _unpaged(given, error.strerror or str(error))
    pipe = cast(IO[str], pager.stdin)
    try:
        with contextlib.suppress(BrokenPipeError):  # it stopped reading: quit, or failed (its status says which)
            for chunk in text:
                pipe.write(chunk)
                pipe.flush()  # a slow read (a tree at a time) shows as it comes, not once a pipe's buffer fills
    except Exception:
        pager.terminate()  # the error is said on the terminal the pager would otherwise hold
        raise
    finally:
        with contextlib.suppress(BrokenPipeError):
            pipe.close()
        while True:  # less ignores Ctrl-C (it stops a search): the command ends once the pager has
            try:
                pager.wait()
                break
            except KeyboardInterrupt:
                pass
    if pager.returncode:
        ended = (f"exited with status {pager.returncode}" if pager.returncode > 0 else
                 f"was stopped by signal {-pager.returncode}")
        named = f"PAGER={given!r}" if given else "less (PAGER is not set)"
        raise StoreError(f"the pager failed: {named} {ended}, so the output may not have been shown; "
                         "give --no-pager to print it without one, or set PAGER to a pager that works")
    return True


def _unpaged(given: str, why: str) -> bool:
    """Say that the pager `given` (PAGER) cannot be run, when PAGER names one: without it, no
    `less` on the system prints the text as it is, quietly."""
    if given:
        click.echo(safe(f"note: the pager PAGER={given!r} cannot be run ({why}): printed without it"), err=True)
    return False


def text(value: str, pager: bool = False) -> None:
    """Print a block of text (a transcript), escaped line by line, keeping its line breaks."""
    lines(_split(value), pager)


def _split(value: str) -> Iterator[str]:
    parts = value.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    yield from parts
