"""`python -m bench --scale N`: one file grown the way a busy agent service grows one, measured
at its full size beside a lean raw sqlite3 table of the same rows, grown in the same run.

The file: N / 1,000 threads of 1,000 messages (appended in rounds of 100 messages per thread,
so threads interleave as a service's do), then N / 10 forks at random offsets of random
threads (N = 2,000,000: 2,000 threads, 200,000 forks, 2.2M events). The lean table holds the
same rows' data, stream and offset only (`position INTEGER PRIMARY KEY, stream, offset,
data`, one index on stream and offset): what an event store cannot do with less. Both get
every batch in the same order, one after the other, so the machine's mood is shared.

Both appends are timed from the same input, the messages as Python dicts, to their rows
committed: the lean side's time holds its encoding of each message into the text both
store (the fastest way the standard library has: one `json.JSONEncoder`, made once), as
threadlog's holds its own. The lean table's insert alone is reported beside it, no target
on it (`lean insert only`).

Then, at full size, every row of issue 14's table: batch and single appends and the file
size against the lean table; a fork and `thread_state` against the same in a small file;
`threadlog ls`'s first page, a full `verify` (speed and peak memory, each in a child process;
the median of three, interleaved with the raw floor) and `verify --since` against their
budgets. Beside the verify, with no target, the same file read by raw sqlite3 and hashed in
two processes (`_raw_floor`): how fast this machine runs the least a verify must do, in this run.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from threadlog import Store, thread_state
from threadlog.cli import cli

from .timing import Measure, compare, interleave

GROUP = "scale"
WORDS = ("the train to Lyon leaves at nine and arrives before noon please book a seat by the window "
         "thanks which platform does it use can I bring a bike how long is the ride").split()
ROUND = 100  # messages per thread per round of the build


class Lean:
    """The raw baseline: the same rows' stream, offset and data, and nothing else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute('CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT NOT NULL, "offset" INTEGER NOT NULL, '
                          "data TEXT NOT NULL)")
        self.conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream, "offset")')
        self.heads: dict[str, int] = {}

    # The JSON of a message's data, as threadlog stores it: keys in sorted order, no spaces.
    _encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    @classmethod
    def data(cls, event: dict[str, Any]) -> str:
        """The stored text of a text message (`_messages`): the keys are built in sorted order."""
        data = event["data"]
        return cls._encode({"content": [{"text": data["content"], "type": "text"}], "role": data["role"]})

    def rows(self, stream: str, datas: list[str]) -> list[tuple[str, int, str]]:
        head = self.heads.get(stream, 0)
        self.heads[stream] = head + len(datas)
        return [(stream, head + i, data) for i, data in enumerate(datas)]

    def batch(self, rows: list[tuple[str, int, str]]) -> float:
        start = time.perf_counter()
        self.conn.execute("BEGIN")
        self.conn.executemany('INSERT INTO events (stream, "offset", data) VALUES (?,?,?)', rows)
        self.conn.execute("COMMIT")
        return time.perf_counter() - start

    def size(self) -> int:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(self.path)


# The appends are measured as sustained rates: the mean of 6x the other rows' rounds, each
# side's checkpoints included. The lean table's connection copies its WAL into the file
# inside one commit in ~500 (single appends) or ~12 (batches), SQLite's automatic
# checkpoint; the store's checkpoint thread does it every 100 commits or 2,000 events beside
# the writer. A median of 5 short samples left the lean side's checkpoints out: 5 x 50 single
# appends never reached one, and the one batch sample that did was dropped.
SUSTAINED = 6
VERIFIES = 3  # full verifies at full size, each ~10 s at 2.2M events: their median is read


def _sustained(name: str, samples: dict[str, list[float]], label: str, **extra: Any) -> Measure:
    """The means of the two sides' samples (their medians kept beside them)."""
    ours, lean = samples["threadlog"], samples["lean"]
    return Measure(GROUP, name, statistics.mean(ours), "s", label, statistics.mean(lean), "speed", len(ours),
                   {**extra, "statistic": "mean", "median_threadlog": statistics.median(ours),
                    "median_lean": statistics.median(lean)})


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 70)))


