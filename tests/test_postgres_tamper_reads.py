"""Every read path over a PostgreSQL database altered with raw SQL: a clear refusal or an answer.

The PostgreSQL side of tests/test_tamper_reads.py. Its columns are typed, so a hand edit cannot
store a blob where text was, but it can store NULL in every nullable column (an event's type
code and type name both, its time both ways), text that is not JSON, or JSON that is not an
object, where JSON was, a negative or huge number in any number, a very long string, an id
that names no stream, or a parent that is the stream itself or one of its forks. Each CLI
command answers or prints one `error:` line (exit 1), each library call answers or raises
`StoreError`, no reading command changes the database, and `verify` names a position.

One database is built once; each case alters one value, runs one command and puts the value
back (by the row's physical address, so even an altered key finds its row).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.postgres import PostgresBackend
from eventstore.verify import verify
from projections.search import update_index
from tests.backends import postgres_url
from tests.test_bad_input import fingerprint
from tests.test_tamper_reads import LIBRARY, build, check_verify, commands, run_command, run_library
from threadlog import IntegrityError, Store, StoreError
from threadlog.cli import cli

# A value of each kind, as SQL; PostgreSQL refuses those a column's type or constraints cannot hold.
KINDS = {
    "null": "NULL", "negative": "-3", "zero": "0", "huge": str(2**63 - 1), "int-max": str(2**31 - 1), "small-max": "32767",
    "text": "'zz'", "json-list": "'[1]'", "json-number": "'7'", "long": "repeat('x', 100000)", "empty": "''",
    "bytes": "'\\x00ff'::bytea", "root": "'T'", "fork-of-fork": "'G'",
}
STREAM_COLUMNS = ("id", "parent_id", "parent_offset", "root_id", "depth", "head", "created_position", "kind",
                  "head_hash", "facts", "first_message_offset", "last_position")
EVENT_COLUMNS = ("position", "root_id", "stream_id", "offset", "event_id", "type", "type_name", "schema_version", "data",
                 "meta", "recorded_at", "recorded_text", "data_digest", "hash", "pending", "redacted_by")
TABLES = ("threadlog_schema", "streams", "events", "snapshots", "search_docs", "search_progress")


class Template(NamedTuple):
    url: str
    checkpoint: str  # of the database before its last few events
    sub: str  # the sub-agent fork's id
    conn: psycopg.Connection[Any]


@pytest.fixture(scope="module")
def template() -> Iterator[Template]:
    url = postgres_url()
    with Store(url) as store:
        checkpoint, sub = build(store)
    with psycopg.connect(url, autocommit=True) as conn:
        yield Template(url, checkpoint, sub, conn)


def dump(conn: psycopg.Connection[Any]) -> list[str]:
    """Every row of every table, as text: equal dumps mean an unchanged database."""
    return [f"{table}: {row[0]}" for table in TABLES
            for row in conn.execute(f"SELECT t::text FROM {table} t ORDER BY 1").fetchall()]  # type: ignore[call-overload]


def _key(table: str) -> str:
    return "id" if table == "streams" else "position"


class Altered(NamedTuple):
    table: str
    column: str
    ctid: str  # where the altered row is now
    value: Any  # what the column held


def alter(conn: psycopg.Connection[Any], table: str, column: str, key: Any, value: str) -> Altered | None:
    """Set `column` of the row `key` names to `value` (SQL); None when PostgreSQL refuses it or it changes nothing."""
    found = conn.execute(f'SELECT "{column}" FROM {table} WHERE {_key(table)} = %s', (key,)).fetchone()  # type: ignore[call-overload]
    if found is None:
        return None
    try:
        done = conn.execute(f'UPDATE {table} SET "{column}" = {value} WHERE {_key(table)} = %s '  # type: ignore[call-overload]
                            f'AND "{column}" IS DISTINCT FROM {value} RETURNING ctid::text', (key,)).fetchone()
    except psycopg.Error:  # a type or a constraint refuses it
        return None
    return None if done is None else Altered(table, column, done[0], found[0])


def restore(conn: psycopg.Connection[Any], altered: Altered) -> None:
    conn.execute(f'UPDATE {altered.table} SET "{altered.column}" = %s WHERE ctid = %s::tid',  # type: ignore[call-overload]
                 (altered.value, altered.ctid))


def _write_commands(stream: str) -> dict[str, list[str]]:
    return {"append": ["append", stream, "--role", "user", "--text", "hi"],
            "emit": ["emit", stream, "title.set", "--data", '{"title": "x"}'], "fork": ["fork", stream]}


WHERE = st.sampled_from([("streams", c) for c in STREAM_COLUMNS] + [("events", c) for c in EVENT_COLUMNS])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=WHERE, row=st.integers(0, 19), kind=st.sampled_from(list(KINDS)), which=st.data())
def test_a_value_of_another_kind_anywhere_is_read_or_refused_clearly(
        template: Template, where: tuple[str, str], row: int, kind: str, which: st.DataObject) -> None:
    table, column = where
    conn = template.conn
    key = ["T", "F", "G", template.sub][row % 4] if table == "streams" else row + 1
    before = dump(conn)
    altered = alter(conn, table, column, key, KINDS[kind])
    if altered is None:
        return
    try:
        tampered = dump(conn)
        cli_commands = {**commands(template.checkpoint, template.sub), "search": ["search", "found"]}
        names = sorted(cli_commands) + [f"lib:{n}" for n in sorted(LIBRARY)] + ["verify"]
        name = which.draw(st.sampled_from(names))
        if name.startswith("lib:"):
            run_library(template.url, name[4:], template.sub)
        elif name == "verify":
            check_verify(template.url)
        else:
            run_command(template.url, cli_commands[name])
        if name == "search":  # the index catches up as it searches: the only write a read makes
            conn.execute("DELETE FROM search_docs; DELETE FROM search_progress WHERE name = 'documents'; "
                         "UPDATE search_progress SET position = 0")
        assert dump(conn) == tampered, f"{name} changed the database"
    finally:
        restore(conn, altered)
        assert dump(conn) == before


def _threadlog(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, stopped after 30 seconds (a hang fails the test rather than the run)."""
    return subprocess.run([sys.executable, "-c", "from threadlog.cli import cli; cli()", "--db", db, *args],
                          capture_output=True, text=True, timeout=30)


