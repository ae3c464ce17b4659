"""What a result was measured on: machine, Python, SQLite, journal mode, `synchronous`."""

from __future__ import annotations

import os
import platform
import resource
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from threadlog import Store


def peak_rss_kib(children: bool = False) -> int:
    """This process's peak resident set since it started running Python (with `children`, the
    larger of that and its waited-for children's), in KiB.

    Not `ru_maxrss` alone: Linux carries the peak of the memory a process had before `exec`
    into it, and a process `subprocess` starts had its parent's (a bench run's, which holds
    what it built) until then. A verify of 2.2M events measured 147 MB that way, 58 MB by its
    own high-water mark (`VmHWM`, the peak of the memory since `exec`). A child's `ru_maxrss`
    carries this process's peak at the time it was started, which this process's own covers."""
    try:
        own = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):  # not Linux: the kernel's figure, as it is
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) if children else own


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(workdir: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = Store(Path(tmp) / "probe.db")
        journal, synchronous = store.journal_mode, store.synchronous
        store.close()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "journal_mode": journal,
        "synchronous": synchronous,
        "synchronous_note": "threadlog default; the append group also runs FULL, the alternatives group runs FULL",
    }
