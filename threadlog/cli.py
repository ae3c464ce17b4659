"""The `threadlog` command: a thin shell over the library.

Each command opens the store, calls one library function and formats the result. Domain
errors print `error: …` on stderr and exit 1; usage errors exit 2 (click's convention).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from eventstore import Store, StoreError

from projections import (
    blame,
    diff,
    display_rows,
    drop_snapshots,
    save_snapshot,
    thread_state,
    transcript,
    write_transcript,
)

from .demo import build_demo
from .render import blame_line, diff_lines, event_line, row_line, state_lines, tree_lines

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    """Turns library errors into one `error:` line and exit status 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreError as error:
            _fail(str(error))
        except BrokenPipeError:  # `threadlog log T | head`: the reader left; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as error:
            _fail(f"{error.strerror or error}: {error.filename}" if error.filename else str(error))
        except UnicodeDecodeError as error:
            _fail(f"input is not UTF-8 text ({error.reason} at byte {error.start})")


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


DEFAULT_DB = "threadlog.db"


def db_option(func: F) -> F:
    """`--db`, accepted after any command (and before it, on the group)."""
    return click.option(
        "--db",
        "db",
        default=None,
        type=click.Path(dir_okay=False),
        help=f"Database file [default: $THREADLOG_DB, else ./{DEFAULT_DB}].",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def with_store(func: Callable[..., Any]) -> Callable[..., Any]:
    """Open the store named by --db for the command, and close it afterwards."""

    @functools.wraps(func)
    def wrapper(db: str | None, **kwargs: Any) -> Any:
        group_db = click.get_current_context().find_root().params.get("db")
        with Store(db or group_db or DEFAULT_DB) as store:
            return func(store, **kwargs)

    return db_option(wrapper)


def _read_text(path: str) -> str:
    """A file's text, or standard input's for `-`; refuses bytes that are not UTF-8."""
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8")
    with open(path, "rb") as file:
        return file.read().decode("utf-8")


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StoreError(f"{what} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db", envvar="THREADLOG_DB", type=click.Path(dir_okay=False),
              help=f"Database file for every command (or $THREADLOG_DB) [default: ./{DEFAULT_DB}].")
@click.version_option(package_name="threadlog")
def cli(db: str | None) -> None:
    """threadlog: an event-sourced conversation store for LLM agents.

    Every message, run, interrupt, compaction and fork is an immutable event in one
    SQLite file. Forks cost O(1): a fork points at its parent and an offset.
    """


@cli.command()
@with_store
def init(store: Store) -> None:
    """Create the database, or migrate it to this release's schema."""
    streams, events = store.counts()
    click.echo(f"{store.path}: schema {store.schema_version()}, {streams} threads, {events} events")


def _meta_pairs(_: click.Context, __: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        pairs[key] = val
    return pairs


@cli.command()
@click.option("--title", help="The thread's title.")
@click.option("--system", help="The system prompt.")
@click.option("--model", help="The model the thread talks to.")
@click.option("--meta", "metadata", multiple=True, callback=_meta_pairs, metavar="K=V", help="Metadata entry (repeatable).")
@with_store
def new(store: Store, title: str | None, system: str | None, model: str | None, metadata: dict[str, str]) -> None:
    """Start a thread; prints its id, alone."""
    click.echo(store.create_thread(title=title, system=system, model=model, metadata=metadata or None))


@cli.command()
@click.argument("thread")
@click.option("--role", type=click.Choice(["user", "assistant"]), required=True, help="Who speaks.")
@click.option("--text", help="The message text.")
@click.option("--content", "content_file", metavar="FILE|-", help="JSON content blocks (or a JSON string) from a file or stdin.")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@click.option("--actor", help="Who wrote it (recorded in meta).")
@with_store
def append(store: Store, thread: str, role: str, text: str | None, content_file: str | None, expect: int | None, actor: str | None) -> None:
    """Append a message to THREAD; prints its offset and position."""
    if (text is None) == (content_file is None):
        raise click.UsageError("give exactly one of --text or --content")
    content = text if text is not None else _parse_json(_read_text(content_file or "-"), "--content")
    meta = {"actor": actor} if actor else {}
    event = store.append_message(thread, role, content, expect="any" if expect is None else expect, **meta)
    click.echo(f"offset {event.offset} position {event.position}")


@cli.command()
@click.argument("thread")
@click.argument("type_", metavar="TYPE")
@click.option("--data", "data_text", metavar="JSON", help="The event's data as JSON.")
@click.option("--data-file", metavar="FILE|-", help="The event's data as JSON, from a file or stdin.")
@click.option("--meta", "meta_text", metavar="JSON", help="The event's meta as JSON (event_id, actor, origin, …).")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@with_store
def emit(store: Store, thread: str, type_: str, data_text: str | None, data_file: str | None, meta_text: str | None,
         expect: int | None) -> None:
    """Append one event of any TYPE to THREAD; prints its offset and position."""
    if (data_text is None) == (data_file is None):
        raise click.UsageError("give exactly one of --data or --data-file")
    data = _parse_json(data_text if data_text is not None else _read_text(data_file or "-"), "--data")
    meta = _parse_json(meta_text, "--meta") if meta_text else {}
    event = {"type": type_, "data": data, "meta": meta}
    recorded = store.append(thread, [event], expect="any" if expect is None else expect)[0]
    click.echo(f"offset {recorded.offset} position {recorded.position}")


def _metadata_choice(_: click.Context, __: click.Parameter, value: str) -> Any:
    if value in ("blank", "inherit"):
        return value
    if value.startswith("keep:") and value[5:]:
        return {"keep": [key for key in value[5:].split(",") if key]}
    raise click.BadParameter("use blank, inherit or keep:K1,K2")


@cli.command()
@click.argument("thread")
@click.option("--at", type=int, help="How many of the parent's events the fork inherits (default: all).")
@click.option("--todos", type=click.Choice(["blank", "inherit"]), default="blank", show_default=True)
@click.option("--metadata", default="blank", show_default=True, callback=_metadata_choice, metavar="blank|inherit|keep:K1,K2")
@click.option("--context", type=click.Choice(["full", "note"]), default="full", show_default=True,
              help="full: the parent's messages; note: one fork note pointing at the transcript.")
@click.option("--retrieval", type=click.Choice(["per-turn", "first-turn", "off"]), default="off", show_default=True)
@click.option("--unanswered", type=click.Choice(["refuse", "drop"]), default="refuse", show_default=True,
              help="What to do with tool calls that have no result.")
@click.option("--transcript", "transcript_path", metavar="PATH", help="Where the parent's transcript lives (named in the fork note).")
@with_store
def fork(store: Store, thread: str, at: int | None, todos: str, metadata: Any, context: str, retrieval: str, unanswered: str,
         transcript_path: str | None) -> None:
    """Fork THREAD in O(1); prints the fork's id, alone."""
    fork_id = store.fork(
        thread, at, todos=todos, metadata=metadata, context=context, retrieval=retrieval,
        unanswered=unanswered, transcript=transcript_path,
    )
    click.echo(fork_id)


@cli.command()
@click.argument("thread")
@click.option("--start", type=click.IntRange(min=0), default=0, help="First offset.")
@click.option("--stop", type=click.IntRange(min=0), help="Offset to stop before.")
@json_option
@with_store
def log(store: Store, thread: str, start: int, stop: int | None, as_json: bool) -> None:
    """THREAD's events (ancestors included): offset, stream, position, type, hash."""
    for event in store.read(thread, start, stop):
        click.echo(json.dumps(event.to_json(), ensure_ascii=False) if as_json else event_line(event))


@cli.command()
@click.argument("thread", required=False)
@json_option
@with_store
def tree(store: Store, thread: str | None, as_json: bool) -> None:
    """The fork tree, with fork offsets: every root, or the tree holding THREAD."""
    threads = store.threads() if thread is None else store.subtree(store.thread(thread).root_id)
    if as_json:
        _emit_json([t.to_json() for t in threads])
    else:
        for line in tree_lines(threads):
            click.echo(line)


@cli.command()
@click.argument("thread")
@click.option("--at", type=click.IntRange(min=0), help="Replay: the state after the first N events (default: all).")
@json_option
@with_store
def show(store: Store, thread: str, at: int | None, as_json: bool) -> None:
    """THREAD's state: status, metadata, todos, interrupts and the model's view of its messages."""
    state = thread_state(store, thread, at)
    if as_json:
        _emit_json(state.to_json())
    else:
        for line in state_lines(state):
            click.echo(line)


@cli.command()
@click.argument("thread")
@click.option("--at", type=click.IntRange(min=0), help="The rows after the first N events (default: all).")
@json_option
@with_store
def rows(store: Store, thread: str, at: int | None, as_json: bool) -> None:
    """The rows a chat UI shows for THREAD, each with a stable id to upsert."""
    result = display_rows(store, thread, at)
    if as_json:
        _emit_json([row.to_json() for row in result])
    else:
        for row in result:
            click.echo(row_line(row))


@cli.command("transcript")
@click.argument("thread")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write it to FILE atomically instead of printing it.")
@click.option("--max-bytes", type=click.IntRange(min=2048), default=512 * 1024, show_default=True,
              help="Bound on the whole transcript, in UTF-8 bytes.")
@click.option("--max-message-bytes", type=click.IntRange(min=256), default=16 * 1024, show_default=True,
              help="Bound on each message (head and tail are kept).")
@click.option("--last", type=click.IntRange(min=1), help="Keep only the N most recent messages.")
@click.option("--start", type=click.IntRange(min=0), default=0, help="First offset.")
@click.option("--stop", type=click.IntRange(min=0), help="Offset to stop before (e.g. a fork point).")
@with_store
def transcript_command(store: Store, thread: str, output: str | None, max_bytes: int, max_message_bytes: int, last: int | None,
                       start: int, stop: int | None) -> None:
    """THREAD as bounded Markdown: ## user / ## assistant, one line per tool call, no tool output."""
    options: dict[str, Any] = {"max_bytes": max_bytes, "max_message_bytes": max_message_bytes, "last": last, "start": start, "stop": stop}
    if output:
        write_transcript(store, thread, output, **options)
        click.echo(output)
    else:
        click.echo(transcript(store, thread, **options), nl=False)


@cli.command("blame")
@click.argument("thread")
@json_option
@with_store
def blame_command(store: Store, thread: str, as_json: bool) -> None:
    """Where each message of THREAD's model view came from: stream, offset, position, time, actor, origin."""
    entries = blame(store, thread)
    if as_json:
        _emit_json([entry.to_json() for entry in entries])
    else:
        for entry in entries:
            click.echo(blame_line(entry))


@cli.command("diff")
@click.argument("a")
@click.argument("b")
@json_option
@with_store
def diff_command(store: Store, a: str, b: str, as_json: bool) -> None:
    """Compare threads A and B: their common history, then each side's own messages."""
    result = diff(store, a, b)
    if as_json:
        _emit_json(result.to_json())
    else:
        for line in diff_lines(result):
            click.echo(line)


@cli.command()
@click.argument("thread", required=False)
@click.option("--drop", is_flag=True, help="Forget every cached snapshot instead (answers do not change).")
@with_store
def snapshot(store: Store, thread: str | None, drop: bool) -> None:
    """Cache THREAD's state so later reads of it and its forks resume there (a cache, never truth)."""
    if drop:
        click.echo(f"dropped {drop_snapshots(store)} snapshot(s)")
        return
    if thread is None:
        raise click.UsageError("give a THREAD, or --drop")
    click.echo(f"snapshot of {thread} at offset {save_snapshot(store, thread)}")


@cli.command()
@json_option
@with_store
def verify(store: Store, as_json: bool) -> None:
    """Recompute every hash chain; exit 0 when every chain holds, 1 naming the first bad position."""
    if sys.stderr.isatty():
        with click.progressbar(length=store.counts().events, label="verifying", file=sys.stderr) as bar:
            report = store.verify(progress=lambda done, total: bar.update(done - bar.pos))
    else:
        report = store.verify()
    if as_json:
        _emit_json(report.to_json())
    else:
        click.echo(f"ok: {report.events} events in {report.streams} threads verified ({report.redacted} redacted)")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the demo's thread ids as JSON.")
@with_store
def demo(store: Store, as_json: bool) -> None:
    """Build a sample conversation (tool call, interrupt, fork, fan-out) and show it."""
    ids = build_demo(store)
    if as_json:
        _emit_json(ids)
        return
    click.echo(f"Built a sample conversation in {store.path}:")
    for line in tree_lines(store.subtree(str(ids["thread"]))):
        click.echo(f"  {line}")
    fork_id = str(ids["fork"])
    click.echo(f"\nThe fork's state (threadlog show {fork_id}):")
    for line in state_lines(thread_state(store, fork_id)):
        click.echo(f"  {line}")
    if store.path != ":memory:":
        parent = str(ids["thread"])
        path = Path(store.path).resolve().with_name(f"{parent}.transcript.md")
        write_transcript(store, parent, path)
        click.echo(f"\nThe parent's transcript: {path}")
    click.echo(f"\nTry: threadlog --help, or threadlog log {ids['thread']} --db {store.path}")


def main() -> None:
    cli(prog_name="threadlog")
