"""`python -m bench [--full | --smoke] [--json PATH] [--only GROUP,...]`

Runs the scenario groups, prints one table of ratios against baselines measured in the same
run, judges the targets, and writes everything (with the machine it ran on) as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import (alternatives, append, cli, fork, importing, live, machine, postgresql, read, scale, search, sessions, targets,
               transcript, web)
from .timing import Measure

GROUPS = {"append": append, "fork": fork, "read": read, "transcript": transcript, "live": live, "import": importing,
          "search": search, "alternatives": alternatives, "cli": cli, "sessions": sessions, "web": web, "scale": scale,
          "postgresql": postgresql}
# Groups a plain run leaves out: they need more than this checkout (a PostgreSQL server's binaries).
OPT_IN = {"postgresql"}
RESULTS = Path(__file__).resolve().parent / "results.json"


def _value(value: float, unit: str) -> str:
    if unit == "bytes":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if value >= scale:
                return f"{value / scale:.1f} {name}"
        return f"{value:.0f} B"
    for scale, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.3g} {name}"
    return f"{value * 1e9:.0f} ns"


def table(measures: list[Measure], verdicts: list[dict[str, Any]], markdown: bool = False) -> str:
    judged = {v["target"]: v for v in verdicts}
    rows = [("scenario", "threadlog", "baseline", "baseline value", "ratio", "target")]
    for m in measures:
        if "skipped" in m.extra:
            rows.append((m.name, "skipped", m.extra["skipped"], "", "", ""))
            continue
        ratio = f"{m.ratio:.3g}x" if m.ratio is not None else ""
        base = _value(m.baseline_value, m.unit) if m.baseline_value is not None else ""
        target = m.extra.get("target")
        if target and m.ratio is not None:
            rule = next(t for t in targets.TARGETS if t.id == target)
            verdict = "" if judged[target]["pass"] is None else " pass" if rule.judge(m.ratio) else " FAIL"
            target = f"{rule.wanted}{verdict}"
        rows.append((m.name, _value(m.value, m.unit), m.baseline_name or "", base, ratio, target or ""))
    if markdown:
        lines = ["| " + " | ".join(cell.strip().replace("|", "\\|") for cell in row) + " |" for row in rows]
        lines.insert(1, "|" + "---|" * len(rows[0]))
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the large sizes (1,000,000-event forks); takes minutes")
    size.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: checks that every scenario runs")
    parser.add_argument("--json", type=Path, help="where to write the results (default bench/results-MODE.json)")
    parser.add_argument("--only", help=f"comma-separated groups to run, of: {', '.join(GROUPS)}")
    parser.add_argument("--backend", dest="engine", choices=["sqlite", "postgresql"], default="sqlite",
                        help="postgresql: run the PostgreSQL group (a throwaway cluster, raw psycopg baselines)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (as in the README)")
    parser.add_argument("--workdir", type=Path, help="keep the databases here instead of a temporary directory")
    parser.add_argument("--scale", type=int, nargs="?", const=2_000_000, metavar="N",
                        help="only the scale scenario: N messages in N/1,000 threads, then N/10 forks (default 2,000,000)")
    args = parser.parse_args(argv)
    mode = "full" if args.full else "smoke" if args.smoke else "quick"
    if args.scale is not None:
        mode = f"scale-{args.scale}"
    # The scale group builds a file of its own (minutes): run by --scale or --only scale, and
    # in smoke mode (a toy size), which runs every scenario.
    everything = [g for g in GROUPS if (g != "scale" or mode == "smoke") and g not in OPT_IN]
    chosen = ["scale"] if args.scale is not None else args.only.split(",") if args.only else everything
    if args.engine == "postgresql" and not args.only:
        chosen = ["postgresql"]
    unknown = [g for g in chosen if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group {unknown[0]!r}; choose from {', '.join(GROUPS)}")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="threadlog-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    measures: list[Measure] = []
    timings: dict[str, float] = {}
    try:
        env = machine.describe(workdir)
        for name in chosen:
            start = time.perf_counter()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            group_dir = workdir / name
            group_dir.mkdir(exist_ok=True)
            if args.scale is not None:
                measures.extend(scale.run_scale(args.scale, group_dir))
            else:
                measures.extend(GROUPS[name].run(mode, group_dir))
            timings[name] = round(time.perf_counter() - start, 1)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    verdicts = targets.judge(measures, mode)
    print(table(measures, verdicts, args.markdown))
    print()
    if mode == "smoke":
        print("smoke mode: sizes too small to judge the targets")
    for v in verdicts:
        if args.scale is not None and v["ratio"] is None:
            continue
        state = "n/a " if v["pass"] is None else "pass" if v["pass"] else "FAIL"
        ratio = f"{v['ratio']:.3g}x" if v["ratio"] is not None else "not measured"
        print(f"{state}  {v['what']}: {ratio} (target {v['wanted']})")
    elapsed = round(time.perf_counter() - began, 1)
    print(f"\n{mode} mode, {elapsed} s; {env['python']}, SQLite {env['sqlite']}, journal_mode={env['journal_mode']}, "
          f"synchronous={env['synchronous']} (default)")
    out = args.json or RESULTS.parent / f"results-{mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"mode": mode, "seconds": elapsed, "group_seconds": timings, "environment": env,
              "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
              "results": [m.to_json() for m in measures], "targets": verdicts}
    out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"results written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
