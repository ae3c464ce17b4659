"""Child processes for the crash and concurrency tests: `python tests/workers.py MODE ...`.

Each worker is a real process with its own `Store` on a shared SQLite file. It reports on
stdout, one JSON object per line, flushed at once, so a parent that SIGKILLs it knows
exactly which operations were acknowledged: a line is written only after the call that
it reports has returned. `intent` lines name what a worker is about to write, so the
parent can tell an in-flight batch (allowed to be absent, never partly present) from a
lost acknowledged one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eventstore.integrity import canonical  # noqa: E402
from threadlog import ConcurrencyError, Store  # noqa: E402


def open_store(db: str) -> Store:
    """The store a worker writes to: a SQLite file (synchronous=NORMAL) or a PostgreSQL URL."""
    return Store(db) if db.startswith("postgresql://") else Store(db, synchronous="NORMAL")


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def recorded(event: Any) -> dict[str, Any]:
    """What the parent compares byte for byte with the stored row."""
    return {
        "position": event.position,
        "stream_id": event.stream_id,
        "offset": event.offset,
        "event_id": event.event_id,
        "type": event.type,
        "data": canonical(event.data),
        "meta": canonical(event.meta),
        "recorded_at": event.recorded_at,
        "hash": event.hash,
    }


def text(rng: random.Random, n: int) -> str:
    words = ["train", "Lyon", "hotel", "ticket", "08:00", "café", "ünïcode", "→", "seat", "platform"]
    return " ".join(rng.choice(words) for _ in range(n))


# -- crash -------------------------------------------------------------------------------------


def crash(db: str, seed: str) -> None:
    """Append forever (single events, batches, new threads, forks) until killed."""
    rng = random.Random(seed)
    store = open_store(db)
    threads = [t.id for t in store.all_threads()]
    n = 0

    def eid() -> str:
        nonlocal n
        n += 1
        return f"{seed}-{n}"

    say(op="ready", threads=len(threads))
    while True:
        roll = rng.random()
        if roll < 0.05 or not threads:
            ids = [eid(), eid()]
            thread_id = f"t-{ids[0]}"
            say(op="intent", ids=ids)
            store.append(thread_id, [
                {"type": "thread.created", "data": {"title": text(rng, 3)}, "meta": {"event_id": ids[0]}},
                {"type": "message.appended", "data": {"role": "user", "content": text(rng, 8)}, "meta": {"event_id": ids[1]}},
            ], expect="no_stream")
            threads.append(thread_id)
            say(op="ack", ids=ids, events=[recorded(e) for e in store.read(thread_id)])
        elif roll < 0.12:
            parent = rng.choice(threads)
            head = store.head(parent)
            at = rng.randint(2, head) if head > 2 else head
            fork_id, event_id = f"f-{eid()}", eid()
            say(op="intent", ids=[event_id])
            store.fork(parent, at, fork_id=fork_id, event_id=event_id, actor="crash-worker")
            threads.append(fork_id)
            say(op="ack", ids=[event_id], events=[recorded(store.event_at(fork_id, at))])
        elif roll < 0.55:
            thread = rng.choice(threads)
            event_id = eid()
            say(op="intent", ids=[event_id])
            event = store.append_message(thread, rng.choice(["user", "assistant"]), text(rng, rng.randint(1, 60)), event_id=event_id)
            say(op="ack", ids=[event_id], events=[recorded(event)])
        else:
            thread = rng.choice(threads)
            size = rng.randint(2, 12)
            ids = [eid() for _ in range(size)]
            batch = []
            for i, event_id in enumerate(ids):
                if i % 4 == 3:
                    batch.append({"type": "metadata.set", "data": {"patch": {"k": i}}, "meta": {"event_id": event_id}})
                else:
                    role = "user" if i % 2 == 0 else "assistant"
                    batch.append({"type": "message.appended", "data": {"role": role, "content": text(rng, rng.randint(1, 400))}, "meta": {"event_id": event_id}})
            say(op="intent", ids=ids)
            events = store.append(thread, batch)
            say(op="ack", ids=ids, events=[recorded(e) for e in events])


def transcripts(db: str, thread: str, path: str, seed: str) -> None:
    """Grow a thread and rewrite its transcript file forever, until killed."""
    from threadlog import transcript, write_transcript

    rng = random.Random(seed)
    store = open_store(db)
    # Large bounds make large files, so that kills often land inside the write itself.
    bounds = {"max_bytes": 8 * 1024 * 1024, "max_message_bytes": 1024 * 1024}
    say(op="ready")
    while True:
        store.append_message(thread, rng.choice(["user", "assistant"]), text(rng, rng.randint(2_000, 20_000)))
        expected = transcript(store, thread, **bounds).encode("utf-8")
        digest = hashlib.sha256(expected).hexdigest()
        say(op="intent", sha=digest, size=len(expected))
        write_transcript(store, thread, path, **bounds)
        say(op="ack", sha=digest)


# -- concurrency -------------------------------------------------------------------------------


def race(db: str, thread: str, count: str, name: str, start: str = "") -> None:
    """Append `count` events to one thread with expect = the last head seen, retrying on conflict
    (once the file `start` exists, when named: workers started one after the other, their
    imports slowed by a busy machine, could otherwise each finish before the next began)."""
    store = open_store(db)
    if start:
        say(op="ready")
        while not os.path.exists(start):
            time.sleep(0.005)
    head = store.head(thread)
    conflicts = 0
    for i in range(int(count)):
        event_id = f"{name}-{i}"
        while True:
            try:
                event = store.append_message(thread, "user", f"{name} says {i}", expect=head, event_id=event_id)
                break
            except ConcurrencyError as error:
                if error.expected != head or not isinstance(error.actual, int) or error.actual <= head:
                    say(op="bad_conflict", expected=error.expected, actual=error.actual, head=head)
                    sys.exit(3)
                conflicts += 1
                head = error.actual
        say(op="ack", event_id=event_id, offset=event.offset, position=event.position)
        head = event.offset + 1
    say(op="done", conflicts=conflicts)


def mixed(db: str, seconds: str, seed: str, *shared: str) -> None:
    """Appends with expect, batches, forks and reads on a few shared threads, for a while."""
    rng = random.Random(seed)
    store = open_store(db)
    threads = list(shared)
    seen_head = {t: store.head(t) for t in threads}
    deadline = time.monotonic() + float(seconds)
    conflicts = n = last_position = 0
    while time.monotonic() < deadline:
        roll = rng.random()
        thread = rng.choice(threads)
        if roll < 0.1:
            head = store.head(thread)
            at = rng.randint(2, head)
            fork_id = f"f-{seed}-{n}"
            n += 1
            store.fork(thread, at, fork_id=fork_id, event_id=f"{seed}-{n}")
            event = store.event_at(fork_id, at)
            threads.append(fork_id)
            seen_head[fork_id] = at + 1
            say(op="fork", fork_id=fork_id, parent=thread, at=at, event_id=event.event_id, position=event.position)
            positions = [event.position]
        elif roll < 0.25:
            history = list(store.read(thread))
            offsets = [e.offset for e in history]
            if offsets != list(range(len(offsets))) or len(offsets) < seen_head[thread]:
                say(op="bad_read", thread=thread, offsets=offsets, seen=seen_head[thread])
                sys.exit(3)
            seen_head[thread] = len(offsets)
            continue
        else:
            size = 1 if roll < 0.8 else rng.randint(2, 5)
            ids = []
            for _ in range(size):
                n += 1
                ids.append(f"{seed}-{n}")
            batch = [{"type": "message.appended", "data": {"role": "user", "content": f"{seed} {i}"}, "meta": {"event_id": i}} for i in ids]
            expect = seen_head[thread]
            while True:
                try:
                    events = store.append(thread, batch, expect=expect)
                    break
                except ConcurrencyError as error:
                    # The conflict reaches the caller with what it expected and what is there.
                    if error.expected != expect or not isinstance(error.actual, int) or error.actual <= expect:
                        say(op="bad_conflict", expected=error.expected, actual=error.actual)
                        sys.exit(3)
                    conflicts += 1
                    expect = error.actual
            seen_head[thread] = events[-1].offset + 1
            say(op="ack", thread=thread, events=[[e.event_id, e.offset, e.position] for e in events])
            positions = [e.position for e in events]
        # One process commits one operation after another: its positions only grow.
        if positions[0] <= last_position or positions != sorted(set(positions)):
            say(op="bad_order", last=last_position, positions=positions)
            sys.exit(3)
        last_position = positions[-1]
    say(op="done", conflicts=conflicts)


def tail(db: str, stop_file: str) -> None:
    """Tail read_all(after=last) until `stop_file` exists, reporting every position seen.

    Each poll also re-reads a window below the last position seen: a position that shows up
    there for the first time appeared after a higher one, which a tailing reader would miss.
    """
    store = open_store(db)
    seen: list[int] = []
    known: set[int] = set()
    last = polls = 0
    while True:
        stopping = os.path.exists(stop_file)
        window = [e.position for e in store.read_all(after=max(0, last - 300))]
        late = [p for p in window if p <= last and p not in known]
        if late:
            say(op="late", positions=late, last=last)
            sys.exit(3)
        new = [p for p in window if p > last]
        if new != sorted(set(new)):
            say(op="unordered", positions=new)
            sys.exit(3)
        seen.extend(new)
        known.update(new)
        if new:
            last = new[-1]
            say(op="saw", last=last)
        polls += 1
        if stopping:
            break
    say(op="done", positions=seen, polls=polls)


# -- a redaction between a catch-up's commits ---------------------------------------------------


def secrets(db: str, count: str, every: str) -> None:
    """Append `count` messages to one thread, a secret (`secret_text`) in every `every`-th; report
    each secret's position."""
    store = open_store(db)
    thread = store.create_thread(title="plain")
    events = [{"type": "message.appended", "data": {"role": "user", "content": secret_text(n // int(every))
               if n % int(every) == 0 else f"filler {n} train platform"}} for n in range(int(count))]
    at: dict[str, int] = {}
    for start in range(0, len(events), 500):
        for n, event in enumerate(store.append(thread, events[start:start + 500]), start):
            if n % int(every) == 0:
                at[str(n // int(every))] = event.position
    store.close()
    say(op="done", at=at)


def secret_text(n: int) -> str:
    """Secret `n`: its index token (folded: `kx<letter>...secret`) differs from every other's from
    its third character on, so FTS5's prefix compression stores all but its first few characters."""
    return f"Kx{chr(ord('a') + n)}qvzmjwr{n}Sécret☃ in a message"


def catch_up(db: str, commit_events: str, pause_after: str) -> None:
    """`update_index` committing every `commit_events` events; after commit `pause_after` (0:
    never) it waits for a line on stdin, and after every commit it pauses briefly, so another
    writer waiting for the lock gets it between two commits."""
    from eventstore import textindex
    from projections.search import update_index

    textindex._COMMIT_EVENTS = int(commit_events)
    textindex._BATCH = max(1, int(commit_events) // 2)
    store = open_store(db)
    commits = 0

    def progress(done: int, total: int) -> None:
        nonlocal commits
        commits += 1
        say(op="commit", done=done, total=total, commits=commits)
        if commits == int(pause_after):
            sys.stdin.readline()
        time.sleep(0.01)

    read = update_index(store, progress)
    store.close()
    say(op="done", read=read)


def redact_all(db: str, *positions: str) -> None:
    """Redact each position (as `threadlog redact` does, truncating the WAL), reporting a
    truncation another connection held up (the redaction is committed all the same)."""
    from threadlog import OldPagesKept

    say(op="ready")
    sys.stdin.readline()
    store = open_store(db)
    kept = 0
    for position in positions:
        try:
            store.redact(int(position), reason="leak", actor="dpo")
        except OldPagesKept:
            kept += 1
    store.close()
    say(op="done", kept=kept)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"crash": crash, "transcripts": transcripts, "race": race, "mixed": mixed, "tail": tail,
     "secrets": secrets, "catch_up": catch_up, "redact_all": redact_all}[mode](*args)
