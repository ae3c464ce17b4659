"""The `threadlog` group and the one error policy of every command under it.

A library error prints one `error:` line and exits 1, never a traceback; Ctrl-C exits 130,
SIGTERM and SIGHUP unwind as it does; a write committed whose result could not be printed
exits 3 (`_committed`), so that a script does not run the write again.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import click

from eventstore import InvalidEvent, OldPagesKept, StoreError
from eventstore.errors import MISSHAPEN, misshapen, unreadable

from .. import output
from ..names import ThreadType
from ..render import safe, safe_block, shell_word
from ..signals import handled
from .options import DEFAULT_DB, FilePath, check_typed


# The exit status of a write command whose write was committed but whose result could not be
# printed (stdout a full disk, a pipe whose reader left): not 1, which says nothing was
# written, so that a script does not run the write again (a second thread, a message twice).
EXIT_UNPRINTED = 3
_COMMITTED = "threadlog.committed"
_WHOLE = "threadlog.whole"  # the commands an error names, printed whole (`_shown_whole`)
_ENDED = "threadlog.ended"  # the status of a command that has stopped and said so (`_ended`)


class _Command(click.Command):
    """Every command: text typed in a terminal or locale that is not UTF-8 is refused as a
    usage error naming the option and the byte, before the command runs. (Python keeps such
    bytes of the command line as lone surrogates, which no UTF-8 holds: `append --text` stored
    nothing and said `events[0].data: not storable as UTF-8 JSON`, `search` that the text
    `cannot be sent`, naming neither what was typed nor where.) Paths are no text: a Linux file
    name may be any bytes, and a path option keeps them. An option read as JSON or as a mapping
    checks what was typed as it reads it (`options.check_typed`): here its value is no longer text."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            # `threadlog ls T`: a command taking its thread as an option said only that T was extra.
            taking = [param for param in self.params if isinstance(param.type, ThreadType)]
            if error.message.startswith("Got unexpected extra argument") and len(taking) == 1 and \
                    isinstance(taking[0], click.Option):
                extra = error.message.rsplit("(", 1)[-1].rstrip(")").split()[0]
                error.message += f"; `threadlog {ctx.info_name}` takes a thread as {taking[0].opts[0]} {extra}"  # type: ignore[misc]  # a plain attribute click types Final
            raise

    def invoke(self, ctx: click.Context) -> Any:
        for param in self.params:
            if isinstance(param.type, click.types.StringParamType):
                value = ctx.params.get(param.name or "")
                for text in value if isinstance(value, tuple) else (value,):
                    check_typed(ctx, param, text)
        return super().invoke(ctx)


class _Subgroup(click.Group):
    """`threadlog import` and `threadlog interrupt`: their commands check what was typed as
    every command does (`_Command`)."""

    command_class = _Command

    def hint(self, ctx: click.Context, args: list[str]) -> str | None:
        """What to say of a command line whose first argument (`args[0]`) names none of this
        group's commands, beyond the list of them; None: nothing more."""
        return None

    def retyped(self, ctx: click.Context, command: str, args: list[str]) -> str:
        """The command line typed (its --db kept, every word quoted for a shell), with `command`
        before `args`, where this group's command goes."""
        db = ctx.params.get("db") or ctx.find_root().params.get("db")  # the group's wins, as `_pass_db` has it
        given = ["--db", shell_word(os.fsdecode(db))] if db else []
        return " ".join(["threadlog", *given, ctx.info_name or "", command, *map(shell_word, args)])

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        # `threadlog import session.jsonl`, `threadlog interrupt T`: click said only "No such
        # command 'session.jsonl'.", as if the file or thread were a mistyped command.
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as error:
            said = self.hint(ctx, args)
            if said is None and error.possibilities:
                raise  # a near name: click's "Did you mean 'claude-code'?" says it
            said = said or (f"`threadlog {ctx.info_name}` takes one of its commands first "
                            f"({', '.join(sorted(self.commands))}), then their arguments: "
                            f"`{self.retyped(ctx, 'COMMAND', args)}`")
            raise click.UsageError(f"No such command {click.utils.make_str(args[0])!r}. {said}", ctx) from None


