"""The commands that read threads: `ls`, `log`, `follow`, `tree`, `show`, `rows`,
`transcript`, `blame` and `diff`, and `snapshot`, the cache later reads resume from."""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import click

from eventstore import Store, StoreError, ThreadInfo, ThreadNotFound
from eventstore.errors import Disconnected
from eventstore.ranges import MAX_INDEX
from eventstore.store import is_url, special_file
from projections import diff, display_rows, drop_snapshots, save_snapshot, thread_state, transcript, write_transcript
from projections.lineage import iter_blame

from .. import output
from ..listing import listing, sub_agents
from ..names import THREAD
from ..render import blame_line, diff_lines, event_line, ls_lines, row_line, safe, shell_word, state_lines, tree_lines
from .group import _cli_words, _committed, _interrupted_status, cli
from .opening import _db_path, with_store
from .options import FilePath, PageStart, Seconds, _check_range, json_option, pager_option
from .printing import _emit_json, _emit_json_array, _json


def _one_more(limit: int) -> int:
    """The threads a page of `limit` reads to know whether a next page exists: one more (an `-n`
    past what a count may be reads every thread, with no next page, as asked)."""
    return min(limit, MAX_INDEX - 1) + 1


@cli.command("ls")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Show at most N threads.")
@click.option("--all", "everything", is_flag=True, help="Include forks and sub-agent forks (else root threads only).")
@click.option("--root", type=THREAD, help="Only THREAD and the forks below it (forks included).")
@click.option("--before", type=PageStart(),
              help="The next page: POSITION, the last row's last_position (the threads last active before it), "
                   "or POSITION:THREAD, with the last row's id too (the threads listed after that row, those "
                   "last active at POSITION too included). A page with more after it names the one to give.")
@json_option
@pager_option
@with_store()
def ls(store: Store, limit: int, everything: bool, root: str | None, before: tuple[int, str | None] | None, as_json: bool,
       no_pager: bool) -> None:
    """Threads, most recently active first: id, kind, fork point, messages, last activity, title.

    Last activity is the time of the thread's last event, to the second: in UTC, as threadlog
    records times, or as an importer found it when that names no zone (`--json` keeps it whole).
    The order is the file's (the position of each thread's last event), not those times: an
    import writes sessions in the order of their files, each with its own times.

    A fork whose parent is not in the file (its row deleted, or the fork's parent_id altered,
    outside threadlog: reads of its history are refused) says so after its fork point (`--json`:
    `parent_missing` is true, false on every other row).

    A page with more threads after it ends with where the next begins, on stderr (the rows on
    stdout stay the table): `--before POSITION`, the last row's last_position, or
    `--before POSITION:THREAD`, with its id, when the next thread was last active at that
    position too (threads of one position, which only raw SQL makes, are listed by id, the
    highest first). `--json` prints no such line: each row holds its `last_position` and `id`,
    and `--before LAST_POSITION:ID` of the last row starts the next page, skipping no thread."""
    pages = _Pages(store, limit, before, everything or root is not None, root)
    with store.consistent():  # the pages of one moment, all read before a pager shows them
        first = next(pages, None)
        if first is None and before is None and root is None:
            _check_rootless(store)
        entries = (entry for page in itertools.chain(() if first is None else (first,), pages) for entry in page)
        if as_json:  # printed as read: a list of 202,000 threads' entries, and their JSON, held 906 MB
            _emit_json_array({**entry, "parent_missing": entry["id"] in pages.orphaned} for entry in entries)
            return
        if first is None:  # as `search` says `no match`: on stderr, stdout left empty (it held the table's header alone)
            click.echo(_no_threads(before), err=True)
            return
        lines = ls_lines(entries, pages.orphaned)
        heading = next(lines)  # every row read for the widths: nothing is read once the pager shows them
    output.lines(itertools.chain((heading,), lines), pager=not no_pager)
    if pages.next_page is not None:
        click.echo(f"(next page: the same command with --before {pages.next_page})", err=True)


