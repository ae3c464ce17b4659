"""What a result was measured on: machine, Python, SQLite, journal mode, `synchronous`."""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from threadlog import Store


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
