"""Import and export: other tools' histories in (Claude Code, pi and SWE-agent, once or
followed as they are written), threadlog's own exports restored, and backups out."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import click

from eventstore import Claimed, Locked, RestoreReport, Store, StoreError
from eventstore.errors import Disconnected
from eventstore.store import special_file
from projections import anthropic_request
from projections.atomic import write_atomically

from .. import output
from ..export import check_restorable, dump_lines, export_all, export_events, export_markdown
from ..importers import ImportSummary, import_claude_code, import_event_files, import_pi, import_swe_agent, swe_agent
from ..importers.follow import follow_claude_code, follow_files
from ..importers.lines import LIVE_SECONDS, files_below
from ..importers.origin import WHAT, command_for
from ..names import THREAD
from ..render import safe, safe_block, safe_json
from ..signals import handled
from .group import _cli_words, _committed, _ended, _Stopped, _Subgroup, cli
from .opening import _pass_db, with_store
from .options import F, FilePath, Seconds, _model_name, db_option, json_option
from .printing import _emit_json, _progress


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
    lines.extend(_cycles_lines(summary))
    if summary.changed:
        file, line = summary.changed_lines[0]
        lines.append(f"changed since imported: {summary.changed} event(s) the source now gives otherwise, first at "
                     f"{file}:{line}, kept as stored (the log is never rewritten; import the file into another database "
                     "to keep both)")
    if summary.gone:
        lines.append(f"shorter than imported: {summary.gone} stored event(s) the source no longer holds, kept as stored "
                     "(the log is never rewritten)")
    return lines


def _cycles_lines(summary: ImportSummary) -> list[str]:
    """Where `summary` cut a cycle of parents, as an import and a follower both say it: the
    count of each kind and the first place."""
    kinds = ((summary.cycles_cut, "1 line's parent chain comes back to it, cut there and taken as the start of a thread, at ",
              "{} lines' parent chains come back to them, each cut there and taken as the start of a thread, first at "),
             (summary.self_parents, "1 entry names itself as its parent, taken as following the entry before it, at ",
              "{} entries name themselves as their parents, each taken as following the entry before it, first at "))
    return [f"parents in a cycle: {one if len(places) == 1 else many.format(len(places))}{places[0][0]}:{places[0][1]}"
            for places, one, many in kinds if places]


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


class _ImportGroup(_Subgroup):
    """`threadlog import`: a file named where the format goes is answered with the command that
    imports it, as the importers tell each other's files apart (`importers.origin`)."""

    def hint(self, ctx: click.Context, args: list[str]) -> str | None:
        command = command_for(click.utils.make_str(args[0]))
        return None if command is None else (f"The file opens with {WHAT[command]}: import it with "
                                             f"`{self.retyped(ctx, command, args)}`")


@cli.group("import", cls=_ImportGroup)
@db_option
def import_group(db: str | None) -> None:
    """Import histories: Claude Code and pi sessions, SWE-agent trajectories, or threadlog's own exports (events)."""
    _pass_db(db)


def _check_sessions_found(paths: list[str], tool: str, given: bool, pattern: str = "*.jsonl", noun: str = "session",
                          finished: bool = False) -> None:
    """Refuse an import from a directory that holds no session file at all (none matching
    `pattern` in or below it): it imported `0 file(s)` and exited 0, so a mistyped directory
    looked like success, and beside another directory it went unnoticed. Directories whose
    sessions were all imported before still import (adding nothing); `--follow` waits for
    sessions to come and is not refused."""
    empty = [path for path in dict.fromkeys(paths)  # a file named is imported (or refused) itself
             if os.path.isdir(path) and not files_below(Path(path), pattern, finished=finished)]  # as the importers search
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