# Threads `ls` lists at a time: each page's titles and counts are looked up together (`listing`),
# and what a page read is let go once its rows are formatted.
_LISTED_TOGETHER = 1000


class _Pages:
    """`ls`'s entries a page of at most `_LISTED_TOGETHER` threads at a time, `limit` in all:
    read through the index page by page, each from right after the last one's last thread
    (`Store.threads(below=)`: threads tied with it at its position, which only raw SQL makes,
    are neither skipped nor listed twice), or for `--root` from its subtree, read once. Once
    read to the end, `next_page` is where the page after these `limit` threads begins
    (`_next_page`), None when no thread is left after them. `orphaned` holds the listed forks
    whose parent is not in the file, each page's added before its entries are given."""

    def __init__(self, store: Store, limit: int, before: tuple[int, str | None] | None, forks: bool,
                 root: str | None) -> None:
        self.store, self.left, self.start, self.forks, self.root = store, limit, before, forks, root
        self.ended = False
        self.next_page: str | None = None
        self._subtree: list[ThreadInfo] | None = None
        self._listed = 0  # of the subtree's threads, how many earlier pages listed
        self.orphaned: set[str] = set()

    def __iter__(self) -> _Pages:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        if self.ended or self.left <= 0:
            raise StopIteration
        wanted = min(self.left, _LISTED_TOGETHER)
        if self.root is None:
            infos = _threads_from(self.store, _one_more(wanted), self.start, forks=self.forks)
        else:
            if self._subtree is None:
                self._subtree = _threads_from(self.store, _one_more(self.left), self.start, root=self.root)
            infos = self._subtree[self._listed:self._listed + wanted + 1]
            self._listed += wanted
        page, more = infos[:wanted], len(infos) > wanted
        if not page:
            raise StopIteration
        self.left -= len(page)
        self.ended, self.start = not more, (page[-1].last_position, page[-1].id)
        if more and self.left <= 0:
            self.next_page = _next_page(page[-1], infos[wanted])
        self.orphaned |= self.store.orphaned(page)
        return listing(self.store, page)


def _threads_from(store: Store, limit: int, start: tuple[int, str | None] | None, *, forks: bool = True,
                  root: str | None = None) -> list[ThreadInfo]:
    """`Store.threads` from where `--before` (`PageStart`) says a page starts."""
    if start is None or start[1] is None:
        return store.threads(limit, None if start is None else start[0], forks=forks, root=root)
    return store.threads(limit, forks=forks, root=root, below=(start[0], start[1]))


def _next_page(last: ThreadInfo, after: ThreadInfo) -> str:
    """The `--before` of the page after the thread `last`, the next thread being `after`: its
    position alone where `after` was active before it (as it always is but for rows raw SQL
    altered), else with its id too, quoted for a shell (`shell_word`: pasted, it reads back)."""
    if after.last_position < last.last_position:
        return str(last.last_position)
    return shell_word(f"{last.last_position}:{last.id}")


def _no_threads(before: tuple[int, str | None] | None) -> str:
    """What an empty page of `ls` or `tree` says."""
    if before is not None and before[1] is not None:
        return f"no thread after {safe(repr(before[1]))} at position {before[0]}"
    if before is not None:
        return f"no thread before position {before[0]}"
    return "no thread yet: `threadlog new` starts one (`threadlog demo` writes a sample)"


def _check_rootless(store: Store) -> None:
    """An empty first page of a file that holds threads: every root's row was altered (only raw
    SQL gives a root a parent), which an empty listing would hide."""
    _check_placed(store.counts().threads, 0)


def _check_placed(held: int, placed: int) -> None:
    """Of the `held` threads, only `placed` were in a tree: the others' rows name parents in a
    cycle (only raw SQL writes one), so no tree reaches them, which a listing would hide."""
    if held > placed:
        astray = "no root thread" if not placed else f"{held - placed} of them are in no tree"
        raise StoreError(f"the store holds {held} threads but {astray}: their rows were altered outside threadlog "
                         "(`threadlog verify` names where)")


