"""Importing Claude Code sessions: MB/s of JSONL for the largest session, against parsing
the same lines with `json.loads` alone (the floor, measured in the same run), and the peak
memory of a process that imports a directory of ~200 MB of sessions (real files copied
under new names into a temporary directory at run time; nothing is written into the
repository).

The issue's targets are absolute (20 MB/s; under 200 MB of memory for 200 MB of sessions);
the bench judges them as ratios so a slow machine does not fail them alone: the import must
run at >= 0.07x the speed of `json.loads` over the same lines (20 MB/s where `json.loads`
parses ~290 MB/s), and its peak resident memory must stay <= 1x the bytes imported. Both
absolute figures are kept in the results beside the ratios.

`python -m bench --only import` runs it with the other groups; `python -m bench.importing
[DATA_DIR] [--mb 200]` prints one JSON document. DATA_DIR defaults to tests/fixtures/claude-code.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from threadlog import Store, import_claude_code

from .machine import peak_rss_kib
from .timing import Measure, compare, interleave

GROUP = "import"

# (megabytes of sessions for the memory figure, rounds of the speed figure) per mode
SIZES = {"smoke": (4, 2), "quick": (200, 5), "full": (200, 9)}

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "claude-code"


def _largest(data: Path) -> Path:
    return max((p for p in data.rglob("*.jsonl") if not p.name.startswith("agent-")), key=lambda p: p.stat().st_size)


def speed(path: Path, rounds: int = 3) -> dict[str, Any]:
    size = path.stat().st_size
    best_import = best_parse = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            start = time.perf_counter()
            for line in path.read_bytes().splitlines():
                json.loads(line)
            best_parse = min(best_parse, time.perf_counter() - start)
            with Store(Path(tmp) / f"{r}.db") as store:
                start = time.perf_counter()
                import_claude_code(store, [path])
                best_import = min(best_import, time.perf_counter() - start)
    return {"file": path.name, "bytes": size, "import_mb_s": size / best_import / 1e6,
            "json_loads_mb_s": size / best_parse / 1e6, "ratio": best_parse / best_import}


def _peak(db: str, directory: str) -> None:
    with Store(db) as store:
        summary = import_claude_code(store, [directory], skip_bad=True)
    print(json.dumps({"peak_rss_kib": peak_rss_kib(), "events": summary.added}))


def memory(data: Path, megabytes: int) -> dict[str, Any]:
    sessions = [p for p in data.rglob("*.jsonl") if not p.name.startswith("agent-")]
    with tempfile.TemporaryDirectory() as tmp:
        root, total, copies = Path(tmp) / "projects", 0, 0
        root.mkdir()
        while total < megabytes * 1e6:
            for source in sessions:
                shutil.copyfile(source, root / f"{uuid.UUID(int=copies)}.jsonl")
                total += source.stat().st_size
                copies += 1
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "bench.importing", "--peak", str(Path(tmp) / "m.db"), str(root)],
                             check=True, capture_output=True, text=True).stdout
        seconds = time.perf_counter() - start
    return {"bytes": total, "files": copies, "seconds": seconds, **json.loads(out)}


def run(mode: str, workdir: Path) -> list[Measure]:
    megabytes, rounds = SIZES[mode]
    path = _largest(FIXTURES)
    raw = path.read_bytes()
    size = len(raw)
    counter = iter(range(1_000_000))

    def parse() -> float:
        start = time.perf_counter()
        for line in raw.splitlines():
            json.loads(line)
        return time.perf_counter() - start

    def import_() -> float:
        with Store(workdir / f"speed-{next(counter)}.db") as store:
            start = time.perf_counter()
            import_claude_code(store, [path])
            return time.perf_counter() - start

    samples = interleave({"import": import_, "json.loads": parse}, rounds)
    speed_ = compare(GROUP, f"import the largest session ({size / 1e6:.1f} MB)", samples, "import", "json.loads",
                     label="json.loads of the same lines", target="import_speed", bytes=size)
    speed_.extra["import_mb_s"] = round(size / speed_.value / 1e6, 1)
    speed_.extra["json_loads_mb_s"] = round(size / (speed_.baseline_value or 1) / 1e6, 1)
    peak = memory(FIXTURES, megabytes)
    return [speed_, Measure(GROUP, f"  peak memory importing {peak['bytes'] / 1e6:.0f} MB of sessions", peak["peak_rss_kib"] * 1024,
                            "bytes", "bytes imported", peak["bytes"], "cost", 1,
                            {"target": "import_memory", "files": peak["files"], "seconds": round(peak["seconds"], 1)})]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", nargs="?", default=str(FIXTURES))
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--peak", nargs=2, metavar=("DB", "DIR"))
    args = parser.parse_args()
    if args.peak:
        _peak(*args.peak)
        return
    data = Path(args.data)
    print(json.dumps({"speed": speed(_largest(data)), "memory": memory(data, args.mb)}, indent=2))


if __name__ == "__main__":
    main()
