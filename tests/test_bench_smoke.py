"""`python -m bench --smoke` runs every scenario group and writes a valid results file.

Benchmarks are not tests: nothing here looks at a figure, only at the shape of the record.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

from threadlog import Store

ROOT = Path(__file__).resolve().parent.parent


def test_bench_smoke_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out), "--workdir", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["mode"] == "smoke"
    env = record["environment"]
    for key in ("python", "sqlite", "journal_mode", "synchronous", "machine"):
        assert env[key]
    groups = {r["group"] for r in record["results"]}
    assert groups == {"append", "fork", "read", "transcript", "live", "import", "search", "alternatives", "cli", "sessions",
                      "web", "scale"}
    measured = [r for r in record["results"] if "skipped" not in r.get("extra", {})]
    assert all(r["value"] > 0 for r in measured)
    assert {t["target"] for t in record["targets"]} >= {"append_full", "append_normal", "batch", "fork_growth", "import_speed", "import_memory", "cli_content"}
    assert "scenario" in done.stdout and "ratio" in done.stdout


def test_the_lean_table_stores_the_text_threadlog_stores(tmp_path: Path) -> None:
    """The scale rows time the lean side's encoding of the same messages: it must make the
    very text threadlog stores, or the two sides would not be doing the same work (nor
    would the file sizes compare the same rows)."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench.scale import Lean, _messages
    finally:
        sys.path.remove(str(ROOT))
    with Store(tmp_path / "t.db") as store:
        thread = store.create_thread(title="same")
        messages = _messages(random.Random(3), 1, 40) + [
            {"type": "message.appended", "data": {"role": "user", "content": 'quote " back \\ é 💡 \u2028 \x00 <b>'}}]
        store.append(thread, messages)
    with contextlib.closing(sqlite3.connect(tmp_path / "t.db")) as conn:
        stored = [row[0] for row in conn.execute(
            "SELECT data FROM events WHERE stream_id = ? AND \"offset\" > 0 ORDER BY \"offset\"", (thread,))]
    assert stored == [Lean.data(message) for message in messages]
