"""One `Store` called from several Python threads (a web server's workers, `asyncio.to_thread`,
a thread pool): each thread writes and reads through a connection of its own.

Every call from a thread other than the one that opened the store failed with SQLite's
"objects created in a thread can only be used in that same thread", so a store opened at a
web app's start served none of its requests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from eventstore import Store, StoreError
from eventstore.sqlite import SQLiteBackend
from projections.state import ThreadState, save_snapshot, thread_state
from tests.backends import postgres_url


def _on_a_thread(call: Callable[[], Any]) -> Any:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_threads_share_a_store_each_writing_and_reading(tmp_path: Path, where: str) -> None:
    path = str(tmp_path / "t.db") if where == "sqlite" else postgres_url()
    with Store(path) as store:
        shared = store.create_thread(title="shared")

        def work(n: int) -> tuple[str, int]:
            own = store.create_thread(title=f"worker {n}")
            for i in range(40):
                store.append_message(own, "user", f"{n}:{i}")
                store.append_message(shared, "assistant", f"{n}:{i}")  # threads racing on one stream
            return own, sum(1 for _ in store.read(own))

        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(work, range(4)))
        assert [length for _, length in done] == [41] * 4
        texts = [e.data["content"][0]["text"] for e in store.read(shared) if e.type == "message.appended"]
        assert sorted(texts) == sorted(f"{n}:{i}" for n in range(4) for i in range(40))
        assert [e.offset for e in store.read(shared)] == list(range(161))
        assert store.verify().events == store.counts().events


def test_asyncio_to_thread_appends_through_the_store_opened_at_start(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    thread = store.create_thread()

    async def handler(text: str) -> int:
        return (await asyncio.to_thread(store.append_message, thread, "user", text)).offset

    assert asyncio.run(handler("from a worker thread")) == 1
    assert [e.type for e in store.read(thread)] == ["thread.created", "message.appended"]
    store.close()


def test_a_read_view_on_one_thread_is_not_joined_by_another_thread_s_write(tmp_path: Path) -> None:
    """Transactions are each thread's own: a write on another thread while one holds a read
    view neither lands inside that view nor fails on it."""
    with Store(tmp_path / "t.db") as store:
        thread = store.create_thread()
        with store.consistent():
            before = store.head(thread)
            _on_a_thread(lambda: store.append_message(thread, "user", "meanwhile"))
            assert store.head(thread) == before  # the view, as of its start
        assert store.head(thread) == before + 1


def test_close_closes_every_thread_s_connection_and_later_calls_say_it_is_closed(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = Store(db)
    thread = store.create_thread()
    opened = threading.Event()
    closed = threading.Event()
    failure: list[BaseException] = []

    def worker() -> None:
        store.append_message(thread, "user", "from the worker")
        opened.set()
        closed.wait(10)
        try:
            store.append_message(thread, "user", "after close")
        except StoreError as error:
            failure.append(error)

    running = threading.Thread(target=worker)
    running.start()
    assert opened.wait(10)
    store.close()
    closed.set()
    running.join()
    assert len(failure) == 1 and "is closed" in str(failure[0])
    # SQLite removes the write-ahead log when the last connection to the file closes: the
    # worker's connection, closed at its call after the store closed, is gone too.
    assert not Path(f"{db}-wal").exists()
    with pytest.raises(StoreError, match="is closed; open it again"):
        _on_a_thread(lambda: store.head(thread))  # a thread that never used it
    with Store(db) as again:
        assert [e.data["content"][0]["text"] for e in again.read(thread) if e.type == "message.appended"] == ["from the worker"]


def _runs_to_done(script: str, tmp_path: Path) -> None:
    """Run `script` in a fresh interpreter (a crash there is an exit code here, not this test
    run's end), its files in `tmp_path`; it must print "done" and exit 0."""
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert (run.returncode, run.stdout.strip()) == (0, "done"), run.stderr[-2000:]


# Eight rounds, each on a file of its own with a thread of 100 messages, `store` and `thread`.
_ROUNDS = """
import sys, threading, time
from eventstore import Store, StoreError


def calls_until_closed(store, thread, n):  # append (odd n) or read (even n) until closed: what the store said
    try:
        while True:
            if n % 2:
                store.append_message(thread, "user", "meanwhile")
            else:
                sum(1 for _ in store.read(thread))
    except StoreError as error:
        return str(error)


for round in range(8):
    store = Store(sys.argv[1] + f"/{round}.db")
    thread = store.create_thread()
    for i in range(100):
        store.append_message(thread, "user", "before")
"""

_CLOSING_UNDER_CALLS = _ROUNDS + """    failures = []
    workers = [threading.Thread(target=lambda n=n: failures.append(calls_until_closed(store, thread, n))) for n in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(0.02 + round * 0.005)
    store.close()
    for worker in workers:
        worker.join()
    assert len(failures) == 4 and all("is closed" in failure for failure in failures), failures
    with Store(sys.argv[1] + f"/{round}.db") as again:
        assert again.verify().events == again.counts().events
print("done")
"""


def test_close_while_other_threads_are_mid_call_ends_their_calls_cleanly(tmp_path: Path) -> None:
    """A web server shutting down closes the store while requests still run on its workers:
    their connections were closed under their calls, and the interpreter died (SQLite's driver
    used the closed connection: a segmentation fault). Each ends with `is closed` instead."""
    _runs_to_done(_CLOSING_UNDER_CALLS, tmp_path)


def test_close_on_another_thread_closes_that_thread_s_connection_and_the_opener_s_once_it_ended(tmp_path: Path) -> None:
    """A store opened on a thread that has ended (a start-up task's) and closed from another:
    both connections close then (SQLite removes the write-ahead log with the last one); while
    the opening thread lives, its connection waits for that thread's next call instead."""
    db = tmp_path / "t.db"
    store: list[Store] = []
    _on_a_thread(lambda: store.append(Store(db)))
    thread = store[0].create_thread()  # this thread's own connection
    store[0].close()
    assert not Path(f"{db}-wal").exists()
    with pytest.raises(StoreError, match="is closed; open it again"):
        store[0].head(thread)

    opener = Store(db)
    opener.create_thread()
    _on_a_thread(opener.close)  # this thread, the opening one, still lives
    assert Path(f"{db}-wal").exists()
    with pytest.raises(StoreError, match="is closed; open it again"):
        opener.head(thread)
    assert not Path(f"{db}-wal").exists()


_CLOSED_FROM_ANOTHER_THREAD = _ROUNDS + """    closer = threading.Thread(target=lambda: (time.sleep(0.02 + round * 0.005), store.close()))
    closer.start()
    said = calls_until_closed(store, thread, round)
    assert "is closed" in said, said
    closer.join()
    with Store(sys.argv[1] + f"/{round}.db") as again:
        assert again.verify().events == again.counts().events
print("done")
"""


def test_close_from_another_thread_while_the_opening_thread_is_mid_call_ends_its_call_cleanly(tmp_path: Path) -> None:
    """A shutdown hook on another thread (a signal's, a server's) closes the store while the
    thread that opened it is mid-call: its connection was closed under that call, as the
    workers' were (a segmentation fault). The opening thread's next call says it is closed."""
    _runs_to_done(_CLOSED_FROM_ANOTHER_THREAD, tmp_path)


def test_a_memory_store_says_so_on_another_thread(tmp_path: Path) -> None:
    with Store(":memory:") as memory:
        with pytest.raises(StoreError, match="a :memory: store serves only the thread that opened it"):
            _on_a_thread(memory.create_thread)
        memory.create_thread()  # its own thread still uses it


def test_a_store_made_from_a_sqlite_backend_opens_another_with_its_settings(tmp_path: Path) -> None:
    with Store(SQLiteBackend(tmp_path / "t.db", synchronous="FULL")) as given:
        thread = _on_a_thread(given.create_thread)
        assert given.thread(thread).head == 1
    with Store(SQLiteBackend(tmp_path / "t.db", read_only=True)) as reading:
        assert _on_a_thread(lambda: reading.thread(thread).head) == 1
        with pytest.raises(StoreError, match="read-only"):
            _on_a_thread(lambda: reading.append_message(thread, "user", "not written"))


def test_a_store_made_from_a_postgresql_backend_gives_each_thread_its_own_connection() -> None:
    """As the README shows for a partitioned table: `Store(PostgresBackend(url, partitions=N))`.
    Its threads shared the one connection, each one's statements joining another's
    transaction, and appends from a thread pool hung for good."""
    from eventstore.postgres import PostgresBackend

    url = postgres_url()
    store = Store(PostgresBackend(url, partitions=4))
    shared = store.create_thread()
    done: list[int] = []

    def work(n: int) -> None:
        own = store.create_thread()
        for i in range(20):
            store.append_message(own, "user", f"{n}:{i}")
            store.append_message(shared, "assistant", f"{n}:{i}")
        done.append(store.head(own))

    workers = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers), "the appends hung"
    assert done == [21] * 4
    assert [e.offset for e in store.read(shared)] == list(range(81))
    assert store.verify().events == store.counts().events == 81 + 4 * 21
    with Store(PostgresBackend(url, read_only=True)) as reading:
        with pytest.raises(StoreError, match="read-only"):
            _on_a_thread(lambda: reading.append_message(shared, "user", "not written"))
    store.close()


