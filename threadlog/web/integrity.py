"""The integrity badge: the result of `Store.verify`, kept until the log grows or the next
full check is due.

`verify` reads every event, so it is not run per page: it runs in a background thread
when a page asks for the badge and the log has grown (or was never verified, or a full
check is due), at most once every `interval` seconds, and pages show the last finished
result meanwhile. The page that starts a run waits a moment for it, so a small file's
first page already shows the answer; other pages never wait.

A full run first takes a checkpoint, so the runs after it check only what was appended
since (`verify(since=...)`: their cost follows the new events, not the log); a full run
comes again once `full_every` seconds have passed, and it catches a rewrite of older events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from eventstore import IntegrityError, Store, StoreError


@dataclass(frozen=True, slots=True)
class Badge:
    """`state` is `verifying`, `ok` or `failed`; `position` names the first bad position."""

    state: str
    events: int = 0
    redacted: int = 0
    position: int | None = None
    error: str = ""
    upto: int = 0  # the last position the log held when this result was taken


class Integrity:
    def __init__(self, open_store: Callable[[], Store], wait: float = 0.25, interval: float = 10.0,
                 full_every: float = 300.0) -> None:
        self._open = open_store
        self._full_every = full_every
        self._since: str | None = None  # the checkpoint the last good run extended to
        self._full_at = 0.0  # when the last full run started
        self._counts = (0, 0)  # events and redactions the last good run counted
        self._wait = wait
        self._interval = interval
        self._last_run: float | None = None
        self._lock = threading.Lock()
        self._badge = Badge("verifying")
        self._running: threading.Thread | None = None
        self._started_for = -1

    def badge(self, last_position: int) -> Badge:
        """The latest result; starts a run when the log has grown past what was verified, or
        when the full re-check is due (an event rewritten in place leaves the log as long as
        it was: the badge said verified until the server restarted)."""
        with self._lock:
            now = time.monotonic()
            due = self._last_run is None or now - self._last_run >= self._interval
            changed = self._started_for != last_position or now - self._full_at >= self._full_every
            if self._running is None and changed and due:
                self._started_for, self._last_run = last_position, now
                self._running = threading.Thread(target=self._run, name="threadlog-verify", daemon=True)
                self._running.start()
                started = self._running
            else:
                started = None
        if started is not None:  # only the page that started a run waits for it, and briefly
            started.join(self._wait)
        with self._lock:
            return self._badge

    def join(self, timeout: float | None = None) -> None:
        """Wait for a run in progress to finish (for benchmarks and tests)."""
        with self._lock:
            running = self._running
        if running is not None:
            running.join(timeout)

    def _run(self) -> None:
        try:
            with self._open() as store:
                upto = store.last_position()
                try:
                    badge = self._verify(store, upto)
                except IntegrityError as error:
                    self._since = None
                    badge = Badge("failed", position=error.position, error=error.why, upto=upto)
        except StoreError as error:
            self._since = None
            badge = Badge("failed", error=str(error))
        except Exception as error:  # noqa: BLE001 - a row verify cannot even read is a failed check, and the
            # thread must finish: a run that died would leave the badge at "verifying" and start no other
            self._since = None
            badge = Badge("failed", error=f"verify could not read a stored row ({type(error).__name__}: {error}); "
                                          "the file was altered outside threadlog")
        with self._lock:
            self._badge = badge
            self._running = None

    def _verify(self, store: Store, upto: int) -> Badge:
        """A full verify (from a checkpoint taken first), or only what came since the last."""
        if self._since is None or time.monotonic() - self._full_at >= self._full_every:
            self._full_at = time.monotonic()
            since = store.checkpoint()  # the run below covers at least what this covers
            report = store.verify()
            self._counts = (report.events, report.redacted)
        else:
            report = store.verify(since=self._since)
            assert report.checkpoint is not None  # verify(since=...) always extends it
            since = report.checkpoint
            self._counts = (self._counts[0] + report.events, self._counts[1] + report.redacted)
        self._since = since
        return Badge("ok", *self._counts, upto=upto)
