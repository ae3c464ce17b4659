"""The `threadlog` command: a thin shell over the library.

Each command opens the store, calls one library function and formats the result. Domain
errors print `error: …` on stderr and exit 1; usage errors exit 2 (click's convention); a
write committed whose result could not be printed (stdout full, closed, or in an encoding
that cannot write it) exits 3.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import click

from eventstore import (FORK_BOILERPLATE, Claimed, IntegrityError, InvalidEvent, Locked, OldPagesKept, RestoreReport, Store, StoreError,
                        ThreadNotFound)
from eventstore.errors import MISSHAPEN, Disconnected, NoStore, NotPermitted, SchemaTooOld, empty_file, misshapen, named
from eventstore.events import MAX_DEPTH
from eventstore.prepare import MAX_EVENT_BYTES, storable_json
from eventstore.ranges import MAX_INDEX
from eventstore.store import MAX_TIMEOUT, is_url, special_file

from projections import (
    anthropic_request,
    check_request,
    diff,
    display_rows,
    drop_snapshots,
    save_snapshot,
    thread_state,
    transcript,
    usage,
    write_transcript,
)
from projections.atomic import write_atomically
from projections.lineage import iter_blame
from projections.request import check_request_point, checkable_offsets
from projections.search import rebuild_index, search, tools_in_other_case, update_index
from projections.usage import total as usage_total

from .demo import build_demo, demo_lines
from .export import dump_lines, export_all, export_events, export_markdown
from .importers import ImportSummary, import_claude_code, import_event_files, import_pi, import_swe_agent
from .importers import swe_agent
from .importers.lines import LIVE_SECONDS
from .importers.follow import follow_claude_code, follow_files
from .importers.lines import files_below
from .interrupt import waking
from .listing import listing
from .note_fork import fork_with_transcript, transcripts_holding
from .subagents import STATUSES, questions, report
from . import output
from .names import THREAD, ThreadType, resolve
from .render import (blame_line, check_line, counted, diff_lines, event_line, hit_line, ls_lines, row_line, safe, safe_block,
                     safe_json, state_lines, tree_lines, usage_lines)
from .signals import handled

if TYPE_CHECKING:  # `anthropic`, imported by the live turns, only for the commands that call the API
    from .live import Turn

F = TypeVar("F", bound=Callable[..., Any])


# The exit status of a write command whose write was committed but whose result could not be
# printed (stdout a full disk, a pipe whose reader left): not 1, which says nothing was
# written, so that a script does not run the write again (a second thread, a message twice).
EXIT_UNPRINTED = 3
_COMMITTED = "threadlog.committed"


class _Group(click.Group):
    """Turns library errors into one `error:` line and exit status 1, never a traceback, and
    Ctrl-C into status 130, as a shell reports a command SIGINT stopped (click's own is 1).
    A write command's output failing after its write was committed (`_committed`) exits 3."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        # The group's own --help and --version print here, while the options are read, before
        # `invoke`: printing them to a full disk (or a closed stdout) raised a traceback.
        try:
            return super().make_context(info_name, args, parent, **extra)
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
            # Once its write is committed (printing the result, closing the store), a Ctrl-C stops
            # nothing: exit 130 told a script to run `append` or `new` again, writing it twice.
            _unprinted(ctx, "Ctrl-C" if not isinstance(error, _Stopped) else signal.Signals(error.signum).name,
                       failed="what came after it was interrupted")
            click.echo(safe("; ".join(["interrupted", *getattr(error, "__notes__", ())])), err=True)
            sys.exit(128 + error.signum if isinstance(error, _Stopped) else 130)
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
        except RecursionError:  # an event nested too deeply, stored by an older release or by hand
            _fail("an event is nested too deeply to show; `threadlog verify` names its position")
        except MemoryError:  # an input far larger than memory (a session file of gigabytes, a device)
            _fail("out of memory: the input is larger than this machine can hold; nothing more was written")
        except MISSHAPEN as error:  # a stored event of the wrong shape (raw SQL wrote it): one line, as every refusal
            _fail(str(misshapen(error)))


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a `kill`, a closed terminal), unwound as Ctrl-C is: what the command
    started is closed on the way out (a live turn's run ends `cancelled`, not left open)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


def _printing(error: OSError) -> bool:
    """Whether `error` rose from printing the command's output (every print goes through
    `click.echo`): it names no file, and `ls > /dev/full` said only "[Errno 28] No space left
    on device"."""
    return any(frame.f_code is click.echo.__code__ for frame, _ in traceback.walk_tb(error.__traceback__))


def _fail(message: str, status: int = 1) -> NoReturn:
    click.echo(f"{output.style('error:', sys.stderr, fg='red', bold=True)} {_bounded(safe(message))}", err=True)
    sys.exit(status)


def _committed(what: str, see: str | None = None) -> None:
    """Note, once a write command's write is committed and before it prints the result, what
    it wrote (`what`) and the command that shows it (`see`, none for a write that running
    again repeats harmlessly): if printing then fails, the error says the write is kept, and
    the exit status is 3, not 1 (`_unprinted`)."""
    click.get_current_context().meta[_COMMITTED] = (what, see)


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
    last, so both ends are kept."""
    cut = len(message) - _ERROR_HEAD - _ERROR_TAIL
    if cut <= 100:
        return message
    return f"{message[:_ERROR_HEAD]}… ({cut:,} characters left out) …{message[-_ERROR_TAIL:]}"


# Library wording -> the CLI's: what a CLI user would type instead.
_CLI_WORDS = {
    "pass unanswered='drop' (or 'keep')": "pass --unanswered drop (or keep)",
    "fork() or fan_out()": "`threadlog fork` or `threadlog fan-out`",
    "redact()": "`threadlog redact`",
    "(expect='no_stream')": "(`threadlog new`)",
    "fan_out()": "`threadlog fan-out`",
    "fan_out launches": "`threadlog fan-out` launches",
    "made by fan_out": "made by `threadlog fan-out`",
    "answer it with resolve_interrupt": "answer it with `threadlog interrupt resolve`",
    "call purge()": "run `threadlog purge`",
    "pass model=... (or create the thread with one)": "pass --model (or create the thread with one: `threadlog new --model`)",
    "user_content: ": "",
    "pass the user's message": "give TEXT",
    "continue it with user_content=None first": "continue it first",
    "max_tokens: ": "--max-tokens ",
}


def _cli_words(message: str) -> str:
    for library, cli_word in _CLI_WORDS.items():
        message = message.replace(library, cli_word)
    return message


DEFAULT_DB = "threadlog.db"


class FilePath(click.Path):
    """A file to open or write: `--db ""` (a shell variable left unset) names none, and was
    taken as no option at all (./threadlog.db, or stdout for `-o`); `notes/` names a
    directory, and was written as the file `notes` (while a fork note named `notes/`)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            self.fail("an empty path names no file", param, ctx)
        if isinstance(value, str) and value.endswith(("/", os.sep)):
            self.fail(f"{value!r} ends with a slash, so it names a directory; name a file", param, ctx)
        return super().convert(value, param, ctx)


def db_option(func: F) -> F:
    """`--db`, accepted after any command (and before it, on the group)."""
    return click.option(
        "--db",
        "db",
        default=None,
        type=FilePath(),
        help=f"Database file [default: $THREADLOG_DB, else ./{DEFAULT_DB}].",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


class Seconds(click.FloatRange):
    """A number of seconds to wait: finite (`nan` passes a range check and `inf` overflows a
    sleep or a lock timeout), and at most what SQLite can wait for a lock."""

    name = "seconds"

    def __init__(self, least: float) -> None:
        super().__init__(min=least, max=MAX_TIMEOUT)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{seconds} is not a number of seconds from {self.min} to {self.max}", param, ctx)
        return seconds


class JSONText(click.ParamType[Any]):
    """An option whose value is JSON: text that is none (or JSON no event can hold) is a usage
    error naming the option and where the JSON broke, before the store is opened. With
    `or_text`, a value that is no JSON is kept as the text it is (JSON nested too deeply is
    still refused: it is JSON, and no event holds it)."""

    name = "json"

    def __init__(self, or_text: bool = False) -> None:
        self.or_text = or_text

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default, already a value
            return value
        try:
            return _json_value(value)
        except _NotJSON as error:
            if self.or_text and not error.nested:
                return value
            self.fail(str(error), param, ctx)


class Setting(click.ParamType[tuple[str, Any]]):
    """`--setting KEY=JSON`: a (key, value) pair, its value refused as `JSONText` refuses one."""

    name = "KEY=JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        key, sep, text = value.partition("=")
        if not sep or not key:
            self.fail(f"{value!r} is not KEY=JSON, e.g. stop_sequences='[\"END\"]'", param, ctx)
        try:
            return key, _json_value(text)
        except _NotJSON as error:
            hint = f" (text is JSON too: {key}='\"{text}\"')" if text.isidentifier() else ""
            self.fail(f"the value of {key} {error}{hint}", param, ctx)


def timeout_option(func: F) -> F:
    return click.option("--timeout", type=Seconds(least=0), default=30.0, show_default=True,
                        help="Seconds to wait for another writer's lock before giving up.")(func)


def _waiting() -> None:
    click.echo("waiting for another writer… (--timeout sets how long)", err=True)


def _open(path: str, mode: str, timeout: float) -> Store:
    """`read`: an existing file, read-only (never created, never written; a file an older
    release wrote is migrated first when it is writable). `write`: an existing file.
    `create`: the file is created if missing (init, new, demo, the importers). A
    `postgresql://` URL opens the server's database the same way: read-only sessions for
    `read` (the server refuses their writes), its schema created when missing otherwise."""
    url = is_url(path)
    special = None if url else special_file(path)
    if special is not None:
        raise StoreError(f"{path} is {special}, not a database file; pass a file path (--db)")
    if not url and mode != "create" and not Path(path).is_file():
        raise StoreError(f"no database at {path}; create one with `threadlog init` (or check --db / $THREADLOG_DB)")
    if not url and mode in ("write", "search") and os.path.getsize(path) == 0:  # as a read-only opening says
        raise empty_file(path)
    writable: dict[str, Any] = {"timeout": timeout} if url else {"timeout": timeout, "on_wait": _waiting}
    if url and mode in ("write", "search"):  # as a missing file is: opened writable, the schema was made
        try:
            Store(path, timeout=timeout, read_only=True).close()
        except NoStore as error:
            raise StoreError(f"{error.where} holds no threadlog store yet; create one with `threadlog init` "
                             "(or check --db / $THREADLOG_DB); nothing was written") from None
        except StoreError:
            pass  # an older schema (migrated by the writable open) or a refusal it gives again
    if mode == "search":  # writes only to bring the index up to date: a file it may not write is searched as it is
        if not url and not os.access(path, os.W_OK):
            # SQLite opens such a file read-only without a word: the catch-up's write then failed.
            return Store(path, timeout=timeout, read_only=True)
        try:
            return Store(path, **writable)
        except StoreError:
            if url or _may_write(path):
                raise
            return Store(path, timeout=timeout, read_only=True)
    if mode != "read":
        return Store(path, **writable)
    try:
        return Store(path, timeout=timeout, read_only=True)
    except SchemaTooOld:
        Store(path, **writable).close()  # migrates, or says why it cannot
        return Store(path, timeout=timeout, read_only=True)


def _may_write(path: str) -> bool:
    """Whether this user may write the file and the directory its write-ahead log goes in."""
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def _db_path() -> str:
    """The database the running command names, as given (a URL with its password): its own
    --db, else the group's (or $THREADLOG_DB), else ./threadlog.db."""
    ctx = click.get_current_context()
    return ctx.params.get("db") or ctx.find_root().params.get("db") or DEFAULT_DB


def with_store(mode: str = "read") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Open the store named by --db for the command (see `_open` for `mode`), resolve its
    THREAD arguments (prefixes, @last), and close the store afterwards."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(db: str | None, timeout: float = 30.0, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            path = _db_path()
            if path == ":memory:":  # `new --db :memory:` printed the id of a thread gone when it exited
                raise click.UsageError("--db :memory: names a database that is gone when the command exits; name a file "
                                       "(or a postgresql:// URL)")
            created = mode == "create" and not is_url(path) and not os.path.lexists(path)
            try:
                with _open(path, mode, timeout) as store:
                    for param in ctx.command.params:
                        if isinstance(param.type, ThreadType) and kwargs.get(str(param.name)) is not None:
                            value = kwargs[str(param.name)]
                            kwargs[str(param.name)] = [resolve(store, v) for v in value] if param.multiple else resolve(store, value)
                    return func(store, **kwargs)
            except BaseException:
                if created:
                    _remove_if_empty(path)
                raise

        wrapped = db_option(wrapper)
        return timeout_option(wrapped) if mode != "read" else wrapped

    return decorate


def _failed_check_as_json(func: Callable[..., Any]) -> Callable[..., Any]:
    """With --json, a file too damaged to open or read through is reported as a failed check
    (`{"ok": false, "position": null, ...}`, exit 1), as the command's help promises."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return func(**kwargs)
        except StoreError as error:
            if not kwargs.get("as_json") or isinstance(error, InvalidEvent):  # a malformed checkpoint is the caller's
                raise
            _failed_check(None, _cli_words(str(error)), kwargs.get("checkpoint"), kwargs.get("since"))

    return wrapper


def _failed_check(position: int | None, why: str, checkpoint: str | None, since: str | None) -> NoReturn:
    """`verify --json`'s report of a failed check, then exit 1. As on success, `since` is the
    checkpoint given; `checkpoint` is the one checked (--checkpoint), or none (--since: the
    next to keep, and the log failed)."""
    _emit_json({"ok": False, "position": position, "error": why, "checkpoint": checkpoint,
                **({"since": since} if since is not None else {})})
    sys.exit(1)


def _remove_if_empty(path: str) -> None:
    """A refused command leaves no database behind where there was none (`threadlog new
    --db typo.db …` refused, an import of a bad file into a new file): the file it created
    is removed while it holds no thread. One that does (an import that wrote sessions
    before refusing one) is kept."""
    if not os.path.isfile(path):
        return  # the command failed before creating it (opening it again would create it)
    try:
        with Store(path, timeout=0) as store:
            if store.counts() != (0, 0):
                return
    except StoreError:
        return  # not ours to judge: leave it
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def pager_option(func: F) -> F:
    return click.option("--no-pager", "no_pager", is_flag=True,
                        help="Print straight to stdout even on a terminal (else long output goes through $PAGER).")(func)


# The most an option's file (or standard input) may hold: twice what an event holds, room for
# JSON written loosely. (`yes | threadlog append T --content -` read until memory ran out.)
MAX_INPUT_BYTES = 2 * MAX_EVENT_BYTES


def _read_text(path: str, option: str) -> str:
    """A file's text, or standard input's for `-`; refuses bytes that are not UTF-8, and more
    than `MAX_INPUT_BYTES`."""
    where = _input_name(path)
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_INPUT_BYTES + 1)
    except OSError as error:  # a usage error (exit 2), as every other path that names nothing readable
        raise click.BadParameter(f"cannot read {where} ({error.strerror})", param_hint=f"'{option}'") from None
    if len(data) > MAX_INPUT_BYTES:
        raise StoreError(f"{option}: {where} holds more than {MAX_INPUT_BYTES // 2**20} MiB; an event holds at most "
                         f"{MAX_EVENT_BYTES // 2**20} MiB of JSON")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StoreError(f"{option}: {where} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def _input_name(path: str) -> str:
    """An input file as messages name it (`-` is standard input)."""
    return "standard input" if path == "-" else path


class _NotJSON(ValueError):
    """Why a text is no JSON an event can hold (`nested`: it is JSON, nested too deeply)."""

    def __init__(self, why: str, nested: bool = False) -> None:
        super().__init__(why)
        self.nested = nested


def _json_value(text: str) -> Any:
    """`text` parsed as JSON, or `_NotJSON` saying where it broke. Python reads `NaN`,
    `Infinity` and `1e999` as numbers no event can store: they are no JSON (an answer `NaN` was
    refused as "not storable as UTF-8 JSON", naming neither it nor `--answer`)."""
    try:
        return storable_json(text)
    except json.JSONDecodeError as error:
        raise _NotJSON(f"is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise _NotJSON(f"is JSON nested too deeply; an event holds at most {MAX_DEPTH} levels", nested=True) from None
    except ValueError as error:  # valid JSON Python will not read: an integer of over 4,300 digits
        raise _NotJSON(f"holds JSON threadlog cannot read: {str(error).split(';')[0]}") from None


def _parse_json(text: str, what: str) -> Any:
    """A file's (or standard input's) text parsed as JSON: what it holds is input, refused
    as the rest of it is (exit 1), where a value typed as an option is a usage error (`JSONText`)."""
    try:
        return _json_value(text)
    except _NotJSON as error:
        raise StoreError(f"{what} {error}") from None


def _json(value: Any, indent: int | None = None) -> str:
    """`value` as JSON for stdout: UTF-8 text kept, what a terminal would obey escaped."""
    return safe_json(json.dumps(value, ensure_ascii=False, indent=indent))


def _emit_json(value: Any) -> None:
    click.echo(_json(value, indent=2))


def _emit_json_array(items: Iterable[Any]) -> None:
    """`_emit_json(list(items))`, byte for byte, printed as the items come (for long streams)."""
    opening = "["
    for item in items:
        body = _json(item, indent=2).replace("\n", "\n  ")
        click.echo(f"{opening}\n  {body}", nl=False)
        opening = ","
    click.echo("[]" if opening == "[" else "\n]")


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
    recorded: the write is kept, do not run the command again), 130 Ctrl-C.
    """


@cli.command()
@json_option
@with_store("create")
def init(store: Store, as_json: bool) -> None:
    """Create the database, or migrate it to this release's schema."""
    streams, events = store.counts()
    if as_json:
        _emit_json({"path": store.path, "schema_version": store.schema_version(), "threads": streams, "events": events})
    else:
        output.lines([f"{store.path}: schema {store.schema_version()}, {counted(streams, 'thread')}, {counted(events, 'event')}"])


def _meta_pairs(_: click.Context, __: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        pairs[key] = val
    return pairs


def _setting_pairs(_: click.Context, __: click.Parameter, values: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """--setting KEY=JSON (repeatable): request settings by key, each given once."""
    settings: dict[str, Any] = {}
    for key, value in values:
        if key in settings:
            raise click.BadParameter(f"{key} is given twice")
        settings[key] = value
    return settings


def _given(name: str) -> bool:
    """Whether the running command's option `name` was given: a JSON option's value may be
    JSON's null, as a value not given is."""
    return click.get_current_context().get_parameter_source(name) is not click.core.ParameterSource.DEFAULT


def _model_name(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    """A --model that names no model (`--model "$MODEL"`, the variable unset) was taken as none
    given: `rerun` replayed with the thread's own model, `new` stored a thread with none."""
    if value is not None and not value.strip():
        raise click.BadParameter("is empty: name a model")
    return value


def _stated(advice: str) -> Callable[[click.Context, click.Parameter, str], str]:
    """The callback of a --reason, --actor or search QUERY: one that says nothing (`--reason
    "$REASON"`, the variable unset) is a usage error naming it, then `advice`, as an empty
    --model is. A redaction failed with the event model's field path (`redact.data.reason:
    String should have at least 1 character`), a search said `no match`, exit 0, as if nothing
    held the words, and an interrupt cancelled with none showed none."""

    def check(_: click.Context, __: click.Parameter, value: str) -> str:
        if not value.strip():
            raise click.BadParameter(f"is empty: {advice}")
        return value

    return check


@contextlib.contextmanager
def _named_as_typed(options: dict[str, str]) -> Iterator[None]:
    """A refusal of the one event a command built from its options names the option the user
    gave (`options`: the library's path of a field -> the option or argument), followed by the
    rest of the path inside it (`--content[0].type`), where the library names its place in a
    batch of events (`events[0].data.content[0].type`) that the user never wrote."""
    try:
        yield
    except InvalidEvent as error:
        for field, option in options.items():
            if error.field == field or error.field.startswith((f"{field}.", f"{field}[")):
                error.field = option + error.field[len(field):]
                error.args = (f"{error.field}: {error.why}",)
                break
        raise


def _recorded(event: Any, as_json: bool) -> None:
    """What append, emit and the interrupt commands print: where the event landed."""
    _committed(f"{event.type} recorded on thread {event.stream_id} at offset {event.offset} (position {event.position})",
               f"threadlog log {event.stream_id} --start {event.offset}")
    if as_json:
        _emit_json(event.to_json())
    else:
        output.lines([f"offset {event.offset} position {event.position}"])


@cli.command()
@click.option("--title", help="The thread's title.")
@click.option("--system", help="The system prompt.")
@click.option("--model", callback=_model_name, help="The model the thread talks to.")
@click.option("--metadata", "--meta", "metadata", multiple=True, callback=_meta_pairs, metavar="K=V",
              help="A thread metadata entry (repeatable; --meta is the same).")
@click.option("--thinking-budget", type=click.IntRange(min=1024), metavar="TOKENS",
              help="Extended thinking for every request of the thread, its forks and sub-agents, with this budget.")
@click.option("--setting", "settings", multiple=True, type=Setting(), callback=_setting_pairs, metavar="KEY=JSON",
              help="A Messages API parameter every request of the thread, its forks and sub-agents sends (repeatable), "
                   "its value as JSON: stop_sequences='[\"END\"]', tool_choice='{\"type\": \"any\"}', "
                   "metadata='{\"user_id\": \"u1\"}' (the request's, not --metadata), service_tier='\"auto\"', "
                   "output_config, speed, inference_geo, diagnostics; checked against the installed anthropic SDK.")
@json_option
@with_store("create")
def new(store: Store, title: str | None, system: str | None, model: str | None, metadata: dict[str, str], thinking_budget: int | None,
        settings: dict[str, Any], as_json: bool) -> None:
    """Start a thread; prints its id, alone."""
    thinking = {"type": "enabled", "budget_tokens": thinking_budget} if thinking_budget else None
    thread = store.create_thread(title=title, system=system, model=model, metadata=metadata or None, thinking=thinking,
                                 settings=settings or None)
    _committed(f"created thread {thread}", f"threadlog show {thread}")
    if as_json:
        _emit_json(store.thread(thread).to_json())
    else:
        click.echo(thread)


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--role", type=click.Choice(["user", "assistant"]), required=True, help="Who speaks.")
@click.option("--text", help="The message text.")
@click.option("--content", "content_file", metavar="FILE|-", help="JSON content blocks (or a JSON string) from a file or stdin.")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@click.option("--actor", help="Who wrote it (recorded in the event's meta).")
@json_option
@with_store("write")
def append(store: Store, thread: str, role: str, text: str | None, content_file: str | None, expect: int | None, actor: str | None,
           as_json: bool) -> None:
    """Append a message to THREAD; prints its offset and position."""
    if (text is None) == (content_file is None):
        raise click.UsageError("give exactly one of --text or --content")
    if text is not None and not text.strip():  # `--text "$MSG"` with MSG unset: a blank message no request sends
        raise click.BadParameter("is empty: give the message text", param_hint="--text")
    content = text if text is not None else _parse_json(_read_text(content_file or "-", "--content"), "--content")
    meta = {"actor": actor} if actor else {}
    given = {"events[0].data.content": "--text" if text is not None else "--content", "events[0].meta.actor": "--actor"}
    with _named_as_typed(given):
        event = store.append_message(thread, role, content, expect="any" if expect is None else expect, **meta)
    _recorded(event, as_json)


@cli.command()
@click.argument("thread", type=THREAD)
@click.argument("type_", metavar="TYPE")
@click.option("--data", type=JSONText(), metavar="JSON", help="The event's data as JSON.")
@click.option("--data-file", metavar="FILE|-", help="The event's data as JSON, from a file or stdin.")
@click.option("--event-meta", "meta", type=JSONText(), metavar="JSON", help="The event's meta as JSON (event_id, actor, origin, …).")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@json_option
@with_store("write")
def emit(store: Store, thread: str, type_: str, data: Any, data_file: str | None, meta: Any, expect: int | None,
         as_json: bool) -> None:
    """Append one event of any TYPE to THREAD; prints its offset and position."""
    if _given("data") == (data_file is not None):  # `--data null` is given, as JSON's null
        raise click.UsageError("give exactly one of --data or --data-file")
    if data_file is not None:
        path = data_file or "-"
        data = _parse_json(_read_text(path, "--data-file"), f"--data-file ({_input_name(path)})")
    if not _given("meta"):
        meta = {}
    event = {"type": type_, "data": data, "meta": meta}
    _recorded(store.append(thread, [event], expect="any" if expect is None else expect)[0], as_json)


def _metadata_choice(_: click.Context, __: click.Parameter, value: str) -> Any:
    if value in ("blank", "inherit"):
        return value
    if value.startswith("keep:"):
        # Spaces around a key are the shell's, not the key's: `keep:user, tenant` kept `user` alone.
        keys = [key.strip() for key in value[5:].split(",")]
        if all(keys):
            return {"keep": keys}
        raise click.BadParameter("keep:K1,K2 names metadata keys separated by commas, and one of them is empty")
    raise click.BadParameter("use blank, inherit or keep:K1,K2")


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=int, help="How many of the parent's events the fork inherits (default: all).")
@click.option("--todos", type=click.Choice(["blank", "inherit"]), default="blank", show_default=True,
              help="blank: the fork starts with no todos; inherit: it keeps the parent's.")
@click.option("--metadata", default="blank", show_default=True, callback=_metadata_choice, metavar="blank|inherit|keep:K1,K2",
              help="The fork's thread metadata: none, the parent's, or only the keys named.")
@click.option("--context", type=click.Choice(["full", "note"]), default="full", show_default=True,
              help="full: the parent's messages; note: one fork note pointing at the transcript.")
@click.option("--retrieval", type=click.Choice(["per-turn", "first-turn", "off"]), default="off", show_default=True,
              help="With --context note: which requests also carry the passages of the parent's history (below the "
                   "fork point) a search finds most relevant to the turn's user message: every turn's, the first "
                   "turn's only, or none.")
@click.option("--unanswered", type=click.Choice(["refuse", "drop", "keep"]), default="refuse", show_default=True,
              help="Tool calls waiting for a result at the fork point: refuse the fork, drop them from its view, "
                   "or keep them waiting in the fork (its next message may answer them).")
@click.option("--transcript", "transcript_path", metavar="PATH", type=FilePath(),
              help="With --context note: write the parent's transcript, as of the fork point, to PATH (atomically, "
                   "before forking) and name it in the fork note.")
@click.option("--title", help="The fork's own title (default: the parent's).")
@click.option("--system", help="The fork's own system prompt (default: the parent's).")
@click.option("--model", callback=_model_name, help="The fork's own model (default: the parent's).")
@click.option("--blank-config", is_flag=True,
              help="Inherit none of the parent's system prompt, model, tools, thinking and settings (--system, --model "
                   "and --setting still apply).")
@click.option("--setting", "settings", multiple=True, type=Setting(), callback=_setting_pairs, metavar="KEY=JSON",
              help="A request setting of the fork's (repeatable), its value as JSON, replacing the parent's for KEY "
                   "(null removes the parent's): e.g. tool_choice='{\"type\": \"auto\"}' or stop_sequences=null. "
                   "The parent's other settings are inherited.")
@json_option
@with_store("write")
def fork(store: Store, thread: str, at: int | None, todos: str, metadata: Any, context: str, retrieval: str, unanswered: str,
         transcript_path: str | None, title: str | None, system: str | None, model: str | None, blank_config: bool,
         settings: dict[str, Any], as_json: bool) -> None:
    """Fork THREAD in O(1); prints the fork's id, alone.

    The fork keeps the parent's title, system prompt, model, tools, thinking and request
    settings unless told otherwise: a narrower agent gets its own with --system, --model,
    --setting or --blank-config."""
    config = {key: value for key, value in (("blank", blank_config or None), ("system", system), ("model", model),
                                            ("settings", settings or None)) if value is not None}
    if transcript_path == "-":
        raise click.BadParameter("names the file the fork note points the model at: not stdout (-)", param_hint="--transcript")
    options = {"todos": todos, "metadata": metadata, "retrieval": retrieval, "unanswered": unanswered, "config": config or None,
               "title": title}
    if transcript_path and context == "note":  # the note names PATH: it is there when the fork is
        fork_id = fork_with_transcript(store, thread, transcript_path, at, **options)
    else:
        fork_id = store.fork(thread, at, context=context, transcript=transcript_path, **options)
    _committed(f"created fork {fork_id} of thread {thread}", f"threadlog tree {fork_id}")
    if as_json:
        _emit_json(store.thread(fork_id).to_json())
    else:
        click.echo(fork_id)


@cli.command("fan-out")
@click.argument("thread", type=THREAD)
@click.argument("directives", nargs=-1, required=True)
@click.option("--placeholder", help="The tool_result text every sub-agent fork answers the pending tool calls with.")
@click.option("--boilerplate", is_flag=True,
              help="Put the fork sub-agent design's <fork-boilerplate> (a worker's rules and report form) before each "
                   "directive.")
@json_option
@with_store("write")
def fan_out(store: Store, thread: str, directives: tuple[str, ...], placeholder: str | None, boilerplate: bool,
            as_json: bool) -> None:
    """Launch one sub-agent fork of THREAD per DIRECTIVE, in one transaction; prints their ids.

    THREAD's last message must be an assistant turn whose tool calls await results: each fork
    answers them with the same placeholder, then adds its own directive (after the same
    boilerplate, with --boilerplate). Run one with `threadlog ask KID` (no text: it answers
    its directive), deliver its answer to THREAD with `threadlog report KID`, and list its
    questions with `threadlog interrupt list THREAD`.
    """
    extra = {} if placeholder is None else {"placeholder": placeholder}
    ids = store.fan_out(thread, list(directives), boilerplate=FORK_BOILERPLATE if boilerplate else None, **extra)
    _committed(f"created {len(ids)} sub-agent fork(s) of thread {thread}: {', '.join(ids)}", f"threadlog tree {thread}")
    if as_json:
        _emit_json([store.thread(i).to_json() for i in ids])
    else:
        output.lines(ids)


@cli.command("report")
@click.argument("subagent", type=THREAD)
@click.option("--text", help="Deliver this instead of the sub-agent's final answer (e.g. why it failed).")
@click.option("--status", type=click.Choice(STATUSES), default="completed", show_default=True,
              help="The notification's status.")
@json_option
@with_store("write")
def report_(store: Store, subagent: str, text: str | None, status: str, as_json: bool) -> None:
    """Deliver SUBAGENT's final answer to the thread that launched it (fan-out), as one
    <task-notification> user message; prints its offset and position.

    The first report also answers the parent's tool calls the sub-agent was launched from,
    with the placeholder the sub-agent saw. Reporting the same answer again writes nothing.
    """
    if text is not None and not text.strip():
        raise click.UsageError("--text is empty; leave it out to deliver the sub-agent's final answer")
    _recorded(report(store, subagent, text, status=status), as_json)


def _pass_db(db: str | None) -> None:
    """`threadlog GROUP --db X SUBCOMMAND …`: the subcommands read the root's --db."""
    if db:
        click.get_current_context().find_root().params["db"] = db


@cli.group()
@db_option
def interrupt(db: str | None) -> None:
    """Raise, resolve or cancel an interrupt: a question a run puts to a human."""
    _pass_db(db)


_INTERRUPT_ID = {"events[0].data.interrupt_id": "INTERRUPT_ID"}  # the argument every interrupt command takes


@interrupt.command("raise")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--question", help="What the human is asked.")
@click.option("--tool-use-id", help="The tool call that waits on the answer (one waiting for its result on THREAD); "
              "the answer becomes its result.")
@json_option
@with_store("write")
def interrupt_raise(store: Store, thread: str, interrupt_id: str, question: str | None, tool_use_id: str | None, as_json: bool) -> None:
    """Record that THREAD waits on a human for INTERRUPT_ID."""
    data = {"interrupt_id": interrupt_id, "question": question, "tool_use_id": tool_use_id}
    event = {"type": "interrupt.raised", "data": {k: v for k, v in data.items() if v is not None}}
    with _named_as_typed({**_INTERRUPT_ID, "events[0].data.question": "--question", "events[0].data.tool_use_id": "--tool-use-id"}):
        (recorded,) = store.append(thread, [event])
    _recorded(recorded, as_json)


@interrupt.command("resolve")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--answer", type=JSONText(or_text=True), metavar="TEXT",
              help="The human's answer (JSON if it parses as JSON, else text).")
@json_option
@with_store("write")
def interrupt_resolve(store: Store, thread: str, interrupt_id: str, answer: Any, as_json: bool) -> None:
    """Record the human's answer to INTERRUPT_ID on THREAD (`threadlog ask` then resumes)."""
    from .live import resolve_interrupt

    with _named_as_typed({**_INTERRUPT_ID, "events[0].data.answer": "--answer"}):
        event = resolve_interrupt(store, thread, interrupt_id, answer)
    _recorded(event, as_json)


@interrupt.command("cancel")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--reason", default="cancelled", show_default=True, callback=_stated("say why it no longer needs an answer"),
              help="Why it no longer needs an answer.")
@json_option
@with_store("write")
def interrupt_cancel(store: Store, thread: str, interrupt_id: str, reason: str, as_json: bool) -> None:
    """Record that INTERRUPT_ID on THREAD no longer needs an answer."""
    event = {"type": "interrupt.cancelled", "data": {"interrupt_id": interrupt_id, "reason": reason}}
    with _named_as_typed({**_INTERRUPT_ID, "events[0].data.reason": "--reason"}):
        (recorded,) = store.append(thread, [event])
    _recorded(recorded, as_json)


@interrupt.command("list")
@click.argument("thread", type=THREAD)
@json_option
@with_store("read")
def interrupt_list(store: Store, thread: str, as_json: bool) -> None:
    """The questions waiting for a human on THREAD and on the sub-agent forks it launched, one a line:
    the thread asking, the interrupt id, the question. Answer one with
    `threadlog interrupt resolve ASKING_THREAD ID --answer A`."""
    asked = questions(store, thread)
    if as_json:
        _emit_json([question.to_json() for question in asked])
    else:
        output.lines(f"{q.thread}  {q.interrupt_id}  {q.question or '-'}" for q in asked)
        if not asked:  # as `search` says `no match`: on stderr, stdout left empty for a script
            click.echo("no question waiting", err=True)


def _one_more(limit: int) -> int:
    """The threads a page of `limit` reads to know whether a next page exists: one more (an `-n`
    past what a count may be reads every thread, with no next page, as asked)."""
    return min(limit, MAX_INDEX - 1) + 1


@cli.command("ls")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Show at most N threads.")
@click.option("--all", "everything", is_flag=True, help="Include forks and sub-agent forks (else root threads only).")
@click.option("--root", type=THREAD, help="Only THREAD and the forks below it (forks included).")
@click.option("--before", type=click.IntRange(min=1), metavar="POSITION",
              help="The next page: threads last active before this position (the last row's last_position).")
@json_option
@pager_option
@with_store()
def ls(store: Store, limit: int, everything: bool, root: str | None, before: int | None, as_json: bool, no_pager: bool) -> None:
    """Threads, most recently active first: id, kind, fork point, messages, last activity, title.

    Last activity is the time of the thread's last event, to the second: in UTC, as threadlog
    records times, or as an importer found it when that names no zone (`--json` keeps it whole).
    The order is the file's (the position of each thread's last event), not those times: an
    import writes sessions in the order of their files, each with its own times.

    A page with more threads after it ends with where the next begins, on stderr (the rows on
    stdout stay the table): `--before POSITION`, the last row's last_position (`--json` prints
    it on every row)."""
    infos = store.threads(_one_more(limit), before, forks=everything or root is not None, root=root)
    more, infos = len(infos) > limit, infos[:limit]
    if not infos and before is None and root is None:
        _check_rootless(store)
    entries = listing(store, infos)
    if as_json:
        _emit_json(entries)
        return
    output.lines(ls_lines(entries), pager=not no_pager)
    if more:
        click.echo(f"(next page: the same command with --before {infos[-1].last_position})", err=True)


def _check_rootless(store: Store) -> None:
    """An empty first page of a file that holds threads: every root's row was altered (only raw
    SQL gives a root a parent), which an empty listing would hide."""
    held = store.counts().threads
    if held:
        raise StoreError(f"the store holds {held} threads but no root thread: their rows were altered outside threadlog "
                         "(`threadlog verify` names where)")


def _check_range(store: Store, thread: str, name: str, value: int | None, *, offset: bool = False, low: int = 0) -> None:
    """`--start`/`--stop`/`--at` past the thread's head: the same error everywhere. An `offset`
    names an event (`request --check --at`), so its range ends one before the head; `low` is the
    least the option takes (`show --at` replays at least `thread.created`)."""
    last = store.head(thread) - (1 if offset else 0)
    if value is not None and value > last:
        raise StoreError(f"{name} {value} is outside thread {thread!r} ({low}..{last})")


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--start", type=click.IntRange(min=0), default=0, help="First offset.")
@click.option("--stop", type=click.IntRange(min=0), help="Offset to stop before.")
@click.option("-n", "--tail", "--last", "tail", type=click.IntRange(min=1), help="Only the last N events.")
@json_option
@pager_option
@with_store()
def log(store: Store, thread: str, start: int, stop: int | None, tail: int | None, as_json: bool, no_pager: bool) -> None:
    """THREAD's events (ancestors included): offset, stream, position, type, hash. --json: JSON lines."""
    _check_range(store, thread, "--start", start)
    _check_range(store, thread, "--stop", stop)
    if tail is not None:
        start = max(start, (store.head(thread) if stop is None else stop) - tail)
    events = store.read(thread, start, stop)
    if as_json:
        for event in events:
            click.echo(_json(event.to_json()))
    else:
        output.lines((event_line(event) for event in events), pager=not no_pager)


@cli.command()
@click.argument("thread", type=THREAD, required=False)
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Without THREAD: the trees of the N most recently active root threads.")
@click.option("--before", type=click.IntRange(min=1), metavar="POSITION",
              help="The next page of trees: roots last active before this position (as `ls --before`).")
@click.option("--all", "everything", is_flag=True, help="Without THREAD: every tree in the file, oldest first.")
@json_option
@pager_option
@with_store()
def tree(store: Store, thread: str | None, limit: int, before: int | None, everything: bool, as_json: bool,
         no_pager: bool) -> None:
    """The fork tree, with fork offsets and titles: the most recently active roots' trees, or the tree holding THREAD.

    A page of trees with more after it ends with where the next begins, on stderr, as `ls` does."""
    limited = click.get_current_context().get_parameter_source("limit") != click.core.ParameterSource.DEFAULT
    next_page = None  # as `ls`: a page of roots with more after it names where the next begins
    if thread is not None and (everything or before is not None or limited):
        raise click.UsageError("-n, --all and --before choose root threads' trees: give them without THREAD")
    if everything and before is not None:
        raise click.UsageError("--all shows every tree: give it without --before")
    if thread is not None:
        root = store.thread(thread).root_id
        try:
            threads = store.subtree(root)
        except ThreadNotFound:  # the row names a root that is not in the file
            raise StoreError(f"thread {thread!r} names {root!r} as its root, which is not in the file: its row was altered "
                             "outside threadlog (`threadlog verify` names where)") from None
    elif everything:
        threads = store.all_threads()
    else:  # a page of an index, however many threads the file holds
        roots = store.threads(_one_more(limit), before, forks=False)
        roots, more = roots[:limit], len(roots) > limit
        threads = [t for root in roots for t in store.subtree(root.id)]
        next_page = roots[-1].last_position if more else None
        if not threads and before is None:
            _check_rootless(store)
    titles = store.titles(threads)
    if as_json:
        _emit_json([{**t.to_json(), "title": titles[t.id]} for t in threads])
        return
    output.lines(tree_lines(threads, titles), pager=not no_pager)
    if next_page is not None:
        click.echo(f"(next page: the same command with --before {next_page})", err=True)


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=click.IntRange(min=1),
              help="Replay: the state after the first N events, thread.created being the first (default: all).")
