"""Opening the store a command names: its --db, else the group's (or $THREADLOG_DB), else
./threadlog.db. Reads open it read-only and never create it; a command refused leaves no
empty database behind where there was none."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from eventstore import Store, StoreError
from eventstore.errors import EmptyFile, NoStore, SchemaTooOld, empty_file
from eventstore.sqlite import holds_no_table
from eventstore.store import is_url, special_file

from ..names import ThreadType, resolve
from ..render import safe, shell_word
from .options import DEFAULT_DB, db_option, timeout_option


def _waiting() -> None:
    click.echo("waiting for another writer… (--timeout sets how long)", err=True)


def _waiting_to_migrate(path: str) -> Callable[[], None]:
    """What a read command says as it waits for the write lock to migrate an older file: it
    takes no --timeout (reads wait for no writer), so the command that migrates the file
    waiting as long as told is named instead."""
    def say() -> None:
        init = f"threadlog init --db {shell_word(path)} --timeout SECONDS"
        click.echo(f"waiting for another writer… ({safe(path)} is from an older release and is migrated before it is "
                   f"read; `{init}` migrates it, waiting as long as told)", err=True)

    return say


def _migrating(path: str) -> Callable[[int, int], None]:
    """What an opening says on a terminal as it starts migrating `path`: said nothing, a large
    file's migration (16 s from schema 6 at 2.2M events) looked like a command that hung.
    Piped, stderr holds what it did (a refusal stays one line)."""
    def say(old: int, new: int) -> None:
        if sys.stderr.isatty():
            click.echo(safe(f"migrating {path} from schema {old} to {new} (once; a large file takes a while)"), err=True)

    return say


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
    writable: dict[str, Any] = ({"timeout": timeout} if url else
                                {"timeout": timeout, "on_wait": _waiting, "on_migrate": _migrating(path)})
    if url and mode in ("write", "search"):  # as a missing file is: opened writable, the schema was made
        try:
            Store(path, timeout=timeout, read_only=True).close()
        except NoStore as error:
            raise _no_store(error) from None
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
    except NoStore as error:
        raise _no_store(error) from None
    except SchemaTooOld:
        migrating = writable if url else {**writable, "on_wait": _waiting_to_migrate(path)}
        Store(path, **migrating).close()  # migrates, or says why it cannot
        return Store(path, timeout=timeout, read_only=True)


def _no_store(error: NoStore) -> StoreError:
    """A database with no store, as a missing file is refused: by every command but those that
    make one, each saying how to make it."""
    return StoreError(f"{error.where} holds no threadlog store yet; create one with `threadlog init` "
                      "(or check --db / $THREADLOG_DB); nothing was written")


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


def _remove_if_empty(path: str) -> None:
    """A refused command leaves no database behind where there was none (`threadlog new
    --db typo.db …` refused, an import of a bad file into a new file): the file it created
    is removed while it holds no thread. One that does (an import that wrote sessions
    before refusing one) is kept."""
    if not os.path.isfile(path):
        return  # the command failed before creating it (opening it again would create it)
    # Read-only, and not at all when it holds no table: opened writable, such a file was made a
    # database first, which the full disk that refused the command refused again, and it stayed.
    if not holds_no_table(path):
        try:
            with Store(path, timeout=0, read_only=True) as store:
                if store.counts() != (0, 0):
                    return
        except EmptyFile:
            pass  # no table: nothing written
        except StoreError:
            return  # not ours to judge: leave it
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def _pass_db(db: str | None) -> None:
    """`threadlog GROUP --db X SUBCOMMAND …`: the subcommands read the root's --db."""
    if db:
        click.get_current_context().find_root().params["db"] = db
