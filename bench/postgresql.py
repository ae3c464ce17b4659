"""`python -m bench --backend postgresql`: the store on PostgreSQL against raw psycopg, same run.

A throwaway cluster is started for the run (tests/pgcluster.py: initdb and pg_ctl on a Unix
socket, the server's default durability settings: fsync and synchronous_commit on). Raw
baselines use psycopg on a table of the same shape (position, stream, offset, data and the
store's other columns), so the ratios are what threadlog's rules cost on top of the server.

- single append: `append_message` vs one INSERT and COMMIT;
- batch of 1,000: `append` vs COPY of the same rows in one transaction;
- 8 writer processes on distinct threads vs 1 (events/s): pairs of runs in alternating order on
  the same server for the same time, their medians; with the CPU per event of the writers and
  of their server backends, WAL bytes per event and the load average (the machine is shared:
  the ratio is only as good as the cores the writers get); and between them the same pairs of
  raw psycopg writers (one autocommitted INSERT an event), for the scaling the machine gives;
- a reader tailing `read_all(after=…)` during one more 8-writer run, counting positions it
  skipped or saw out of order;
- a fork of a large thread vs a fork of a 10-event one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

from threadlog import Store

from . import threads
from .timing import Measure, compare, interleave

GROUP = "postgresql"

# (single appends per sample, rounds, batch rounds, seconds per writer run, writer rounds, fork parent size)
SIZES = {
    "smoke": (5, 2, 1, 1.0, 1, 1_000),
    "quick": (50, 8, 5, 4.0, 3, 100_000),
    "full": (100, 15, 10, 8.0, 5, 1_000_000),
}

RAW_DDL = (
    "CREATE TABLE raw_events (position bigserial PRIMARY KEY, stream_id text NOT NULL, \"offset\" bigint NOT NULL, "
    "event_id bytea NOT NULL UNIQUE, type smallint, schema_version integer NOT NULL, data text NOT NULL, meta text NOT NULL, "
    "recorded_at bigint, hash bytea NOT NULL, pending text, UNIQUE (stream_id, \"offset\"))"
)
RAW_COLUMNS = 'stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, hash, pending'
DATA = json.dumps({"role": "user", "content": [{"type": "text", "text": threads.text_of(80, 1)}]}, separators=(",", ":"))


class _Raw:
    """Raw psycopg writing the same shape of row: the baseline."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.offset = 0
        self.stream = os.urandom(8).hex()

    def row(self) -> tuple[Any, ...]:
        self.offset += 1
        return (self.stream, self.offset, os.urandom(16), 2, 1, DATA, "{}", time.time_ns() // 1000, os.urandom(32), None)

    def single(self) -> None:
        with self.conn.transaction():
            self.conn.execute(f"INSERT INTO raw_events ({RAW_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", self.row())

    def single_autocommitted(self) -> None:
        """The same INSERT as its own implicit transaction, prepared: one round trip, as the
        store's own append sends when it knows the stream's head."""
        self.conn.execute(f"INSERT INTO raw_events ({RAW_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", self.row(),
                          prepare=True)

    def batch(self, n: int) -> None:
        with self.conn.transaction(), self.conn.cursor() as cursor:
            with cursor.copy(f"COPY raw_events ({RAW_COLUMNS}) FROM STDIN") as copy:
                for _ in range(n):
                    copy.write_row(self.row())


def _server_cpu(postmaster: int) -> float | None:
    """User + system CPU seconds of the server's running processes (the postmaster's children:
    backends, WAL writer, checkpointer), if /proc shows them."""
    total = 0.0
    try:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
            if int(fields[1]) == postmaster:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None
    return total


def _writer(url: str, seconds: float, ready: Any, start: Any, counts: Any, finish: Any, raw: bool) -> None:
    """Append for `seconds` once started; report (appends, seconds, CPU seconds), then keep the
    connection (its server process's CPU is counted) until told to finish. `raw`: the
    baseline's INSERT, autocommitted (`_Raw.single_autocommitted`), in place of the store's append."""
    if raw:
        baseline = _Raw(url)
        append, close = baseline.single_autocommitted, baseline.conn.close
    else:
        store = Store(url)
        thread = store.create_thread(title="writer")
        close = store.close

        def append() -> None:
            store.append_message(thread, "user", "a short message from one of the writers")
    n = 0
    ready.put(True)
    start.wait()
    client, begin = time.process_time(), time.perf_counter()
    end = begin + seconds
    while time.perf_counter() < end:
        append()
        n += 1
    counts.put((n, time.perf_counter() - begin, time.process_time() - client))
    finish.wait()
    close()


def _tailer(url: str, stop: Any, out: Any) -> None:
    """Tail read_all(after=last) as a follower does (a short sleep when nothing is new); report
    (positions seen, out-of-order polls, polls). Skips are counted afterwards: every stored
    position the reader never saw."""
    store = Store(url)
    last = polls = unordered = 0
    seen: list[int] = []
    while True:
        stopping = stop.is_set()
        new = [e.position for e in store.read_all(after=last)]
        unordered += new != sorted(new)
        seen += new
        last = max(new, default=last)
        polls += 1
        if stopping:
            break
        if not new:
            time.sleep(0.005)
    out.put((seen, unordered, polls))
    store.close()


def _writers(url: str, postmaster: int, k: int, seconds: float, tail: bool, raw: bool = False) -> dict[str, Any]:
    """`k` writer processes, each on its own thread, started together (and a tailing reader if
    `tail`): events/s in total and per writer, CPU per event in the writers and in the server,
    WAL bytes per event, and the load average when they started."""
    import psycopg

    ctx = multiprocessing.get_context("spawn")
    start, stop, finish, ready, counts, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, seconds, ready, start, counts, finish, raw)) for _ in range(k)]
    reader = ctx.Process(target=_tailer, args=(url, stop, out)) if tail else None
    for p in procs:
        p.start()
    if reader:
        reader.start()
    for _ in procs:  # every writer has started, connected and created its thread: they run together
        ready.get(timeout=120)
    time.sleep(0.5)  # and the reader has read what is already there
    with psycopg.connect(url, autocommit=True) as conn:
        wal = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        load, server = os.getloadavg()[0], _server_cpu(postmaster)
        start.set()
        done = [counts.get(timeout=seconds + 120) for _ in procs]
        after = _server_cpu(postmaster)
        finish.set()
        wal_bytes = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", wal).fetchone()
    for p in procs:
        p.join()
    events = sum(n for n, *_ in done)
    per_writer = [n / took for n, took, _ in done]
    result: dict[str, Any] = {
        "events_per_s": sum(per_writer), "per_writer_min": min(per_writer), "per_writer_max": max(per_writer),
        "client_cpu_ms": 1000 * sum(cpu for _, _, cpu in done) / max(events, 1),
        "server_cpu_ms": None if server is None or after is None else 1000 * (after - server) / max(events, 1),
        "wal_bytes": float(wal_bytes[0]) / max(events, 1) if wal_bytes else None, "load": load,
    }
    if reader:
        stop.set()
        seen, unordered, polls = out.get(timeout=120)
        reader.join()
        with Store(url) as store:
            stored = [e.position for e in store.read_all()]
        result.update(tail_skipped=len(set(stored) - set(seen)), tail_out_of_order=unordered + (seen != sorted(seen)),
                      tail_seen=len(seen), tail_polls=polls)
    return result