# Each command's module, imported when the command runs (or is completed, or its help asked for):
# `threadlog ls` loaded the importers, the sub-agents and the demo as well, a tenth of its start,
# and a script runs one process per thread or per event. Each module registers its commands on
# `cli` as it loads (`@cli.command`); `threadlog --help` loads them all, to list them.
_COMMANDS = {
    "append": "writing",
    "ask": "api",
    "blame": "reading",
    "checkpoint": "audit",
    "demo": "writing",
    "diff": "reading",
    "emit": "writing",
    "export": "transfer",
    "fan-out": "writing",
    "follow": "reading",
    "fork": "writing",
    "import": "transfer",
    "index": "search",
    "init": "writing",
    "interrupt": "writing",
    "log": "reading",
    "ls": "reading",
    "new": "writing",
    "purge": "audit",
    "redact": "audit",
    "report": "writing",
    "request": "api",
    "rerun": "api",
    "rows": "reading",
    "search": "search",
    "serve": "serve",
    "show": "reading",
    "snapshot": "reading",
    "transcript": "reading",
    "tree": "reading",
    "usage": "api",
    "verify": "audit",
}


class _Group(click.Group):
    """Turns library errors into one `error:` line and exit status 1, never a traceback, and
    Ctrl-C into status 130, as a shell reports a command SIGINT stopped (click's own is 1).
    A write command's output failing after its write was committed (`_committed`) exits 3.

    Its commands are loaded one module at a time, as they are used (`_COMMANDS`)."""

    command_class = _Command
    group_class = _Subgroup

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            _load(_COMMANDS[cmd_name])
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        # A name no command has loads them all, as --help does: click suggests the close ones
        # ("Did you mean 'ls'?") among the commands loaded, and `threadlog lss` had loaded none.
        if click.utils.make_str(args[0]) not in _COMMANDS:
            for name in self.list_commands(ctx):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as error:
            # `threadlog --json ls`: click offered "Did you mean '--version'?", as if ls had no --json.
            name = next((arg for arg in args if arg in _COMMANDS), None)
            command = self.get_command(ctx, name) if name else None
            if command is None or not any(error.option_name in (*p.opts, *p.secondary_opts) for p in command.params):
                raise
            raise click.UsageError(f"{error.option_name} is an option of `threadlog {name}`: give it after the command "
                                   f"(`threadlog {name} {error.option_name} …`); before it go only --db, --version and --help",
                                   ctx) from None

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        # The group's own --help and --version print here, while the options are read, before
        # `invoke`: printing them to a full disk (or a closed stdout) raised a traceback.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as error:  # as --help loads every command (click said `Aborted!`, status 1)
            _interrupted(error)
        except BrokenPipeError:  # `threadlog --help | head -1`: click ends it quietly
            raise
        except OSError as error:
            if not _printing(error):
                raise
            _fail(f"printing the output failed: {error.strerror or error}")

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with handled((signal.SIGTERM, signal.SIGHUP), _stop):  # unwound as Ctrl-C is
                return super().invoke(ctx)
        except click.ClickException as error:
            # A usage error quoting what was typed (a path that cannot be read, a directory
            # holding no session) is printed by click, not `_fail`: escaped here as every line is.
            error.message = safe_block(error.message)  # type: ignore[misc]  # a plain attribute click types Final
            raise
        except KeyboardInterrupt as error:
            if _ENDED in ctx.meta:  # stopped and said so: a signal as it closes has nothing left to stop
                sys.exit(ctx.meta[_ENDED])
            # Once its write is committed (printing the result, closing the store), a Ctrl-C stops
            # nothing: exit 130 told a script to run `append` or `new` again, writing it twice.
            _unprinted(ctx, "Ctrl-C" if not isinstance(error, _Stopped) else signal.Signals(error.signum).name,
                       failed="what came after it was interrupted")
            _interrupted(error)
        except OldPagesKept as error:  # committed: exit 1 said nothing was written, and a retry was refused as done
            _fail("committed: " + _cli_words("; ".join([str(error), *getattr(error, "__notes__", ())])), EXIT_UNPRINTED)
        except StoreError as error:
            _fail(_cli_words("; ".join([str(error), *getattr(error, "__notes__", ())])))
        except BrokenPipeError:  # `threadlog log T | head`: the reader left; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            _unprinted(ctx, "stdout was closed")
            sys.exit(1)
        except OSError as error:
            _unprinted(ctx, str(error.strerror or error), error.filename)
            if error.filename is None and _printing(error):
                _fail(f"printing the output failed: {error.strerror or error}")
            _fail(f"{error.strerror or error}: {error.filename}" if error.filename else str(error))
        except UnicodeDecodeError as error:
            _fail(f"input is not UTF-8 text ({error.reason} at byte {error.start})")
        except UnicodeEncodeError as error:
            if error.encoding.replace("_", "-").lower() in ("utf-8", "utf8"):  # a lone surrogate raw SQL stored
                _fail(str(misshapen(error)))
            # What threadlog writes itself is UTF-8: this is stdout in a locale that is not (stderr
            # writes what it cannot encode as escapes), not an event of the wrong shape.
            # After a write committed, that is said (exit 3): exit 1 told a script to run the write again.
            unwritable = (f"stdout's encoding ({sys.stdout.encoding}) cannot write U+{ord(error.object[error.start]):04X}; run "
                          "threadlog with a UTF-8 locale (LC_ALL=C.UTF-8) or PYTHONIOENCODING=utf-8")
            _unprinted(ctx, unwritable)
            _fail(unwritable)
        except RecursionError as error:  # an event nested too deeply, stored by an older release or by hand
            _fail(str(unreadable(error)))
        except MemoryError:  # an input far larger than memory (a session file of gigabytes, a device)
            _fail("out of memory: the input is larger than this machine can hold; nothing more was written")
        except MISSHAPEN as error:  # a stored event of the wrong shape (raw SQL wrote it): one line, as every refusal
            _fail(str(misshapen(error)))
        finally:
            if _ENDED in ctx.meta:  # stopped and said so: a signal while the process exits ends it so too
                _exit_on_signals(ctx.meta[_ENDED])


