"""Redaction on PostgreSQL leaves no copy of the erased text in the search index: neither in
the rows a query can read nor in the index's files, and not when a search catches the index
up while the redaction runs. (Dead row versions and the server's WAL are the server's to
recycle: the README says what to run.)"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from projections.search import extractor
from threadlog import OldPagesKept, Store, search
from tests.backends import postgres_cluster, postgres_url
from tests.test_postgres_tamper_reads import dump

SECRET = "Zq7SecretWordKx"


def _rows_holding(url: str, word: str) -> list[str]:
    """Every row of every threadlog table, as text, that holds `word` (any case)."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        found = []
        for table in tables:
            for (text,) in conn.execute(f"SELECT t::text FROM {table} t"):  # noqa: S608 (names from the catalogue)
                if word.lower() in text.lower():
                    found.append(f"{table}: {text[:120]}")
        return found


# The store's relations: its schema's tables and indexes, their TOAST tables and those's indexes.
_RELATIONS = """
WITH own AS (SELECT c.oid, c.reltoastrelid FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace),
     toast AS (SELECT reltoastrelid AS oid FROM own WHERE reltoastrelid <> 0
               UNION SELECT x.indexrelid FROM pg_index x JOIN own ON x.indrelid = own.reltoastrelid)
SELECT c.relname, pg_relation_filepath(c.oid) FROM pg_class c
WHERE (c.oid IN (SELECT oid FROM own) OR c.oid IN (SELECT oid FROM toast)) AND pg_relation_filepath(c.oid) IS NOT NULL
"""


def _files_holding(url: str, word: str) -> list[str]:
    """The relations of the store's schema (tables, their TOAST, indexes) whose files hold `word`.
    Only this store's: every pg_toast relation of the database (each earlier test's schema's),
    each found by a glob of the database's directory, took 127 s at the end of a suite."""
    data = postgres_cluster().data
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # every page on disk
        files = conn.execute(_RELATIONS).fetchall()
    needle = word.lower().encode()
    found = set()
    for name, path in files:
        node = data / path  # its segments: the file, then .1, .2, ...; and its free space and visibility maps
        segments = [node, node.with_name(node.name + "_fsm"), node.with_name(node.name + "_vm")]
        while (more := node.with_name(f"{node.name}.{len(segments) - 2}")).exists():
            segments.append(more)
        if any(needle in segment.read_bytes().lower() for segment in segments if segment.exists()):
            found.add(name)
    return sorted(found)


def _statistics_holding(url: str, word: str) -> list[str]:
    """The columns of the store's tables whose statistics (`pg_stats`) hold `word`."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT tablename, attname, s::text FROM pg_stats s WHERE schemaname = current_schema()").fetchall()
    return sorted(f"{table}.{column}" for table, column, text in rows if word.lower() in text.lower())


def _indexed_secret(store: Store) -> int:
    """The position of a message holding SECRET, in a thread of its own, once the search index holds it."""
    leak = store.append_message(store.create_thread(title="keys"), "user", f"the password is {SECRET} today")
    assert [hit.position for hit in search(store, SECRET)] == [leak.position]
    return leak.position


@contextlib.contextmanager
def _snapshot_held(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A reader whose snapshot (REPEATABLE READ) is taken at once and held until it rolls back:
    every row version a redaction removes after it stays alive meanwhile."""
    with psycopg.connect(url) as reader:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM events").fetchone()
        yield reader


def _once_search_docs_waits(url: str, then: Callable[[], Any]) -> threading.Thread:
    """A thread running `then` once a session waits for a lock on this store's `search_docs`
    (the index's rewrite, VACUUM FULL, behind a reader's lock on it)."""

    def watch() -> None:
        deadline = time.monotonic() + 30
        with psycopg.connect(url, autocommit=True) as conn:
            while not conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'search_docs'::regclass"
                                   ).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the index's rewrite never waited for the reader's lock"
                time.sleep(0.02)
        then()

    watching = threading.Thread(target=watch)
    watching.start()
    return watching


