"""Following session files while another tool writes them: poll, import what is new, repeat.

Polling (stdlib only): a file's size and modification time are checked every `interval`
seconds and a changed session is imported again. Importing is idempotent, so a re-read
adds only the new lines, and restarting the follower resumes from what the database
already holds. A half-written last line is left for the next poll, and so is the last
response until a line of another unit shows it complete, or until the file has been
quiet for `settle` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from eventstore import Store

from .claude_code import import_claude_code
from .summary import ImportSummary


def follow_claude_code(
    store: Store,
    paths: Sequence[str | Path],
    *,
    interval: float = 0.5,
    settle: float = 5.0,
    skip_bad: bool = False,
    on_import: Callable[[ImportSummary], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> ImportSummary:
    """Mirror the sessions under `paths` into `store` until `stop()` returns true.

    `on_import` gets the summary of each poll that added events. Returns the total.
    """
    total = ImportSummary()
    seen: dict[Path, tuple[int, int]] = {}
    quiet_since: dict[Path, float] = {}
    settled: set[Path] = set()
    while not stop():
        changed: list[Path] = []
        now = time.monotonic()
        for path in _files(paths):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            signature = (stat.st_size, stat.st_mtime_ns)
            if seen.get(path) != signature:
                seen[path] = signature
                quiet_since[path] = now
                settled.discard(path)
                changed.append(path)
            elif path not in settled and now - quiet_since[path] >= settle:
                settled.add(path)
                summary = import_claude_code(store, [path], skip_bad=skip_bad)
                _report(total, summary, on_import)
        if changed:
            summary = import_claude_code(store, changed, skip_bad=skip_bad, partial_tail=True)
            _report(total, summary, on_import)
        time.sleep(interval)
    return total


def _files(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*.jsonl")) if not p.name.startswith("agent-"))
        elif path.exists():
            out.append(path)
    return out


def _report(total: ImportSummary, summary: ImportSummary, on_import: Callable[[ImportSummary], None] | None) -> None:
    if summary.added:
        total.merge(summary)
        if on_import is not None:
            on_import(summary)