@click.option("--last", type=click.IntRange(min=1), help="Show only the last N messages of the model view.")
@json_option
@pager_option
@with_store()
def show(store: Store, thread: str, at: int | None, last: int | None, as_json: bool, no_pager: bool) -> None:
    """THREAD's state: model, system prompt, status, metadata, todos, interrupts and the model's view of its messages."""
    _check_range(store, thread, "--at", at, low=1)
    state = thread_state(store, thread, at)
    if as_json:
        _emit_json(state.to_json())
    else:
        lines = list(state_lines(state, last))  # every message read first: one unreadable printed half the state
        output.lines(lines, pager=not no_pager)


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=click.IntRange(min=0), help="The rows as of the first N events (default: all).")
@json_option
@pager_option
@with_store()
def rows(store: Store, thread: str, at: int | None, as_json: bool, no_pager: bool) -> None:
    """The rows a chat UI shows for THREAD, each with a stable id to upsert."""
    _check_range(store, thread, "--at", at)
    result = display_rows(store, thread, at)
    if as_json:
        _emit_json([row.to_json() for row in result])
    else:
        output.lines((row_line(row) for row in result), pager=not no_pager)


@cli.command("transcript")
@click.argument("thread", type=THREAD)
@click.option("-o", "--output", "output_path", type=FilePath(),
              help="Write it to FILE atomically instead of printing it (-: print it).")