def _built_and_altered(tmp_path: Path, backend: str, sql: str) -> str:
    """A store on `backend` holding `build`'s rows, then altered by `sql`; its path or URL."""
    db = postgres_url() if backend == "postgresql" else str(tmp_path / "t.db")
    with Store(db) as store:
        build(store)
    if backend == "postgresql":
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(sql)
    else:
        with contextlib.closing(sqlite3.connect(db)) as lite, lite:
            lite.execute(sql)
    return db


# A cycle of parents: T's row names G (a fork of T's fork F) as its parent. Reading any of the
# three ran the recursive ancestry query forever (on SQLite in memory, on PostgreSQL filling a
# temporary file), and `verify` looped in Python looking for the fork point's owner.
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_cycle_of_parents_is_refused_and_named_by_verify(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "UPDATE streams SET parent_id = 'G' WHERE id = 'T'")
    for thread in ("T", "F", "G"):
        shown = _threadlog(db, "show", thread)
        assert shown.returncode == 1 and "its parent_id names" in shown.stderr and "a cycle of forks" in shown.stderr, shown
    # A fork at an offset the cycle holds reads the cycle: refused. (One at G's head reads G's
    # row alone, as an append does: it is written, and reading it refuses like the others.)
    forked = _threadlog(db, "fork", "G", "--at", "3")
    assert forked.returncode == 1 and "a cycle of forks" in forked.stderr, forked
    at_head = _threadlog(db, "fork", "G")
    assert at_head.returncode == 0, at_head
    shown = _threadlog(db, "show", at_head.stdout.strip())
    assert shown.returncode == 1 and "a cycle of forks" in shown.stderr, shown
    for listing in (["ls"], ["tree"], ["tree", "--all"]):  # no root is left to list: they printed nothing and exited 0
        listed = _threadlog(db, *listing)
        assert listed.returncode == 1 and "holds 5 threads but no root thread" in listed.stderr, listed
    # With a sound thread beside them, `tree --all` printed its tree and left the five out without a word.
    sound = _threadlog(db, "new", "--title", "sound").stdout.strip()
    listed = _threadlog(db, "tree", "--all")
    assert listed.returncode == 1 and listed.stdout.startswith(sound) and len(listed.stdout.splitlines()) == 1, listed
    assert ("holds 6 threads but 5 of them are in no tree: their rows were altered outside threadlog"
            in listed.stderr), listed
    verified = _threadlog(db, "verify")
    assert verified.returncode == 1 and "integrity check failed at position 1:" in verified.stderr, verified


