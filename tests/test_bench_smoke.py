"""`python -m bench --smoke` runs every scenario group and writes a valid results file.

Benchmarks are not tests: nothing here looks at a figure, only at the shape of the record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