@click.option("--max-bytes", type=click.IntRange(min=2048), default=512 * 1024, show_default=True,
              help="Bound on the whole transcript, in UTF-8 bytes.")
@click.option("--max-message-bytes", type=click.IntRange(min=256), default=16 * 1024, show_default=True,
              help="Bound on each message (head and tail are kept).")
@click.option("--last", type=click.IntRange(min=1), help="Keep only the N most recent messages.")
@click.option("--start", type=click.IntRange(min=0), default=0, help="First offset.")
@click.option("--stop", type=click.IntRange(min=0), help="Offset to stop before (e.g. a fork point).")
@json_option
@pager_option
@with_store()
def transcript_command(store: Store, thread: str, output_path: str | None, max_bytes: int, max_message_bytes: int, last: int | None,
                       start: int, stop: int | None, as_json: bool, no_pager: bool) -> None:
    """THREAD as bounded Markdown: ## user / ## assistant, one line per tool call, no tool output."""
    _check_range(store, thread, "--start", start)
    _check_range(store, thread, "--stop", stop)
    options: dict[str, Any] = {"max_bytes": max_bytes, "max_message_bytes": max_message_bytes, "last": last, "start": start, "stop": stop}
    if output_path and output_path != "-":
        written = write_transcript(store, thread, output_path, **options)
        if as_json:
            _emit_json({"thread": thread, "path": str(written)})
        elif special_file(output_path) is None:  # a path printed after `-o /dev/stdout` would end the transcript
            output.lines([output_path])
        return
    text = transcript(store, thread, **options)
    if as_json:
        _emit_json({"thread": thread, "transcript": text})
    else:
        output.text(text, pager=not no_pager)