def _writer_measures(url: str, postmaster: int, seconds: float, rounds: int) -> list[Measure]:
    """8 writers vs 1: `rounds` pairs, the two in alternating order, the same server and duration;
    the medians of their rates. The same pairs of raw psycopg writers run between them, each
    event one autocommitted INSERT (`_Raw.single_autocommitted`, one round trip, as the store's
    append): the scaling the server and driver give on this machine with no threadlog at all.
    Then one more 8-writer run with a reader tailing the log, for the reader's own measure (its
    polls cost the writers CPU, so that run is not in the ratio)."""
    runs: dict[tuple[int, bool], list[dict[str, Any]]] = {(k, raw): [] for k in (1, 8) for raw in (False, True)}
    for r in range(rounds):
        for k in ((1, 8) if r % 2 == 0 else (8, 1)):
            for raw in ((False, True) if r % 2 == 0 else (True, False)):
                runs[k, raw].append(_writers(url, postmaster, k, seconds, tail=False, raw=raw))
    tailed = _writers(url, postmaster, 8, seconds, tail=True)

    def med(k: int, key: str, raw: bool = False) -> Any:
        values = [run[key] for run in runs[k, raw] if run[key] is not None]
        return round(statistics.median(values), 3) if values else None

    def ratios(raw: bool) -> list[float]:
        return [round(b["events_per_s"] / a["events_per_s"], 2) for a, b in zip(runs[1, raw], runs[8, raw])]

    one, eight = med(1, "events_per_s"), med(8, "events_per_s")
    raw_one, raw_eight = med(1, "events_per_s", raw=True), med(8, "events_per_s", raw=True)
    figures = {f"{key}_{k}": med(k, key) for k in (1, 8) for key in runs[1, False][0]}
    raw_figures = {f"raw_{key}_{k}": med(k, key, raw=True)
                   for k in (1, 8) for key in ("events_per_s", "client_cpu_ms", "server_cpu_ms")}
    measures = [
        Measure(GROUP, f"8 writer processes vs 1, distinct threads (events/s, median of {rounds})", 1 / eight, "s",
                "1 writer process", 1 / one, "speed", rounds,
                {"target": "pg_writers", "ratios": ratios(False), "seconds": seconds, **figures,
                 "raw_ratio": round(raw_eight / raw_one, 3)}),
        Measure(GROUP, f"raw psycopg: 8 writer processes vs 1 (an autocommitted INSERT each, median of {rounds})", 1 / raw_eight, "s",
                "1 raw writer process", 1 / raw_one, "speed", rounds, {"ratios": ratios(True), **raw_figures}),
        Measure(GROUP, "one of 8 writer processes vs 1 writer alone (events/s)", 8 / eight, "s", "1 writer process",
                1 / one, "speed", rounds, {"per_writer_min_8": med(8, "per_writer_min"),
                                           "per_writer_max_8": med(8, "per_writer_max")}),
    ]
    tail = {key: tailed[key] for key in ("tail_skipped", "tail_out_of_order", "tail_seen", "tail_polls")}
    # Counted as 1 + problems against 1, so the verdict (<= 1x) reads "none at all".
    problems = tail["tail_skipped"] + tail["tail_out_of_order"]
    measures.append(Measure(GROUP, "tailing reader during an 8-writer run: 1 + skipped + out of order", 1.0 + problems,
                            "count", "none", 1.0, "cost", 1,
                            {**tail, "target": "pg_tail", "events_per_s_8_tailed": round(tailed["events_per_s"])}))
    return measures