def _check_parents(every: _EveryThread) -> None:
    """Forks whose parents' rows are gone (only raw SQL deletes one): printed at the top of a
    tree of their own, or in `--json` with the `parent_id` no thread printed has, and the
    listing exits as a failure, as a script reading the JSON could not tell otherwise."""
    if every.orphan is not None:
        first = every.orphan
        forks = "a fork names a parent" if every.orphans == 1 else f"{every.orphans} forks name parents"
        printed = "at the top of its own tree" if every.by_tree else "naming it as its parent_id"
        raise StoreError(f"{forks} not in the file ({first.id!r} forks {first.parent_id!r}), each printed {printed}: "
                         "their rows were altered outside threadlog (`threadlog verify` names where)")


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
    if start:
        # A read from `start` checks only the streams holding those offsets: the events of a fork
        # whose parent's row is gone are printed as asked, then what is missing before them is
        # said (exit 1), as a read from its first offset refuses it.
        store.ancestry(thread)


@cli.command()
@click.argument("thread", type=THREAD, required=False)
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Without THREAD: the trees of the N most recently active root threads.")
@click.option("--before", type=PageStart(),
              help="The next page of trees, as `ls --before`: POSITION, the last root's last_position (the roots "
                   "last active before it), or POSITION:THREAD, with its id too (the roots listed after it).")
@click.option("--all", "everything", is_flag=True,
              help="Without THREAD, -n or --before: every tree in the file, oldest first.")
@json_option
@pager_option
@with_store()
def tree(store: Store, thread: str | None, limit: int, before: tuple[int, str | None] | None, everything: bool,
         as_json: bool, no_pager: bool) -> None:
    """The fork tree, with fork offsets and titles: the most recently active roots' trees, or the tree holding THREAD.

    A sub-agent fork's line names its agent and the call that started it, as its metadata does
    (`agentId`, `parentToolUseID`); one `fan-out` made names no agent, and its line names the call
    its placeholder answers and its directive's first words instead. --json gives them whole as
    agent_id, tool_use_id and directive.

    A page of trees with more after it ends with where the next begins, on stderr, as `ls` does
    (`--json` prints no such line: give `--before` the last root's `last_position:id`)."""
    limited = click.get_current_context().get_parameter_source("limit") != click.core.ParameterSource.DEFAULT
    next_page = None  # as `ls`: a page of roots with more after it names where the next begins
    every = None
    if thread is not None and (everything or before is not None or limited):
        raise click.UsageError("-n, --all and --before choose root threads' trees: give them without THREAD")
    paging = [name for name, given in (("-n", limited), ("--before", before is not None)) if given]
    if everything and paging:  # they choose a page of roots, which --all is not: `--all -n 5` printed every tree
        raise click.UsageError(f"--all shows every tree: give it without {' and '.join(paging)}")
    if thread is not None:
        groups: Iterable[Sequence[ThreadInfo]] = [_tree_holding(store, thread)]
    elif everything:  # printed as read: a file of 200,000 forks printed nothing for 7 s, and held them all
        groups = every = _EveryThread(store, by_tree=not as_json)
    else:  # a page of an index, however many threads the file holds
        roots = _threads_from(store, _one_more(limit), before, forks=False)
        next_page = _next_page(roots[limit - 1], roots[limit]) if len(roots) > limit else None
        roots = roots[:limit]
        groups = [[t for root in roots for t in store.subtree(root.id)]]
        if not groups[0] and before is None:
            _check_rootless(store)
    titled = ((threads, store.titles(threads), sub_agents(store, threads)) for threads in groups if threads)
    first = next(titled, None)
    every_titled = itertools.chain(() if first is None else (first,), titled)  # read to see whether any, then put back
    if as_json:  # printed as it goes, as the text is
        _emit_json_array({**t.to_json(), "title": titles[t.id], **agents[t.id].to_json()}
                         for threads, titles, agents in every_titled for t in threads)
    elif first is not None:
        output.lines((line for threads, titles, agents in every_titled for line in tree_lines(threads, titles, agents)),
                     pager=not no_pager)
    if every is not None:  # every thread was read: those of a cycle of parents (raw SQL) were in no tree, left out unsaid
        _check_placed(every.held, every.placed)
        _check_parents(every)
    if as_json:
        return
    if first is None:  # it printed nothing at all
        click.echo(_no_threads(before), err=True)
        return
    if next_page is not None:
        click.echo(f"(next page: the same command with --before {next_page})", err=True)


