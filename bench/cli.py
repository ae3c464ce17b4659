"""Cold CLI appends: `threadlog append --content FILE` against `threadlog append --text`; and
a cold `threadlog ls` against a cold `python -c` reading the same rows with sqlite3.

A shell loop or a hook appends one event per process, so what it pays is a cold start. Each
sample is a fresh process appending to the same database; the content files hold a text
block, a text and a tool_use block, and a tool_result block (every tool call with an id of
its own, the call a result answers recorded just before, untimed). The baseline is a cold
`--text` append, measured in the same rounds. Target: content at most 1.5x text.

A script listing or printing threads (one process per thread) pays the command's start, not the
read: the baseline of a cold `ls` is a cold interpreter that imports sqlite3 and runs a SELECT of
the same threads. Target: `ls` at most 8x it (6.56x in a quick run once a command loaded only
its own module, 10.1x before; the machine was busy for both).
"""

from __future__ import annotations

import compileall
import copy
import functools
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from threadlog import Store

from .timing import Measure, Sample, compare, interleave

GROUP = "cli"
SIZES = {"smoke": 2, "quick": 10, "full": 20}  # rounds
TEXT = "Find me a train from Paris to Lyon tomorrow morning, before nine if there is one."
CONTENTS: dict[str, list[dict[str, Any]]] = {
    "text": [{"type": "text", "text": TEXT}],
    "tool_use": [{"type": "text", "text": "Let me look."},
                 {"type": "tool_use", "id": "toolu_01", "name": "search_trains",
                  "input": {"from": "Paris", "to": "Lyon", "before": "09:00"}}],
    "tool_result": [{"type": "tool_result", "tool_use_id": "toolu_01",
                     "content": [{"type": "text", "text": "07:04 TGV 6601, 08:04 TGV 6603"}]}],
}


def _compiled() -> None:
    """Write the bytecode of every module of the three packages before the first sample: a cold
    start is timed as an installed release starts (pip compiles a package as it installs it),
    not with a compile of each source edited since it last ran, or of every source where
    PYTHONDONTWRITEBYTECODE is set (the imports then write none, and each sample compiled
    them all: the same code's cold `ls` read 10.3x-11.8x uncompiled, 5.5x-6.6x compiled)."""
    import eventstore
    import projections
    import threadlog

    for package in (eventstore, projections, threadlog):
        compileall.compile_dir(Path(package.__path__[0]), quiet=1)


def _cold(args: list[str], command: tuple[str, ...] = ("-m", "threadlog.cli")) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *command, *args], check=True, capture_output=True)
    return time.perf_counter() - start


# What `ls` reads, as a script would read it with no library: the threads, most recent first.
_SELECT = ("import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT id, kind, head, facts FROM streams "
           "ORDER BY last_position DESC LIMIT 50').fetchall())")


def run(mode: str, workdir: Path) -> list[Measure]:
    """Each variant appends to a thread of its own; a tool call's id is fresh every sample, and
    the tool_result variant's call is recorded (untimed, in process) just before its sample."""
    _compiled()
    db = workdir / "cli.db"
    store = Store(db)
    threads = {name: store.create_thread(title=name) for name in ["--text", *CONTENTS]}
    calls = itertools.count()

    def content(name: str, role: str) -> float:
        blocks = copy.deepcopy(CONTENTS[name])
        call_id = f"toolu_{next(calls):04d}"
        for block in blocks:
            block.update({"id": call_id} if "id" in block else {"tool_use_id": call_id} if "tool_use_id" in block else {})
        if name == "tool_result":
            store.append_message(threads[name], "assistant", [{"type": "tool_use", "id": call_id, "name": "search_trains",
                                                               "input": {}}])
        path = workdir / f"{name}.json"
        path.write_text(json.dumps(blocks))
        return _cold(["--db", str(db), "append", threads[name], "--role", role, "--content", str(path)])

    variants: dict[str, Sample] = {
        "--text": lambda: _cold(["--db", str(db), "append", threads["--text"], "--role", "user", "--text", TEXT])}
    for name in CONTENTS:
        variants[name] = functools.partial(content, name, "user" if name == "tool_result" else "assistant")
    variants["ls"] = lambda: _cold(["--db", str(db), "ls"])
    variants["select"] = lambda: _cold([str(db)], ("-c", _SELECT))
    samples = interleave(variants, SIZES[mode])
    store.close()
    return [*(compare(GROUP, f"cold CLI append --content ({name} blocks)", samples, name, "--text",
                      label="cold CLI append --text", kind="cost", target="cli_content") for name in CONTENTS),
            compare(GROUP, "cold CLI ls", samples, "ls", "select", label="cold python -c sqlite3 SELECT", kind="cost",
                    target="cli_ls")]
