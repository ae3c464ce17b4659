"""The integrity badge: the result of `Store.verify`, kept until the log grows.

`verify` reads every event, so it is not run per page: it runs in a background thread
when a page asks for the badge and the log has grown (or was never verified), at most once
every `interval` seconds, and pages show the last finished result meanwhile. The page that starts a run waits a moment for it, so
a small file's first page already shows the answer; other pages never wait. A rewrite that does not add events is
caught on the next run (after the next append, or a restart of the viewer).
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
    def __init__(self, open_store: Callable[[], Store], wait: float = 0.25, interval: float = 10.0) -> None:
        self._open = open_store
        self._wait = wait
        self._interval = interval
        self._last_run: float | None = None
        self._lock = threading.Lock()
        self._badge = Badge("verifying")
        self._running: threading.Thread | None = None
        self._started_for = -1

    def badge(self, last_position: int) -> Badge:
        """The latest result; starts a run when the log has grown past what was verified."""
        with self._lock:
            due = self._last_run is None or time.monotonic() - self._last_run >= self._interval
            if self._running is None and self._started_for != last_position and due:
                self._started_for, self._last_run = last_position, time.monotonic()
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
                    report = store.verify()
                    badge = Badge("ok", report.events, report.redacted, upto=upto)
                except IntegrityError as error:
                    badge = Badge("failed", position=error.position, error=error.why, upto=upto)
        except StoreError as error:
            badge = Badge("failed", error=str(error))
        with self._lock:
            self._badge = badge
            self._running = None