# The same cycle beside a sound thread: `tree --all --json` printed all five threads in creation
# order, T, F, G and the sub-agent fork with parent_ids no top reaches, and exited 0, so a script
# could not tell. It prints them and fails as the text does, naming how many are in no tree.
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_tree_all_json_says_how_many_threads_are_in_no_tree_and_fails(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "UPDATE streams SET parent_id = 'G' WHERE id = 'T'")
    sound = _threadlog(db, "new", "--title", "sound").stdout.strip()
    listed = _threadlog(db, "tree", "--all", "--json")
    assert listed.returncode == 1, listed
    ids = [t["id"] for t in json.loads(listed.stdout)]
    assert len(ids) == 5 and ids[:3] == ["T", "F", "G"] and ids[-1] == sound, listed.stdout
    assert listed.stderr == ("error: the store holds 5 threads but 4 of them are in no tree: their rows were altered "
                             "outside threadlog (`threadlog verify` names where)\n"), listed.stderr


# The same cycle: `export --all` wrote every stream and event and exited 0, and `import events`
# then refused the backup ("fork 'T' needs its parent 'G' ... restored before it"). It is still
# written whole (what a backup of a damaged file can keep), then said unrestorable (exit 1).
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_export_all_of_a_cycle_of_parents_is_written_then_said_unrestorable(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "UPDATE streams SET parent_id = 'G' WHERE id = 'T'")
    held = _held(db)
    exported = _threadlog(db, "export", "--all", "-o", str(tmp_path / "all.jsonl"))
    assert exported.returncode == 1 and exported.stdout == f"{tmp_path / 'all.jsonl'}\n", exported
    assert exported.stderr == ("error: the export is written, but a restore refuses it: the parents of thread 'F' make a cycle "
                               "of forks, which leaves 4 threads in no tree: their rows were altered outside threadlog; "
                               "`threadlog verify` names where\n"), exported.stderr
    assert json.loads((tmp_path / "all.jsonl").read_text().splitlines()[-1])["end"]["streams"] == 4
    restored = _threadlog(str(tmp_path / "restored.db"), "import", "events", str(tmp_path / "all.jsonl"))
    assert restored.returncode == 1 and "needs its parent 'G'" in restored.stderr, restored
    assert _held(db) == held


def _held(db: str) -> Any:
    """What the database holds: equal values mean nothing was written."""
    if db.startswith("postgresql"):
        with psycopg.connect(db, autocommit=True) as conn:
            return dump(conn)
    return fingerprint(Path(db))


# A parent's row deleted: F's. `title` and `count` of G (F's fork) read its history up to the
# missing row, as `show` does, but `ls` and the web thread list walked up for titles and counts
# of the whole page at once and failed on every thread: "thread 'F' not found".
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_deleted_parent_row_ends_the_history_for_titles_and_counts_as_for_one_thread(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "DELETE FROM streams WHERE id = 'F'")
    with Store(db) as store:
        infos = store.all_threads()
        assert "G" in [info.id for info in infos]
        assert store.titles(infos) == {info.id: store.title(info.id) for info in infos}
        assert store.count_each(infos, "message.appended") == {info.id: store.count(info.id, "message.appended") for info in infos}
    listed = _threadlog(db, "ls", "--all", "--json")
    assert listed.returncode == 0 and '"G"' in listed.stdout, listed


# The same deleted row: `tree --all` printed G at the top of a tree of its own, like a root
# thread, and exited 0, saying nothing of the parent it forks.
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_tree_all_says_which_fork_lost_its_parent_and_fails(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "DELETE FROM streams WHERE id = 'F'")
    listed = _threadlog(db, "tree", "--all")
    assert listed.returncode == 1, listed
    tops = [line for line in listed.stdout.splitlines() if not line.startswith((" ", "│", "├", "└"))]
    assert tops[0].startswith("T  thread") and tops[1] == (
        "⑃ G  fork, 13 events, forked at 11 from F, which is not in the file"), listed.stdout
    assert listed.stderr == ("error: a fork names a parent not in the file ('G' forks 'F'), each printed at the top of its own "
                             "tree: their rows were altered outside threadlog (`threadlog verify` names where)\n"), listed.stderr


