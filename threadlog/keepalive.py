"""A stream kept alive by pings alone (`Stall`): closed once no event came for the client's
read timeout.

The API sends `ping` events to keep a quiet stream's connection open, and the anthropic SDK
drops them before its caller sees one; the client's read timeout counts the wait for each
piece of the body, a ping included. So a server that sent pings and nothing else held a turn
open for ever, where one sending nothing failed after the timeout. `Stall` counts the time
spent waiting for the stream's next event, pings or not, against that same timeout, and
closes the response when it runs out: the read then fails, and the turn ends with status
`error`, naming the wait (`StalledStream`); once the answer is whole (`message_stop` came), the
close ends the stream as its end would, and the answer is kept. Time spent outside the wait (the
caller printing text) does not count.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any


class StalledStream(Exception):
    """The stream sent no event within the read timeout (keep-alive pings aside)."""


class Stall:
    """A watch over one stream's waits: `waiting()` before reading its next event, `got()`
    after; `close` is called (on the watch's thread) once one wait outlasts `limit` seconds
    (with no limit, nothing is watched)."""

    def __init__(self, limit: float | None, close: Callable[[], Any]) -> None:
        self.limit = limit
        self.close = close
        self.since: float | None = None  # when the current wait began; None between waits
        self.expired = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="threadlog stream watch", daemon=True)

    def __enter__(self) -> Stall:
        if self.limit is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def waiting(self) -> None:
        self.since = time.monotonic()

    def got(self) -> None:
        self.since = None

    def check(self) -> None:
        """Raise `StalledStream` if the watch closed the stream (what its read raised instead
        says only that the connection closed)."""
        if self.expired:
            raise StalledStream(f"the API sent no event for {self.limit:g} s (the client's read timeout; keep-alive pings "
                                "do not count), so the stream was closed")

    def _watch(self) -> None:
        assert self.limit is not None
        while True:
            since = self.since
            left = self.limit if since is None else since + self.limit - time.monotonic()
            if since is not None and left <= 0:
                self.expired = True
                self.close()
                return
            if self.done.wait(min(left, self.limit)):
                return


def read_timeout(timeout: Any) -> float | None:
    """The read timeout a client's (or a request's) `timeout` setting gives: a number of
    seconds, or an httpx `Timeout`'s `read`; None (no limit) for anything else."""
    value = getattr(timeout, "read", timeout)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None
