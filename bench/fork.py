"""Forks of threads of 10, 10,000 and (with --full) 1,000,000 events, at the head and in the middle.

A fork writes one `streams` row and one `thread.forked` event whatever the parent's size,
so its cost must not grow with the parent. All parents live in one database file, the way
a store holds many threads, so the figures differ only in the parent's size; each size is
compared with the same kind of fork of a 10-event thread, interleaved in the same rounds.
Rows and bytes written are counted per fork: rows from the tables' counts, logical bytes
from the lengths of the values written, and WAL bytes from the log after one fork.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventstore.sqlite import SQLiteBackend
from threadlog import Store

from . import threads
from .timing import Measure, compare, interleave

GROUP = "fork"

# (parent sizes, forks per sample, rounds) per mode
SIZES = {
    "smoke": ((10, 1_000), 5, 3),
    "quick": ((10, 10_000, 100_000), 20, 15),
    "full": ((10, 10_000, 1_000_000), 20, 25),
}

ROW_BYTES = {
    "streams": "coalesce(length(id),0)+coalesce(length(parent_id),0)+8*5+coalesce(length(kind),0)"
    "+coalesce(length(head_hash),0)+coalesce(length(facts),0)",
    "events": "coalesce(length(stream_id),0)+8*3+length(event_id)+length(type)+length(data)+length(meta)"
    "+length(recorded_at)+length(data_digest)+length(hash)+coalesce(length(pending),0)",
}


def _written(conn: sqlite3.Connection, since_position: int, since_streams: int) -> tuple[int, int]:
    """(rows, logical bytes) added since a position and a streams row count."""
    events, ev_bytes = conn.execute(f"SELECT count(*), coalesce(sum({ROW_BYTES['events']}),0) FROM events "
                                    "WHERE position > ?", (since_position,)).fetchone()
    streams, st_bytes = conn.execute(f"SELECT count(*), coalesce(sum({ROW_BYTES['streams']}),0) FROM streams "
                                     "WHERE rowid > ?", (since_streams,)).fetchone()
    return events + streams, ev_bytes + st_bytes


def _footprint(store: Store, conn: sqlite3.Connection, path: Path, thread: str, at: int | None,
               forks: int = 10) -> dict[str, Any]:
    """Rows, logical bytes and WAL bytes written per fork, averaged over `forks` forks.

    WAL bytes are whole pages (each with its 24-byte frame header): every B-tree page a
    commit touches, so they vary with where the rows land, never with the parent's size.
    """
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    position = conn.execute("SELECT coalesce(max(position),0) FROM events").fetchone()[0]
    streams_rowid = conn.execute("SELECT coalesce(max(rowid),0) FROM streams").fetchone()[0]
    for _ in range(forks):
        store.fork(thread, at=at)
    rows, logical = _written(conn, position, streams_rowid)
    wal = Path(f"{path}-wal")
    wal_bytes = wal.stat().st_size - 32 if wal.exists() else 0  # less the WAL's own header
    return {"rows_per_fork": rows / forks, "bytes_per_fork": round(logical / forks),
            "wal_bytes_per_fork": round(wal_bytes / forks)}


def run(mode: str, workdir: Path) -> list[Measure]:
    sizes, per_sample, rounds = SIZES[mode]
    path = workdir / "fork.db"
    backend = SQLiteBackend(path)  # kept: the footprint is read from its connection
    store = Store(backend)
    parents: dict[int, str] = {}
    setup: dict[str, float] = {}
    for size in sizes:
        parents[size], seconds = threads.build(store, size)
        setup[f"build {size:,} events (s)"] = round(seconds, 2)
    backend.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def forker(size: int, where: str) -> Callable[[], float]:
        thread = parents[size]
        at = None if where == "head" else size // 2

        def sample() -> float:
            start = time.perf_counter()
            for _ in range(per_sample):
                store.fork(thread, at=at)
            return (time.perf_counter() - start) / per_sample

        return sample

    variants = {f"{where} {size}": forker(size, where) for size in sizes for where in ("head", "middle")}
    samples = interleave(variants, rounds)
    out = []
    largest = max(sizes)
    for size in sizes:
        for where in ("head", "middle"):
            footprint = _footprint(store, backend.conn, path, parents[size], None if where == "head" else size // 2)
            extra: dict[str, Any] = {**footprint, "parent_events": size}
            if size == largest:
                extra["target"] = "fork_growth"
                extra["setup"] = setup
            written = (f"{footprint['rows_per_fork']:g} rows, {footprint['bytes_per_fork']} B, "
                       f"{footprint['wal_bytes_per_fork'] / 1e3:.0f} kB WAL")
            out.append(compare(GROUP, f"fork at {where} of {size:,} events ({written})", samples, f"{where} {size}", f"{where} 10",
                               label=f"fork at {where} of 10 events", kind="cost", **extra))
    out[0].extra["db_bytes"] = os.path.getsize(path)
    store.close()
    return out