# The same deleted row: `tree --all --json` printed G with its parent_id 'F' and exited 0, so a
# script reading it could not tell that F is gone. It prints every thread and fails as the text does.
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_tree_all_json_says_which_fork_lost_its_parent_and_fails(tmp_path: Path, backend: str) -> None:
    db = _built_and_altered(tmp_path, backend, "DELETE FROM streams WHERE id = 'F'")
    listed = _threadlog(db, "tree", "--all", "--json")
    assert listed.returncode == 1, listed
    printed = json.loads(listed.stdout)
    assert [t["id"] for t in printed if t["id"] in ("T", "G")] == ["T", "G"], printed
    assert next(t for t in printed if t["id"] == "G")["parent_id"] == "F"
    assert listed.stderr == ("error: a fork names a parent not in the file ('G' forks 'F'), each printed naming it as its "
                             "parent_id: their rows were altered outside threadlog (`threadlog verify` names where)\n"), \
        listed.stderr


# `tree THREAD` prints the tree of the root THREAD's row names. A row naming a fork as its root
# had that fork printed at the top, "forked from T, which is not in the file" (T was); with a
# row above THREAD deleted, the root's tree was printed without THREAD in it. Both exited 0.
# `--json` refuses them alike, printing nothing. The deleted row is said as every read of G
# says it (the viewer's pages too).
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
@pytest.mark.parametrize("options", [(), ("--json",)], ids=["text", "json"])
@pytest.mark.parametrize(("sql", "says"), [
    ("UPDATE streams SET root_id = 'F' WHERE id = 'G'", "thread 'G' names 'F' as its root, which is a fork of 'T': their rows "
                                                        "were altered outside threadlog (`threadlog verify` names where)"),
    ("DELETE FROM streams WHERE id = 'F'", "thread 'G' is forked from 'F', which is not in the file: its first 11 events cannot "
                                           "be read (that thread's row was deleted, or the fork's parent_id altered, outside "
                                           "threadlog); `threadlog verify` names where"),
], ids=["root-names-a-fork", "parent-deleted"])
def test_tree_of_a_thread_no_tree_holds_is_refused(tmp_path: Path, backend: str, options: tuple[str, ...], sql: str,
                                                    says: str) -> None:
    db = _built_and_altered(tmp_path, backend, sql)
    listed = _threadlog(db, "tree", "G", *options)
    assert listed.returncode == 1 and listed.stdout == "", listed
    assert listed.stderr == f"error: {says}\n", listed.stderr
    assert _threadlog(db, "tree", "T").returncode == 0  # the root's own tree is printed


# A write onto a stream whose row was altered so that it cannot be written: refused with one
# `error:` line, nothing written. (A head_hash of the right form but another value, or a head
# past the events, is written onto: the chain breaks there, and `verify` names where.)
WRITES_REFUSED = {
    "head-negative": "head = -3", "head-huge": f"head = {2**63 - 1}", "head-below-events": "head = 3",
    "facts-not-json": "facts = 'zz'", "facts-a-list": "facts = '[1]'",
}


# Not a fork at a head lowered below the events: it inherits the events below it, which are there.
WRITE_CASES = [(change, command) for change in WRITES_REFUSED for command in ("append", "emit", "fork")
               if (change, command) != ("head-below-events", "fork")]


@pytest.mark.parametrize(("change", "command"), WRITE_CASES, ids=[f"{change}-{command}" for change, command in WRITE_CASES])
def test_a_write_onto_an_altered_stream_is_refused_and_writes_nothing(template: Template, change: str,
                                                                      command: str) -> None:
    conn = template.conn
    before = dump(conn)
    column, value = WRITES_REFUSED[change].split(" = ")
    altered = alter(conn, "streams", column, "T", value)
    assert altered is not None
    try:
        tampered = dump(conn)
        result = CliRunner().invoke(cli, ["--db", template.url, *_write_commands("T")[command]])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code == 1 and result.output.count("error:") == 1, result.output
        assert dump(conn) == tampered
    finally:
        restore(conn, altered)
        assert dump(conn) == before


