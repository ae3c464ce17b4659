"""The `threadlog` command: a thin shell over the library.

Each command opens the store, calls one library function and formats the result. Domain
errors print `error: …` on stderr and exit 1; usage errors exit 2 (click's convention).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click

from eventstore import Store, StoreError
from eventstore.events import MAX_DEPTH

from projections import (
    anthropic_request,
    blame,
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
from projections.request import checkable_offsets
from projections.search import rebuild_index, search, update_index
from projections.usage import total as usage_total

from .demo import build_demo
from .export import dump_lines, export_all, export_events, export_markdown
from .importers import ImportSummary, import_claude_code, import_events, import_pi
from .importers.follow import follow_claude_code
from .render import blame_line, check_line, diff_lines, event_line, hit_line, row_line, state_lines, tree_lines, usage_lines

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
        except RecursionError:  # an event nested too deeply, stored by an older release or by hand
            _fail("an event is nested too deeply to show; `threadlog verify` names its position")


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
    except RecursionError:
        raise StoreError(f"{what} is JSON nested too deeply; an event holds at most {MAX_DEPTH} levels") from None


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
@click.option("--checkpoint", "checkpoint", metavar="C",
              help="Also prove the log still holds, unchanged, everything checkpoint C (from `threadlog checkpoint`) covered.")
@json_option
@with_store
def verify(store: Store, checkpoint: str | None, as_json: bool) -> None:
    """Recompute every hash chain and stored column; exit 0 when all hold, 1 naming the first bad position.

    With --checkpoint, a deleted thread, a cut tail or any rewritten event the checkpoint
    covered fails too, however consistently it was re-chained.
    """
    if sys.stderr.isatty():
        with click.progressbar(length=store.counts().events, label="verifying", file=sys.stderr) as bar:
            report = store.verify(progress=lambda done, total: bar.update(done - bar.pos), checkpoint=checkpoint)
    else:
        report = store.verify(checkpoint=checkpoint)
    if as_json:
        _emit_json(report.to_json())
        return
    click.echo(f"ok: {report.events} events in {report.streams} threads verified ({report.redacted} redacted)")
    if checkpoint is not None:
        click.echo(f"ok: the log still holds everything checkpoint {checkpoint} covered")


@cli.command("checkpoint")
@json_option
@with_store
def checkpoint_command(store: Store, as_json: bool) -> None:
    """Print one string covering every event in the log now; keep it elsewhere.

    `threadlog verify --checkpoint C` later proves nothing it covers was removed, added or
    changed: the one check a writer of the file cannot forge.
    """
    value = store.checkpoint()
    if as_json:
        _emit_json({"checkpoint": value})
    else:
        click.echo(value)


@cli.command()
@click.argument("position", type=int)
@click.option("--reason", required=True, help="Why the payload is erased (recorded in the log).")
@click.option("--actor", required=True, help="Who erases it (recorded in the log).")
@json_option
@with_store
def redact(store: Store, position: int, reason: str, actor: str, as_json: bool) -> None:
    """Erase the payload of the event at POSITION, keeping the chain and recording who and why.

    No copy stays in the file: snapshots are dropped, freed pages zeroed, the WAL truncated.
    """
    record = store.redact(position, reason=reason, actor=actor)
    if as_json:
        _emit_json(record.to_json())
    else:
        click.echo(f"redacted position {position}; recorded at position {record.position}")


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
        f"{summary.compactions} compaction(s)",
        f"{summary.added} event(s) added of {summary.events}",
    ]
    if summary.skipped:
        lines.append("lines without conversation: " + ", ".join(f"{kind} {n}" for kind, n in sorted(summary.skipped.items())))
    lines.extend(f"skipped {file}:{line}: {why}" for file, line, why in summary.bad)
    return lines


def _print_summary(summary: ImportSummary, as_json: bool) -> None:
    if as_json:
        _emit_json(summary.to_json())
    else:
        for line in _summary_lines(summary):
            click.echo(line)


@cli.group("import")
@db_option
def import_group(db: str | None) -> None:
    """Import other tools' session histories (Claude Code, pi)."""
    if db:  # `threadlog import --db X claude-code …`: the subcommands read the root's --db
        click.get_current_context().find_root().params["db"] = db