def _purge_once_unheld(store: Store) -> None:
    """purge(), again while it says a transaction older than the redaction holds the old version
    (what its error asks): the suite's other tests share the database, and one of theirs open
    since before the redaction holds it up as any other client's would."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return store.purge()
        except OldPagesKept:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_redacted_word_leaves_the_search_index_files() -> None:
    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="keys")
        store.append_message(t, "user", "nothing to see")
        leak = store.append_message(t, "user", f"the password is {SECRET} today")
        assert [hit.position for hit in search(store, SECRET)] == [leak.position]
        assert "search_tsv" in _files_holding(url, SECRET), "the test must start with the word in the index"
        store.redact(leak.position, reason="password", actor="ops")
        assert search(store, SECRET) == []
        assert store.verify().redacted == 1
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


@pytest.mark.parametrize("purger", ["another thread", "another store"])
def test_purge_after_a_redaction_elsewhere_rewrites_the_search_index(purger: str) -> None:
    """`redact(..., purge=False)` leaves the purge to a later `purge()`, which may run on another
    thread of the store (each has a connection of its own) or in another process (`threadlog
    purge`): it left the erased word in the index's files, as only the redacting connection knew
    to write the index anew."""
    url = postgres_url()
    with Store(url) as store:
        leak = _indexed_secret(store)
        redacting = threading.Thread(target=lambda: store.redact(leak, reason="password", actor="ops", purge=False))
        redacting.start()
        redacting.join(30)
        assert store.verify().redacted == 1
        if purger == "another thread":
            _purge_once_unheld(store)
        else:
            with Store(url) as other:
                _purge_once_unheld(other)
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


@pytest.mark.parametrize("partitions", [0, 4], ids=["one-table", "partitioned"])
def test_a_redaction_a_snapshot_open_elsewhere_holds_up_says_so_and_purge_finishes_it(partitions: int) -> None:
    """A reader's snapshot open since before the redaction keeps the old row version, and VACUUM
    cannot remove it: redact and purge said all was done while the erased payload stayed in the
    table's file. Both say the old version is kept (`OldPagesKept`, as SQLite's readers of the
    WAL), and purge, once the reader is done, leaves no copy."""
    from eventstore.postgres import PostgresBackend

    url = postgres_url()
    with Store(PostgresBackend(url, partitions=partitions)) as store:
        t = store.create_thread(title="keys")
        leak = store.append_message(t, "user", f"the password is {SECRET} today")
        with _snapshot_held(url) as reader:
            with pytest.raises(OldPagesKept, match="old row version"):
                store.redact(leak.position, reason="password", actor="ops")
            with pytest.raises(OldPagesKept, match="old row version"):
                store.purge()
            reader.rollback()
        assert store.verify().redacted == 1
        store.purge()
        with _snapshot_held(url):  # a snapshot taken after the redaction holds nothing up
            store.purge()
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


def test_a_prepared_transaction_from_before_the_redaction_is_said_to_keep_the_old_version() -> None:
    """A transaction prepared for two-phase commit (`PREPARE TRANSACTION`) before the redaction
    holds the old row version up as an open one does, but no session shows it: redact and purge
    said all was done while the erased payload stayed in the table's file. Both name it now, and
    purge, once it is rolled back, leaves no copy."""
    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="keys")
        leak = store.append_message(t, "user", f"the password is {SECRET} today")
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("BEGIN")
            other.execute("SELECT txid_current()")  # it holds an id, older than the redaction's
            other.execute("PREPARE TRANSACTION 'threadlog-test-held'")
        try:
            with pytest.raises(OldPagesKept, match=r"1 prepared transaction\(s\) \(pg_prepared_xacts\) .*old row version"):
                store.redact(leak.position, reason="password", actor="ops")
            with pytest.raises(OldPagesKept, match="prepared transaction"):
                store.purge()
        finally:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("ROLLBACK PREPARED 'threadlog-test-held'")
        store.purge()
        assert store.verify().redacted == 1
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


def test_a_snapshot_ending_while_purge_runs_is_still_said_to_have_kept_the_old_version() -> None:
    """purge() vacuumed, then asked whether a transaction older than the redaction was open. One
    that ended in between (here: while the index's rewrite waited for its lock) had kept the old
    row version through the vacuum of the events, and purge said all was done while the erased
    text stayed in the table's file. Asked before the vacuum, it says so; a purge after is clean."""
    url = postgres_url()
    with Store(url) as store:
        leak = _indexed_secret(store)
        with _snapshot_held(url) as reader:  # from before the redaction
            reader.execute("LOCK TABLE search_docs IN ACCESS SHARE MODE")  # the index's rewrite waits for it
            store.redact(leak, reason="password", actor="ops", purge=False)
            ending = _once_search_docs_waits(url, reader.rollback)  # past the events' vacuum, before purge() returns
            try:
                with pytest.raises(OldPagesKept, match="old row version"):
                    store.purge()
            finally:
                ending.join()
        store.purge()
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


def test_a_purge_after_a_redaction_a_snapshot_held_up_writes_the_search_index_anew() -> None:
    """The redaction of an indexed event writes the index anew (VACUUM FULL), and a snapshot open
    since before it kept the removed row in the new files too; the redaction said so, and to call
    purge() once the snapshot ends. That purge vacuumed only: the note asking for the rewrite was
    gone, and the erased word stayed in the index's files."""
    url = postgres_url()
    with Store(url) as store:
        leak = _indexed_secret(store)
        with _snapshot_held(url) as reader:
            with pytest.raises(OldPagesKept, match="old row version"):
                store.redact(leak, reason="password", actor="ops")
            reader.rollback()
        store.purge()
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


def test_threadlog_purge_held_up_on_postgresql_says_what_holds_it_not_the_write_ahead_log() -> None:
    """`threadlog purge` while a snapshot from before the redaction is open said SQLite's words,
    that the write-ahead log still holds old pages (PostgreSQL's WAL is the server's, and purge
    does not touch it): the user was not told that a transaction holds the old row version in
    the table's file. It says so now, exits 1 and changes no row; once the snapshot ends, a
    purge leaves no copy."""
    url = postgres_url()
    with Store(url) as store:
        leak = _indexed_secret(store)
        with _snapshot_held(url) as reader:
            with pytest.raises(OldPagesKept):
                store.redact(leak, reason="password", actor="ops")
            with psycopg.connect(url, autocommit=True) as conn:
                before = dump(conn)
            done = subprocess.run([sys.executable, "-m", "threadlog", "--db", url, "purge"], capture_output=True, text=True,
                                  timeout=60)
            with psycopg.connect(url, autocommit=True) as conn:
                assert dump(conn) == before
            reader.rollback()
    assert done.returncode == 1 and done.stdout == "", done
    assert re.fullmatch(r"error: \d+ transaction\(s\) open elsewhere since before the last redaction still see the old "
                        r"row version of its event, so it stays in the table's file; run `threadlog purge` again once "
                        r"they end\n", done.stderr), done.stderr
    with Store(url) as store:
        _purge_once_unheld(store)
    assert _rows_holding(url, SECRET) == []
    assert _files_holding(url, SECRET) == []


def test_a_search_catching_up_while_a_redaction_runs_keeps_no_copy() -> None:
    url = postgres_url()
    with Store(url) as writer, Store(url) as indexer:
        t = writer.create_thread(title="keys")
        leak = writer.append_message(t, "user", f"the password is {SECRET} today")
        make = extractor(indexer)
        read, release = threading.Event(), threading.Event()

        def slow() -> Any:
            extract = make()

            def call(*args: Any) -> Any:
                read.set()  # the events are read: the index holds the payload in memory now
                assert release.wait(30)
                return extract(*args)

            return call

        errors: list[BaseException] = []

        def run(work: Any) -> threading.Thread:
            def target() -> None:
                try:
                    work()
                except BaseException as error:  # noqa: BLE001 (raised again in the test's thread)
                    errors.append(error)

            thread = threading.Thread(target=target)
            thread.start()
            return thread

        catching_up = run(lambda: indexer.update_index(slow))
        assert read.wait(30)
        redacting = run(lambda: writer.redact(leak.position, reason="password", actor="ops"))
        redacting.join(1)  # it may finish now, or wait for the index to be committed
        release.set()
        catching_up.join(30)
        redacting.join(30)
        assert not errors, errors
        assert search(writer, SECRET) == []
    assert _rows_holding(url, SECRET) == []


def test_a_redaction_racing_appends_and_another_redaction_on_the_same_thread() -> None:
    """PostgreSQL locks per thread: a redaction must take its thread's lock before it reads the
    head it appends its event.redacted to, or an append committed in between fails it."""
    url = postgres_url()
    with Store(url) as redactor, Store(url) as writer, Store(url) as other:
        t = writer.create_thread(title="busy")
        outcomes: list[tuple[str, str]] = []
        for round_ in range(20):
            leak = writer.append_message(t, "user", f"{SECRET} {round_}")
            start = threading.Barrier(3)
            results: dict[str, str] = {}

            def attempt(name: str, work: Any) -> None:
                start.wait(10)
                try:
                    work()
                    results[name] = "ok"
                except OldPagesKept:  # committed; the racing redaction's snapshot saw the old version
                    results[name] = "ok"
                except Exception as error:  # noqa: BLE001 (the outcome is what the test compares)
                    results[name] = f"{type(error).__name__}: {error}"

            threads = [threading.Thread(target=attempt, args=args) for args in [
                ("redact", lambda: redactor.redact(leak.position, reason="leak", actor="ops")),
                ("again", lambda: other.redact(leak.position, reason="leak", actor="ops")),
                ("append", lambda: writer.append_message(t, "assistant", "noted")),
            ]]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert results["append"] == "ok", results
            outcomes.append((results["redact"], results["again"]))
        for first, second in outcomes:  # exactly one redaction of each event; the other is told why
            assert sorted([first, second])[1] == "ok", outcomes
            assert sorted([first, second])[0].startswith("InvalidEvent: position: "), outcomes
            assert "is already redacted" in sorted([first, second])[0]
        assert redactor.verify().redacted == 20
        redactor.purge()
        assert search(redactor, SECRET) == []


@pytest.mark.parametrize("partitions", [0, 4], ids=["one-table", "partitioned"])
def test_a_redacted_payload_leaves_the_planner_statistics(partitions: int) -> None:
    """The server's ANALYZE (autovacuum runs it once a table has grown) samples the rows' values
    into `pg_statistic`: a redacted message's text stayed there after redact and purge said no
    copy was left, readable by any role that may read the table (`SELECT histogram_bounds FROM
    pg_stats`), words of the search index among them (`most_common_elems`)."""
    from eventstore.postgres import PostgresBackend

    url = postgres_url()
    with Store(PostgresBackend(url, partitions=partitions)) as store:
        t = store.create_thread(title="keys")
        leaks = [store.append_message(t, "user", f"the password is {SECRET}{i} today").position for i in range(30)]
        assert len(search(store, SECRET + "0")) == 1
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        assert _statistics_holding(url, SECRET), "the test must start with the text in the statistics"
        for position in leaks:
            store.redact(position, reason="password", actor="ops", purge=False)
        _purge_once_unheld(store)
    assert _rows_holding(url, SECRET) == []
    assert _statistics_holding(url, SECRET) == []

