"""Ctrl-C that stops a command waiting on the network, whenever it comes.

Python raises `KeyboardInterrupt` from its SIGINT handler when the main thread next checks for
signals. A blocking read checks when a signal interrupts it; but a SIGINT that lands after the
last check and before the read begins interrupts nothing: the read then waits for data, and an
API that stops sending mid-answer never sends any. (Measured: 1 `ask --stream` in 150, Ctrl-C
sent as the first words were printed, kept waiting.) While `waking()` is open, a timer signal
every 0.1 s interrupts whatever read is waiting, which sees the pending SIGINT and raises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

TICK = 0.1  # seconds: the longest a Ctrl-C that came at the wrong moment waits


@contextlib.contextmanager
def waking() -> Iterator[None]:
    """Interrupt blocking calls every `TICK` seconds (a no-op SIGALRM) while open, so a SIGINT
    is seen at once. Only in the main thread (the only one signals are handled in) and where
    interval timers exist; elsewhere it does nothing. Python retries a call a signal interrupted
    (PEP 475), so nothing else notices the ticks. The previous handler and timer come back on exit."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    before = signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before)
        signal.signal(signal.SIGALRM, previous)
