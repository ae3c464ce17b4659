"""threadlog's own export (`threadlog export --format events`) back in, with identical hashes.

The file is read as it goes (a backup can be larger than memory); `Store.restore` writes it
in one transaction and refuses it whole if any line is malformed or any hash differs. Several
files are written in one transaction too: all, or none.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from eventstore import InvalidEvent, RestoreReport, Store
from eventstore.prepare import MAX_EVENT_BYTES

from .lines import HEAD_BYTES, existing_paths, not_text
from .origin import RUN, WHAT, first_line_of, opening_of


# The longest line an export holds: one event, its data and its meta at most 32 MiB of JSON each,
# with its ids, times and hashes. A longer one (a device, a file that is no export) is refused,
# not read whole.
MAX_LINE_BYTES = 2 * MAX_EVENT_BYTES + 2**20

# What a file the import refuses should have been (`not_text`).
FORMAT = "a threadlog export (JSON Lines text)"


# How many bytes read between two reports of a restore's progress.
TELL_EVERY = 2**20


class _Read:
    """How far a restore has read its files, in bytes, told to `progress(done, total)` at every
    `TELL_EVERY` and at the end of each file; `total` is the files' sizes (a pipe's bytes count
    as they are read, its size unknown). `done == total` once every file is read, and only
    then: what comes next (a check of every stream written, the commit) is not counted, and
    took half a minute at 2.2M events, so a reader may say it."""

    def __init__(self, files: list[Path], progress: Callable[[int, int], None]) -> None:
        self.total = sum(path.stat().st_size for path in files if path.is_file())
        self.done = self.told = 0
        self.unread = len(files)
        self.progress = progress

    def add(self, count: int) -> None:
        self.done += count
        if self.done - self.told >= TELL_EVERY:
            self.tell()

    def tell(self) -> None:
        self.told = self.done
        self.progress(self.done, self.done if not self.unread else max(self.total, self.done + 1))

    def ended(self) -> None:
        """One file read to its end."""
        self.unread -= 1
        self.tell()


def _lines(path: Path, read: _Read | None = None) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as handle:
        head = handle.peek(HEAD_BYTES)
        why = not_text(path, head, FORMAT)
        if why is not None:
            raise InvalidEvent("line 1", why)
        if handle.peek(len(codecs.BOM_UTF8)).startswith(codecs.BOM_UTF8):  # a Windows editor's byte order mark
            handle.read(len(codecs.BOM_UTF8))
            if read is not None:
                read.add(len(codecs.BOM_UTF8))
        first = True
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
            if read is not None:
                read.add(len(raw))
            if len(raw) > MAX_LINE_BYTES:
                raise InvalidEvent(f"line {number}", f"is longer than {MAX_LINE_BYTES // 2**20} MiB; an export line holds "
                                   f"one event, its data and its meta at most {MAX_EVENT_BYTES // 2**20} MiB of JSON each")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise InvalidEvent(f"line {number}", f"is not UTF-8 ({error.reason} at byte {error.start})") from None
            except (ValueError, RecursionError) as error:
                _refuse_another_tools(number, opening_of(head) if first else None)
                raise InvalidEvent(f"line {number}", f"is not JSON ({error})") from None
            if first:
                _refuse_another_tools(number, first_line_of(record))
                first = False
            yield number, record
        if read is not None:
            read.ended()


def _refuse_another_tools(number: int, tool: str | None) -> None:
    """Refuse a file `tool` wrote (a Claude Code or pi session, a SWE-agent trajectory) naming
    the command that imports it: it was "not a threadlog export", or its first line "not JSON"."""
    if tool is not None:
        raise InvalidEvent(f"line {number}", f"{WHAT[tool]}, not a threadlog export: {RUN[tool]}")


def import_events(store: Store, path: str | Path) -> RestoreReport:
    """Restore one export file into `store`; errors name the file and line."""
    return import_event_files(store, [path])[0]


def import_event_files(store: Store, paths: Iterable[str | Path],
                       progress: Callable[[int, int], None] | None = None) -> list[RestoreReport]:
    """Restore export files into `store` in order, in one transaction: all of them, or, when
    any is refused, none (an error names its file and line). `progress(done, total)` is told
    the bytes read of them all as they are read (`_Read`): a restore of millions of events
    takes minutes."""
    # All, before any is read; each is read once, as it comes, so a pipe (`<(zcat backup.gz)`) is one too.
    files = existing_paths(paths, "name files `threadlog export` wrote", directories=False, pipes=True)
    read = None if progress is None else _Read(files, progress)
    return store.restore_many((str(path), _lines(path, read)) for path in files)
