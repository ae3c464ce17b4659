"""Signal handlers set for the length of a block: the CLI's SIGTERM and SIGHUP unwinding a
command as Ctrl-C does, a live turn holding Ctrl-C off while it closes its run.

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


@contextlib.contextmanager
def handled(signums: Iterable[int], handler: Handler) -> Iterator[None]:
    """`handler` for each of `signums` inside the block, the handlers before put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, previous)
