"""THREAD arguments as people type them: a unique id prefix (as git takes), or `@last`.

The CLI resolves every THREAD argument through `resolve` once the store is open, and
completes thread ids in bash, zsh and fish through click's completion (`ThreadType`).
"""

from __future__ import annotations

import os

import click
from click.shell_completion import CompletionItem

from eventstore import Store, StoreError
from eventstore.errors import named

LAST = "@last"
_SHOWN = 8  # candidates named in an ambiguity error


class AmbiguousName(StoreError):
    """A THREAD name that starts several ids: `matches` holds the first of them (at most 8)."""

    def __init__(self, name: str, matches: list[str], more: bool) -> None:
        self.name, self.matches = name, matches
        super().__init__(f"{named(name)} is ambiguous: it starts the ids {', '.join(matches)}{', …' if more else ''}; type more of the id")


class Unresolved(StoreError):
    """A THREAD name that names no thread: `why` says so; the message adds what to do at the
    command line (the web viewer shows `why` alone)."""

    def __init__(self, why: str, advice: str) -> None:
        self.why = why
        super().__init__(f"{why}; {advice}")


def resolve(store: Store, name: str) -> str:
    """The full id `name` stands for: itself, `@last` (the most recently active thread, forks
    included), or the one id it is a prefix of. Refuses an unknown or ambiguous name."""
    if name == LAST:
        latest = store.threads(limit=1)
        if not latest:
            raise Unresolved(f"{LAST}: {store.path} holds no thread yet", "start one with `threadlog new`")
        return latest[0].id
    if not name:  # `threadlog show "$t"` with t never set
        raise Unresolved("the thread given is empty (a shell variable not set?)", "`threadlog ls --all` lists them")
    matches = store.ids_starting(name, _SHOWN + 1)
    if name in matches or not matches:
        if not matches:
            starts = f"@; `{LAST}` names the most recently active thread" if name.startswith("@") else "it"
            raise Unresolved(f"thread {named(name)} not found (no thread id starts with {starts})", "`threadlog ls --all` lists them")
        return name
    if len(matches) == 1:
        return matches[0]
    raise AmbiguousName(name, matches[:_SHOWN], len(matches) > _SHOWN)


class ThreadType(click.types.StringParamType):
    """A THREAD argument: kept as typed (the command resolves it once the store is open) and
    completed from the database named by --db or $THREADLOG_DB."""

    name = "thread"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        path = ctx.params.get("db") or ctx.find_root().params.get("db") or os.environ.get("THREADLOG_DB") or "threadlog.db"
        items = [CompletionItem(LAST)] if LAST.startswith(incomplete) else []
        try:
            with Store(path, read_only=True) as store:
                items += [CompletionItem(i) for i in store.ids_starting(incomplete, 50)]
        except StoreError:
            pass  # no database (yet): nothing to complete
        return items


THREAD = ThreadType()
