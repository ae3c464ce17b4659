"""Where the CLI's text goes: escaped, paged on a terminal, coloured only where it may be.

Every line of text output passes through `render.safe` here, so nothing the store holds
(a title, a message, an id) can send a terminal control sequence.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, cast

import click

from eventstore import StoreError

from .render import safe
from .signals import handled


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
    escaped: Iterator[str] = (safe(line) + "\n" for line in items)
    if pager and sys.stdout.isatty():
        unshown = _paged(escaped)
        if unshown is None:
            return
        escaped = unshown
    for line in escaped:
        click.echo(line, nl=False, color=color_allowed(sys.stdout))


# The characters that make PAGER a line for the shell rather than a program and its words, as git
# counts them (run-command.c), less the space and the tab: words split at those alone are split
# alike by shlex, and a missing program run without a shell is named more precisely than sh's 127.
_SHELL_SYNTAX = frozenset("|&;<>()$`\\\"'\n*?[#~=%")

# More characters than a pipe holds unread (64 KiB on Linux and macOS; a program may enlarge its
# own, to 1 MiB unless the system allows more): once this many went in, some have been read.
_PIPE_HOLDS = 1 << 20


def _paged(text: Iterator[str]) -> Iterator[str] | None:
    """Show `text` through the pager click's `echo_via_pager` would choose ($PAGER, else `less`;
    none when stdin is not a terminal or TERM is dumb), and return None once one has, else the
    text still to print on stdout: all of it when no pager ran. Run here, not by click, which
    ignores the pager's exit status: `PAGER=false` showed nothing and the command exited 0.

    PAGER is run as git runs it: through `sh -c` when it holds shell syntax (`LESS=-R less`,
    `less -R | cat`, a quoted path, `$HOME/bin/pager`), else as a program and its words.

    A pager that cannot be started is said on stderr and the text printed without it, as git
    does. One that exits non-zero fails the command, naming PAGER: how much of the text it
    showed is unknown, and the text, printed as it is read, cannot be printed again. One that
    the user quits before the end (`q` in less) exits 0: the rest is left unprinted, quietly.
    One that Ctrl-C ended (less ignores it; `more` does not) stops the command (130), as Ctrl-C
    would have without a pager."""
    import subprocess  # here: a command that prints no page (a hook's `append`) starts without it
    if not sys.stdin.isatty() or os.environ.get("TERM") in ("dumb", "emacs"):
        return text
    given = os.environ.get("PAGER", "")
    try:
        command = shlex.split(given) or ["less"]
    except ValueError as error:  # an unclosed quote, which sh refuses too, before running anything
        return _unpaged(given, str(error), text)
    through_shell = not _SHELL_SYNTAX.isdisjoint(given)
    if through_shell:
        command = [given]
    else:
        program = shutil.which(command[0])
        if program is None:
            return _unpaged(given, "not found, or not executable", text)
        command[0] = program
    try:
        pager = subprocess.Popen(command, shell=through_shell, stdin=subprocess.PIPE, text=True, errors="replace")
    except OSError as error:  # a script whose interpreter is missing, a file no system runs, no sh
        return _unpaged(given, error.strerror or str(error), text)
    pipe = cast(IO[str], pager.stdin)
    # Through a shell, a pager that cannot be started is known only by the shell's status, once
    # some text has gone into the pipe: that text is kept until the pipe has surely been read from.
    sent: list[str] | None = [] if through_shell else None
    written = 0
    try:
        with contextlib.suppress(BrokenPipeError):  # it stopped reading: quit, or failed (its status says which)
            for chunk in text:
                if sent is not None:
                    sent.append(chunk)
                pipe.write(chunk)
                pipe.flush()  # a slow read (a tree at a time) shows as it comes, not once a pipe's buffer fills
                written += len(chunk)  # a character is a byte or more in the pipe
                if written > _PIPE_HOLDS:
                    sent = None
    except Exception:
        pager.terminate()  # the error is said on the terminal the pager would otherwise hold
        raise
    finally:
        with contextlib.suppress(BrokenPipeError):
            pipe.close()
        # less ignores Ctrl-C (it stops a search): the command ends once the pager has. A Ctrl-C
        # meanwhile is noted, not raised: raised inside `Popen.wait` after the pager was reaped but
        # before its status was kept, it lost the status, the next wait read 0, and a pager Ctrl-C
        # had ended passed for one quit (exit 0, about one run in four on a loaded machine).
        caught: list[int] = []
        with handled((signal.SIGINT,), lambda signum, frame: caught.append(signum)):
            pager.wait()
        interrupted = bool(caught)
    if interrupted and pager.returncode:  # a pager Ctrl-C ended (not less): the command was stopped, not the pager broken
        raise KeyboardInterrupt
    # sh exits 127 for a command it cannot find and 126 for one it cannot execute (a file without
    # the x bit, a directory): the pager never started, as when Popen fails without a shell, so
    # the same note, and the text printed whole. Once the pipe has surely been read from, those
    # statuses fail the command like any other; before, a pager line that read a little and then
    # exited 126 or 127 itself cannot be told from one never started, and is taken for one.
    if through_shell and pager.returncode in (126, 127) and sent is not None:
        why = "the shell found no such command" if pager.returncode == 127 else "the shell could not execute it"
        return _unpaged(given, f"{why}, status {pager.returncode}", itertools.chain(sent, text))
    if pager.returncode:
        ended = (f"exited with status {pager.returncode}" if pager.returncode > 0 else
                 f"was stopped by signal {-pager.returncode}")
        named = f"PAGER={given!r}" if given else "less (PAGER is not set)"
        raise StoreError(f"the pager failed: {named} {ended}, so the output may not have been shown; "
                         "give --no-pager to print it without one, or set PAGER to a pager that works")
    return None


def _unpaged(given: str, why: str, text: Iterator[str]) -> Iterator[str]:
    """Say that the pager `given` (PAGER) cannot be run, when PAGER names one, and return `text`
    to print without it: without a PAGER, no `less` on the system prints it as it is, quietly."""
    if given:
        click.echo(safe(f"note: the pager PAGER={given!r} cannot be run ({why}): printed without it"), err=True)
    return text


def text(value: str, pager: bool = False) -> None:
    """Print a block of text (a transcript), escaped line by line, keeping its line breaks."""
    lines(_split(value), pager)


def _split(value: str) -> Iterator[str]:
    parts = value.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    yield from parts
