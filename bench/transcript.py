"""Transcript of a thread holding about 4 MB of text: its time against reading the same
events, and the peak memory of a process that builds it.

The transcript is bounded (512 KiB by default), so building it must not hold the whole
thread in memory: the peak is measured in a fresh process (`python -m bench.transcript DB
THREAD` prints it as JSON), from its resident set before and after the call.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threadlog import Store

from . import threads
from .machine import peak_rss_kib
from .timing import Measure, compare, interleave

GROUP = "transcript"

# (text bytes per thread, bytes per message, rounds) per mode
SIZES = {"smoke": ((200_000,), 2_000, 3), "quick": ((4_000_000,), 2_000, 9), "full": ((4_000_000, 16_000_000), 2_000, 15)}


def _transcript() -> Callable[..., Any] | None:
    try:
        from threadlog import transcript
    except ImportError:
        return None
    return transcript


def measure_memory(db: str, thread: str) -> dict[str, Any]:
    """In this process: the peak of the Python heap while one transcript is built
    (tracemalloc), and the resident-set high-water mark before and after it."""
    transcript = _transcript()
    assert transcript is not None
    store = Store(db)
    before = peak_rss_kib()
    tracemalloc.start()
    text = transcript(store, thread)
    _, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = peak_rss_kib()
    return {"heap_peak_bytes": heap_peak, "rss_before_kib": before, "rss_peak_kib": after,
            "rss_growth_kib": after - before, "transcript_bytes": len(text.encode("utf-8"))}


def _memory_in_fresh_process(db: Path, thread: str) -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "bench.transcript", str(db), thread], cwd=root, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def run(mode: str, workdir: Path) -> list[Measure]:
    sizes, per_message, rounds = SIZES[mode]
    transcript = _transcript()
    out = []
    for total in sizes:
        name = f"transcript of {total / 1e6:g} MB of text"
        if transcript is None:
            out.append(Measure(GROUP, name, 0.0, "s", extra={"skipped": "projections not available"}))
            continue
        db = workdir / f"transcript-{total}.db"
        store = Store(db)
        thread, built = threads.build(store, total // per_message + 1, size=per_message)

        def timer(fn: Callable[[], Any]) -> Callable[[], float]:
            def sample() -> float:
                start = time.perf_counter()
                fn()
                return time.perf_counter() - start
            return sample

        samples = interleave({
            "transcript": timer(lambda: transcript(store, thread)),  # noqa: B023
            "read": timer(lambda: sum(1 for _ in store.read(thread))),  # noqa: B023
        }, rounds)
        store.close()
        memory = _memory_in_fresh_process(db, thread)
        out.append(compare(GROUP, name, samples, "transcript", "read", label="read of the same events", kind="cost",
                           target="transcript", setup={"build (s)": round(built, 2)}, text_bytes=total, **memory))
        out.append(Measure(GROUP, f"  peak Python heap while building it ({total / 1e6:g} MB thread)", memory["heap_peak_bytes"],
                           "bytes", extra={"rss_growth_kib": memory["rss_growth_kib"]}))
    return out


if __name__ == "__main__":
    print(json.dumps(measure_memory(sys.argv[1], sys.argv[2])))