@cli.command("blame")
@click.argument("thread", type=THREAD)
@json_option
@pager_option
@with_store()
def blame_command(store: Store, thread: str, as_json: bool, no_pager: bool) -> None:
    """Where each message of THREAD's model view came from: stream, offset, position, time, actor, origin."""
    entries = iter_blame(store, thread)  # streamed: a long thread's blame is printed in bounded memory
    if as_json:
        _emit_json_array(entry.to_json() for entry in entries)
    else:
        output.lines((blame_line(entry) for entry in entries), pager=not no_pager)


@cli.command("diff")
@click.argument("a", type=THREAD)
@click.argument("b", type=THREAD)
@json_option
@pager_option
@with_store()
def diff_command(store: Store, a: str, b: str, as_json: bool, no_pager: bool) -> None:
    """Compare threads A and B: their common history, then each side's own messages."""
    result = diff(store, a, b)
    if as_json:
        _emit_json(result.to_json())
    else:
        output.lines(diff_lines(result), pager=not no_pager)


@cli.command()
@click.argument("thread", type=THREAD, required=False)
@click.option("--drop", is_flag=True, help="Forget cached snapshots instead: THREAD's own, or every one (answers do not change).")
@json_option
@with_store("write")
def snapshot(store: Store, thread: str | None, drop: bool, as_json: bool) -> None:
    """Cache THREAD's state so later reads of it and its forks resume there (a cache, never truth)."""
    if drop:
        dropped = drop_snapshots(store, thread=thread)
        _committed(f"dropped {dropped} snapshot(s)")
        if as_json:
            _emit_json({"dropped": dropped, "thread": thread})
        else:
            output.lines([f"dropped {dropped} snapshot(s)"])
        return
    if thread is None:
        raise click.UsageError("give a THREAD, or --drop")
    offset = save_snapshot(store, thread)
    _committed(f"snapshot of {thread} at offset {offset}")
    if as_json:
        _emit_json({"thread": thread, "offset": offset})
    else:
        output.lines([f"snapshot of {thread} at offset {offset}"])


