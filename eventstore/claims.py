"""Claims: a name on a database that one process at a time holds, for as long as it runs.

A follower (`threadlog import pi --follow`) holds one while it runs, so that a second follower
of the same format into the same database is refused at its start: two followers reading one
session a moment apart can take a turn still being written at different points, and the
second then meets the first's event under the same id with other content.

The operating system (or the server) lets go of a claim when its process ends, however it
ends (Ctrl-C, SIGKILL, a crash): no claim is ever left behind to clear by hand.

- SQLite (`file_claim`): an advisory lock (`flock`) on a small file beside the database,
  `<database>-<name>.lock`, which holds the holder's process id for a refusal to name. It is
  emptied, never removed, when the claim is released: removed, a process that had opened it
  just before could lock it while another locked a new file of the same name. The lock is
  the file's own, apart from SQLite's locks on the database (opening the database file itself
  would release those when closed: SQLite's locks are per process). POSIX only: on Windows no
  claim is taken.
- PostgreSQL: a session advisory lock on a connection of its own (`PostgresBackend.claim`).
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from .errors import Claimed, InvalidEvent, StoreError, shown

# A claim's name is part of a file name (`file_claim`): lowercase words joined by hyphens.
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_NAME_CHARS = 64


def check_name(name: Any) -> None:
    """Refuse a claim's name that could not be part of a file name everywhere."""
    if not isinstance(name, str) or len(name) > _NAME_CHARS or not _NAME.fullmatch(name):
        raise InvalidEvent("name", f"a claim's name is lowercase letters and digits in words joined by single hyphens, "
                                   f"at most {_NAME_CHARS} characters (it names a file), not {shown(name)}")


class Claim:
    """A claim held (`Store.claim`): until `release()`, the end of a `with` block, this object's
    collection, or the end of the process, whichever comes first."""

    def __init__(self, release: Callable[[], None], keep: Callable[[], None] | None = None) -> None:
        self._release = weakref.finalize(self, release)  # called once, whichever way it ends
        self._keep = keep

    def keep(self) -> None:
        """Make sure the claim is still held, for a holder that runs on: on PostgreSQL the lock
        goes with its connection, which a restart of the server (or an idle timeout) ends
        unseen; it is then taken again, or `Claimed` raised if another process took it
        meanwhile (`Disconnected` while the server does not answer). A file's lock (SQLite)
        lasts as long as the claim: nothing to do."""
        if self._keep is not None and self._release.alive:
            self._keep()

    def release(self) -> None:
        """Let the claim go (once released, again does nothing)."""
        self._release()

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def unclaimed() -> Claim:
    """What a database no other process can open takes (`:memory:`): nothing to hold."""
    return Claim(lambda: None)


def file_claim(database: str, name: str) -> Claim:
    """The claim `name` on the SQLite file `database`: an exclusive `flock` on
    `<database>-<name>.lock` beside the file the database path names (a symlink followed, as
    SQLite follows it), taken without waiting; `Claimed`, naming the holder's pid, if another
    open file (another process's, or this one's) holds it."""
    if sys.platform == "win32":  # no flock: POSIX only, as the module doc says
        return unclaimed()
    import fcntl

    lock = f"{os.path.realpath(database)}-{name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise StoreError(f"cannot open {lock} ({error.strerror}), the file whose lock keeps a second process from taking "
                         f"the claim {name!r} on {database}; make its directory writable (or create the file there), "
                         "or use a database in a writable directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid(fd)
        os.close(fd)
        raise Claimed(database, name, pid) from None
    except OSError as error:  # a file system without locks (ENOLCK): a claim cannot be told apart from none
        os.close(fd)
        raise StoreError(f"cannot lock {lock} ({error.strerror}): the file system of {database} keeps no locks, so the "
                         f"claim {name!r} cannot be held there; use a database on a local file system") from None
    with suppress(OSError):  # (a full disk: the claim is held, its holder's pid left unknown)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release() -> None:
        with suppress(OSError):
            os.ftruncate(fd, 0)  # no pid of a process that no longer holds it
        os.close(fd)  # the lock goes with the last descriptor of the open file

    return Claim(release)


def _pid(fd: int) -> int | None:
    """The process id the holder of the lock on `fd`'s file wrote there (None if it has not
    yet, or the file holds something else)."""
    text = os.pread(fd, 32, 0).strip()
    return int(text) if text.isdigit() else None