def _messages(rng: random.Random, start: int, count: int) -> list[dict[str, Any]]:
    return [{"type": "message.appended", "data": {"role": "user" if (start + i) % 2 else "assistant", "content": _text(rng)}}
            for i in range(count)]


def _file_size(store: Store) -> int:
    store.purge()  # the WAL copied into the file and truncated
    return os.path.getsize(store.path)


def build(workdir: Path, messages: int, log: Any) -> tuple[Store, Lean, list[str], dict[str, Any]]:
    """The scale file and its lean twin; returns them, the root threads and the build's figures."""
    rng = random.Random(14)
    store = Store(workdir / "scale.db")
    lean = Lean(workdir / "lean.db")
    threads = [store.create_thread(title=f"thread {i}") for i in range(max(messages // 1000, 1))]
    for thread in threads:
        lean.batch(lean.rows(thread, ['{"title":"x"}']))
    per_thread = max(messages // len(threads), 1)
    rates: list[tuple[float, float]] = []  # (threadlog, lean) events/s per round
    began = time.perf_counter()
    for start in range(1, per_thread, ROUND):
        count = min(ROUND, per_thread - start)
        ours = theirs = 0.0
        for thread in threads:
            batch = _messages(rng, start, count)
            t0 = time.perf_counter()
            store.append(thread, batch)
            ours += time.perf_counter() - t0
            theirs += lean.batch(lean.rows(thread, [Lean.data(e) for e in batch]))
        done = len(threads) * count
        rates.append((done / ours, done / theirs))
        log(f"  {start + count - 1:,} of {per_thread:,} messages per thread: threadlog {done / ours:,.0f} events/s, "
            f"lean {done / theirs:,.0f} events/s")
    forks = max(messages // 10, 1)
    fork_seconds = 0.0
    for i in range(forks):
        parent = rng.choice(threads)
        at = rng.randint(2, per_thread)
        t0 = time.perf_counter()
        fork = store.fork(parent, at=at)
        fork_seconds += time.perf_counter() - t0
        forked = store.event_at(fork, at).data  # the same thread.forked data, in the lean table
        lean.batch(lean.rows(fork, [json.dumps(forked, separators=(",", ":"), sort_keys=True, ensure_ascii=False)]))
        if (i + 1) % 20_000 == 0:
            log(f"  {i + 1:,} of {forks:,} forks")
    figures = {"build (s)": round(time.perf_counter() - began, 1), "first round events/s": round(rates[0][0]),
               "last round events/s": round(rates[-1][0]), "lean last round events/s": round(rates[-1][1]),
               "fork during build (µs)": round(fork_seconds / forks * 1e6)}
    return store, lean, threads, figures


def _peak_verify(path: Path) -> tuple[float, int, int]:
    """(seconds, events, peak RSS in bytes) of a full verify in a child process. A large log is
    verified in two processes (`eventstore.splitscan`): the peak is the larger of the two."""
    code = ("import sys, time; from threadlog import Store; from bench.machine import peak_rss_kib\n"
            "s = Store(sys.argv[1], read_only=True); t = time.perf_counter(); r = s.verify(); t = time.perf_counter() - t\n"
            "print(t, r.events, peak_rss_kib(children=True) * 1024)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


# The least any verify does with an event, in raw sqlite3 and hashlib: read its row and hash
# its data and a header. No check, no chain: a floor for the machine of the run, not a rival.
_FLOOR = ("import hashlib, sqlite3, sys\n"
          "conn = sqlite3.connect(sys.argv[1]); sha256 = hashlib.sha256\n"
          "for _, stream, offset, data, meta, at in conn.execute(\n"
          "        'SELECT position, stream_id, \"offset\", data, meta, recorded_at FROM events WHERE position > ? AND position <= ?',\n"
          "        (int(sys.argv[2]), int(sys.argv[3]))):\n"
          "    sha256(f'{stream}{offset}{meta}{at}{sha256(data.encode()).hexdigest()}'.encode()).digest()\n")


def _raw_floor(path: Path) -> float:
    """Seconds for two processes, side by side, to read every event row of the file (each half
    of the positions) and hash each twice (`_FLOOR`): what the full verify's two processes do
    at the least, on the machine as it is during this run."""
    with sqlite3.connect(path) as conn:
        last = conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0
    start = time.perf_counter()
    halves = [subprocess.Popen([sys.executable, "-c", _FLOOR, str(path), str(lo), str(hi)])
              for lo, hi in ((0, last // 2), (last // 2, last))]
    if any(half.wait() for half in halves):
        raise RuntimeError("the raw floor's reads failed")
    return time.perf_counter() - start


def run_scale(messages: int, workdir: Path, rounds: int = 5) -> list[Measure]:
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    log(f"building {messages:,} messages in {max(messages // 1000, 1):,} threads, then {max(messages // 10, 1):,} forks ...")
    store, lean, threads, figures = build(workdir, messages, log)
    streams, events = store.counts()
    at = f"at {events / 1e6:.1f}M events"
    rng = random.Random(7)
    out: list[Measure] = []

    # Batch append of 1,000, each to a random thread, beside the lean table's.
    def ours_batch() -> float:
        batch = _messages(rng, 0, 1000)
        start = time.perf_counter()
        store.append(rng.choice(threads), batch)
        return time.perf_counter() - start

    inserts: list[float] = []  # the lean side's insert alone, of each sample

    def lean_batch() -> float:
        batch = _messages(rng, 0, 1000)
        thread = rng.choice(threads)
        start = time.perf_counter()
        rows = lean.rows(thread, [Lean.data(e) for e in batch])
        encoded = time.perf_counter() - start
        inserts.append(lean.batch(rows))
        return encoded + inserts[-1]

    samples = interleave({"threadlog": ours_batch, "lean": lean_batch}, rounds * SUSTAINED)
    out.append(_sustained(f"batch append of 1,000 {at} (mean: sustained)", samples, "lean raw: encode + executemany",
                          target="scale_batch", build=figures))
    out.append(_sustained(f"batch append of 1,000 {at}, against the lean insert alone (no target)",
                          {"threadlog": samples["threadlog"], "lean": inserts[-len(samples["lean"]):]}, "lean insert only"))

    # Single appends at synchronous=NORMAL (the store's default), each to a random thread.
    per_sample = 50
    inserts = []

    def ours_single() -> float:
        texts = [_text(rng) for _ in range(per_sample)]
        chosen = [rng.choice(threads) for _ in range(per_sample)]
        start = time.perf_counter()
        for thread, text in zip(chosen, texts):
            store.append_message(thread, "user", text)
        return (time.perf_counter() - start) / per_sample

    def lean_single() -> float:
        messages = [{"data": {"role": "user", "content": _text(rng)}} for _ in range(per_sample)]
        chosen = [rng.choice(threads) for _ in range(per_sample)]
        encoding = inserting = 0.0
        for thread, message in zip(chosen, messages):
            start = time.perf_counter()
            row = lean.rows(thread, [Lean.data(message)])
            encoding += time.perf_counter() - start
            inserting += lean.batch(row)
        inserts.append(inserting / per_sample)
        return (encoding + inserting) / per_sample

    samples = interleave({"threadlog": ours_single, "lean": lean_single}, rounds * SUSTAINED)
    out.append(_sustained(f"single append, synchronous=NORMAL, {at} (mean: sustained)", samples,
                          "lean raw: encode + BEGIN/INSERT/COMMIT", target="scale_append"))
    out.append(_sustained(f"single append {at}, against the lean insert alone (no target)",
                          {"threadlog": samples["threadlog"], "lean": inserts[-len(samples["lean"]):]}, "lean insert only"))

    size, lean_size = _file_size(store), lean.size()
    out.append(Measure(GROUP, f"file size {at}", size, "bytes", "lean raw table, same rows", lean_size, "cost", 1,
                       {"target": "scale_size", "streams": streams, "events": events}))

    # A fork of a 1,000-message thread here against a fork of a 10-event thread in a small file.
    small = Store(workdir / "small.db")
    tiny = small.create_thread(title="small")
    small.append(tiny, _messages(rng, 1, 9))

    def fork_big() -> float:
        thread = rng.choice(threads)
        start = time.perf_counter()
        store.fork(thread)
        return time.perf_counter() - start

    def fork_small() -> float:
        start = time.perf_counter()
        small.fork(tiny)
        return time.perf_counter() - start

    samples = interleave({"big": fork_big, "small": fork_small}, rounds * 4)
    out.append(compare(GROUP, f"fork {at}", samples, "big", "small", label="fork at 10 events, small file", kind="cost",
                       target="scale_fork"))

    # thread_state of a 100-event thread, here and alone in a file.
    hundred = store.create_thread(title="hundred")
    store.append(hundred, _messages(rng, 1, 99))
    alone = small.create_thread(title="hundred")
    small.append(alone, _messages(rng, 1, 99))

    def state_big() -> float:
        start = time.perf_counter()
        thread_state(store, hundred)
        return time.perf_counter() - start

    def state_small() -> float:
        start = time.perf_counter()
        thread_state(small, alone)
        return time.perf_counter() - start

    samples = interleave({"big": state_big, "small": state_small}, rounds * 4)
    out.append(compare(GROUP, f"thread_state of 100 events {at}", samples, "big", "small", label="the same, small file",
                       kind="cost", target="scale_state"))
    small.close()

    # `threadlog ls`: its first page, the command run in this process (Python's start-up apart).
    runner = CliRunner()

    def ls_page() -> float:
        start = time.perf_counter()
        result = runner.invoke(cli, ["ls", "--db", str(store.path), "--no-pager"])
        seconds = time.perf_counter() - start
        assert result.exit_code == 0, result.output
        return seconds

    samples = {"ls": [ls_page() for _ in range(rounds + 1)][1:], "budget": [0.05]}
    out.append(compare(GROUP, f"first page of threadlog ls, {streams:,} threads", samples, "ls", "budget",
                       label="50 ms budget", kind="cost", target="scale_ls"))

    # Full verify in a child process: its speed against 200,000 events/s and its peak memory.
    # The verify takes ~10 s of both cores, and the machine's speed moves its rate by tens of
    # percent from minute to minute (six verifies of one file in two minutes: 9.9-14.1 s): it
    # is run VERIFIES times, interleaved with the raw floor on the same file (which says how
    # much of a miss is the machine's), and their medians are read, as every other row's.
    checkpoint = store.checkpoint()
    store.append(rng.choice(threads), _messages(rng, 0, 1000))
    runs: list[tuple[float, int, int]] = []

    def full_verify() -> float:
        runs.append(_peak_verify(Path(store.path)))
        return runs[-1][0]

    samples = interleave({"verify": full_verify, "floor": lambda: _raw_floor(Path(store.path))}, VERIFIES, warmup=0)
    seconds, verified = statistics.median(samples["verify"]), runs[0][1]
    each = ", ".join(f"{t:.1f}" for t in samples["verify"])
    out.append(Measure(GROUP, f"full verify, {verified:,} events ({verified / seconds:,.0f} events/s; median of {each} s)",
                       seconds / verified, "s", "200,000 events/s budget", 1 / 200_000, "speed", len(runs),
                       {"target": "scale_verify_speed"}))
    out.append(Measure(GROUP, "peak memory of those verifies (the largest process of any)",
                       max(peak for _, _, peak in runs), "bytes", "200 MB budget", 200e6, "cost", len(runs),
                       {"target": "scale_verify_memory"}))
    floor = statistics.median(samples["floor"])
    out.append(Measure(GROUP, f"full verify vs raw sqlite3 reading every row and hashing it twice, two processes "
                       f"({verified / floor:,.0f} events/s; no target)", seconds / verified, "s", "raw floor",
                       floor / verified, "speed", len(runs)))

    def since() -> float:
        start = time.perf_counter()
        store.verify(since=checkpoint)
        return time.perf_counter() - start

    samples = {"since": [since() for _ in range(rounds)], "full": [seconds]}
    out.append(compare(GROUP, "verify --since a checkpoint, 1,000 new events", samples, "since", "full",
                       label="full verify", kind="cost", target="scale_since"))
    store.close()
    lean.conn.close()
    return out


def run(mode: str, workdir: Path) -> list[Measure]:
    """The group in a normal run: a small file (2,000 messages in smoke mode, 200,000 quick,
    2,000,000 full), every row measured; `--scale N` picks the size."""
    sizes = {"smoke": 2_000, "quick": 200_000, "full": 2_000_000}
    return run_scale(sizes[mode], workdir, rounds=3 if mode == "smoke" else 5)

