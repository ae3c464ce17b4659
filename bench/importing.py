"""Importing Claude Code sessions: MB/s of JSONL for the largest session, against parsing
the same file with `json.loads` alone (the floor), and the peak memory of a process that
imports a directory of ~200 MB of sessions (real files copied under new names into a
temporary directory at run time; nothing is written into the repository).

`python -m bench.importing [DATA_DIR] [--mb 200]` prints one JSON document. DATA_DIR
defaults to tests/fixtures/claude-code.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from threadlog import Store, import_claude_code

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
    print(json.dumps({"peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "events": summary.added}))


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