def _exit_on_signals(status: int) -> None:
    """A signal from now on exits with `status` at once, nothing more said. The handlers the
    command ran under are put back as it returns (SIG_DFL): a service manager's second SIGTERM
    in the interpreter's last milliseconds killed a stopped follower (-15, not 143)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda *_: os._exit(status))


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a `kill`, a closed terminal), unwound as Ctrl-C is: what the command
    started is closed on the way out (a live turn's run ends `cancelled`, not left open)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


def _load(module: str) -> None:
    """Import the commands of `module`, a Ctrl-C meanwhile raised once it is loaded. Raised inside
    it, the Ctrl-C could land in the `exec()` by which dataclasses and named tuples build their
    methods, and CPython keeps a Ctrl-C raised there marked unhandled once it is caught:
    `python -m threadlog` printed `interrupted`, then ended itself by SIGINT, not status 130.
    (`threadlog.__main__` holds the same while the CLI itself loads.)"""
    caught: list[int] = []
    noted = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when Ctrl-C is ignored
    with handled((signal.SIGINT,) if noted else (), lambda signum, frame: caught.append(signum)):
        importlib.import_module(f"{__package__}.{module}")
    if caught:
        raise KeyboardInterrupt


def _interrupted(error: KeyboardInterrupt) -> NoReturn:
    click.echo(safe("; ".join(["interrupted", *getattr(error, "__notes__", ())])), err=True)
    sys.exit(_interrupted_status(error))


def _interrupted_status(error: KeyboardInterrupt) -> int:
    """The exit status of a command `error` stopped, as a shell reports the signal: 130 for
    Ctrl-C, 143 for SIGTERM, 129 for SIGHUP, so a service manager tells its own stop from one."""
    return 128 + error.signum if isinstance(error, _Stopped) else 130


def _printing(error: OSError) -> bool:
    """Whether `error` rose from printing the command's output (every print goes through
    `click.echo`): it names no file, and `ls > /dev/full` said only "[Errno 28] No space left
    on device"."""
    return any(frame.f_code is click.echo.__code__ for frame, _ in traceback.walk_tb(error.__traceback__))


def _fail(message: str, status: int = 1) -> NoReturn:
    click.echo(f"{output.style('error:', sys.stderr, fg='red', bold=True)} {_bounded(safe(message))}", err=True)
    sys.exit(status)


