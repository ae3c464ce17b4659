"""The one-round-trip append on PostgreSQL: a store remembers the head its own last write to a
stream left, chains the next single event onto it and sends everything at once; the server
writes it only if that head is still the stored one (eventstore/postgres.py, `append_at`).

A remembered head may be old (another store or process wrote since): the append must then
land exactly where the two-round-trip path would have put it, with the same hash, the same
`expect` answers and the same refusals, and a refusal must leave the database as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import ConcurrencyError, InvalidEvent, Store, StoreError, export_all, import_events
from threadlog.export import dump_lines
from tests.backends import postgres_url

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(name="url")
def a_postgres_url() -> str:
    return postgres_url()


class RoundTrips:
    """Counts the pipelines a backend sends (each is one round trip to the server)."""

    def __init__(self, backend: Any) -> None:
        self.count = 0
        send = backend._send

        def counted(*statements: Any) -> Any:
            self.count += 1
            return send(*statements)

        backend._send = counted


def counted_store(url: str) -> tuple[Store, RoundTrips]:
    """A store on a PostgreSQL backend made here (nothing reaches into a store for its backend),
    and the count of its round trips."""
    from eventstore.postgres import PostgresBackend

    backend = PostgresBackend(url)
    return Store(backend), RoundTrips(backend)


def other_process_appends(url: str, thread: str, text: str) -> int:
    """Append one message from another process; its offset."""
    code = ("import sys; from threadlog import Store; s = Store(sys.argv[1]); "
            "print(s.append_message(sys.argv[2], 'user', sys.argv[3]).offset); s.close()")
    done = subprocess.run([sys.executable, "-c", code, url, thread, text], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def texts(store: Store, thread: str) -> list[str]:
    return [e.data["content"][0]["text"] for e in store.read(thread) if e.type == "message.appended"]


def test_an_append_after_the_stores_own_is_one_round_trip(url: str) -> None:
    store, trips = counted_store(url)
    with store:
        t = store.create_thread(title="one trip")
        trips.count = 0
        recorded = [store.append_message(t, "user", f"m{i}") for i in range(5)]
        assert trips.count == 5
        assert [e.offset for e in recorded] == [1, 2, 3, 4, 5]
        assert [e.position for e in recorded] == [e.position for e in store.read(t, 1)]
        assert [e.hash for e in recorded] == [e.hash for e in store.read(t, 1)]
        store.verify()


@pytest.mark.parametrize("writer", ["another store", "another process"])
def test_a_head_moved_by_another_writer_falls_back_and_appends_at_the_right_offset(url: str, writer: str) -> None:
    store, trips = counted_store(url)
    with store:
        t = store.create_thread(title="stale")
        store.append_message(t, "user", "mine 1")
        if writer == "another process":
            assert other_process_appends(url, t, "theirs") == 2
        else:
            with Store(url) as other:
                assert other.append_message(t, "user", "theirs").offset == 2
        trips.count = 0
        mine = store.append_message(t, "user", "mine 2")
        assert trips.count == 3  # the refused attempt, then the head read and the write
        assert mine.offset == 3
        stored = store.event_at(t, 3)
        assert (stored.position, stored.hash) == (mine.position, mine.hash)
        # It took no position when it found the head moved: positions run on without a gap.
        assert [e.position for e in store.read(t)] == list(range(1, 5))
        assert texts(store, t) == ["mine 1", "theirs", "mine 2"]
        store.verify()
        trips.count = 0
        assert store.append_message(t, "user", "mine 3").offset == 4
        assert trips.count == 1, "the head the fallback wrote is remembered again"


def test_a_head_moved_while_the_append_waits_for_the_streams_lock_is_not_written_over(url: str) -> None:
    """The one statement reads the head before it waits for the stream's lock; another writer
    that holds the lock moves the head and commits meanwhile: the append must see that, write
    nothing in its statement, and land after the other writer's event. The waiting append is
    in another thread of this process: it must let this thread run meanwhile (libpq's own
    blocking wait held the GIL, so this thread, holding the lock, stood still until the lock
    timed out). The other writer is another thread: the append whose head is remembered is made
    on the thread that opened its store (another thread would use a connection of its own)."""
    import threading
    import time

    from eventstore.head import Head
    from eventstore.postgres import PostgresBackend
    from eventstore.prepare import prepare

    store, trips = counted_store(url)
    locker = PostgresBackend(url)
    held, release, failed = threading.Event(), threading.Event(), []

    def hold(t: str) -> None:
        try:
            with Store(locker) as other:  # made on this thread: it writes through `locker` itself
                with locker.transaction():
                    row, position = locker.stream_for_append(t, 1)  # holds the stream's lock, as an append does
                    held.set()
                    release.wait(30)
                    assert row is not None
                    event = prepare({"type": "message.appended", "data": {"role": "user", "content": "moved it"}}, "x")
                    other._write(t, Head.of(row), [event], position)
        except BaseException as error:  # shown by the test's thread
            failed.append(error)
            held.set()

    with store:
        t = store.create_thread(title="race")
        store.append_message(t, "user", "remembered")
        trips.count = 0
        holder = threading.Thread(target=hold, args=(t,))
        holder.start()
        assert held.wait(30) and not failed, failed
        # Timed from before the timer starts: the append ends after the release, however late
        # a busy machine runs this thread between the two lines.
        started = time.monotonic()
        threading.Timer(0.5, release.set).start()  # while the append below waits for the lock
        waited = store.append_message(t, "user", "waited")
        assert time.monotonic() - started >= 0.4, "the append did not wait for the stream's lock"
        holder.join(30)
        assert not failed, failed
        assert waited.offset == 3
        assert trips.count == 3, "the statement wrote nothing; the head was read again and the event written"
        assert texts(store, t) == ["remembered", "moved it", "waited"]
        store.verify()


def test_appends_through_remembered_heads_restore_into_sqlite_with_identical_hashes(url: str, tmp_path: Path) -> None:
    """Two PostgreSQL stores take turns (each head remembered, then moved by the other); the
    export restores into SQLite, which recomputes every hash and refuses any that differs."""
    with Store(url) as a, Store(url) as b:
        t = a.create_thread(title="turns")
        for i in range(6):
            (a, b)[i % 3 == 2].append_message(t, "user" if i % 2 else "assistant", f"turn {i}")
            (a, b)[i % 2].append(t, [{"type": "metadata.set", "data": {"patch": {"i": i}}}])
        f = a.fork(t, 5)
        a.append_message(f, "user", "in the fork")
        exported = [(e.position, e.hash) for e in a.read_all()]
        path = tmp_path / "all.jsonl"
        path.write_text("".join(dump_lines(export_all(a))), encoding="utf-8")
    with Store(tmp_path / "lite.db") as lite:
        import_events(lite, path)
        assert [(e.position, e.hash) for e in lite.read_all()] == exported
        lite.verify()


def test_expect_against_a_remembered_head_answers_as_the_stored_head_does(url: str) -> None:
    with Store(url) as store, Store(url) as other:
        t = store.create_thread(title="expect")
        store.append_message(t, "user", "first")  # remembered: head 2
        other.append_message(t, "user", "moved")  # stored: head 3
        with pytest.raises(ConcurrencyError) as caught:
            store.append_message(t, "user", "expects 2", expect=2)
        assert (caught.value.expected, caught.value.actual) == (2, 3)
        assert store.head(t) == 3
        # An expect that matches the stored head but not the remembered one is not refused.
        assert store.append_message(t, "user", "expects 3", expect=3).offset == 3
        # And a remembered head that is current refuses a wrong expect as the stored one would.
        with pytest.raises(ConcurrencyError) as caught:
            store.append_message(t, "user", "expects 9", expect=9)
        assert (caught.value.expected, caught.value.actual) == (9, 4)
        with pytest.raises(ConcurrencyError):
            store.append_message(t, "user", "no stream", expect="no_stream")
        assert texts(store, t) == ["first", "moved", "expects 3"]
        store.verify()


def test_an_event_refused_against_an_old_head_is_judged_against_the_stored_one(url: str) -> None:
    """Another writer made the call this tool_result answers: against the remembered head (no
    call waiting) it would be refused; against the stored head it is valid and is written."""
    call = [{"type": "tool_use", "id": "tu1", "name": "trains", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "tu1", "content": "08:00"}]
    with Store(url) as store, Store(url) as other:
        t = store.create_thread(title="facts")
        store.append_message(t, "user", "trains?")
        other.append_message(t, "assistant", call)
        assert store.append_message(t, "user", result).offset == 3
        # The other way round: the remembered head still waits for tu1, the stored one does not.
        other.append_message(t, "assistant", "done")
        store.append_message(t, "assistant", call)  # tu1 waits again, remembered by `store`
        other.append_message(t, "user", result)  # and is answered by `other`
        with pytest.raises(InvalidEvent, match="tu1"):
            store.append_message(t, "user", result)
        store.verify()


def test_a_refusal_in_the_one_round_trip_leaves_the_database_as_it_was(url: str) -> None:
    """The server refuses the event (a trigger) or the stream's lock times out, inside the one
    pipeline: nothing is written, no lock stays held, and the store's next append works."""
    import psycopg

    from eventstore.postgres import PostgresBackend

    backend = PostgresBackend(url, timeout=0.5)
    with Store(backend) as store:
        t = store.create_thread(title="refused")
        store.append_message(t, "user", "first")
        before = backend.dump()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                         b"$$ BEGIN IF NEW.data LIKE '%refuse me%' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")
            conn.execute(b"CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()")
        trips = RoundTrips(backend)
        with pytest.raises(StoreError, match="refused"):
            store.append_message(t, "user", "refuse me")
        assert trips.count == 1, "refused in the one round trip, not after a fallback"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"DROP TRIGGER refuse ON events")
        assert backend.dump() == before
        with psycopg.connect(url) as other:  # another transaction holds the thread's lock
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (t,))
            with pytest.raises(StoreError, match="stayed locked"):
                store.append_message(t, "user", "waits for the lock")
        assert backend.dump() == before
        with Store(url, timeout=5) as again:
            assert again.append_message(t, "user", "from another store").offset == 2
        assert store.append_message(t, "user", "second").offset == 3
        assert texts(store, t) == ["first", "from another store", "second"]
        store.verify()


