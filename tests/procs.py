"""Starting and reading worker processes: those of `tests/workers.py`, and workers started
together past their imports (`started_together`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

WORKERS = str(Path(__file__).resolve().parent / "workers.py")


class Worker:
    """A child process whose stdout lines (JSON) are collected by a background thread."""

    def __init__(self, mode: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, WORKERS, mode, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.lines: list[dict[str, Any]] = []
        self.torn = ""  # a last line cut short by a kill: never an acknowledgement
        self.ready = threading.Event()
        self.changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                self.torn = line
                break
            record = json.loads(line)
            with self.changed:
                self.lines.append(record)
                self.changed.notify_all()
            if record.get("op") == "ready":
                self.ready.set()
        self.ready.set()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, count: int, op: str = "ack", timeout: float = 30.0) -> None:
        """Block until `count` lines of kind `op` have arrived (or the child has exited)."""
        with self.changed:
            self.changed.wait_for(
                lambda: sum(1 for r in self.lines if r.get("op") == op) >= count or not self._reader.is_alive(),
                timeout=timeout,
            )

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> bool:
        """Block until a line satisfying `predicate` has arrived (False if the child exited first)."""
        with self.changed:
            return self.changed.wait_for(
                lambda: any(predicate(r) for r in self.lines) or not self._reader.is_alive(), timeout=timeout
            ) and any(predicate(r) for r in self.lines)

    def kill(self) -> str:
        """SIGKILL the child; returns what it wrote on stderr."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)
        return self._close()

    def tell(self, line: str = "go") -> None:
        """Write a line to the child's stdin (a worker that waits for one goes on)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _close(self) -> str:
        assert self.proc.stdout is not None and self.proc.stderr is not None and self.proc.stdin is not None
        with contextlib.suppress(OSError):  # a child killed or gone: its end of the pipe is closed
            self.proc.stdin.close()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return err

    def wait(self, timeout: float = 120.0) -> str:
        """Wait for the child to exit by itself; returns its stderr."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("worker did not finish in time") from None
        self._reader.join(timeout=30)
        return self._close()

    def finish(self, timeout: float = 120.0) -> str:
        """Wait for a normal exit; returns stderr. Fails on a non-zero exit."""
        err = self.wait(timeout)
        assert self.proc.returncode == 0, f"worker exited {self.proc.returncode}: {self.lines[-3:]} {err[-2000:]}"
        return err

    def of(self, op: str) -> list[dict[str, Any]]:
        return [r for r in self.lines if r.get("op") == op]


def announced_url(proc: subprocess.Popen[str]) -> str:
    """The URL a `threadlog serve --port 0` child says it serves at, from its line on stderr
    (written once the port is its own; a warning a library prints may come before it). A port
    picked here and closed before the child bound it could be taken by another process in between."""
    assert proc.stderr is not None
    seen = ""
    while line := proc.stderr.readline():
        if line.startswith("serving ") and " at http://" in line:
            return line.split(" at ")[-1].split()[0].rstrip("/")
        seen += line
    raise AssertionError(f"threadlog serve did not start: {seen[-2000:]}")


def interruptible(argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """A child that Ctrl-C (SIGINT) stops however this test was started: a background job of a
    non-interactive shell ignores SIGINT, its children inherit that, and a Python started with
    SIGINT ignored never raises KeyboardInterrupt. Its fault handler is on, so a child that
    does not stop shows where each of its threads was (`ctrl_c`)."""
    env = {**(popen.pop("env", None) or os.environ), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen(argv, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), env=env, **popen)


def ctrl_c(proc: subprocess.Popen[Any], timeout: float = 30.0) -> tuple[Any, Any]:
    """SIGINT `proc` and read what it wrote; a child still running after `timeout` is stopped
    with SIGABRT, which makes its fault handler print every thread's stack, and the test fails
    with them (never leaving the child running into the next test)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        stacks = err.decode("utf-8", "replace") if isinstance(err, bytes) else str(err or "")
        raise AssertionError(f"{proc.args!r} did not stop within {timeout} s of Ctrl-C; where it was:\n{stacks[-4000:]}") from None


@contextlib.contextmanager
def started_together(argvs: list[list[str]]) -> Iterator[list[subprocess.Popen[str]]]:
    """`python ARGV…` for each argv, workers that print `ready` once imported and then wait for a
    line: all are started, then all told to go at once (past their slow imports). On the way
    out a worker still running is killed, and every pipe is closed (also when an assertion cut
    the test short)."""
    procs = [subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for argv in argvs]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def all_done(procs: list[subprocess.Popen[str]], timeout: float) -> None:
    """Wait for each worker to exit 0 having printed `done` (its stderr's end shown if not)."""
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0 and out.strip() == "done", err[-3000:]


def bound_by_file_modes(*capabilities: str) -> list[str]:
    """The command prefix that runs a process held to file modes as any user is (nothing as
    an ordinary user; as root, `setpriv` without `capabilities`, e.g. "dac_override", which
    let root write or read past them), or skips the test where that cannot be done."""
    import shutil

    import pytest

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv to run a process as root held to file modes")
    return [setpriv, "--bounding-set", ",".join(f"-{name}" for name in capabilities), "--"]
