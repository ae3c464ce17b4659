"""Reading and rebuilding: `read` and `thread_state` of a long thread, and a deep fork chain.

The baseline is what any code reading the same rows must at least do: `SELECT data FROM
events` for the thread's rows plus `json.loads` of each. A fork chain of depth 1,000 with
10 events per segment is read against a flat thread of as many events: one indexed range
scan per ancestor must not cost much more than one scan over a flat thread; its last events,
and a fork at its head, must cost about what they cost on the flat thread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventstore.sqlite import SQLiteBackend
from threadlog import Store

from . import threads
from .timing import Measure, compare, interleave

GROUP = "read"

# (long thread's events, rounds, chain depth, chain rounds) per mode
SIZES = {"smoke": (2_000, 3, 20, 3), "quick": (100_000, 9, 1_000, 11), "full": (100_000, 15, 1_000, 21)}


def _projections() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    try:
        from threadlog import save_snapshot, thread_state
    except ImportError:
        return None
    return thread_state, save_snapshot


def raw_read(conn: sqlite3.Connection, thread: str) -> int:
    """The baseline: the thread's own rows, `SELECT data` and `json.loads` each."""
    rows = conn.execute('SELECT data FROM events WHERE stream_id = ? ORDER BY "offset"', (thread,))
    loads = json.loads
    return len([loads(row[0]) for row in rows])


def chain(store: Store, depth: int, per_segment: int = 10) -> str:
    """A root of `per_segment` events and `depth` forks at the head, each with `per_segment` events."""
    thread, _ = threads.build(store, per_segment, title="chain")
    for _ in range(depth):
        thread = store.fork(thread)
        threads.extend(store, thread, per_segment - 1)
    return thread


def _timer(fn: Callable[[], Any]) -> Callable[[], float]:
    def sample() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return sample


def _snapshot(store: Store, thread: str, thread_state: Callable[..., Any], save_snapshot: Callable[..., Any],
              rounds: int, events: int) -> Measure:
    """The state one event past a snapshot, against the full rebuild of the same state."""
    save_snapshot(store, thread)
    store.append_message(thread, "user", "one more")
    samples = interleave({
        "snapshot": _timer(lambda: thread_state(store, thread)),
        "rebuild": _timer(lambda: thread_state(store, thread, use_snapshots=False)),
    }, rounds)
    return compare(GROUP, f"thread_state one event past a snapshot ({events:,} events)", samples, "snapshot", "rebuild",
                   label="full rebuild (messages not viewed)", kind="cost", target="snapshot")


def run(mode: str, workdir: Path) -> list[Measure]:
    events, rounds, depth, chain_rounds = SIZES[mode]
    backend = SQLiteBackend(workdir / "read.db")  # kept: the baseline reads on the same connection
    store = Store(backend)
    thread, built = threads.build(store, events)
    projections = _projections()
    variants = {
        "read": _timer(lambda: sum(1 for _ in store.read(thread))),
        "raw": _timer(lambda: raw_read(backend.conn, thread)),
    }
    if projections is not None:
        thread_state, save_snapshot = projections
        # The state with its messages viewed (parsed), and as returned (messages parsed on demand).
        variants["thread_state"] = _timer(lambda: len(thread_state(store, thread, use_snapshots=False).messages))
        variants["thread_state lazy"] = _timer(lambda: thread_state(store, thread, use_snapshots=False))
    samples = interleave(variants, rounds)
    out = [compare(GROUP, f"read {events:,} events", samples, "read", "raw", label="SELECT + json.loads",
                   events=events, setup={"build (s)": round(built, 2)})]
    if projections is None:
        out.append(Measure(GROUP, f"thread_state of {events:,} events", 0.0, "s", extra={"skipped": "projections not available"}))
    else:
        out.append(compare(GROUP, f"thread_state of {events:,} events, messages viewed", samples, "thread_state", "raw",
                           label="SELECT + json.loads", target="thread_state"))
        out.append(compare(GROUP, f"thread_state of {events:,} events, messages not viewed", samples, "thread_state lazy",
                           "raw", label="SELECT + json.loads"))
        out.append(_snapshot(store, thread, thread_state, save_snapshot, rounds, events))

    start = time.perf_counter()
    deep = chain(store, depth)
    deep_built = time.perf_counter() - start
    count = store.head(deep)
    flat, _ = threads.build(store, count, title="flat")
    chain_samples = interleave({
        "chain": _timer(lambda: sum(1 for _ in store.read(deep))),
        "flat": _timer(lambda: sum(1 for _ in store.read(flat))),
    }, chain_rounds)
    out.append(compare(GROUP, f"read fork chain of depth {depth:,} ({count:,} events)", chain_samples, "chain", "flat",
                       label=f"read flat thread of {count:,} events", kind="cost", target="chain_read",
                       setup={"build chain (s)": round(deep_built, 2)}))
    # The last events, and a fork at the head, read only the streams holding them.
    tail_samples = interleave({
        "chain": _timer(lambda: sum(1 for _ in store.read(deep, count - 10))),
        "flat": _timer(lambda: sum(1 for _ in store.read(flat, count - 10))),
    }, chain_rounds)
    out.append(compare(GROUP, f"read the last 10 events at fork depth {depth:,}", tail_samples, "chain", "flat",
                       label="the same of the flat thread", kind="cost", target="chain_tail"))
    fork_samples = interleave({"chain": _timer(lambda: store.fork(deep)), "flat": _timer(lambda: store.fork(flat))}, chain_rounds)
    out.append(compare(GROUP, f"fork at the head at fork depth {depth:,}", fork_samples, "chain", "flat",
                       label="fork of the flat thread", kind="cost", target="chain_fork"))
    store.close()
    return out