@import_group.command("claude-code")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (reported) instead of refusing their session.")
@click.option("--follow", is_flag=True, help="Keep running and mirror the sessions as Claude Code writes them (Ctrl-C stops).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=0.5, show_default=True, help="With --follow: seconds between polls.")
@json_option
@with_store
def import_claude_code_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float, as_json: bool) -> None:
    """Import Claude Code sessions from PATHS (files, or directories searched recursively;
    default ~/.claude/projects). Re-importing adds nothing; a grown file adds its new lines."""
    sources = list(paths) or [str(Path.home() / ".claude" / "projects")]
    if follow:
        def report(summary: ImportSummary) -> None:
            click.echo(json.dumps(summary.to_json()) if as_json else f"+{summary.added} event(s) ({summary.files} file(s))")

        try:
            total = follow_claude_code(store, sources, interval=interval, skip_bad=skip_bad, on_import=report)
        except KeyboardInterrupt:
            click.echo("stopped", err=True)
            return
        _print_summary(total, as_json)
        return
    bar, update = _progress("importing")
    if bar is None:
        summary = import_claude_code(store, sources, skip_bad=skip_bad)
    else:
        with bar:
            summary = import_claude_code(store, sources, skip_bad=skip_bad, progress=update)
    _print_summary(summary, as_json)


@import_group.command("events")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@json_option
@with_store
def import_events_command(store: Store, paths: tuple[str, ...], as_json: bool) -> None:
    """Restore files written by `threadlog export --format events` (or `export --all`), with
    identical ids, times and hashes; each file is refused whole if any hash differs.
    Restoring twice adds nothing."""
    reports = [(path, import_events(store, path)) for path in paths]
    if as_json:
        _emit_json([{"file": path, **report.to_json()} for path, report in reports])
        return
    for path, report in reports:
        kept = "positions kept" if report.positions_kept else "positions renumbered"
        click.echo(f"{path}: {report.added} event(s) added, {report.present} already present, "
                   f"{report.streams} thread(s) created ({kept})")


@import_group.command("pi")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (reported) instead of refusing their file.")
@json_option
@with_store
def import_pi_command(store: Store, paths: tuple[str, ...], skip_bad: bool, as_json: bool) -> None:
    """Import pi coding agent session files from PATHS (files, or directories searched recursively)."""
    _print_summary(import_pi(store, list(paths), skip_bad=skip_bad), as_json)


@cli.command("export")
@click.argument("thread", required=False)
@click.option("--format", "format_", type=click.Choice(["events", "markdown", "anthropic"]), default="events", show_default=True,
              help="events: JSON lines that `import events` restores with identical hashes; markdown: the full, "
                   "unbounded transcript; anthropic: the Messages API request (as `request` prints it).")
@click.option("--all", "everything", is_flag=True, help="Every thread and event in the file (a backup), as events.")
@click.option("--model", help="With --format anthropic: the model to name (default: the thread's).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write to FILE (atomically: a failed export leaves the old file) instead of stdout.")
@with_store
def export_command(store: Store, thread: str | None, format_: str, everything: bool, model: str | None, output: str | None) -> None:
    """Write THREAD (with its ancestors' history) or, with --all, the whole log."""
    if everything == (thread is not None):
        raise click.UsageError("give a THREAD or --all, not both")
    if everything and format_ != "events":
        raise click.UsageError("--all writes events only")
    chunks: Iterable[str]
    if format_ == "markdown":
        chunks = [export_markdown(store, str(thread))]
    elif format_ == "anthropic":
        chunks = [json.dumps(anthropic_request(store, str(thread), model=model), ensure_ascii=False, indent=2) + "\n"]
    else:
        chunks = dump_lines(export_all(store) if everything else export_events(store, str(thread)))
    if output is None:
        for chunk in chunks:
            click.echo(chunk, nl=False)
        return
    write_atomically(output, (chunk.encode("utf-8") for chunk in chunks), "the export")
    click.echo(output)


# -- the Anthropic API: requests, live turns, re-runs, usage ------------------------------------