def run(mode: str, workdir: Path) -> list[Measure]:
    from tests.pgcluster import Cluster, ClusterUnavailable

    per_sample, rounds, batch_rounds, seconds, writer_rounds, fork_size = SIZES[mode]
    try:
        cluster = Cluster(workdir / "cluster" if os.geteuid() != 0 else None)
    except ClusterUnavailable as error:
        return [Measure(GROUP, "postgresql", 0.0, "s", extra={"skipped": str(error)})]
    try:
        return _run(cluster, mode, per_sample, rounds, batch_rounds, seconds, writer_rounds, fork_size)
    finally:
        cluster.stop()


def _run(cluster: Any, mode: str, per_sample: int, rounds: int, batch_rounds: int, seconds: float,
         writer_rounds: int, fork_size: int) -> list[Measure]:
    url = cluster.url()
    cluster.execute(RAW_DDL)
    store, raw = Store(url), _Raw(url)
    thread = store.create_thread(title="single")
    store.append_message(thread, "user", "first")
    measures: list[Measure] = []

    def ours_single() -> float:
        begin = time.perf_counter()
        for _ in range(per_sample):
            store.append_message(thread, "user", threads.text_of(80, 1))
        return (time.perf_counter() - begin) / per_sample

    def raw_single() -> float:
        begin = time.perf_counter()
        for _ in range(per_sample):
            raw.single()
        return (time.perf_counter() - begin) / per_sample

    samples = interleave({"threadlog": ours_single, "raw": raw_single}, rounds)
    measures.append(compare(GROUP, "single append (PostgreSQL)", samples, "threadlog", "raw",
                            label="raw psycopg INSERT + COMMIT", target="pg_append"))

    batch_thread = store.create_thread(title="batch")
    events = threads.messages(0, 1000, 80)

    def ours_batch() -> float:
        begin = time.perf_counter()
        store.append(batch_thread, events)
        return (time.perf_counter() - begin) / 1000

    def raw_batch() -> float:
        begin = time.perf_counter()
        raw.batch(1000)
        return (time.perf_counter() - begin) / 1000

    samples = interleave({"threadlog": ours_batch, "raw": raw_batch}, batch_rounds)
    measures.append(compare(GROUP, "batch append of 1,000 (PostgreSQL, per event)", samples, "threadlog", "raw",
                            label="raw psycopg COPY, one transaction", target="pg_batch"))

    measures += _writer_measures(url, cluster.postmaster_pid(), seconds, writer_rounds)

    small, _ = threads.build(store, 10, title="small")
    large, built = threads.build(store, fork_size, title="large")

    def fork_of(parent: str) -> Any:
        def sample() -> float:
            begin = time.perf_counter()
            for _ in range(per_sample):
                store.fork(parent)
            return (time.perf_counter() - begin) / per_sample
        return sample

    samples = interleave({"large": fork_of(large), "small": fork_of(small)}, rounds)
    measures.append(compare(GROUP, f"fork at {fork_size:,} events vs at 10 (PostgreSQL)", samples, "large", "small",
                            label="fork at 10 events", kind="cost", target="pg_fork", build_seconds=round(built, 1)))
    store.close()
    raw.conn.close()
    return measures
