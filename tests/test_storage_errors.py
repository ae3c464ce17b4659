"""Only `StoreError` leaves the store: damaged files, closed stores and the backend seam.

A driver error met anywhere (opening, a query, or while iterating over rows already
returned) reaches the caller as a `StoreError` that names the file, never as a `sqlite3`
exception; the CLI turns it into one `error:` line and exit status 1.
"""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventstore import Locked, SchemaError, Store, StoreError
from eventstore.sqlite import SQLiteBackend
from projections import display_rows, thread_state, transcript
from threadlog import export_all, export_events
from tests.backends import postgres_url

THREADLOG = str(Path(sys.executable).parent / "threadlog")
PAGE = 4096


def damaged(tmp_path: Path) -> tuple[Path, str]:
    """A file whose header, schema and streams read fine but whose later pages (the events'
    rows) are overwritten with garbage, as a failing disk or a torn copy leaves them."""
    db = tmp_path / "damaged.db"
    with Store(db) as store:
        thread = store.create_thread(title="kept")
        store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": "x" * 200}}] * 300)
    assert not Path(f"{db}-wal").exists()  # closing checkpointed everything into the file
    pages = db.stat().st_size // PAGE
    with open(db, "r+b") as file:
        for page in range(pages // 2, pages):
            file.seek(page * PAGE)
            file.write(b"\xa5" * PAGE)
    return db, thread


@pytest.mark.parametrize("read", [
    lambda s, t: list(s.read(t)),
    lambda s, t: list(s.read_data(t)),
    lambda s, t: list(s.read_all()),
    lambda s, t: thread_state(s, t).messages,
    lambda s, t: display_rows(s, t),
    lambda s, t: transcript(s, t),
    lambda s, t: s.verify(),
], ids=["read", "read_data", "read_all", "thread_state", "display_rows", "transcript", "verify"])
def test_a_corrupt_page_met_while_reading_is_a_store_error_naming_the_file(tmp_path: Path, read: Any) -> None:
    db, thread = damaged(tmp_path)
    with Store(db) as store:
        assert store.head(thread) == 301  # it opens, and its streams still read
        with pytest.raises(StoreError) as caught:
            read(store, thread)
    assert type(caught.value) is StoreError
    assert str(db) in str(caught.value) and "damaged" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no sqlite3 error shown


def test_iterating_rows_already_returned_translates_errors_too(tmp_path: Path) -> None:
    """The error surfaces from `next()`, after `read` returned: the iterator translates it."""
    db, thread = damaged(tmp_path)
    with Store(db) as store:
        rows = store.read(thread)  # checks the thread, reads nothing yet
        with pytest.raises(StoreError, match="damaged"):
            for _ in rows:
                pass


def test_the_cli_on_a_file_that_opens_but_is_corrupt_further_in(tmp_path: Path) -> None:
    db, thread = damaged(tmp_path)
    for args in (["log", thread], ["show", thread], ["transcript", thread], ["verify"]):
        done = subprocess.run([THREADLOG, *args, "--db", str(db)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "sqlite3" not in done.stderr, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(db) in lines[0], done.stderr


def test_a_write_that_outwaits_its_timeout_raises_locked_naming_the_file_and_writes_nothing(tmp_path: Path) -> None:
    """A caller that retries on another writer's lock (a follower, a service) tells it by its
    class, not by the words of a plain StoreError."""
    path = tmp_path / "t.db"
    with Store(str(path), timeout=0.2) as store:
        t = store.create_thread()
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(Locked, match="stayed locked by another writer") as refused:
            store.append_message(t, "user", "waits")
        assert refused.value.path == str(path) and str(path) in str(refused.value)
        holder.execute("ROLLBACK")
        holder.close()
        assert store.head(t) == 1
        store.append_message(t, "user", "once it is free")
        assert store.head(t) == 2


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_read_only_open_where_no_store_is_says_how_to_make_one(tmp_path: Path, backend: str) -> None:
    """`Store(target, read_only=True)` on a missing file names `threadlog init`; on a PostgreSQL
    database with no store it said only that a read-only open creates nothing."""
    target = str(tmp_path / "typo.db") if backend == "sqlite" else postgres_url()
    with pytest.raises(StoreError, match=r"create one with `threadlog init` \(or check the (path|URL)\)"):
        Store(target, read_only=True)


def test_a_file_that_is_not_a_database_is_refused_by_code(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"just some notes, not a database\n" * 200)
    with pytest.raises(SchemaError, match="not a SQLite database"):
        Store(db)


@pytest.mark.parametrize("version", [-1, 0, 1, 5, 6])
def test_a_schema_version_altered_by_hand_is_refused_and_changes_nothing(tmp_path: Path, version: int) -> None:
    """A current file whose user_version was set back (or below 0): opening it would migrate
    tables that are already there. It is refused in one line naming the version."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(thread_id="T")
        store.purge()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaError, match=f"schema version {version}\\b"):
        Store(db)
    for args in (["ls"], ["new"], ["verify"]):
        done = subprocess.run([THREADLOG, *args, "--db", str(db)], capture_output=True, text=True, timeout=60)
        lines = done.stderr.splitlines()
        assert done.returncode == 1 and len(lines) == 1 and f"schema version {version}" in lines[0], (args, done.stderr)
    assert db.read_bytes() == before


# -- a closed store ---------------------------------------------------------------------------


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What Python would print as `Exception ignored in ...` (errors in finalizers)."""
    seen: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(f"{info.object!r}: {info.exc_value!r}"))
    yield seen


@pytest.mark.parametrize("reader", ["read", "read_data", "read_raw", "read_all"])
def test_an_open_read_then_a_closed_store_prints_nothing(tmp_path: Path, unraisable: list[str], reader: str) -> None:
    """An exception escapes a loop over a read, the store is closed while the exception (and
    so the suspended generator) is alive; finalizing the generator must not touch the
    closed connection (it printed `Cannot operate on a closed database`)."""
    store = Store(tmp_path / "t.db")
    thread = store.create_thread()
    for i in range(300):
        store.append_message(thread, "user", f"message {i}")
    rows = store.read_all() if reader == "read_all" else getattr(store, reader)(thread)
    caught: list[BaseException] = []
    try:
        for _ in rows:
            raise ValueError("the caller's own error")
    except ValueError as error:
        caught.append(error)  # keeps the traceback, and the generator, alive
    store.close()
    del rows
    caught.clear()
    gc.collect()
    assert unraisable == []


def test_reading_after_close_is_a_store_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    thread = store.create_thread()
    store.append_message(thread, "user", "hi")
    rows = store.read(thread)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        list(rows)
    with pytest.raises(StoreError, match="closed"):
        store.head(thread)


CLOSED_CALLS = {
    "verify": lambda s, t: s.verify(),
    "checkpoint": lambda s, t: s.checkpoint(),
    "consistent": lambda s, t: s.consistent().__enter__(),
    "export_events": lambda s, t: list(export_events(s, t)),
    "export_all": lambda s, t: list(export_all(s)),
}


@pytest.mark.parametrize("call", CLOSED_CALLS)
def test_a_consistent_read_after_close_is_a_store_error(tmp_path: Path, call: str) -> None:
    """What reads in one read transaction (verify, checkpoint, exports) raised sqlite3's
    `ProgrammingError: Cannot operate on a closed database`."""
    store = Store(tmp_path / "t.db")
    thread = store.create_thread()
    store.close()
    with pytest.raises(StoreError, match="is closed; open it again"):
        CLOSED_CALLS[call](store, thread)


# -- the seam ---------------------------------------------------------------------------------


def test_a_store_runs_on_a_backend_object_with_its_own_settings(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "t.db", synchronous="FULL")
    with Store(backend) as store:
        thread = store.create_thread()
        assert (store.synchronous, store.journal_mode, store.path) == ("FULL", "wal", str(tmp_path / "t.db"))
        assert store.counts() == (1, 1) and store.head(thread) == 1


@pytest.mark.parametrize("path", [None, 5, b"t.db", ["t.db"]], ids=["none", "int", "bytes", "list"])
def test_a_store_of_something_that_is_no_path_nor_backend_is_refused_at_once(path: Any) -> None:
    """Store(None) was taken for a backend object and failed at its first call (AttributeError)."""
    with pytest.raises(StoreError, match=f"a store opens a file path, a postgresql:// URL or a storage backend, not {type(path).__name__}$"):
        Store(path)


@pytest.mark.parametrize("name", ["a\x00b.db", "\ud800.db"], ids=["nul", "lone-surrogate"])
def test_a_path_no_file_can_have_is_refused_by_name(tmp_path: Path, name: str) -> None:
    """The driver raised ValueError (embedded null byte) or UnicodeEncodeError."""
    with pytest.raises(StoreError, match="cannot name a file: it holds a character no file name can"):
        Store(str(tmp_path / name))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setting", ["synchronous", "timeout"])
def test_a_setting_nested_too_deeply_to_show_is_refused_briefly(tmp_path: Path, setting: str) -> None:
    """The refusal wrote the value with repr(), which raised RecursionError."""
    deep: dict[str, Any] = {}
    for _ in range(1200):
        deep = {"a": deep}
    with pytest.raises(StoreError, match=rf"^{setting} must be .*, not \{{'a': \{{'a': \{{'a': \{{\.\.\.\}}\}}\}}\}}$"):
        Store(tmp_path / "t.db", **{setting: deep})


@pytest.mark.parametrize("read_only", ["no", 2, None], ids=["text", "int", "none"])
def test_a_read_only_that_is_no_bool_is_refused(tmp_path: Path, read_only: Any) -> None:
    """read_only="no" opened the file read-only (any value was taken for its truth)."""
    Store(tmp_path / "t.db").close()
    with pytest.raises(StoreError, match=f"^read_only must be True or False, not {read_only!r}$"):
        Store(tmp_path / "t.db", read_only=read_only)


@pytest.mark.parametrize("progress", [True, 5, "dots"], ids=["bool", "int", "text"])
def test_a_verify_progress_that_is_no_function_is_refused_by_name(tmp_path: Path, progress: Any) -> None:
    """It was called once events were checked: TypeError ('int' object is not callable)."""
    with Store(tmp_path / "t.db") as store:
        store.append_message(store.create_thread(), "user", "hi")
        with pytest.raises(StoreError, match=f"^progress: must be a function called as progress\\(done, total\\), not {type(progress).__name__}$"):
            store.verify(progress)


def test_sqlite_settings_belong_to_the_sqlite_backend(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="SQLiteBackend"):
        Store(SQLiteBackend(tmp_path / "t.db"), synchronous="FULL")
    with pytest.raises(StoreError, match="synchronous must be"):
        Store(tmp_path / "u.db", synchronous="sometimes")


def test_a_postgresql_url_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="PostgreSQL") as caught:
        Store("postgresql://ana:secret@db.example/threads")
    assert "secret" not in str(caught.value)
    assert not any(tmp_path.iterdir())


def _append_in_a_worker(db: str, thread: str, event: dict[str, Any]) -> None:
    with Store(db) as store:
        store.append(thread, [event])


def test_a_refusal_in_a_worker_process_reaches_the_parent_as_itself(tmp_path: Path) -> None:
    """An error of threadlog raised in a worker process (`concurrent.futures`, multiprocessing)
    is pickled to the parent: `InvalidEvent(field, why)` was pickled as a call with its message
    alone, its unpickling raised TypeError, and the parent saw a broken process pool instead of
    the refusal (and its `field`)."""
    import concurrent.futures
    import multiprocessing
    import pickle

    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread()
    bad = {"type": "message.appended", "data": {"role": "robot", "content": "hi"}}
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        refused = pool.submit(_append_in_a_worker, str(db), thread, bad).exception(timeout=120)
        missing = pool.submit(_append_in_a_worker, str(db), "no-such-thread", bad).exception(timeout=120)
    from eventstore import InvalidEvent, ThreadNotFound

    assert isinstance(refused, InvalidEvent) and refused.field == "events[0].data.role" and "'user' or 'assistant'" in str(refused), refused
    assert isinstance(missing, (ThreadNotFound, InvalidEvent)), missing
    with Store(db) as store:
        assert store.head(thread) == 1
        for error in (refused, missing, Locked(str(db), "busy")):
            again = pickle.loads(pickle.dumps(error))
            assert (type(again), str(again), again.__dict__) == (type(error), str(error), error.__dict__)