def _tree_holding(store: Store, thread: str) -> list[ThreadInfo]:
    """The tree `tree THREAD` prints: that of the root THREAD's row names, refused where the rows
    (altered outside threadlog) make it no tree holding THREAD: its top printed as a fork whose
    parent "is not in the file" (it was), or the root's tree printed without THREAD."""
    root = store.ancestry(thread)[0].root_id  # a fork whose parent's row is gone: refused as its reads are
    try:
        threads = store.subtree(root)
    except ThreadNotFound:  # the row names a root that is not in the file
        raise StoreError(f"thread {thread!r} names {root!r} as its root, which is not in the file: its row was altered "
                         "outside threadlog (`threadlog verify` names where)") from None
    if threads[0].parent_id is not None:
        astray = f"thread {thread!r} names {root!r} as its root, which is a fork of {threads[0].parent_id!r}"
    elif all(info.id != thread for info in threads):
        astray = f"thread {thread!r} is not in the tree of its root {root!r}"
    else:
        return threads
    raise StoreError(f"{astray}: their rows were altered outside threadlog (`threadlog verify` names where)")


# Threads of `tree --all --json` whose titles are looked up together (forks of one parent made
# one after the other share the lookups of its history): few, as each costs memory until printed.
_TITLED_TOGETHER = 100


class _EveryThread:
    """`tree --all`'s threads as of one moment, a group at a time: tree by tree for the text,
    which prints each tree whole; in creation order for `--json`, its order. Once read to the
    end, `held` is how many threads the file held at that moment and `placed` how many were
    in a tree: a thread whose parents form a cycle (only raw SQL makes one) is in no tree.
    `orphans` counts the trees whose top is a fork whose parent's row is gone, and `orphan` is
    the first of them: by tree, each group's first thread is its tree's top; in creation order,
    where every thread is given, `Store.strays` finds both once every group is given (a set of
    the ids printed, to look each parent up in, grew with the file)."""

    def __init__(self, store: Store, by_tree: bool) -> None:
        self.store, self.by_tree = store, by_tree
        self.held = self.placed = self.orphans = 0
        self.orphan: ThreadInfo | None = None

    def __iter__(self) -> Iterator[Sequence[ThreadInfo]]:
        with self.store.consistent():
            if self.by_tree:
                groups: Iterator[Sequence[ThreadInfo]] = self.store.trees()
            else:
                threads = self.store.each_thread()
                groups = iter(lambda: list(itertools.islice(threads, _TITLED_TOGETHER)), [])
            for group in groups:
                self.placed += len(group)
                if self.by_tree and group:
                    self._top(group[0])
                yield group
            self.held = self.store.counts().threads
            if not self.by_tree:  # the threads of a cycle were given too, with parent_ids no top reaches
                strays = self.store.strays()
                self.placed -= strays.unplaced
                self.orphans, self.orphan = strays.orphans, strays.first_orphan

    def _top(self, top: ThreadInfo) -> None:
        if top.parent_id is not None:  # a fork at the top of a tree: its parent's row is gone
            self.orphans += 1
            self.orphan = self.orphan or top


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
    state = thread_state(store, thread, at, paged=True)  # printed while the store is open: `--last` reads only those
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
    offset = save_snapshot(store, thread)  # the state after the first `offset` events
    said = f"snapshot of {thread} after its first {offset} events (offsets 0..{offset - 1}, as `show --at {offset}`)"
    _committed(said)
    if as_json:
        _emit_json({"thread": thread, "offset": offset})
    else:
        output.lines([said])


