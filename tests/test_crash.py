"""Crash safety: a real child process appends and is SIGKILLed at random moments.

The child reports every acknowledged append on a pipe (tests/workers.py). After each kill
the parent reopens the file and checks that nothing acknowledged was lost or changed, that
no batch is half there, that the chain verifies, and that appends carry on.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from eventstore.integrity import canonical
from tests import stored
from threadlog import Store

try:
    from .procs import Worker
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from procs import Worker  # type: ignore[no-redef]

KILLS = 24

COLUMNS = 'position, stream_id, "offset", event_id, type, data, meta, recorded_at, hash'


def stored_rows(db: Path) -> dict[str, dict[str, Any]]:
    """Every event row by event id, read with raw sqlite3 (no threadlog code involved)."""
    conn = sqlite3.connect(db)
    try:
        keys = ["position", "stream_id", "offset", "event_id", "type", "data", "meta", "recorded_at", "hash"]
        return {row[3]: dict(zip(keys, row)) for row in stored.events(conn, keys)}
    finally:
        conn.close()


def integrity_check(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_sigkill_during_appends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    with Store(db) as store:
        t = store.create_thread(title="crash")
        store.append_message(t, "user", "start")
        store.fork(t, 2)
    rng = random.Random(5)
    acked: dict[str, dict[str, Any]] = {}
    in_flight_at_kill = torn_lines = 0
    for round_ in range(KILLS):
        worker = Worker("crash", str(db), f"r{round_}")
        worker.ready.wait(timeout=30)
        # Kill after a random number of acknowledged appends plus a random extra moment,
        # so kills land before, inside and after transactions.
        worker.wait_for(rng.randint(0, 60))
        time.sleep(rng.uniform(0, 0.01))
        err = worker.kill()
        assert worker.proc.returncode == -9, f"the worker died on its own: {err[-2000:]}"
        torn_lines += bool(worker.torn)

        intents = worker.of("intent")
        acks = worker.of("ack")
        for ack in acks:
            for event in ack["events"]:
                acked[event["event_id"]] = event
        unacked = intents[len(acks):]
        assert len(unacked) <= 1, "the worker runs one operation at a time"
        in_flight_at_kill += bool(unacked)

        assert integrity_check(db) == "ok"
        rows = stored_rows(db)
        missing = [i for i in acked if i not in rows]
        assert not missing, f"round {round_}: acknowledged events lost: {missing[:5]}"
        changed = [i for i, event in acked.items() if rows[i] != event]
        assert not changed, f"round {round_}: acknowledged events changed: {changed[:3]}"
        if unacked:
            present = [i for i in unacked[0]["ids"] if i in rows]
            assert present in ([], unacked[0]["ids"]), f"round {round_}: a partial batch survived: {present}"
            for i in present:  # committed but not yet acknowledged: fine, it is whole
                acked[i] = {"event_id": i, **{k: v for k, v in rows[i].items() if k != "event_id"}}
        # Every event a worker wrote was acknowledged, or was the whole in-flight batch.
        strays = [i for i in rows if "-" in i and i not in acked]
        assert not strays, f"events nobody acknowledged as whole: {strays[:5]}"

        with Store(db) as store:
            report = store.verify()
            assert report.events == len(rows)
            # Appends continue where they stopped: every thread takes a new event.
            for info in store.all_threads()[:3]:
                event = store.append_message(info.id, "user", f"after kill {round_}", event_id=f"parent-{round_}-{info.id}")
                assert event.offset == info.head
                acked[event.event_id] = {
                    "position": event.position, "stream_id": event.stream_id, "offset": event.offset,
                    "event_id": event.event_id, "type": event.type, "data": canonical(event.data), "meta": canonical(event.meta),
                    "recorded_at": event.recorded_at, "hash": event.hash,
                }
    with Store(db) as store:
        report = store.verify()
    print(f"\n{KILLS} SIGKILLs of an appending process: {len(acked)} acknowledged events all present and "
          f"byte-identical; {in_flight_at_kill} kills caught an append in flight (none left a partial batch); "
          f"{torn_lines} torn report lines; final verify: {report.events} events in {report.streams} threads")
    assert in_flight_at_kill >= 3, "too few kills landed during an append to show anything"


def test_sigkill_during_write_transcript_leaves_old_or_new_file(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    out = tmp_path / "out" / "transcript.md"
    out.parent.mkdir()
    with Store(db) as store:
        t = store.create_thread(title="transcript crash")
        store.append_message(t, "user", "hello")
    rng = random.Random(7)
    current = "absent"  # the whole version the file holds between rounds
    in_flight = replaced_mid_kill = 0
    leftovers: set[str] = set()
    for round_ in range(KILLS):
        worker = Worker("transcripts", str(db), t, str(out), f"w{round_}")
        worker.ready.wait(timeout=30)
        # Kill soon after a write was announced: before, inside or just after it.
        worker.wait_for(rng.randint(1, 3), op="intent")
        time.sleep(rng.uniform(0, 0.03))
        err = worker.kill()
        assert worker.proc.returncode == -9, f"the worker died on its own: {err[-2000:]}"
        intents, acks = worker.of("intent"), worker.of("ack")
        if acks:
            current = acks[-1]["sha"]
        allowed = {current}
        if len(intents) > len(acks):
            in_flight += 1
            allowed.add(intents[-1]["sha"])
        state = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else "absent"
        assert state in allowed, f"round {round_}: the transcript file is torn (neither the old nor the new one)"
        replaced_mid_kill += state != current
        current = state
        # A temp file left beside the target means the kill landed between its creation
        # and the rename: the case this test is about.
        leftovers |= {p.name for p in out.parent.iterdir() if p != out}
        with Store(db) as store:
            store.verify()
    print(f"\n{KILLS} SIGKILLs during write_transcript: the file was always the old or the new whole version "
          f"({in_flight} kills during a write, {len(leftovers)} of them after the temp file was created, "
          f"{replaced_mid_kill} after the rename but before the acknowledgement)")
    assert in_flight >= 3
