"""Writing a file atomically: a temporary file beside it, fsynced, then renamed over it.

A crash at any point leaves either the old file or the new one, never a truncated mix, and
the temporary file is removed if anything fails before the rename (a crash can still leave a
hidden `.NAME.*.tmp`). Modes: a file that replaces a regular file keeps that file's mode; a
new file gets the mode the umask allows (0644 under umask 022, 0600 under 077), as `open`
would give it. A symlink to a regular file (or to nothing) is replaced by the new file: it
is not followed, and the file it pointed to is left as it was.

What is not a regular file is written to, as a shell's `>` would, never replaced: a device
(`/dev/null`, a terminal), a pipe, or a symlink to one (`/dev/stdout`). A rename over one
made it a regular file (as root, `/dev/null` itself). And `keep` names files no write may
touch, a database's own (`Store.files`): written over, the database was gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from eventstore.errors import InvalidEvent, shown
from eventstore.store import special_file, unnamable


def write_atomically(path: str | os.PathLike[str], chunks: Iterable[bytes], what: str = "the file",
                     keep: Iterable[str] = ()) -> Path:
    """Write `chunks` to `path` atomically; returns the path. `what` names it in errors; `path`
    may not be one of the files `keep` names."""
    with staged(path, chunks, what, keep) as target:
        return target


def check_path(path: Any, what: str) -> None:
    """Refuse a `path` to write `what` to that is no file path (None: a TypeError from `os`), or
    that no file can have (a NUL, a lone surrogate: ValueError or UnicodeEncodeError)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidEvent("path", f"must be a file path to write {what} to, not {type(path).__name__}")
    if unnamable(path):
        raise InvalidEvent("path", f"{shown(os.fspath(path))} cannot name a file: it holds a character no file name can "
                                   "(a NUL, or a lone surrogate)")


@contextlib.contextmanager
def staged(path: str | os.PathLike[str], chunks: Iterable[bytes], what: str = "the file",
           keep: Iterable[str] = ()) -> Iterator[Path]:
    """`write_atomically`, with the rename held back until the `with` block succeeds: the file is
    written and synced beside `path` first, and left out (removed, `path` untouched) when the
    block raises. For a file that names something the block makes, e.g. the transcript a
    note fork points at: neither is left without the other when the block is refused. A
    device or a pipe is written once the block succeeds (see the module doc)."""
    check_path(path, what)
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"is a directory: name a file to write {what} to", str(target))
    _refuse_kept(target, keep, what)
    if special_file(str(target)) is not None:
        yield target
        with _naming(target), open(target, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
        return
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"no such directory to write {what} in", str(directory))
    with _naming(target):
        fd, tmp = _create_temporary(directory, target.name)
    try:
        with contextlib.suppress(FileNotFoundError):
            replaced = os.lstat(target)
            if stat.S_ISREG(replaced.st_mode):
                os.fchmod(fd, stat.S_IMODE(replaced.st_mode))
        with _naming(target), os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        yield target
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable; not every platform can open a directory
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def _naming(target: Path) -> Iterator[None]:
    """An `OSError` raised inside names `target`: a failed write named no file (`[Errno 28] No
    space left on device`), and a failed creation the hidden temporary file, a name the caller
    never gave."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(target)) from None


def _refuse_kept(target: Path, keep: Iterable[str], what: str) -> None:
    """Refuse a target that is (or links to) one of the files `keep` names."""
    real = os.path.realpath(target)
    for kept in keep:
        same = real == os.path.realpath(kept)
        with contextlib.suppress(OSError):  # either may not exist: then only the names can agree
            same = same or os.path.samefile(target, kept)
        if same:
            raise InvalidEvent("path", f"{str(target)!r} is the database's own file {kept!r}: {what} written there would "
                               "destroy the database; name another file (nothing was written)")


def _create_temporary(directory: Path, name: str) -> tuple[int, str]:
    """A new, empty file beside the target, created with mode 0666 less the umask (the mode a
    new file should get; `tempfile.mkstemp` would force 0600), never an existing path."""
    while True:
        tmp = str(directory / f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