@cli.command()
@click.option("--checkpoint", "checkpoint", metavar="C",
              help="Also prove the log still holds, unchanged, everything checkpoint C (from `threadlog checkpoint`) covered.")
@click.option("--since", "since", metavar="C",
              help="Check only the events appended after checkpoint C, and print the checkpoint extended over them.")
@json_option
@_failed_check_as_json
@with_store()
def verify(store: Store, checkpoint: str | None, since: str | None, as_json: bool) -> None:
    """Recompute every hash chain and stored column; exit 0 when all hold, 1 naming the first bad position.

    With --checkpoint, a deleted thread, a cut tail or any rewritten event the checkpoint
    covered fails too, however consistently it was re-chained. With --since, only what was
    appended after checkpoint C is checked (quick on a large file; what C covers is not read
    again, but for its last event, which must be the one C names: a checkpoint of another
    file is refused; `verify --checkpoint C` proves all of it), and the checkpoint covering the whole log now
    is printed: keep it for next time. With --json the report is printed either way: `ok`,
    and on failure `position` and `error`. A file of 300,000 events or more is checked in
    two processes at once (a second Python process reads the later half); a problem found
    that way is checked again in one, which names it.
    """
    if since is not None and checkpoint is not None:
        raise click.UsageError("give --checkpoint or --since, not both")
    try:
        if sys.stderr.isatty() and since is None:
            with click.progressbar(length=store.counts().events, label="verifying", file=sys.stderr) as bar:
                report = store.verify(progress=lambda done, total: bar.update(done - bar.pos), checkpoint=checkpoint)
        else:
            report = store.verify(checkpoint=checkpoint, since=since)
    except IntegrityError as error:
        if not as_json:
            raise
        _failed_check(error.position, error.why, checkpoint, since)
    if as_json:
        _emit_json({**report.to_json(), **({"since": since} if since is not None else {})})
        return
    if since is not None:
        output.lines([f"ok: {counted(report.events, 'event')} appended since the checkpoint verified, in "
                      f"{counted(report.streams, 'thread')} "
                      f"({report.redacted} redacted)",
                      f"checkpoint: {report.checkpoint}"])
        return
    output.lines([f"ok: {counted(report.events, 'event')} in {counted(report.streams, 'thread')} verified "
                  f"({report.redacted} redacted)"])
    if report.checkpoint is not None:
        output.lines([f"ok: the log still holds everything checkpoint {report.checkpoint} covered"])


@cli.command("checkpoint")
@json_option
@with_store()
def checkpoint_command(store: Store, as_json: bool) -> None:
    """Print one string covering every event in the log now; keep it elsewhere.

    `threadlog verify --checkpoint C` later proves nothing it covers was removed, added or
    changed: the one check a writer of the file cannot forge.
    """
    bar, update = _progress("reading every hash")  # seconds at millions of events
    if bar is None:
        value = store.checkpoint()
    else:
        with bar:
            value = store.checkpoint(progress=update)
    if as_json:
        _emit_json({"checkpoint": value})
    else:
        click.echo(value)


@cli.command()
@click.argument("position", type=click.IntRange(min=1))
@click.option("--reason", required=True, callback=_stated("say why the payload is erased"),
              help="Why the payload is erased (recorded in the log).")
@click.option("--actor", required=True, callback=_stated("name who erases it"), help="Who erases it (recorded in the log).")
@json_option
@with_store("write")
def redact(store: Store, position: int, reason: str, actor: str, as_json: bool) -> None:
    """Erase the payload of the event at POSITION, keeping the chain and recording who and why.

    No copy stays in the file: snapshots are dropped, freed pages zeroed, the WAL truncated.
    Transcript files written for note forks (`fork --context note --transcript`) are outside
    the file: those written from a history holding the event are listed, to rewrite or delete.
    """
    try:
        record = store.redact(position, reason=reason, actor=actor)
    except OldPagesKept as error:  # committed (exit 3): the transcripts to rewrite are named all the same
        for note in transcripts_holding(store, position):
            error.add_note(f"note fork {note.fork}'s transcript {note.path} was written with the erased text: rewrite or "
                           "delete it")
        raise
    _committed(f"redacted position {position}, recorded at position {record.position}",
               f"threadlog log {record.stream_id} --start {record.offset}")
    stale = transcripts_holding(store, position)
    if as_json:
        _emit_json({**record.to_json(), "transcripts_holding": [note._asdict() for note in stale]})
        return
    output.lines([f"redacted position {position}; recorded at position {record.position}"])
    output.lines(f"note fork {note.fork}'s transcript {note.path} was written with the erased text: rewrite it "
                 f"(threadlog transcript {note.parent} --stop {note.at} -o {shlex.quote(note.path)}) or delete it"
                 for note in stale)


@cli.command()
@json_option
@with_store("write")
def purge(store: Store, as_json: bool) -> None:
    """Finish a redaction a reader held up: leave no old page in the write-ahead log.

    `redact` does this itself; when another connection was reading at that moment, the log
    still held the erased payload's old pages and `redact` said so. Run this once the
    readers are done (PostgreSQL: vacuums the rewritten tables)."""
    try:
        store.purge()
    except OldPagesKept:  # its own job, not a write kept: nothing is committed by a purge
        _fail("another connection is reading (or writing), so the write-ahead log still holds old pages; run "
              "`threadlog purge` again once it is done")
    _committed("purged the old copies of erased payloads")
    if as_json:
        _emit_json({"purged": True})
    else:
        output.lines(["purged: no old copy of an erased payload is left"])


@cli.command()
@click.option("--thread", "thread", type=THREAD, help="Only THREAD's events.")
@click.option("--forks", is_flag=True, help="With --thread: its forks' events too (forks made while following included).")
@click.option("--after", type=click.IntRange(min=0), help="Start after this position (default: the log's end now).")
@click.option("--interval", type=Seconds(least=0.01), default=0.25, show_default=True, help="Seconds between polls.")
@json_option
@with_store()
def follow(store: Store, thread: str | None, forks: bool, after: int | None, interval: float, as_json: bool) -> None:
    """Print events as they are committed, like tail -f (Ctrl-C stops, status 130). --json: JSON lines."""
    if forks and thread is None:
        raise click.UsageError("--forks follows a thread's forks: name the thread with --thread")
    position = store.last_position() if after is None else after
    wanted: set[str] | None = None
    if thread is not None:  # with --forks, the forks there are already (later ones join as their thread.forked goes by)
        wanted = {info.id for info in store.subtree(thread)} if forks else {thread}
    reading = store
    try:
        while True:
            try:
                for event in reading.read_all(after=position):
                    position = event.position
                    if wanted is not None and forks and event.type == "thread.forked" and event.data["parent_id"] in wanted:
                        wanted.add(event.stream_id)
                    if wanted is not None and event.stream_id not in wanted:
                        continue
                    if as_json:
                        click.echo(_json(event.to_json()))
                    else:
                        output.lines([event_line(event)])
                    sys.stdout.flush()
            except Disconnected as lost:
                if reading is not store:
                    reading.close()
                reading = _reconnected(_db_path(), lost, position, interval)
            time.sleep(interval)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        if reading is not store:
            reading.close()


def _reconnected(path: str, lost: Disconnected, position: int, interval: float) -> Store:
    """A new read-only store on the server `follow` lost (restarted, or the network down): tried
    again every second or `interval`, whichever is longer, until the server answers, as `tail -F`
    follows a file that comes back. A refusal other than no answer (the store dropped, the
    role's grants revoked) ends `follow` with its message."""
    click.echo(f"note: {_cli_words(str(lost))}\nnote: following on after position {position} once the server answers "
               "again (Ctrl-C stops)", err=True)
    while True:
        time.sleep(max(interval, 1.0))
        try:
            again = Store(path, read_only=True)
        except Disconnected:
            continue
        click.echo(f"reconnected to {safe(again.path)}", err=True)
        return again


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the demo's thread ids as JSON.")
@with_store("create")
def demo(store: Store, as_json: bool) -> None:
    """Build a sample conversation (tool call, interrupt, fork, sub-agents) and explain it."""
    ids, built = build_demo(store)
    if built:
        _committed(f"built the demo: thread {ids['thread']} and its forks", f"threadlog tree {ids['thread']}")
    if as_json:
        _emit_json({**ids, "created": built})
        return
    output.lines(demo_lines(store, ids, built))
    parent = str(ids["thread"])
    name = f"{parent}.transcript.md"  # beside the database file; a server's database: here
    path = Path.cwd() / name if is_url(store.path) else Path(store.path).resolve().with_name(name)
    write_transcript(store, parent, path)
    output.lines([f"The whole conversation as bounded Markdown (what a model can be pointed at): {path}"])