def _open_files(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:  # (the listing's own descriptor, closed by now)
            pass
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_a_thread_that_ends_closes_its_connection(tmp_path: Path) -> None:
    """A server that starts a thread per request (socketserver's ThreadingMixIn) must not keep
    a connection, and its open files, for every request it served."""
    db = (tmp_path / "t.db").resolve()
    with Store(db) as store:
        thread = store.create_thread()

        def request(n: int) -> None:
            worker = threading.Thread(target=store.append_message, args=(thread, "user", f"request {n}"))
            worker.start()
            worker.join()

        request(0)
        held = _open_files(db)  # (SQLite may keep a closed connection's descriptor for the next)
        for n in range(1, 30):
            request(n)
        assert _open_files(db) == held
        assert store.head(thread) == 31


def _resumable_thread(store: Store) -> tuple[str, list[dict[str, Any]]]:
    """A thread with a snapshot and an event after it (a state resumes from the snapshot and
    reads the older message bodies lazily), and the messages a rebuilt state gives."""
    thread = store.create_thread()
    for i in range(30):
        store.append_message(thread, "user" if i % 2 == 0 else "assistant", f"message {i}")
    save_snapshot(store, thread)
    store.append_message(thread, "user", "after the snapshot")
    return thread, [m.to_json() for m in thread_state(store, thread, use_snapshots=False).messages]


class _Holding:
    """A reader whose `store_closing()` lets another thread read a state, and waits until it has."""

    def __init__(self) -> None:
        self.closing, self.read = threading.Event(), threading.Event()

    def store_closing(self) -> None:
        self.closing.set()
        assert self.read.wait(30)


def test_a_state_read_on_another_thread_while_the_store_closes_says_it_is_closed(tmp_path: Path) -> None:
    """A worker's request reads a thread's state while the server's shutdown closes the store:
    the state was registered after `close()` had listed the readers, was forgotten uncalled,
    and its `messages` said the store is closed later, outside the call. The call says so now."""
    store = Store(tmp_path / "t.db")
    thread, _ = _resumable_thread(store)
    holding = _Holding()
    store.finish_before_close(holding)
    outcome: list[ThreadState | StoreError] = []

    def request() -> None:
        assert holding.closing.wait(30)
        try:
            outcome.append(thread_state(store, thread))
        except StoreError as error:
            outcome.append(error)
        holding.read.set()

    worker = threading.Thread(target=request)
    worker.start()
    store.close()
    worker.join(30)
    assert len(outcome) == 1
    if isinstance(outcome[0], ThreadState):
        outcome[0].messages
    assert isinstance(outcome[0], StoreError) and "is closed; open it again" in str(outcome[0])


def test_states_read_on_other_threads_as_the_store_closes_answer_or_say_it_is_closed(tmp_path: Path) -> None:
    """Requests racing a shutdown: each state a worker got answers `messages` after close, or its
    read said the store is closed; none fails later (listing the readers while a worker
    registered one could also raise "dictionary changed size during iteration")."""
    for round in range(6):
        store = Store(tmp_path / f"{round}.db")
        thread, expected = _resumable_thread(store)
        kept = [thread_state(store, thread) for _ in range(300)]  # registered, waiting for close
        states: list[ThreadState] = []
        refused: list[str] = []
        started = threading.Barrier(5)

        def request() -> None:
            started.wait(30)
            try:
                while True:
                    states.append(thread_state(store, thread))
            except StoreError as error:
                refused.append(str(error))

        workers = [threading.Thread(target=request) for _ in range(4)]
        for worker in workers:
            worker.start()
        started.wait(30)
        store.close()
        for worker in workers:
            worker.join(30)
        assert len(refused) == 4 and all("is closed" in why for why in refused), refused
        for state in kept + states:
            assert [m.to_json() for m in state.messages] == expected


class _Reader:
    called = False

    def store_closing(self) -> None:
        self.called = True


def test_close_while_another_thread_registers_readers_calls_them_and_does_not_raise() -> None:
    """Listing the weakly held readers while another thread added one raised RuntimeError
    ("dictionary changed size during iteration") from `close()`, which then closed nothing."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, as a loaded machine does
    try:
        for _ in range(20):
            store = Store(":memory:")
            readers = [_Reader() for _ in range(20000)]
            for reader in readers:
                store.finish_before_close(reader)
            refused: list[str] = []

            def register() -> None:
                try:
                    while True:
                        reader = _Reader()
                        store.finish_before_close(reader)
                        readers.append(reader)
                except StoreError as error:
                    refused.append(str(error))

            registering = threading.Thread(target=register, daemon=True)
            registering.start()
            store.close()
            registering.join(30)
            assert refused and "is closed" in refused[0]
            assert all(reader.called for reader in readers)
    finally:
        sys.setswitchinterval(interval)
