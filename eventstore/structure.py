"""The engine's check of a file's structure (`Backend.damaged`) during a full verify, and the
refusal of a file it finds damaged.

The check (SQLite's `integrity_check`: ~4 s of a verify of 2.2M events) runs without
Python's lock, beside the scan, on another core: on a thread of this process (`start`) when
the log is checked in one scan, or in the process checking a split verify's later part
(`eventstore.splitscan`), which reports what it found (`reported`). On two cores the first
part's process, hosting the check, ended 2.5 s after the later part's (13.3 s against 10.8 s);
hosted by the later part, which has less to scan, the two ended within 0.5 s of each other.
"""

from __future__ import annotations

import threading

from .backend import Backend
from .errors import IntegrityError, ReadersHeldOff


class Structure:
    """One verify's check of the file's structure: started here, reported from elsewhere, or
    (neither) run within the verify's own read when its result is wanted (`check`)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.found: str | None = None
        self.done = False
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> Structure:
        """Run the check on a thread of its own, beside whatever this process does next."""
        self.found, self.done, self.error = None, False, None
        self.thread = threading.Thread(target=self._run, name="threadlog structure check", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.found, self.done = self.backend.damaged(beside=True), True
        except BaseException as error:  # raised where the verify waits for it
            self.error = error

    def reported(self, found: str | None) -> None:
        """What the check run elsewhere (a split verify's later part) found."""
        self.found, self.done = found, True

    def wait(self) -> tuple[bool, str | None]:
        """(whether the started check ran, what it found): it did not run when a writer waiting to
        commit held its connection off, or an error stopped it; `check` then runs it again."""
        if self.thread is not None:
            self.thread.join()
        return self.done, self.found

    def check(self) -> None:
        """Refuse a file whose engine finds its structure damaged, once every row verified: an
        index that disagrees with its table lets reads miss events (`log`, `export`) that the
        scan, which reads the table, found whole. A check not run beside (or held off: outside
        WAL mode a writer waiting on this read keeps new readers off) runs within this read."""
        done, found = self.wait()
        if isinstance(self.error, ReadersHeldOff):
            self.error = None
        if self.error is not None:
            raise self.error
        refuse_damage(found if done else self.backend.damaged())


def refuse_damage(found: str | None) -> None:
    if found is not None:
        raise IntegrityError(None, f"the database's structure is damaged ({found}): reads through its indexes can miss "
                                   "or misplace events, though every event's hash holds; rebuild the indexes (sqlite3 FILE "
                                   "REINDEX) on a copy, verify it, or restore from a backup")