def _note(message: str) -> None:
    """Say `message` on stderr as one `note:` line, escaped and cut as an `error:` line is: what
    it quotes (an error a server sent) may be a megabyte, and hold line breaks and escapes."""
    click.echo(f"note: {_bounded(safe(message))}", err=True)


def _shown_whole(*commands: str) -> None:
    """Note commands an error about to be raised names for the user to run: printed, they are
    neither cut (`_bounded`) nor reworded (`_cli_words`), which changed what they would do (an
    id holding `redact()` or `thread: thread ` was rewritten inside its quotes, and a long one
    cut, so the command named another run or interrupt). Each is `safe` already (`command_line`
    quotes what `safe` would escape)."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta.setdefault(_WHOLE, []).extend(commands)


def _split_whole(message: str) -> list[str]:
    """`message` cut into the text around the commands `_shown_whole` noted, and those commands:
    the commands at the odd indices."""
    context = click.get_current_context(silent=True)
    commands = sorted({c for c in (context.meta.get(_WHOLE, []) if context is not None else []) if c}, key=len, reverse=True)
    if not commands:
        return [message]
    return re.split("(" + "|".join(map(re.escape, commands)) + ")", message)


def _committed(what: str, see: str | None = None) -> None:
    """Note, once a write command's write is committed and before it prints the result, what
    it wrote (`what`) and the command that shows it (`see`, none for a write that running
    again repeats harmlessly): if printing then fails, the error says the write is kept, and
    the exit status is 3, not 1 (`_unprinted`)."""
    click.get_current_context().meta[_COMMITTED] = (what, see)


def _ended(status: int) -> None:
    """Note that the command has stopped, said how, and exits with `status`: a signal from
    then on (a second Ctrl-C, a service manager's second SIGTERM as it closes the database)
    ends it with `status` and nothing more said. A follower stopped by a signal, and saying
    `stopped: N event(s) imported in all`, exited 3 with an error calling its stop a failure."""
    click.get_current_context().meta[_ENDED] = status


def _unprinted(ctx: click.Context, reason: str, filename: str | None = None, failed: str | None = None) -> None:
    """Exit 3, naming what was committed, when an output failed after a write (`_committed`),
    or what `failed` says did."""
    if _COMMITTED not in ctx.meta:
        return
    what, see = ctx.meta[_COMMITTED]
    failed = failed or (f"writing {filename} failed" if filename else "printing the result failed")
    shown = f": `{see}` shows it, rather than running the command again" if see else ""
    _fail(f"committed: {what}; only {failed} ({reason}); the write is kept{shown}", EXIT_UNPRINTED)


_ERROR_HEAD, _ERROR_TAIL = 600, 300


def _bounded(message: str) -> str:
    """`message` cut in its middle when long: an error names what it refused, and a value
    typed or read from a file may be megabytes; what was wrong comes first and what to do
    last, so both ends are kept. A command to run (`_shown_whole`) is kept whole, and what
    follows it: the cut falls in the text before it."""
    parts = _split_whole(message)
    before, kept = parts[0], "".join(parts[1:])
    cut = len(before) - _ERROR_HEAD - _ERROR_TAIL
    if cut <= 100:
        return message
    return f"{before[:_ERROR_HEAD]}… ({cut:,} characters left out) …{before[-_ERROR_TAIL:]}{kept}"


# Library wording -> the CLI's: what a CLI user would type instead.
_CLI_WORDS = {
    "pass unanswered='drop' (or 'keep')": "pass --unanswered drop (or keep)",
    "which unanswered='drop' leaves out": "which --unanswered drop leaves out",
    "(unanswered='keep'), or start a new thread": "(--unanswered keep), or start a new thread (`threadlog new`)",
    "fork() or fan_out()": "`threadlog fork` or `threadlog fan-out`",
    "redact()": "`threadlog redact`",
    "(expect='no_stream')": "(`threadlog new`)",
    "fan_out()": "`threadlog fan-out`",
    "fan_out launches": "`threadlog fan-out` launches",
    "made by fan_out": "made by `threadlog fan-out`",
    "report(store, kid)": "`threadlog report KID`",
    "report(store, kid, text, status='failed')": "`threadlog report KID --text WHY --status failed`",
    "call purge()": "run `threadlog purge`",
    # Every command that needs a model takes --model; no event sets one on a thread made without.
    "pass model=... (or create the thread with one)": ("pass --model (or make a thread that names one: `threadlog fork "
                                                       "--model` of this one, or `threadlog new --model`)"),
    "model: thread ": "thread ",  # as `thread: thread `: --model was not given, and is what to do
    "user_content: ": "",
    "thread: thread ": "thread ",  # the parameter's name before the thread it names, said twice
    # A fork or request point's range and what it counts (`fork`, `rerun`, `request`): the option's
    # name, where elsewhere the word is prose (`at offset 1`, `at 99`).
    ", so at must be ": ", so --at must be ",
    " event(s): at counts the events": " event(s): --at counts the events",
    "pass the user's message": "give TEXT",
    "continue it with user_content=None first": "continue it first",
    "max_tokens: ": "--max-tokens ",
}


# A quoted span as a message prints an id or a value: Python's repr of a string, `'…'`, or `"…"`
# when it holds a `'`, its backslashes escaping what follows them. One opens after no letter
# or digit (the `'` of "user's" or "ids'" is prose).
_QUOTED = r"""(?<!\w)(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""


def _kept_quoted(cli_word: str) -> Callable[[re.Match[str]], str]:
    """What a match of `_REWORDED` becomes: a quoted span stays as it is, the library's words
    become `cli_word`."""
    return lambda match: match.group(1) or cli_word


_REWORDED = [(re.compile(f"({_QUOTED})|{re.escape(library)}"), _kept_quoted(cli_word)) for library, cli_word in _CLI_WORDS.items()]


def _cli_words(message: str) -> str:
    """`message` in the CLI's words (`_CLI_WORDS`), in its prose only: a command to run
    (`_shown_whole`) is typed as it is, and a quoted id or value is what the user gave (an id
    `redact()` was named as '`threadlog redact`', a thread nobody typed)."""
    parts = _split_whole(message)
    for i in range(0, len(parts), 2):  # the commands between them are typed as they are
        for words, reworded in _REWORDED:
            parts[i] = words.sub(reworded, parts[i])
    return "".join(parts)


@contextlib.contextmanager
def _named_as_typed(options: dict[str, str]) -> Iterator[None]:
    """A refusal of what a command built from its options names the option the user gave
    (`options`: the library's path of a field -> the option or argument), followed by the rest
    of the path inside it (`--content[0].type`), where the library names its place in a batch of
    events (`events[0].data.content[0].type`) that the user never wrote, or its own parameter
    (`checkpoint`, given as `--since`). (Where a refusal's sentence names a parameter, as `at`
    in a range, `_CLI_WORDS` says the option for every command alike.)"""
    try:
        yield
    except InvalidEvent as error:
        for field, option in options.items():
            if error.field == field or error.field.startswith((f"{field}.", f"{field}[")):
                error.field = option + error.field[len(field):]
                error.args = (f"{error.field}: {error.why}",)
                break
        raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db", envvar="THREADLOG_DB", type=FilePath(),
              help=f"Database file for every command (or $THREADLOG_DB) [default: ./{DEFAULT_DB}].")
@click.version_option(package_name="threadlog")
def cli(db: str | None) -> None:
    """threadlog: an event-sourced conversation store for LLM agents.

    Every message, run, interrupt, compaction and fork is an immutable event in one
    SQLite file. Forks cost O(1): a fork points at its parent and an offset.

    Exit status: 1 an error (one `error:` line on stderr), 2 a usage error, 3 a write
    committed that could not finish (its result not printed, stdout full, closed or not UTF-8,
    or a Ctrl-C once it was written; a redaction whose old pages a reader kept in the
    write-ahead log; an `ask` or `rerun` whose turn failed once its question or fork was
    recorded; an `ask` whose answer holds no text or was cut short: the write is kept, do not
    run the command again), 130 Ctrl-C (143 SIGTERM, 129 SIGHUP).
    """


def main() -> None:
    output.stand_in_for_closed_streams()
    cli(prog_name="threadlog")