@cli.command()
@click.option("--thread", "thread", type=THREAD, help="Only THREAD's events.")
@click.option("--forks", is_flag=True, help="With --thread: its forks' events too (forks made while following included).")
@click.option("--after", type=click.IntRange(min=0), help="Start after this position (default: the log's end now).")
@click.option("--interval", type=Seconds(least=0.01), default=0.25, show_default=True, help="Seconds between polls.")
@json_option
@with_store()
def follow(store: Store, thread: str | None, forks: bool, after: int | None, interval: float, as_json: bool) -> None:
    """Print events as they are committed, like tail -f (Ctrl-C stops, status 130; SIGTERM 143). --json: JSON lines."""
    if forks and thread is None:
        raise click.UsageError("--forks follows a thread's forks: name the thread with --thread")
    position = store.last_position() if after is None else after
    wanted: set[str] | None = None
    if thread is not None:  # with --forks, the forks there are already (later ones join as their thread.forked goes by)
        wanted = {info.id for info in store.subtree(thread)} if forks else {thread}
    reading = store
    path = _db_path()
    opened = None if is_url(path) else _identity(path)  # the file read, while its path names it
    seen = _event_at(store, position)
    waiting = False
    try:
        while True:
            try:
                for event in reading.read_all(after=position):
                    position, seen = event.position, event.event_id
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
            now = None if opened is None else _identity(path)
            if now is not None and now != opened:
                again = _replacement(path, position, seen, waiting)
                waiting = again is None
                if again is not None:
                    if reading is not store:
                        reading.close()
                    reading, opened, waiting = again, now, False
            time.sleep(interval)
    except KeyboardInterrupt as error:  # its way out: no `interrupted` line, the status alone
        sys.exit(_interrupted_status(error))
    finally:
        if reading is not store:
            reading.close()


def _identity(path: str) -> tuple[int, int] | None:
    """The file `path` names (its device and inode), or None while it names none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _event_at(store: Store, position: int) -> str | None:
    """The id of the event at `position` in `store`, None where it holds none."""
    event = next(store.read_all(after=position - 1, limit=1), None) if position > 0 else None
    return event.event_id if event is not None and event.position == position else None


def _replacement(path: str, position: int, seen: str | None, waiting: bool) -> Store | None:
    """The file now at `path` (a restore put it there, `follow` holding the one it replaced),
    to follow on after `position` where it holds the event `seen` read there; None while it is
    no database yet, or its log ends before `position` (a restore still writing: said once,
    unless `waiting` already). One holding another event there is another history: refused."""
    try:
        again = Store(path, read_only=True)
    except StoreError:
        return None
    last = again.last_position()
    if last < position:
        again.close()
        if not waiting:
            click.echo(f"note: {safe(path)} was replaced by another file, whose log ends at position {last}; following "
                       f"it once it reaches position {position}, the last one read (Ctrl-C stops)", err=True)
        return None
    if _event_at(again, position) != seen:
        again.close()
        raise StoreError(f"{safe(path)} was replaced by a file that holds another event at position {position} than the "
                         f"one read there: it is another history; follow it anew (threadlog follow --after {position} "
                         "prints what it holds past that position)")
    click.echo(f"note: {safe(path)} was replaced by another file; following it after position {position}", err=True)
    return again


def _reconnected(path: str, lost: Disconnected, position: int, interval: float) -> Store:
    """A new read-only store on the server `follow` lost (restarted, or the network down): tried
    again every second or `interval`, whichever is longer, until the server answers, as `tail -F`
    follows a file that comes back. A refusal other than no answer (the store dropped, the
    role's grants revoked) ends `follow` with its message."""
    click.echo(f"note: {safe(_cli_words(str(lost)))}\nnote: following on after position {position} once the server answers "
               "again (Ctrl-C stops)", err=True)
    while True:
        time.sleep(max(interval, 1.0))
        try:
            again = Store(path, read_only=True)
        except Disconnected:
            continue
        click.echo(f"reconnected to {safe(again.path)}", err=True)
        return again