# Bytes that are not UTF-8 text (or none at all) in a bytea column that holds text when it is not
# a packed id, digest or hash. Decoding them failed the whole query on the server ("invalid byte
# sequence", "index -1 out of valid range"): every read over the row said "database error",
# naming no row, `verify` named no position, and `verify --since` added "current transaction is
# aborted". Now the reader names the position and the column (a digest reads as not stored: the
# data's is taken), and `verify` names the position.
UNDECODABLE = {  # (the column, its value, the event: the sub-agent fork's first, or the redacted one)
    "event-id-bytes": ("event_id", "'\\x00ff'::bytea", 17), "event-id-empty": ("event_id", "''::bytea", 17),
    "event-id-not-utf8": ("event_id", "'\\x74c3'::bytea", 17), "hash-bytes": ("hash", "'\\x74ff'::bytea", 17),
    "digest-bytes": ("data_digest", "'\\x00ff'::bytea", 11),  # kept for a redacted event only
}


@pytest.mark.parametrize("change", list(UNDECODABLE.values()), ids=list(UNDECODABLE))
def test_bytes_that_are_not_text_are_named_by_position(template: Template, change: tuple[str, str, int]) -> None:
    column, value, position = change
    conn = template.conn
    altered = alter(conn, "events", column, position, value)
    assert altered is not None
    thread = template.sub if position == 17 else "T"
    try:
        with Store(template.url, read_only=True) as store:
            if column == "data_digest":  # read as not stored: a reader takes the data's
                assert len(list(store.read(thread))) == store.head(thread)
            else:
                with pytest.raises(StoreError, match=f"the event at position {position} cannot be read: its {column} is None"):
                    list(store.read(thread))
        since = [] if column == "data_digest" else [["verify", "--since", template.checkpoint]]  # checks new events only
        for args in (["verify"], *since):
            result = CliRunner().invoke(cli, ["--db", template.url, *args])
            assert result.exit_code == 1 and f"integrity check failed at position {position}:" in result.output, result.output
        if column != "data_digest":
            shown = CliRunner().invoke(cli, ["--db", template.url, "log", thread])
            assert shown.exit_code == 1 and f"the event at position {position} cannot be read" in shown.output, shown.output
    finally:
        restore(conn, altered)