def test_an_event_larger_than_the_sockets_buffer_is_sent_whole_in_either_path(url: str) -> None:
    """The connection is non-blocking: a 10 MB event does not fit the socket at once, and the
    wait for the answer must keep sending it (it hung, waiting for an answer to a request the
    server had not received in full)."""
    body = "x" * 10_000_000
    store, trips = counted_store(url)
    with store:
        t = store.create_thread(title="large")
        assert store.append_message(t, "user", body).offset == 1  # two round trips: the head read
        trips.count = 0
        assert store.append_message(t, "user", body + "y").offset == 2  # one: the remembered head
        assert trips.count == 1
        assert [len(text) for text in texts(store, t)] == [10_000_000, 10_000_001]
        store.verify()


def test_a_fork_and_a_new_thread_append_in_one_round_trip_after_their_first_write(url: str) -> None:
    store, trips = counted_store(url)
    with store:
        t = store.create_thread(title="parent")
        store.append_message(t, "user", "hello")
        f = store.fork(t)
        trips.count = 0
        assert store.append_message(f, "user", "in the fork").offset == 3
        assert store.append_message(t, "user", "in the parent").offset == 2
        assert trips.count == 2
        assert texts(store, f) == ["hello", "in the fork"]
        store.verify()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["text", "call", "result", "expect"])),
                      min_size=1, max_size=12))