def finished_option(tool: str) -> Callable[[F], F]:
    """`--finished`: every file named is one `tool` no longer writes (copied from elsewhere,
    which makes its time of change now), so none waits for a later import as a file changed in
    the last 10 minutes does. With `--follow`, which reads files as they are written, it is
    refused before the database is opened."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("finished") and kwargs.get("follow"):
                raise click.UsageError("--finished says the files are no longer written, --follow follows them as they are "
                                       "written: give one of them")
            return func(*args, **kwargs)

        return click.option("--finished", is_flag=True,
                            help=f"The files are finished ({tool} no longer writes them: copies just made): import "
                                 "each as it is, leaving nothing for a later import however recently it "
                                 f"changed. Not for files {tool} is writing: what they do not show complete yet "
                                 "would be taken as whole, and their later lines refused.")(cast(F, checked))

    return decorate


# How often a follower waiting for its next poll looks whether a signal asked it to stop.
_STOP_CHECK = 0.05


def _follow(run: Callable[..., ImportSummary], as_json: bool, noun: str) -> None:
    """Run a follower (`follow_claude_code`, `follow_files`, given all but its callbacks) of
    `noun` (what the tool's files are called) until Ctrl-C, SIGTERM or SIGHUP, printing each
    poll that added events, skipped a bad line (--skip-bad) or cut a cycle of parents (each
    named once, as one import names it, as text or --json alike), each refusal, and once, the database locked by another writer
    past --timeout, or a PostgreSQL server gone away: the follower goes on, and imports what
    waited once it is free, or back (it exited).

    A signal stops it once the poll under way is written, so a session is not left part
    imported (within `_STOP_CHECK` seconds when it waits, whatever --interval is; when the
    signal comes while it waits for another writer's lock, as that wait ends); a second one
    stops it at once, what is being written rolled back (a third and more add nothing: that
    stop is under way, counting what was written). It then says how many events it
    imported in all (Ctrl-C said only `stopped`) and exits as a shell reports the signal that
    stopped it, but 0 for Ctrl-C, its usual way out (and SIGTERM exited 0 too, a service
    manager unable to tell a stop it asked for from one that went wrong)."""
    total = ImportSummary()  # counted by the follower as each poll ends, however it ends
    signals: list[int] = []

    def report(summary: ImportSummary) -> None:
        if summary.added:
            _committed(f"the {noun} imported so far (the last import added "
                       f"{summary.added} event(s) from {summary.files} file(s))", "threadlog ls")
        if as_json:
            click.echo(json.dumps(summary.to_json()))
            return
        # Each bad line once, at the poll that first skipped it; each cut once, at the poll that first made it.
        # Escaped, as `import` prints them: a file's name may hold any byte but `/` and NUL.
        output.lines([f"+{summary.added} event(s) ({summary.files} file(s))",
                      *(f"skipped {file}:{line}: {why}" for file, line, why in summary.bad), *_cycles_lines(summary)])

    def asked(signum: int, frame: Any) -> None:
        signals.append(signum)
        if len(signals) == 2 and not stopped:  # asked again while it runs: stop now (once)
            raise KeyboardInterrupt if signum == signal.SIGINT else _Stopped(signum)

    def pause(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not signals and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, _STOP_CHECK))

    stopped = False  # and says so: a signal from then on stops nothing more
    with handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), asked):
        try:
            run(on_import=report, on_refused=functools.partial(_refused_while_following, noun),
                on_locked=functools.partial(_locked_while_following, noun), stop=lambda: bool(signals), pause=pause,
                on_lost=functools.partial(_lost_while_following, noun), total=total)
        except KeyboardInterrupt:
            pass  # the second signal (the first is in `signals`)
        except Claimed:  # another follower of the format runs: refused before anything was read
            raise
        except StoreError as error:  # the database itself (a full disk): what was imported before stays
            error.add_note(f"{total.added} event(s) were imported before it, and are kept")
            raise
        finally:
            stopped = True
        status = 128 + signals[0] if signals and signals[0] != signal.SIGINT else 0
        _ended(status)  # a signal as it closes the database, once the handlers are put back, too
        click.echo(f"stopped: {total.added} event(s) imported in all", err=True)
    if status:
        sys.exit(status)


@import_group.command("claude-code")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (reported) instead of refusing the import.")
@follow_options("sessions as Claude Code writes them")
@finished_option("Claude Code")
@json_option
@with_store("create")
def import_claude_code_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float,
                               finished: bool, as_json: bool) -> None:
    """Import Claude Code sessions from PATHS (files, or directories searched recursively;
    default ~/.claude/projects). Re-importing adds nothing; a grown file adds its new lines.
    A session changed in the last 10 minutes may still be written: what it does not show
    complete yet (a last response, a running sub-agent) is left for a later import (--finished
    says none is: sessions just copied). A content
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
        _check_sessions_found(sources, "Claude Code", given=bool(paths), finished=finished)
    if follow:
        _follow(functools.partial(follow_claude_code, store, sources, interval=interval, skip_bad=skip_bad), as_json, "sessions")
        return
    live_within = None if finished else LIVE_SECONDS
    bar, update = _progress("importing")
    if bar is None:
        summary = import_claude_code(store, sources, skip_bad=skip_bad, live_within=live_within)
    else:
        with bar:
            summary = import_claude_code(store, sources, skip_bad=skip_bad, progress=update, live_within=live_within)
    _print_summary(summary, as_json)


@import_group.command("events")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@json_option
@with_store("create")
def import_events_command(store: Store, paths: tuple[str, ...], as_json: bool) -> None:
    """Restore files written by `threadlog export --format events` (or `export --all`), with
    identical ids, times and hashes, in one transaction: if any line of any file is refused
    (a hash that differs, a malformed line), nothing is written. Restoring twice adds nothing."""
    bar, update = _progress("restoring")  # minutes at millions of events
    # A pipe's size is not known until it ends: its bar says how much was read, not a share
    # (told a total one byte past what was read, it said 99% from the first megabyte on).
    piped = any(not Path(path).is_file() for path in paths)

    def read(done: int, total: int) -> None:
        if piped and done < total:
            bar.label = f"restoring: {done / 2**20:,.1f} MiB read"
            bar.length = None
            bar.update(done - bar.pos)
            return
        update(done, total)
        if done == total:  # every line read: what is left is not counted, and took half a minute at 2.2M events
            bar.label = "restoring: checking what was restored, then committing"
            bar.render_progress()

    with bar or contextlib.nullcontext():
        reports = list(zip(paths, import_event_files(store, paths, progress=None if bar is None else read)))
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
@finished_option("pi")
@json_option
@with_store("create")
def import_pi_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float, finished: bool,
                      as_json: bool) -> None:
    """Import pi coding agent session files from PATHS (files, or directories searched recursively).

    A file changed in the last 10 minutes may be written as it is read: a half-written last line
    is left for a later import, and so is a header alone that names no model (pi 2 and later
    write the model change next); --finished says none is (files just copied). A directory
    holding no session file (*.jsonl) at all is refused (exit 2), except with --follow, which
    keeps running, imports each file again as pi appends to it (a half-written last line waits
    for the next poll), and waits for sessions to come."""
    if follow:
        _follow(functools.partial(follow_files, store, "pi", list(paths), interval=interval, skip_bad=skip_bad), as_json,
                "sessions")
        return
    _check_sessions_found(list(paths), "pi", given=True, finished=finished)
    _print_summary(import_pi(store, list(paths), skip_bad=skip_bad, finished=finished), as_json)


@import_group.command("swe-agent")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--skip-bad", is_flag=True, help="Skip a file that cannot be imported (reported) instead of refusing the import.")
@follow_options("trajectories as SWE-agent rewrites them")
@finished_option("SWE-agent")
@json_option
@with_store("create")
def import_swe_agent_command(store: Store, paths: tuple[str, ...], skip_bad: bool, follow: bool, interval: float,
                             finished: bool, as_json: bool) -> None:
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
    is being written again by SWE-agent, and is left for a later import (--finished says none
    is: files just copied; such a file is then refused as cut short).
    Replay demos (.yaml) are not trajectories and are not imported.
    A directory holding no trajectory file (*.traj) at all is refused (exit 2), except with
    --follow, which keeps running, imports each trajectory again as SWE-agent rewrites it after
    each step (one read cut short waits for the next poll), and waits for trajectories to come."""
    if follow:
        _follow(functools.partial(follow_files, store, "swe-agent", list(paths), interval=interval, skip_bad=skip_bad), as_json,
                swe_agent.NOUN)
        return
    _check_sessions_found(list(paths), "SWE-agent", given=True, pattern="*.traj", noun="trajectory",
                          finished=finished)
    _print_summary(import_swe_agent(store, list(paths), skip_bad=skip_bad, finished=finished), as_json)


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
    bar = update = None
    if everything and not (output in (None, "-") and sys.stdout.isatty()):  # a bar amid the lines it prints would garble both
        bar, update = _progress("exporting")  # a minute or more at millions of events
    if format_ == "markdown":
        chunks = [export_markdown(store, str(thread))]
    elif format_ == "anthropic":
        chunks = [json.dumps(anthropic_request(store, str(thread), model=model), ensure_ascii=False, indent=2) + "\n"]
    else:
        chunks = dump_lines(export_all(store, progress=update) if everything else export_events(store, str(thread)))
    if output is None or output == "-":
        with bar or contextlib.nullcontext():
            for chunk in chunks:
                # Text UTF-8 cannot hold (raw SQL stored it) refused, as a file's write refuses it: shown
                # escaped, it made a backup that looked whole and that no restore takes.
                chunk.encode("utf-8")
                click.echo(safe_block(chunk) if format_ == "markdown" else safe_json(chunk), nl=False)
    else:
        with bar or contextlib.nullcontext():
            write_atomically(output, (chunk.encode("utf-8") for chunk in chunks), "the export", keep=store.files)
        if special_file(output) is None:  # a path printed after `-o /dev/stdout` would end the export
            click.echo(safe(output))
    if everything:
        check_restorable(store)
