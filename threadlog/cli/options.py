"""The parameter types and options the commands share: --db, --json, --timeout, --no-pager,
a file path, a number of seconds, JSON typed as an option's value or read from a file (or
standard input), a model, a reason that must say something, text that is UTF-8.

What cannot be right is refused before the store is opened, as a usage error naming the
option; an offset past the thread's head (`_check_range`) says the range the thread holds.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from eventstore import Store, StoreError
from eventstore.errors import InvalidEvent, shown
from eventstore.events import MAX_DEPTH
from eventstore.ids import check_id
from eventstore.prepare import MAX_EVENT_BYTES, storable_json
from eventstore.ranges import MAX_INDEX
from eventstore.store import MAX_TIMEOUT


F = TypeVar("F", bound=Callable[..., Any])


DEFAULT_DB = "threadlog.db"


def check_typed(ctx: click.Context | None, param: click.Parameter | None, text: Any) -> None:
    """Refuse text typed in a terminal or locale that is not UTF-8 (`group._Command`), naming the
    byte and where it is in what was typed."""
    if not isinstance(text, str):
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}, half of a surrogate pair,"
        raise click.BadParameter(f"is not UTF-8 text ({byte} at character {error.start + 1}); threadlog keeps text as "
                                 "UTF-8: set the terminal or locale to UTF-8 (LC_ALL=C.UTF-8)", ctx=ctx, param=param) from None


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


class InputFile(click.ParamType[str]):
    """`FILE|-`: a file to read, or `-` for standard input, kept as typed (`_read_text` reads
    it). Not text: a Linux file name may be any bytes, which the check of typed text
    (`group._Command`) leaves alone."""

    name = "file"


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
        check_typed(ctx, param, value)  # the JSON read from it is no longer what was typed
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
        check_typed(ctx, param, value)
        key, sep, text = value.partition("=")
        if not sep or not key:
            self.fail(f"{value!r} is not KEY=JSON, e.g. stop_sequences='[\"END\"]'", param, ctx)
        try:
            return key, _json_value(text)
        except _NotJSON as error:
            hint = f" (text is JSON too: {key}='\"{text}\"')" if text.isidentifier() else ""
            self.fail(f"the value of {key} {error}{hint}", param, ctx)


class Digits(click.IntRange):
    """An `IntRange` written in the digits 0-9 alone: Python's `int()` also reads `3_0` as 30 and
    `٣` as 3, and `redact 3_0` erased position 30, which no one can take back."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not (value.isascii() and value.isdigit()):
            self.fail(f"{shown(value)} is not a number written in the digits 0-9", param, ctx)
        return super().convert(value, param, ctx)


class PageStart(click.ParamType[tuple[int, str | None]]):
    """`--before POSITION` or `--before POSITION:THREAD`: where a page of a listing starts, as
    (position, thread id or None). A position alone starts below it; with the last listed
    thread's id, right after that thread, so the threads tied with it at that position (only
    raw SQL gives threads one) are neither skipped nor listed twice. The position is digits,
    so the first `:` ends it and the id is the rest, whatever it holds (`:` included)."""

    name = "POSITION[:THREAD]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        given = shown(value)  # cut short: a value of 5,000 digits was repeated whole
        position, sep, thread = value.partition(":")
        if not (position.isascii() and position.isdigit()) or (sep and not thread):
            self.fail(f"{given} is not POSITION or POSITION:THREAD (a page's last row's last_position, and its id)",
                      param, ctx)
        digits = position.lstrip("0") or "0"  # leading zeros counted as digits: 0000000000000000000005 was "too large"
        number = int(digits) if len(digits) <= len(str(MAX_INDEX)) else MAX_INDEX + 1  # int() of 5,000 digits raises
        if number > MAX_INDEX:
            self.fail(f"{given}: a position is at most {MAX_INDEX}", param, ctx)
        if number < 1 and not sep:
            self.fail(f"{given}: no thread is last active before position {number}", param, ctx)
        try:
            return number, check_id("THREAD", thread) if sep else None
        except InvalidEvent as error:  # an id no thread has: a page after it would list threads by chance
            self.fail(f"{given}: the thread id {error.why}", param, ctx)


def timeout_option(func: F) -> F:
    return click.option("--timeout", type=Seconds(least=0), default=30.0, show_default=True,
                        help="Seconds to wait for another writer's lock before giving up.")(func)


def pager_option(func: F) -> F:
    return click.option("--no-pager", "no_pager", is_flag=True,
                        help="Print straight to stdout even on a terminal (else the text, however short, goes through "
                             "$PAGER, or less, when stdin and stdout are terminals).")(func)


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


def _check_range(store: Store, thread: str, name: str, value: int | None, *, offset: bool = False, low: int = 0) -> None:
    """`--start`/`--stop`/`--at` past the thread's head: the same error everywhere. An `offset`
    names an event (`request --check --at`), so its range ends one before the head; `low` is the
    least the option takes (`show --at` replays at least `thread.created`)."""
    last = store.head(thread) - (1 if offset else 0)
    if value is not None and value > last:
        raise StoreError(f"{name} {value} is outside thread {thread!r} ({low}..{last})")
