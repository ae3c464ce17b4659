"""`threadlog.interrupt.waking`: a Ctrl-C that did not interrupt a blocking read (it came just
before the read began) still stops the process, within a tick. Real processes, real signals.

The race itself lasts microseconds; here it is made to last: the main thread blocks SIGINT, so
the SIGINT sent lands on another thread, which trips Python's handler without interrupting the
main thread's read, exactly as a SIGINT landing just before the read does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import contextlib, signal, socket, sys, threading, time
sys.path.insert(0, sys.argv[1])
from threadlog.interrupt import waking

def elsewhere():  # takes SIGINT (not SIGALRM): Python's handler trips, the main thread's read goes on
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
threading.Thread(target=elsewhere, daemon=True).start()
silent, _ = socket.socketpair()
try:
    with waking() if sys.argv[2] == "waking" else contextlib.nullcontext():
        print("reading", flush=True)
        silent.recv(1)  # nothing is ever sent
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def reading(mode: str, tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(ROOT), mode], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "reading"
    time.sleep(0.5)  # into the read (a SIGINT sent before it trips the handler that the read then sees)
    return proc


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers on this platform")
def test_a_ctrl_c_that_missed_the_read_stops_it_within_a_tick(tmp_path: Path) -> None:
    proc = reading("waking", tmp_path)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "interrupted" and proc.returncode == 0


def test_without_it_such_a_ctrl_c_waits_for_data_that_never_comes(tmp_path: Path) -> None:
    """The race as the test makes it, without `waking`: still reading a second later."""
    proc = reading("plain", tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=1)
    finally:
        proc.kill()
        proc.communicate()
