"""Signal handlers set for the length of a block: the CLI's SIGTERM and SIGHUP unwinding a
command as Ctrl-C does, a live turn holding Ctrl-C off while it closes its run, and a count
that a signal does not cut in two (`deferred`).

Python runs signal handlers in the main thread only, and only there may they be set; in
any other thread the block runs with the handlers as they are.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

Handler = Callable[[int, Any], Any] | int | signal.Handlers

# The signals a handler set by `handled` caught while a `deferred` block runs, handled as it
# ends (None: no such block runs).
_caught: list[tuple[Callable[[int, Any], Any], int, Any]] | None = None


@contextlib.contextmanager
def handled(signums: Iterable[int], handler: Handler) -> Iterator[None]:
    """`handler` for each of `signums` inside the block, the handlers before put back after.
    A signal that comes while a `deferred` block runs is handled as that block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if callable(handler):
        handler = _waiting_for_deferred(handler)
    before = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, previous)


def _waiting_for_deferred(handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    def handle(signum: int, frame: Any) -> Any:
        if _caught is not None:
            _caught.append((handler, signum, frame))
            return None
        return handler(signum, frame)

    return handle


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block that the handlers set by `handled` do not interrupt: a signal that comes while
    it runs is handled as it ends, in turn (a handler raising drops the ones after it). For a
    count: a handler raising `KeyboardInterrupt` between the bytecodes of a merge left a
    follower's total short of what it had written. Open in an open one, it adds nothing; in
    a thread other than the main one (where no handler runs), nothing."""
    global _caught
    if threading.current_thread() is not threading.main_thread() or _caught is not None:
        yield
        return
    _caught = []
    try:
        yield
    finally:
        caught = _caught  # a signal from here on is handled at once
        _caught = None
        for handler, signum, frame in caught:
            handler(signum, frame)