def _client() -> Any:
    """An `anthropic.Anthropic` client from ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL when set)."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        _fail("ANTHROPIC_API_KEY is not set; export your API key (https://console.anthropic.com) and try again")
    import anthropic  # seconds to import: only the commands that talk to the API pay for it

    return anthropic.Anthropic(api_key=key, base_url=os.environ.get("ANTHROPIC_BASE_URL") or None)


@cli.command("request")
@click.argument("thread")
@click.option("--at", type=click.IntRange(min=0), help="The request as of the first N events (default: all).")
@click.option("--check", is_flag=True,
              help="Prove the recorded request digest(s): of the message at offset N with --at, else of every live message.")
@click.option("--model", help="The model to name (default: the thread's).")
@click.option("--no-cache", is_flag=True, help="Leave out the cache_control breakpoints.")
@json_option
@with_store
def request_command(store: Store, thread: str, at: int | None, check: bool, model: str | None, no_cache: bool, as_json: bool) -> None:
    """THREAD as the keyword arguments of client.messages.create, as JSON; --check says whether
    each recorded request still rebuilds byte for byte (exit 1 when one does not)."""
    if not check:
        kwargs = anthropic_request(store, thread, at, cache=not no_cache, model=model)
        click.echo(json.dumps(kwargs, ensure_ascii=False, indent=None if as_json else 2))
        return
    offsets = [at] if at is not None else checkable_offsets(store, thread)
    if not offsets:
        _fail(f"no message of {thread} was recorded by a live turn; there is no request digest to check")
    checks = [check_request(store, thread, offset) for offset in offsets]
    if as_json:
        _emit_json([c.to_json() for c in checks])
    else:
        for c in checks:
            click.echo(check_line(c))
    if not all(c.ok for c in checks):
        sys.exit(1)


@cli.command()
@click.argument("thread")
@click.argument("text")
@click.option("--model", help="The model to ask (default: the thread's).")
@click.option("--stream", is_flag=True, help="Stream the answer as it is written.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="The answer's token limit [default: 4096].")
@json_option
@with_store
def ask(store: Store, thread: str, text: str, model: str | None, stream: bool, max_tokens: int | None, as_json: bool) -> None:
    """Send TEXT on THREAD to the Anthropic API and record the turn (ANTHROPIC_API_KEY)."""
    from .live import run_turn

    client = _client()
    echo = (lambda piece: click.echo(piece, nl=False)) if stream and not as_json else None
    turn = run_turn(store, thread, text, client, model=model, stream=stream, max_tokens=max_tokens, on_text=echo)
    if as_json:
        _emit_json(turn.to_json())
    elif echo is None and turn.text:
        click.echo(turn.text)
    elif echo is not None:
        click.echo()
    if turn.status == "error":
        _fail(turn.error or "the turn failed")


@cli.command()
@click.argument("thread")
@click.option("--at", type=click.IntRange(min=1), required=True, help="Fork point: the first N events are kept.")
@click.option("--model", required=True, help="The model to replay the later user messages with.")
@click.option("--stream", is_flag=True, help="Use the streaming API.")
@with_store
def rerun(store: Store, thread: str, at: int, model: str, stream: bool) -> None:
    """Fork THREAD at N and replay its later user messages with MODEL; prints the fork's id,
    alone (then: threadlog diff THREAD FORK)."""
    from .live import rerun as replay

    click.echo(replay(store, thread, at, _client(), model=model, stream=stream))


@cli.command("usage")
@click.argument("thread")
@json_option
@with_store
def usage_command(store: Store, thread: str, as_json: bool) -> None:
    """Tokens spent by THREAD and by each fork below it, and the input read from the prompt cache."""
    rows = usage(store, thread)
    if as_json:
        _emit_json({"threads": [r.to_json() for r in rows], "total": usage_total(rows, thread).to_json()})
    else:
        for line in usage_lines(rows, usage_total(rows, thread)):
            click.echo(line)


# -- search (threadlog search, threadlog index) ----------------------------------------------------


@cli.command("search")
@click.argument("query")
@click.option("--thread", help="Search only this thread's history (its own events and its ancestors' below each fork point).")
@click.option("--role", type=click.Choice(["user", "assistant"]), help="Only this role's messages.")
@click.option("--tool", "tool_name", metavar="NAME", help="Only calls of this tool and their results.")
@click.option("-n", "limit", type=click.IntRange(min=1), default=10, show_default=True, help="How many hits.")
@json_option
@with_store
def search_command(store: Store, query: str, thread: str | None, role: str | None, tool_name: str | None, limit: int,
                   as_json: bool) -> None:
    """Full-text search (SQLite FTS5 syntax; an invalid query is taken as plain words), best first."""
    hits = search(store, query, thread=thread, role=role, tool=tool_name, limit=limit)
    if as_json:
        _emit_json({"query": query, "thread": thread, "hits": [hit.to_json() for hit in hits]})
        return
    for hit in hits:
        click.echo(hit_line(hit))
    if not hits:
        click.echo("no match", err=True)


@cli.command("index")
@click.option("--rebuild", is_flag=True, help="Empty the index and rebuild it from the whole log.")
@json_option
@with_store
def index_command(store: Store, rebuild: bool, as_json: bool) -> None:
    """Bring the search index up to date (searches do this themselves), or rebuild it."""
    read = rebuild_index(store) if rebuild else update_index(store)
    position = store.index_position()
    if as_json:
        _emit_json({"rebuilt": rebuild, "events_read": read, "position": position})
    else:
        click.echo(f"{'rebuilt' if rebuild else 'updated'}: {read} events read; the index covers positions up to {position}")


def main() -> None:
    cli(prog_name="threadlog")


if __name__ == "__main__":
    main()
