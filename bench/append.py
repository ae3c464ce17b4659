"""Appends: one event per call at synchronous FULL and NORMAL, and 1,000 events per call.

The baseline is raw `sqlite3` writing the same rows into an identical `events` table
(the store's own schema, same indexes, same journal mode and `synchronous`, rows packed as
the store packs them: time-ordered 16-byte ids, 32-byte hashes), with no validation,
hashing or head bookkeeping: `BEGIN; INSERT; COMMIT` per event, and `BEGIN; executemany;
COMMIT` per batch.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from eventstore.ids import event_id
from eventstore.packing import pack_id
from eventstore.sqlite import INSERT_EVENT, SQLiteBackend
from threadlog import Store

from .timing import Measure, compare, interleave

GROUP = "append"
TEXT = "Find me a train from Paris to Lyon tomorrow morning, before nine if there is one."

# (single appends per sample, rounds, batch rounds) per mode
SIZES = {"smoke": (20, 3, 2), "quick": (200, 15, 15), "full": (500, 25, 25)}


def message(i: int) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant", "content": TEXT}}


class RawLog:
    """A raw connection to a file with the store's schema, inserting rows shaped like the store's."""

    def __init__(self, path: Path, synchronous: str) -> None:
        backend = SQLiteBackend(path, synchronous=synchronous)  # creates the identical schema
        store = Store(backend)
        self.thread = store.create_thread(title="raw")
        store.append_message(self.thread, "user", TEXT)
        self.template = backend.conn.execute(
            "SELECT position, stream_id, \"offset\", event_id, type, schema_version, data, meta, recorded_at, "
            "data_digest, hash, pending FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        store.close()
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.offset = 2

    def rows(self, count: int) -> list[tuple[Any, ...]]:
        """`count` fresh rows (new offsets, event ids and hashes), made before the clock starts."""
        out = []
        for _ in range(count):
            t = self.template
            out.append((None, t[1], self.offset, pack_id(event_id()), t[4], t[5], t[6], t[7], t[8], t[9],
                        os.urandom(32), None, None))
            self.offset += 1
        return out

    def insert_each(self, rows: list[tuple[Any, ...]]) -> float:
        execute = self.conn.execute
        start = time.perf_counter()
        for row in rows:
            execute("BEGIN")
            execute(INSERT_EVENT, row)
            execute("COMMIT")
        return (time.perf_counter() - start) / len(rows)

    def insert_batch(self, rows: list[tuple[Any, ...]]) -> float:
        start = time.perf_counter()
        self.conn.execute("BEGIN")
        self.conn.executemany(INSERT_EVENT, rows)
        self.conn.execute("COMMIT")
        return time.perf_counter() - start


def _single(workdir: Path, synchronous: str, per_sample: int, rounds: int) -> Measure:
    store = Store(workdir / f"append-{synchronous.lower()}.db", synchronous=synchronous)
    thread = store.create_thread(title="append")
    raw = RawLog(workdir / f"append-raw-{synchronous.lower()}.db", synchronous)

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(per_sample):
            store.append_message(thread, "user", TEXT)
        return (time.perf_counter() - start) / per_sample

    def baseline() -> float:
        return raw.insert_each(raw.rows(per_sample))

    samples = interleave({"threadlog": ours, "raw": baseline}, rounds)
    store.close()
    return compare(GROUP, f"append 1 event, synchronous={synchronous}", samples, "threadlog", "raw",
                   label="raw BEGIN/INSERT/COMMIT", target=f"append_{synchronous.lower()}", per_sample=per_sample)


def _batch(workdir: Path, rounds: int, size: int = 1000) -> Measure:
    store = Store(workdir / "batch.db")
    thread = store.create_thread(title="batch")
    raw = RawLog(workdir / "batch-raw.db", "NORMAL")
    events = [message(i) for i in range(size)]

    def ours() -> float:
        start = time.perf_counter()
        store.append(thread, events)
        return time.perf_counter() - start

    def baseline() -> float:
        return raw.insert_batch(raw.rows(size))

    samples = interleave({"threadlog": ours, "raw": baseline}, rounds)
    store.close()
    return compare(GROUP, f"append batch of {size:,} events", samples, "threadlog", "raw",
                   label="raw executemany", target="batch")


def run(mode: str, workdir: Path) -> list[Measure]:
    per_sample, rounds, batch_rounds = SIZES[mode]
    return [
        _single(workdir, "FULL", per_sample, rounds),
        _single(workdir, "NORMAL", per_sample, rounds),
        _batch(workdir, batch_rounds),
    ]
