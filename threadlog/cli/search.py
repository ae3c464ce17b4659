"""Full-text search (`threadlog search`) and its index (`threadlog index`), which a search
first brings up to date."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from eventstore import Store
from eventstore.errors import NotPermitted, named
from projections.search import rebuild_index, search, tools_in_other_case, update_index

from .. import output
from ..names import THREAD
from ..render import counted, hit_line, safe
from .group import _committed, cli
from .opening import with_store
from .options import _stated, json_option
from .printing import _emit_json, _progress


# What a catch-up of the index and a rebuild say they do; each says what Ctrl-C leaves.
_CATCH_UP = "indexing for search (Ctrl-C keeps what is done)"
_REBUILD = "rebuilding the search index (Ctrl-C keeps the old one)"


class _Indexing:
    """What a catch-up of the search index says while it runs, once it needs more than one
    commit (the first search of a large log), or a rebuild once it needs more than one batch:
    a progress bar on stderr when it is a terminal, else one line saying what it does."""

    def __init__(self, label: str = _CATCH_UP) -> None:
        self.label = label
        self.bar: Any = None
        self.update: Callable[[int, int], None] = lambda done, total: None
        self.told = False

    def __call__(self, done: int, total: int) -> None:
        if not sys.stderr.isatty():
            if not self.told and done < total:
                click.echo(f"{self.label}: {total:,} events to index", err=True)
                self.told = True
            return
        if self.bar is None:
            if done >= total:
                return
            self.bar, self.update = _progress(self.label)
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
    """Bring the search index up to date (searches do this themselves), or rebuild it.
    Without --rebuild it first checks that the index holds every document it wrote (none
    removed or copied by hand), which a search on PostgreSQL does not: counting them there
    costs about 80 ms a million."""
    if not rebuild:  # first: a refusal leaves the index as it was, new events not caught up
        store.check_index()
    with _Indexing(_REBUILD if rebuild else _CATCH_UP) as progress:
        read = rebuild_index(store, progress) if rebuild else update_index(store, progress)
    _committed(f"{'rebuilt' if rebuild else 'updated'} the search index")
    position = store.index_position()
    if as_json:
        _emit_json({"rebuilt": rebuild, "events_read": read, "position": position})
    else:
        click.echo(f"{'rebuilt' if rebuild else 'updated'}: {counted(read, 'event')} read; the index covers positions up to {position}")