# -- import and export: other tools' histories in, backups out --------------------------------

def _progress(total_label: str) -> Any:
    """A progress bar on stderr when it is a terminal, else nothing."""
    if not sys.stderr.isatty():
        return None, None
    bar = click.progressbar(length=1, label=total_label, file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.length = total
        bar.update(done - bar.pos)

    return bar, update


def _summary_lines(summary: ImportSummary) -> list[str]:
    lines = [
        f"{summary.files} file(s): {summary.threads} thread(s), {summary.forks} fork(s), {summary.subagents} sub-agent fork(s)",
        f"{summary.prompts} prompt(s), {summary.assistant_messages} assistant message(s), {summary.tool_calls} tool call(s), "
        f"{summary.compactions} compaction(s)" + (f", {summary.failed_turns} failed turn(s)" if summary.failed_turns else ""),
        f"{summary.added} event(s) added of {summary.events}",
    ]
    skipped = summary.kinds()
    if skipped:
        lines.append("lines without conversation: " + ", ".join(f"{kind} {n}" for kind, n in skipped))
    lines.extend(f"skipped {file}:{line}: {why}" for file, line, why in summary.bad)
    if summary.waiting:
        lines.append(f"still being written, left for a later import: {summary.waiting} (a half-written last line or "
                     "trajectory, a pi header whose model is not written yet, "
                     "a last response or a sub-agent's file the session does not show complete yet, or a "
                     "response waiting on a tool call)")
        lines.extend(f"  {file}" for file in summary.waiting_files)
    if summary.changed:
        file, line = summary.changed_lines[0]
        lines.append(f"changed since imported: {summary.changed} event(s) the source now gives otherwise, first at "
                     f"{file}:{line}, kept as stored (the log is never rewritten; import the file into another database "
                     "to keep both)")
    return lines


def _print_summary(summary: ImportSummary, as_json: bool) -> None:
    """Print what an import did; then, when --skip-bad skipped all that its files held (and none
    waits to be written), fail (exit 1): exit 0 said that an import of nothing had worked, and
    a file that was no session went unnoticed in a script."""
    if summary.added:
        _committed(f"imported {summary.added} event(s) from {summary.files} file(s)", "threadlog ls")
    if as_json:
        _emit_json(summary.to_json())
    else:
        output.lines(_summary_lines(summary))
    if summary.bad and not summary.events and not summary.waiting:
        files = list(dict.fromkeys(file for file, _, _ in summary.bad))
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more file(s)" if len(files) > 3 else "")
        raise StoreError(f"nothing was imported: --skip-bad skipped all that {shown} held ({len(summary.bad)} skipped, "
                         "each named in the summary)")


@cli.group("import")
@db_option
def import_group(db: str | None) -> None:
    """Import histories: Claude Code and pi sessions, SWE-agent trajectories, or threadlog's own exports (events)."""
    _pass_db(db)


def _check_sessions_found(paths: list[str], tool: str, given: bool, pattern: str = "*.jsonl", noun: str = "session") -> None:
    """Refuse an import from a directory that holds no session file at all (none matching
    `pattern` in or below it): it imported `0 file(s)` and exited 0, so a mistyped directory
    looked like success, and beside another directory it went unnoticed. Directories whose
    sessions were all imported before still import (adding nothing); `--follow` waits for
    sessions to come and is not refused."""
    empty = [path for path in dict.fromkeys(paths)  # a file named is imported (or refused) itself
             if os.path.isdir(path) and not files_below(Path(path), pattern)]  # as the importers search
    if not empty:
        return
    holds = "holds" if len(empty) == 1 else "hold"
    message = (f"{', '.join(empty)} {holds} no {tool} {noun} file ({pattern}, searched recursively): nothing to import from "
               f"{'it' if len(empty) == 1 else 'them'}; name the directory (or files) holding them")
    if given:
        raise click.BadParameter(message, param_hint="PATHS")
    raise click.UsageError(message + " as PATHS")


def _refused_while_following(noun: str, session: Any, error: StoreError) -> None:
    """Say on stderr that a session (or with `session` None, a path searched) was refused, and
    that the other `noun` (sessions, SWE-agent's trajectories) are still followed."""
    reason = _cli_words("; ".join([str(error), *getattr(error, "__notes__", ())]))
    again = "this one is read again when it changes" if session is not None else "it is searched again at each poll"
    click.echo(safe(f"refused: {reason}; the other {noun} are still followed, and {again}"), err=True)


def _locked_while_following(noun: str, error: Locked) -> None:
    """Say on stderr that another writer holds the database (a long import, a `redact`, a
    `purge`), and that the follower goes on: the `noun` it was importing wait for the lock."""
    click.echo(safe(f"waiting: the database {error.path} is locked by another writer ({error.why}); the {noun} it holds "
                    "up are imported once it is free, tried again at each poll"), err=True)


def _lost_while_following(noun: str, error: Disconnected) -> None:
    """Say on stderr that the PostgreSQL server went away (a restart), and that the follower
    goes on: the `noun` it was importing wait until the server answers again."""
    click.echo(safe(f"waiting: {error}; the {noun} are imported once the server answers again, tried at each poll"),
               err=True)


def follow_options(writes: str) -> Callable[[F], F]:
    """`--follow` and `--interval` for an import of sessions that `writes` (a tool's sessions,
    as it writes them) while the import runs. `--interval` without `--follow` is refused before
    the database is opened: the import, run once, would have ignored it without a word."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            given = click.get_current_context().get_parameter_source("interval") != click.core.ParameterSource.DEFAULT
            if given and not kwargs.get("follow"):
                raise click.UsageError("--interval sets how often --follow polls: give --follow too, or leave --interval out")
            return func(*args, **kwargs)

        command = click.option("--interval", type=Seconds(least=0.05), default=0.5, show_default=True,
                               help="With --follow: seconds between polls.")(cast(F, checked))
        return click.option("--follow", is_flag=True, help=f"Keep running and mirror the {writes} (Ctrl-C stops). One "
                            "follower of a format runs into a database at a time.")(command)

    return decorate


# How often a follower waiting for its next poll looks whether a signal asked it to stop.
_STOP_CHECK = 0.05


def _follow(run: Callable[..., ImportSummary], as_json: bool, noun: str) -> None:
    """Run a follower (`follow_claude_code`, `follow_files`, given all but its callbacks) of
    `noun` (what the tool's files are called) until Ctrl-C, SIGTERM or SIGHUP, printing each
    poll that added events or skipped a bad line (--skip-bad; each named once, as one import
    names it), each refusal, and once, the database locked by another writer
    past --timeout, or a PostgreSQL server gone away: the follower goes on, and imports what
    waited once it is free, or back (it exited).

    A signal stops it once the poll under way is written, so a session is not left part
    imported (within `_STOP_CHECK` seconds when it waits, whatever --interval is; when the
    signal comes while it waits for another writer's lock, as that wait ends); a second one
    stops it at once, what is being written rolled back. It then says how many events it
    imported in all (Ctrl-C said only `stopped`) and exits as a shell reports the signal that
    stopped it, but 0 for Ctrl-C, its usual way out (and SIGTERM exited 0 too, a service
    manager unable to tell a stop it asked for from one that went wrong)."""
    added = 0
    signals: list[int] = []

    def report(summary: ImportSummary) -> None:
        nonlocal added
        added += summary.added
        if summary.added:
            _committed(f"the {noun} imported so far (the last import added "
                       f"{summary.added} event(s) from {summary.files} file(s))", "threadlog ls")
        if as_json:
            click.echo(json.dumps(summary.to_json()))
            return
        click.echo(f"+{summary.added} event(s) ({summary.files} file(s))")
        for file, line, why in summary.bad:  # each once, at the poll that first skipped it
            click.echo(f"skipped {file}:{line}: {why}")

    def asked(signum: int, frame: Any) -> None:
        if signals:  # asked again: stop now
            raise KeyboardInterrupt if signum == signal.SIGINT else _Stopped(signum)
        signals.append(signum)

    def pause(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not signals and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, _STOP_CHECK))

    try:
        with handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), asked):
            run(on_import=report, on_refused=functools.partial(_refused_while_following, noun),
                on_locked=functools.partial(_locked_while_following, noun), stop=lambda: bool(signals), pause=pause,
                on_lost=functools.partial(_lost_while_following, noun))
    except KeyboardInterrupt:
        pass  # the second signal (the first is in `signals`)
    except Claimed:  # another follower of the format runs: refused before anything was read
        raise
    except StoreError as error:  # the database itself (a full disk): what was imported before stays
        error.add_note(f"{added} event(s) were imported before it, and are kept")
        raise
    click.echo(f"stopped: {added} event(s) imported in all", err=True)
    if signals and signals[0] != signal.SIGINT:
        sys.exit(128 + signals[0])


@import_group.command("claude-code")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (reported) instead of refusing the import.")
@follow_options("sessions as Claude Code writes them")
@json_option
@with_store("create")
def import_claude_code_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float, as_json: bool) -> None:
    """Import Claude Code sessions from PATHS (files, or directories searched recursively;
    default ~/.claude/projects). Re-importing adds nothing; a grown file adds its new lines.
    A session changed in the last 10 minutes may still be written: what it does not show
    complete yet (a last response, a running sub-agent) is left for a later import. A content
    block of a type the anthropic SDK does not know (a newer release's) is left out and counted
    as block/<type>, the rest of its line imported; a malformed line refuses the import, naming
    it, with nothing written (--skip-bad skips it instead).
    A directory holding no session file (*.jsonl) at all is refused (exit 2), except with
    --follow, which waits for sessions to come."""
    sources = list(paths) or [str(Path.home() / ".claude" / "projects")]
    if not paths and not os.path.exists(sources[0]):  # (PATHS given are checked by click)
        raise click.UsageError(f"no PATHS given, and {sources[0]}, where Claude Code keeps its sessions, does not exist: "
                               "name the session files or directories to import")
    if not follow:
        _check_sessions_found(sources, "Claude Code", given=bool(paths))
    if follow:
        _follow(functools.partial(follow_claude_code, store, sources, interval=interval, skip_bad=skip_bad), as_json, "sessions")
        return
    bar, update = _progress("importing")
    if bar is None:
        summary = import_claude_code(store, sources, skip_bad=skip_bad, live_within=LIVE_SECONDS)
    else:
        with bar:
            summary = import_claude_code(store, sources, skip_bad=skip_bad, progress=update, live_within=LIVE_SECONDS)
    _print_summary(summary, as_json)


@import_group.command("events")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@json_option
@with_store("create")
def import_events_command(store: Store, paths: tuple[str, ...], as_json: bool) -> None:
    """Restore files written by `threadlog export --format events` (or `export --all`), with
    identical ids, times and hashes, in one transaction: if any line of any file is refused
    (a hash that differs, a malformed line), nothing is written. Restoring twice adds nothing."""
    reports = list(zip(paths, import_event_files(store, paths)))
    if any(report.added or report.erased for _, report in reports):
        _committed(f"restored {sum(report.added for _, report in reports)} event(s) from {len(reports)} file(s)", "threadlog ls")
    if as_json:
        _emit_json([{"file": path, **report.to_json()} for path, report in reports])
        return
    def line(path: str, report: RestoreReport) -> str:
        said = f"{path}: {report.added} event(s) added, {report.present} already present, {report.streams} thread(s) created"
        if report.erased:
            said += f", {report.erased} stored event(s) erased as the export holds them redacted"
        if not report.added:  # nothing was written: no positions were kept or renumbered
            return said
        return f"{said} ({'positions kept' if report.positions_kept else 'positions renumbered'})"

    output.lines(line(path, report) for path, report in reports)


@import_group.command("pi")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (reported) instead of refusing the import.")
@follow_options("session files as pi writes them")
@json_option
@with_store("create")
def import_pi_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float, as_json: bool) -> None:
    """Import pi coding agent session files from PATHS (files, or directories searched recursively).

    A file changed in the last 10 minutes may be written as it is read: a half-written last line
    is left for a later import, and so is a header alone that names no model (pi 2 and later
    write the model change next). A directory holding no session file (*.jsonl) at all is refused (exit 2),
    except with --follow, which keeps running, imports each file again as pi appends to it
    (a half-written last line waits for the next poll), and waits for sessions to come."""
    if follow:
        _follow(functools.partial(follow_files, store, "pi", list(paths), interval=interval, skip_bad=skip_bad), as_json,
                "sessions")
        return
    _check_sessions_found(list(paths), "pi", given=True)
    _print_summary(import_pi(store, list(paths), skip_bad=skip_bad), as_json)


@import_group.command("swe-agent")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip a file that cannot be imported (reported) instead of refusing the import.")
@follow_options("trajectories as SWE-agent rewrites them")
@json_option
@with_store("create")
def import_swe_agent_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float,
                             as_json: bool) -> None:
    """Import SWE-agent trajectory files (.traj) from PATHS (files, or directories searched recursively).

    One thread per file, from its `history`: the first system message is the thread's system
    prompt, tool calls are tool_use blocks (arguments that are not a JSON object are kept as
    {"arguments": TEXT}), a run of tool messages is one user message of tool_result blocks, an
    observation's image_url parts are images (a data: URL its data, an http(s) one its address),
    and a plain-text action stays text. The thread's model is the one replay_config names;
    without one, `threadlog request` and `ask` need --model. The same file (by its absolute
    path: a copy elsewhere is a thread of its own) imported again adds nothing; one a later step
    grew adds its new messages. A file that cannot be read, is not a trajectory, or holds an entry that
    cannot be imported, is refused by name, with nothing written (with --skip-bad it is left out whole,
    named, and the others imported); one empty or cut short that changed in the last 10 minutes
    is being written again by SWE-agent, and is left for a later import.
    Replay demos (.yaml) are not trajectories and are not imported.
    A directory holding no trajectory file (*.traj) at all is refused (exit 2), except with
    --follow, which keeps running, imports each trajectory again as SWE-agent rewrites it after
    each step (one read cut short waits for the next poll), and waits for trajectories to come."""
    if follow:
        _follow(functools.partial(follow_files, store, "swe-agent", list(paths), interval=interval, skip_bad=skip_bad), as_json,
                swe_agent.NOUN)
        return
    _check_sessions_found(list(paths), "SWE-agent", given=True, pattern="*.traj", noun="trajectory")
    _print_summary(import_swe_agent(store, list(paths), skip_bad=skip_bad), as_json)


@cli.command("export")
@click.argument("thread", type=THREAD, required=False)
@click.option("--format", "format_", type=click.Choice(["events", "markdown", "anthropic"]), default="events", show_default=True,
              help="events: JSON lines that `import events` restores with identical hashes; markdown: the full, "
                   "unbounded transcript; anthropic: the Messages API request (as `request` prints it).")
@click.option("--all", "everything", is_flag=True, help="Every thread and event in the file (a backup), as events.")
@click.option("--model", callback=_model_name, help="With --format anthropic: the model to name (default: the thread's).")
@click.option("-o", "--output", type=FilePath(),
              help="Write to FILE (atomically: a failed export leaves the old file) instead of stdout (-: stdout).")
@with_store()
def export_command(store: Store, thread: str | None, format_: str, everything: bool, model: str | None, output: str | None) -> None:
    """Write THREAD (with its ancestors' history) or, with --all, the whole log."""
    if everything == (thread is not None):
        raise click.UsageError("give a THREAD or --all (one of them)")
    if everything and format_ != "events":
        raise click.UsageError("--all writes events only")
    if model is not None and format_ != "anthropic":
        raise click.UsageError("--model names the model of --format anthropic only")
    chunks: Iterable[str]
    if format_ == "markdown":
        chunks = [export_markdown(store, str(thread))]
    elif format_ == "anthropic":
        chunks = [json.dumps(anthropic_request(store, str(thread), model=model), ensure_ascii=False, indent=2) + "\n"]
    else:
        chunks = dump_lines(export_all(store) if everything else export_events(store, str(thread)))
    if output is None or output == "-":
        for chunk in chunks:
            # Text UTF-8 cannot hold (raw SQL stored it) refused, as a file's write refuses it: shown
            # escaped, it made a backup that looked whole and that no restore takes.
            chunk.encode("utf-8")
            click.echo(safe_block(chunk) if format_ == "markdown" else safe_json(chunk), nl=False)
        return
    write_atomically(output, (chunk.encode("utf-8") for chunk in chunks), "the export", keep=store.files)
    if special_file(output) is None:  # a path printed after `-o /dev/stdout` would end the export
        click.echo(safe(output))


# -- the Anthropic API: requests, live turns, re-runs, usage ------------------------------------


def api_options(func: F) -> F:
    """`--api-timeout` and `--api-retries`: the anthropic client's own settings (`_client`)."""
    func = click.option("--api-retries", type=click.IntRange(min=0, max=100), default=None,
                        help="How many times the client retries a request that failed to connect, timed out, or was "
                             "answered 408, 409, 429 or 5xx, waiting longer each time [default: the anthropic SDK's, 2].")(func)
    return click.option("--api-timeout", type=Seconds(least=0.01), default=None,
                        help="Seconds to wait for the API, for each response (or, streaming, between its pieces) "
                             "before the try fails [default: the anthropic SDK's, 600].")(func)


def _client(timeout: float | None = None, retries: int | None = None) -> Any:
    """An `anthropic.Anthropic` client from ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL when set),
    with the SDK's timeout and retries unless `api_options` gave others."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        _fail("ANTHROPIC_API_KEY is not set; export your API key (https://console.anthropic.com) and try again")
    import anthropic  # seconds to import: only the commands that talk to the API pay for it
    import httpx2  # the SDK's HTTP client

    base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
    try:
        settings: dict[str, Any] = {}
        if timeout is not None:
            settings["timeout"] = timeout
        if retries is not None:
            settings["max_retries"] = retries
        return anthropic.Anthropic(api_key=key, base_url=base_url, **settings)
    except httpx2.InvalidURL as error:
        _fail(f"ANTHROPIC_BASE_URL {base_url!r} is not a URL the client can use: {error}")


@cli.command("request")
@click.argument("thread", type=THREAD)
@click.option("--at", type=click.IntRange(min=0),
              help="The request as of the first N events, thread.created being the first; they must hold a message "
                   "(default: all).")
@click.option("--check", is_flag=True,
              help="Prove the recorded request digest(s): of the message at offset N with --at, else of every live message.")
@click.option("--model", callback=_model_name, help="The model to name (default: the thread's).")
@click.option("--no-cache", is_flag=True, help="Leave out the cache_control breakpoints.")
@json_option
@with_store("search")  # a note fork's retrieval reads the search index, brought up to date when the file may be written
def request_command(store: Store, thread: str, at: int | None, check: bool, model: str | None, no_cache: bool, as_json: bool) -> None:
    """THREAD as the keyword arguments of client.messages.create, as JSON; --check says whether
    each recorded request still rebuilds byte for byte (exit 1 when one does not)."""
    if check:  # an offset of a message: 0..head - 1 (without --check, the library names the points a request takes)
        _check_range(store, thread, "--at", at, offset=True)
    else:
        from .note_fork import is_note_fork
        from .note_tools import extra_tools, transcript_tools

        if at is not None:  # before the state as of `at` is read, which names the range a replay takes
            check_request_point(store, thread, at)
        # A note fork's requests offer the tools that read its parent's transcript, as `ask` sends them.
        tools = extra_tools(thread_state(store, thread, at).tools, transcript_tools(store, thread)) \
            if is_note_fork(store, thread) else None
        kwargs = anthropic_request(store, thread, at, cache=not no_cache, model=model, extra_tools=tools)
        click.echo(_json(kwargs, indent=None if as_json else 2))
        return
    offsets = [at] if at is not None else checkable_offsets(store, thread)
    if not offsets:
        _fail(f"no message of {thread} was recorded by a live turn; there is no request digest to check")
    checks = [check_request(store, thread, offset) for offset in offsets]
    if as_json:
        _emit_json([c.to_json() for c in checks])
    else:
        output.lines(check_line(c) for c in checks)
    if not all(c.ok for c in checks):
        sys.exit(1)


class _Echo:
    """`ask --stream`'s printer: a stdout that fails mid-answer (a full disk, a closed pipe)
    stops the printing, not the turn, whose answer is recorded; the failure is raised then."""

    def __init__(self) -> None:
        self.failed: OSError | None = None

    def __call__(self, piece: str) -> None:
        if self.failed is None:
            try:
                # A lone surrogate (no UTF-8 can write it) shown as its escape: its UnicodeEncodeError
                # ended the turn, reported as a stored event of the wrong shape.
                click.echo(safe_block(piece).encode("utf-8", "backslashreplace").decode("utf-8"), nl=False)
            except OSError as error:
                self.failed = error


@cli.command()
@click.argument("thread", type=THREAD)
@click.argument("text", required=False)
@click.option("--model", callback=_model_name, help="The model to ask (default: the thread's).")
@click.option("--stream", is_flag=True, help="Stream the answer as it is written.")
@click.option("--max-tokens", type=click.IntRange(min=1),
              help="The answer's token limit, more than the thread's thinking budget if it has one, unless "
                   "ANTHROPIC_CUSTOM_HEADERS sends the interleaved-thinking beta [default: 4096, plus the budget].")
@api_options
@json_option
@with_store("write")
def ask(store: Store, thread: str, text: str | None, model: str | None, stream: bool, max_tokens: int | None,
        api_timeout: float | None, api_retries: int | None, as_json: bool) -> None:
    """Send TEXT on THREAD to the Anthropic API and record the turn (ANTHROPIC_API_KEY;
    ANTHROPIC_BASE_URL and ANTHROPIC_CUSTOM_HEADERS as the anthropic SDK reads them).

    Without TEXT, ask again: a failed turn keeps the question (exit 3), so a retry sends no
    second copy. An answer with no text (the model refused) is recorded, and stderr names its
    stop reason: exit 3, so a script does not take the empty output for the answer. On a note
    fork the model is offered `read_transcript` and `grep_transcript`, which read the parent's
    history below the fork point, as its note tells it to."""
    from .live import run_turn
    from .note_fork import is_note_fork
    from .note_tools import transcript_tools

    if text is not None and not text.strip():
        raise click.BadParameter("is empty: give the question, or leave TEXT out to ask again", param_hint="TEXT")
    echo = _Echo() if stream and not as_json else None
    # A note fork's model is told to read its parent's transcript: with no tool it could not.
    tools = transcript_tools(store, thread) if is_note_fork(store, thread) else None
    with _client(api_timeout, api_retries) as client, waking():  # closed: its socket is not left to the collector
        turn = run_turn(store, thread, text, client, model=model, tools=tools, stream=stream, max_tokens=max_tokens,
                        on_text=echo)
    _committed(f"the turn on thread {thread} (run {turn.run_id}, {turn.status})", f"threadlog show {thread} --last 2")
    if echo is not None and echo.failed is not None:
        raise echo.failed
    if as_json:
        _emit_json(turn.to_json())
    elif echo is None and turn.text:
        output.text(turn.text)
    elif echo is not None:
        click.echo()
    if turn.status == "error":  # committed (the question, the run): exit 3, not 1, or a script's retry asks twice
        _fail(f"{turn.error or 'the turn failed'} (the question is kept: `threadlog ask {thread}` with no TEXT asks again)",
              EXIT_UNPRINTED)
    if turn.status == "ok" and not turn.text.strip():  # a blank line and exit 0 read as an answer
        _fail(_no_text(turn), EXIT_UNPRINTED)


def _no_text(turn: Turn) -> str:
    """Why `ask` printed no answer: the last answer's stop reason, and the refusal's category
    and explanation when the API gave them (`stop_details`)."""
    answer = turn.messages[-1].data if turn.messages else {}
    details = answer.get("stop_details")
    said = [str(details[key]) for key in ("category", "explanation") if isinstance(details, dict) and details.get(key)]
    why = f" ({': '.join(said)})" if said else ""
    return (f"the answer has no text: the model stopped with stop_reason {answer.get('stop_reason')!r}{why}; "
            f"the turn is recorded (`threadlog show {turn.thread} --last 2` shows it)")


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=int, required=True,
              help="Fork point: the first N events are kept (they must hold a message; thread.created is event 1); "
                   "the user messages after them are replayed.")
@click.option("--model", callback=_model_name, required=True, help="The model to replay the later user messages with.")
@click.option("--stream", is_flag=True, help="Use the streaming API.")
@api_options
@json_option
@with_store("write")
def rerun(store: Store, thread: str, at: int, model: str, stream: bool, api_timeout: float | None, api_retries: int | None,
          as_json: bool) -> None:
    """Fork THREAD at N and replay its later user messages with MODEL; prints the fork's id,
    alone (then: threadlog diff THREAD FORK)."""
    from .live import rerun as replay

    store.check_fork_point(thread, at, doing="rerun")  # what the store can say, before the key only the API needs
    with _client(api_timeout, api_retries) as client, waking():
        fork_id = replay(store, thread, at, client, model=model, stream=stream)
    _committed(f"created fork {fork_id} of thread {thread}, replayed with {model}", f"threadlog diff {thread} {fork_id}")
    if as_json:
        _emit_json(store.thread(fork_id).to_json())
    else:
        click.echo(fork_id)
    info = store.thread(fork_id)
    runs = [e.data for e in store.read(fork_id, start=info.base) if e.type == "run.finished"]
    if runs and runs[-1].get("status") != "ok":  # a replayed turn failed: the replay stopped there (it said 0 and nothing)
        _fail(f"the replay stopped: a turn ended {runs[-1].get('status')}: {runs[-1].get('error') or 'no reason given'}; "
              f"fork {fork_id} keeps what was replayed", EXIT_UNPRINTED)  # committed: a retry would fork again


@cli.command("usage")
@click.argument("thread", type=THREAD)
@json_option
@with_store()
def usage_command(store: Store, thread: str, as_json: bool) -> None:
    """Tokens spent by THREAD and by each fork below it, and the input read from the prompt cache.

    answers: each thread's own assistant messages that carry usage (`messages` in --json), a
    fork's inherited ones counted once, in its parent's row; `ls` counts every message."""
    rows = usage(store, thread)
    if as_json:
        _emit_json({"threads": [r.to_json() for r in rows], "total": usage_total(rows, thread).to_json()})
    else:
        output.lines(usage_lines(rows, usage_total(rows, thread)))


# -- search (threadlog search, threadlog index) ----------------------------------------------------


class _Indexing:
    """What a catch-up of the search index says while it runs, once it needs more than one
    commit (the first search of a large log): a progress bar on stderr when it is a terminal,
    else one line saying what it does."""

    LABEL = "indexing for search (Ctrl-C keeps what is done)"

    def __init__(self) -> None:
        self.bar: Any = None
        self.update: Callable[[int, int], None] = lambda done, total: None
        self.told = False

    def __call__(self, done: int, total: int) -> None:
        if not sys.stderr.isatty():
            if not self.told and done < total:
                click.echo(f"{self.LABEL}: {total:,} events to index", err=True)
                self.told = True
            return
        if self.bar is None:
            if done >= total:
                return
            self.bar, self.update = _progress(self.LABEL)
            self.bar.__enter__()
        self.update(done, total)

    def __enter__(self) -> _Indexing:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@cli.command("search")
@click.argument("query", callback=_stated("give the words to search for"))
@click.option("--thread", type=THREAD, help="Search only this thread's history (its own events and its ancestors' below each fork point).")
@click.option("--role", type=click.Choice(["user", "assistant"]), help="Only this role's messages.")
@click.option("--tool", "tool_name", metavar="NAME", help="Only calls of this tool and their results.")
@click.option("-n", "--limit", "limit", type=click.IntRange(min=1), default=10, show_default=True, help="How many hits.")
@json_option
@with_store("search")
def search_command(store: Store, query: str, thread: str | None, role: str | None, tool_name: str | None, limit: int,
                   as_json: bool) -> None:
    """Full-text search, best first: SQLite FTS5 syntax (an invalid query is taken as plain
    words), or on PostgreSQL its web search syntax (`"a phrase"`, `or`, `-word`).

    The index is first brought up to date; in a file this user may not write (or by a
    PostgreSQL role that may only read), what it already covers is searched (a note says
    when that is not the whole log)."""
    unwritable = store.read_only
    with _Indexing() as progress:
        try:
            hits = search(store, query, thread=thread, role=role, tool=tool_name, limit=limit, catch_up=not unwritable,
                          progress=progress)
        except NotPermitted:  # a role that may only read (PostgreSQL): searched as a file it may not write is
            unwritable = True
            hits = search(store, query, thread=thread, role=role, tool=tool_name, limit=limit, catch_up=False)
    covered, last = store.index_position(), store.last_position()
    if unwritable and covered < last:
        why = "is read-only" if store.read_only else "does not let this user write its search index"
        click.echo(f"note: {safe(store.path)} {why}: its search index covers positions up to {covered} of {last}; "
                   "newer events are not searched", err=True)
    if as_json:
        _emit_json({"query": query, "thread": thread, "hits": [hit.to_json() for hit in hits]})
    else:
        output.lines(hit_line(hit) for hit in hits)
        if not hits:
            click.echo("no match", err=True)
    if not hits and tool_name is not None:  # `--tool bash` of calls of `Bash`: names match exactly
        others = tools_in_other_case(store, tool_name, thread)
        if others:
            click.echo(safe(f"hint: no tool named {named(tool_name)}{' in this thread' if thread else ''}; did you mean "
                            f"{' or '.join(map(named, others))}? (--tool matches a name as written)"), err=True)


@cli.command("index")
@click.option("--rebuild", is_flag=True, help="Empty the index and rebuild it from the whole log.")
@json_option
@with_store("write")
def index_command(store: Store, rebuild: bool, as_json: bool) -> None:
    """Bring the search index up to date (searches do this themselves), or rebuild it."""
    with _Indexing() as progress:
        read = rebuild_index(store) if rebuild else update_index(store, progress)
    _committed(f"{'rebuilt' if rebuild else 'updated'} the search index")
    position = store.index_position()
    if as_json:
        _emit_json({"rebuilt": rebuild, "events_read": read, "position": position})
    else:
        click.echo(f"{'rebuilt' if rebuild else 'updated'}: {counted(read, 'event')} read; the index covers positions up to {position}")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (keep it local: the viewer has no login).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in the default web browser.")
@json_option
@with_store()
def serve(store: Store, host: str, port: int, open_browser: bool, as_json: bool) -> None:
    """A local, read-only web viewer: threads, rows, replay, fork tree, blame, diff, live updates."""
    try:
        from .web import create_app
        from .web.server import run
    except ImportError as error:
        missing = (error.name or "a package").split(".")[0]
        raise StoreError(f"threadlog serve needs the web extra ({missing} is missing): pip install 'threadlog[web]'") from None
    import socket

    if not host.strip():
        raise click.BadParameter("names no address (127.0.0.1 keeps the viewer on this machine)", param_hint="--host")
    ctx = click.get_current_context()
    target = _db_path()  # store.path hides a URL's password
    name = f"[{host}]" if ":" in host else host  # an IPv6 address, as URLs and Host headers write it
    # Listening comes first: the viewer is announced (and a browser pointed at it) only once
    # the port is its own; before, a port in use was announced, and --open showed whatever
    # else listened there. Port 0 takes a free one, and the announced URL names it.
    try:
        listening = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except (OSError, OverflowError) as error:
        reason = "in use by another program" if isinstance(error, OSError) and error.errno == errno.EADDRINUSE else str(error)
        raise StoreError(f"cannot listen on {name} port {port}: {reason}; pass another --port (or --host)") from None
    port = listening.getsockname()[1]
    url = f"http://{name}:{port}/"
    hosts = sorted({"127.0.0.1", "localhost", name})
    if as_json:
        _emit_json({"url": url, "db": store.path, "read_only": True})
        sys.stdout.flush()
    click.echo(f"serving {safe(store.path)} read-only at {url} (Ctrl-C stops)", err=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(0.5, webbrowser.open, [url]).start()
    with listening:
        run(create_app(target, hosts), listening)


def main() -> None:
    output.stand_in_for_closed_streams()
    cli(prog_name="threadlog")


if __name__ == "__main__":
    main()