def test_an_event_whose_transaction_id_readers_never_see_finished_is_named_by_verify() -> None:
    """`events.txid` decides when readers tailing the log (`read_all`, `follow`, the search
    index) return an event: once its transaction is below every running one. Moved past every
    transaction, the event is never returned (the search index covers later positions without
    it, for good) while every hash still holds."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        store.append_message(thread, "user", "Find me a train to Lyon")
        hidden = store.append_message(thread, "user", "And a ferry to Corsica")
        store.append_message(thread, "user", "Thanks")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE events SET txid = (pg_current_xact_id()::text::bigint + 1000000)::text::xid8 "
                     "WHERE position = %s", (hidden.position,))
    with Store(url, read_only=True) as store:
        assert [e.position for e in store.read_all()] == [1, 2, 4]  # what the edit does to readers
        with pytest.raises(StoreError) as failed:
            store.verify()
    assert failed.value.position == hidden.position  # type: ignore[attr-defined]
    assert "txid" in str(failed.value) and "outside threadlog" in str(failed.value)
    result = CliRunner().invoke(cli, ["--db", url, "verify"])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: integrity check failed at position {hidden.position}:")


def test_a_hit_whose_event_has_no_time_names_the_event_not_the_index() -> None:
    """A search reads each hit's time with its event: with both of the event's time columns
    emptied by hand it said the index was altered ("a document names position 2, where no
    event is"), and `index --rebuild`, which reads no time, changed nothing: every search
    after it said the same."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        altered = store.append_message(thread, "user", "Find me a ferry to Corsica")
        update_index(store)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE events SET recorded_at = NULL, recorded_text = NULL WHERE position = %s", (altered.position,))
    for _ in range(2):
        result = CliRunner().invoke(cli, ["--db", url, "search", "ferry"])
        assert result.exit_code == 1
        assert result.output.startswith(f"error: the event at position {altered.position} cannot be read"), result.output
        assert "index" not in result.output
        assert CliRunner().invoke(cli, ["--db", url, "index", "--rebuild"]).exit_code == 0


def test_a_row_moved_past_the_position_sequence_is_named_by_verify() -> None:
    """A row's position moved past the sequence (to 2^31 - 1) was refused as the sequence's
    fault, at no position: the refusal names the row the next write collides with."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        store.append_message(thread, "user", "Find me a train to Lyon")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"UPDATE events SET position = {2**31 - 1} WHERE position = 2")
    with Store(url, read_only=True) as store, pytest.raises(IntegrityError) as refused:
        store.verify()
    assert refused.value.position == 2**31 - 1, refused.value
    assert "the next write would take position 3, where the log already goes to 2147483647" in str(refused.value)


@pytest.mark.parametrize("verify", [["verify"], ["verify", "--since", "CHECKPOINT"]], ids=["full", "since"])
def test_a_position_sequence_moved_back_is_named_by_verify(verify: list[str]) -> None:
    """Positions come from a sequence on PostgreSQL. Moved back with psql (`setval`), every
    write failed as a clash with another writer, 'or its rows were altered outside threadlog
    (`threadlog verify` names where)', and verify said all was well."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        store.append_message(thread, "user", "Find me a train to Lyon")
        checkpoint = store.checkpoint()
        store.append_message(thread, "user", "And a ferry to Corsica")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT setval('event_positions', 1)")
    runner = CliRunner()
    refused = runner.invoke(cli, ["--db", url, "append", thread, "--role", "user", "--text", "more"])
    assert refused.exit_code == 1 and "`threadlog verify` names where" in refused.output
    result = runner.invoke(cli, ["--db", url, *[checkpoint if arg == "CHECKPOINT" else arg for arg in verify]])
    assert result.exit_code == 1
    # (the refused append took 2, or not: named at the first row the next write collides with)
    assert re.search(r"at position ([23]): the next write would take position \1, where the log already goes to 3",
                     result.output), result.output
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT setval('event_positions', 3)")  # as the message says
    assert runner.invoke(cli, ["--db", url, *[checkpoint if arg == "CHECKPOINT" else arg for arg in verify]]).exit_code == 0
    assert runner.invoke(cli, ["--db", url, "append", thread, "--role", "user", "--text", "more"]).exit_code == 0


# PostgreSQL keeps a type's name in `type_name` only for a type with no code (and, in a database
# written before the LangGraph types had one, for those). A type of the catalogue named there
# with no code beside it read as that type, its hash whole, so every verify passed; but the
# queries that find a thread's title look for the code (the index holding titles holds codes):
# `ls` showed an older title, or none. Every verify now names the row, and readers refuse it.
# the type kept by name: its position, and the position verify names (a redaction's at the row it erased)
NAMED = {"thread.created": (1, 1), "title.set": (3, 3), "message.appended": (2, 2), "event.redacted": (5, 4)}


@pytest.mark.parametrize("named", list(NAMED))
def test_a_type_of_the_catalogue_kept_by_its_name_alone_is_named_by_every_verify(named: str) -> None:
    url = postgres_url()
    with Store(url) as store:
        empty = store.checkpoint()
        store.create_thread(title="first title", thread_id="t")
        store.append_message("t", "user", "first")
        store.append("t", [{"type": "title.set", "data": {"title": "second title"}}])
        secret = store.append_message("t", "user", "my PIN is 1234")
        store.redact(secret.position, reason="a PIN", actor="ops")
        before = store.checkpoint()
    position, named_at = NAMED[named]
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("UPDATE events SET type = NULL, type_name = %s WHERE position = %s", (named, position)).rowcount == 1
    with Store(url, read_only=True) as store:
        for check in (store.verify, lambda: store.verify(checkpoint=before), lambda: store.verify(since=empty),
                      lambda: _verify_only(url, "t")):
            with pytest.raises(IntegrityError) as failed:
                check()
            assert failed.value.position == named_at, failed.value
        with pytest.raises(StoreError, match=f"position {position} cannot be read: its type is None"):
            list(store.read("t"))
    result = CliRunner().invoke(cli, ["--db", url, "verify"])
    assert result.exit_code == 1 and f"position {named_at}" in result.output, result.output


def _verify_only(url: str, thread: str) -> None:
    """`verify(only=[thread])`, on a backend of its own, as a restore checks the threads it wrote."""
    backend = PostgresBackend(url)
    try:
        with backend.read_transaction():
            verify(backend, only=[thread])
    finally:
        backend.close()
