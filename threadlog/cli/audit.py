"""Proving and erasing: `verify` and `checkpoint` (the hash chains, and a checkpoint kept
elsewhere that a writer of the file cannot forge), `redact` and `purge` (a payload erased,
with no copy of it left in the file)."""

from __future__ import annotations

import functools
import shlex
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from eventstore import IntegrityError, InvalidEvent, OldPagesKept, RecordedEvent, Store, StoreError

from .. import output
from ..leftovers import events_holding, still_holding
from ..note_fork import transcripts_holding
from ..render import command_line, counted
from .group import _cli_words, _committed, _fail, _named_as_typed, cli
from .opening import with_store
from .options import Digits, _stated, json_option
from .printing import _emit_json, _progress

_LISTED = 20  # events still holding an erased text, named one a line; --json names every one


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
        with _named_as_typed({"checkpoint": "--since" if since is not None else "--checkpoint"}):
            bar, update = _progress("verifying")
            if bar is None:
                report = store.verify(checkpoint=checkpoint, since=since)
            else:
                with bar:
                    report = store.verify(progress=update, checkpoint=checkpoint, since=since)
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
@click.argument("position", type=Digits(min=1))
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
    So are the other events of its thread tree that still hold text of the erased payload (an
    answer quoting it, a tool result echoing it, a LangGraph checkpoint), to redact as well.
    """
    try:  # as it was: what else still holds its text is looked for after (`_holding`)
        erased = next(store.read_all(after=position - 1, limit=1), None)
    except (StoreError, RecursionError):  # unreadable (nested too deep to read, say): a reason to redact it
        erased = None
    try:
        with _named_as_typed({"position": "POSITION"}):
            record = store.redact(position, reason=reason, actor=actor)
    except OldPagesKept as error:  # committed (exit 3): the transcripts to rewrite are named all the same
        for note in transcripts_holding(store, position):
            error.add_note(f"note fork {note.fork}'s transcript {note.path} was written with the erased text: rewrite or "
                           "delete it")
        copies, failed = _holding(store, erased, position)
        for line in [*map(still_holding, copies[:_LISTED]), *([failed] if failed else [])]:
            error.add_note(line)
        raise
    _committed(f"redacted position {position}, recorded at position {record.position}",
               command_line("threadlog log", [record.stream_id], f"--start {record.offset}"))
    stale = transcripts_holding(store, position)
    copies, failed = _holding(store, erased, position)
    if as_json:
        _emit_json({**record.to_json(), "transcripts_holding": [note._asdict() for note in stale],
                    "events_holding": [{"position": copy.position, "thread": copy.stream_id, "offset": copy.offset,
                                        "type": copy.type} for copy in copies],
                    **({"events_holding_unknown": failed} if failed else {})})
        return
    output.lines([f"redacted position {position}; recorded at position {record.position}"])
    output.lines(f"note fork {note.fork}'s transcript {note.path} was written with the erased text: rewrite it "
                 f"(threadlog transcript {note.parent} --stop {note.at} -o {shlex.quote(note.path)}) or delete it"
                 for note in stale)
    output.lines([*map(still_holding, copies[:_LISTED]), *([failed] if failed else [])])
    if len(copies) > _LISTED:
        output.lines([f"... and {len(copies) - _LISTED} more events holding it (--json lists them all)"])


def _holding(store: Store, erased: RecordedEvent | None, position: int) -> tuple[list[RecordedEvent], str | None]:
    """The events still holding the erased event's text (`events_holding`), and, when its thread
    tree holds an event that cannot be read (raw SQL stored it), why the look failed instead: the
    redaction is committed by then, and an error would read as if it were not."""
    if erased is None or erased.position != position:
        return [], None
    try:
        return events_holding(store, erased), None
    except (StoreError, RecursionError) as error:
        return [], f"could not look for other events holding the erased text ({error}); the redaction is recorded"


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
    except OldPagesKept as error:  # its own job, not a write kept: nothing is committed by a purge
        # In the backend's words: SQLite's WAL, or PostgreSQL's transactions keeping a row version.
        _fail(f"{error.held}; run `threadlog purge` again once {error.until}")
    _committed("purged the old copies of erased payloads")
    if as_json:
        _emit_json({"purged": True})
    else:
        output.lines(["purged: no old copy of an erased payload is left"])
