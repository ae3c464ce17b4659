"""Concurrency between real processes sharing one SQLite file (tests/workers.py).

Writers serialize on SQLite's write lock (`BEGIN IMMEDIATE`), so a position is assigned and
committed before the next writer can read the sequence: commit order is position order.
The tailing reader checks exactly that from the outside.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests import stored
from threadlog import Store

try:
    from .procs import Worker
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from procs import Worker  # type: ignore[no-redef]


def offsets_by_stream(db: Path) -> dict[str, list[int]]:
    conn = sqlite3.connect(db)
    try:
        out: dict[str, list[int]] = {}
        for stream, offset in conn.execute('SELECT stream_id, "offset" FROM events ORDER BY stream_id, "offset"'):
            out.setdefault(stream, []).append(offset)
        return out
    finally:
        conn.close()


def test_four_processes_racing_on_one_thread_with_expect(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    with Store(db) as store:
        t = store.create_thread(title="race")
    per_worker = 40
    # All four begin together (once the start file exists): started one after the other, their
    # imports slowed by a busy machine, each could finish before the next began, racing nothing.
    start = tmp_path / "go"
    workers = [Worker("race", str(db), t, str(per_worker), f"w{i}", str(start)) for i in range(4)]
    for w in workers:
        assert w.ready.wait(60) and w.of("ready"), w.proc.stderr.read() if w.proc.stderr else ""
    start.touch()
    for w in workers:
        w.finish()
    acks = [a for w in workers for a in w.of("ack")]
    conflicts = sum(w.of("done")[0]["conflicts"] for w in workers)
    with Store(db) as store:
        history = list(store.read(t))
        store.verify()
    by_id = Counter(e.event_id for e in history)
    assert len(acks) == 4 * per_worker
    for ack in acks:
        assert by_id[ack["event_id"]] == 1, f"{ack['event_id']} stored {by_id[ack['event_id']]} times"
        stored = history[ack["offset"]]
        assert (stored.event_id, stored.position) == (ack["event_id"], ack["position"])
    assert [e.offset for e in history] == list(range(1 + 4 * per_worker)), "offsets are not contiguous"
    assert [e.position for e in history] == sorted(e.position for e in history)
    assert conflicts > 0, "no conflict: the expect path was not exercised"
    print(f"\n4 processes x {per_worker} appends to one thread with expect=last seen head: "
          f"{conflicts} ConcurrencyErrors retried; every event present once, offsets 0..{len(history) - 1}")


def test_four_processes_on_their_own_threads_never_conflict(tmp_path: Path) -> None:
    db = tmp_path / "own.db"
    with Store(db) as store:
        threads = [store.create_thread(title=f"own {i}") for i in range(4)]
    per_worker = 60
    workers = [Worker("race", str(db), t, str(per_worker), f"w{i}") for i, t in enumerate(threads)]
    for w in workers:
        w.finish()
    assert all(w.of("done")[0]["conflicts"] == 0 for w in workers), "a writer on its own thread saw a conflict"
    with Store(db) as store:
        for t in threads:
            assert [e.offset for e in store.read(t)] == list(range(1 + per_worker))
        report = store.verify()
    print(f"\n4 processes x {per_worker} appends, each on its own thread: no error at all; {report.events} events verify")


def test_eight_processes_mixing_appends_forks_and_reads_with_a_tailing_reader(tmp_path: Path) -> None:
    db = tmp_path / "mixed.db"
    with Store(db) as store:
        shared = []
        for i in range(3):
            t = store.create_thread(title=f"shared {i}")
            store.append_message(t, "user", "hello")
            shared.append(t)
    stop = tmp_path / "stop"
    tailer = Worker("tail", str(db), str(stop))
    writers = [Worker("mixed", str(db), "4", f"p{i}", *shared) for i in range(8)]
    for w in writers:
        w.finish()
    stop.touch()
    tailer.finish()

    acked: dict[str, tuple[str, int, int]] = {}
    forks = []
    for w in writers:
        for a in w.of("ack"):
            for event_id, offset, position in a["events"]:
                assert event_id not in acked, f"{event_id} acknowledged twice"
                acked[event_id] = (a["thread"], offset, position)
        for f in w.of("fork"):
            forks.append(f)
            acked[f["event_id"]] = (f["fork_id"], f["at"], f["position"])
    conflicts = sum(w.of("done")[0]["conflicts"] for w in writers)

    conn = sqlite3.connect(db)
    rows = {r[0]: (r[1], r[2], r[3]) for r in stored.events(conn, ["event_id", "stream_id", "offset", "position"])}
    positions = [r[0] for r in conn.execute("SELECT position FROM events ORDER BY position")]
    conn.close()
    lost = [i for i in acked if i not in rows]
    assert not lost, f"acknowledged events lost: {lost[:5]}"
    moved = [i for i, where in acked.items() if rows[i] != where]
    assert not moved, f"events not where their append said: {moved[:5]}"
    written_by_workers = [i for i in rows if i.startswith("p")]
    assert len(written_by_workers) == len(acked), "an event was written that no worker acknowledged"

    with Store(db) as store:
        bases = {t.id: t.base for t in store.all_threads()}
        for stream, offsets in offsets_by_stream(db).items():
            assert offsets == list(range(bases[stream], bases[stream] + len(offsets))), f"{stream}: offsets not contiguous"
        for f in forks:
            parent = [e.event_id for e in store.read(f["parent"], 0, f["at"])]
            assert [e.event_id for e in store.read(f["fork_id"], 0, f["at"])] == parent
        report = store.verify()

    seen = tailer.of("done")[0]["positions"]
    assert seen == sorted(set(seen)), "the tailing reader saw positions out of order"
    missed = sorted(set(positions) - set(seen))
    assert not missed, f"positions that appeared after a higher one (a tailing reader missed them): {missed[:10]}"
    print(f"\n8 processes for 4 s on {len(shared)} shared threads: {len(acked)} acknowledged events "
          f"({len(forks)} forks), {conflicts} ConcurrencyErrors each retried to success; a reader tailing "
          f"read_all(after=last) in {tailer.of('done')[0]['polls']} polls saw all {len(seen)} positions in order; "
          f"verify: {report.events} events")
    assert conflicts > 0, "no conflict happened, so the retry path was not exercised"


def test_the_tailing_reader_catches_a_position_committed_after_a_higher_one(tmp_path: Path) -> None:
    """The check above can fail: forge the broken order with raw SQL (threadlog cannot
    produce it) and the tailing reader reports the late position."""
    db = tmp_path / "forged.db"
    with Store(db) as store:
        store.create_thread(title="x")
    stop = tmp_path / "stop"
    tailer = Worker("tail", str(db), str(stop))
    row = "INSERT INTO events (position, stream_id, \"offset\", event_id, type, schema_version, data, meta, recorded_at, data_digest, hash) VALUES (?, 'z', ?, ?, 'title.set', 1, '{}', '{}', '', '', '')"
    conn = sqlite3.connect(db)
    conn.execute(row, (100, 1, "high"))
    conn.commit()
    assert tailer.wait_until(lambda r: r.get("op") == "saw" and r["last"] >= 100)
    conn.execute(row, (90, 0, "late"))  # committed after 100, below it
    conn.commit()
    conn.close()
    stop.touch()
    err = tailer.wait()
    print(f"\nforged a commit of position 90 after 100: the tailing reader reported {tailer.lines[-1]}")
    assert tailer.proc.returncode == 3 and tailer.lines[-1] == {"op": "late", "positions": [90], "last": 100}, err


_CREATOR = """
import json, sys
from threadlog import InvalidEvent, Store
target, round_ = sys.argv[1:]
store = Store(target)
print("ready", flush=True)
sys.stdin.readline()
try:
    out = store.create_thread(title="trip", event_id=f"create-{round_}")
except InvalidEvent as error:
    out = "refused: " + str(error)
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_processes_retrying_one_create_thread_at_once_get_its_one_thread(tmp_path: Path, backend: str) -> None:
    """A retried create_thread returns the thread it made, however the retries meet: a retry
    that looked its event id up before the original wrote it drew a thread id of its own and
    was refused ("already used in thread ..."), where a retried append or fork is answered."""
    from tests.backends import postgres_url
    from tests.procs import started_together

    target = postgres_url() if backend == "postgresql" else str(tmp_path / "created.db")
    Store(target).close()
    for round_ in range(3):
        with started_together([["-c", _CREATOR, target, str(round_)] for _ in range(4)]) as procs:
            outs = [json.loads(proc.communicate(timeout=120)[0].splitlines()[-1]) for proc in procs]
        assert len(set(outs)) == 1 and not outs[0].startswith("refused"), outs
    with Store(target) as store:
        assert store.counts() == (3, 3)
