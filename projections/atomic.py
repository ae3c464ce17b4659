"""Writing a file atomically: a temporary file beside it, fsynced, then renamed over it.

A crash at any point leaves either the old file or the new one, never a truncated mix, and
the temporary file is removed if anything fails before the rename (a crash can still leave a
hidden `.NAME.*.tmp`). Modes: a file that replaces a regular file keeps that file's mode; a
new file gets the mode the umask allows (0644 under umask 022, 0600 under 077), as `open`
would give it. A symlink at the target is replaced by the new file: it is not followed, and
the file it pointed to is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], chunks: Iterable[bytes], what: str = "the file") -> Path:
    """Write `chunks` to `path` atomically; returns the path. `what` names it in errors."""
    with staged(path, chunks, what) as target:
        return target


@contextlib.contextmanager
def staged(path: str | os.PathLike[str], chunks: Iterable[bytes], what: str = "the file") -> Iterator[Path]:
    """`write_atomically`, with the rename held back until the `with` block succeeds: the file is
    written and synced beside `path` first, and left out (removed, `path` untouched) when the
    block raises. For a file that names something the block makes, e.g. the transcript a
    note fork points at: neither is left without the other when the block is refused."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"is a directory: name a file to write {what} to", str(target))
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"no such directory to write {what} in", str(directory))
    fd, tmp = _create_temporary(directory, target.name)
    try:
        with contextlib.suppress(FileNotFoundError):
            replaced = os.lstat(target)
            if stat.S_ISREG(replaced.st_mode):
                os.fchmod(fd, stat.S_IMODE(replaced.st_mode))
        with os.fdopen(fd, "wb") as handle:
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


def _create_temporary(directory: Path, name: str) -> tuple[int, str]:
    """A new, empty file beside the target, created with mode 0666 less the umask (the mode a
    new file should get; `tempfile.mkstemp` would force 0600), never an existing path."""
    while True:
        tmp = str(directory / f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