def test_stores_taking_turns_on_one_thread_keep_one_chain(turns: list[tuple[int, str]]) -> None:
    """Three stores append to one thread in any order, each through its remembered head when it
    can: every append lands at the next offset, refusals are those the stored head calls for,
    positions rise with offsets, and every chain verifies."""
    url = postgres_url()
    stores = [Store(url) for _ in range(3)]
    try:
        t = stores[0].create_thread(title="turns")
        head, waiting = 1, False
        for n, (who, kind) in enumerate(turns):
            store = stores[who]
            if kind == "call":
                store.append_message(t, "assistant", [{"type": "tool_use", "id": f"tu{n}", "name": "x", "input": {}}])
                head, waiting = head + 1, True
            elif kind == "result":
                answer = [{"type": "tool_result", "tool_use_id": f"tu{n - 1}", "content": "ok"}]
                if waiting and turns[n - 1][1] == "call":
                    store.append_message(t, "user", answer)
                    head, waiting = head + 1, False
                else:
                    with pytest.raises(InvalidEvent):
                        store.append_message(t, "user", answer)
            elif kind == "expect":
                with pytest.raises(ConcurrencyError):
                    store.append_message(t, "user", "late", expect=head - 1)
                assert store.append_message(t, "user", "on time", expect=head).offset == head
                head += 1
            else:
                assert store.append_message(t, "user", f"text {n}").offset == head
                head += 1
        events = list(stores[1].read(t))
        assert [e.offset for e in events] == list(range(head))
        assert [e.position for e in events] == sorted(e.position for e in events)
        stores[2].verify()
    finally:
        for store in stores:
            store.close()
