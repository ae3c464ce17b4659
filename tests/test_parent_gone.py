"""A fork whose parent's stream row is gone (only raw SQL deletes one): its first events, and
those of every fork below it, are in no thread of the file. Every read reaching them, in the
library and on the command line, is refused with the words the viewer's pages say; a read of
only the offsets the file holds answers, and a command printing such a part says afterwards
what is missing and exits 1. No refusal changes the database.

Such a thread was read from the fork point on as if it were whole (the command line exited 0),
on both backends; only the viewer's pages and `verify` said anything of it.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from eventstore.errors import IntegrityError, Unreadable
from eventstore.sqlite import SQLiteBackend
from tests.backends import postgres_url
from tests.test_bad_input import fingerprint
from tests.test_postgres_tamper_reads import dump
from threadlog import (Store, anthropic_request, blame, diff, display_rows, export_events, export_markdown, lineage,
                       save_snapshot, search, thread_state, transcript)
from threadlog.cli import cli
from threadlog.web import create_app

SAID = {"orphan": "thread 'orphan' is forked from 'orphanparent', which is not in the file",
        "below": "thread 'below' descends from 'orphan', a fork of 'orphanparent', which is not in the file"}
MISSING = (": its first 3 events cannot be read (that thread's row was deleted, or the fork's parent_id altered, outside "
           "threadlog); `threadlog verify` names where")


def _refusal(thread: str) -> str:
    return SAID[thread] + MISSING


def _orphaned(db: str) -> None:
    """orphanparent (3 events), its fork `orphan` at 3 (2 events of its own), `orphan`'s fork
    `below` at its head, and a sound thread; then orphanparent's row deleted."""
    with Store(db) as store:
        store.create_thread(thread_id="orphanparent", title="gone", model="claude-x")
        store.append_message("orphanparent", "user", "hi")
        store.append_message("orphanparent", "assistant", "hello")
        store.fork("orphanparent", fork_id="orphan")
        store.append_message("orphan", "user", "more")
        store.fork("orphan", fork_id="below")
        store.create_thread(thread_id="fine", title="fine")
        store.append_message("fine", "user", "fine")
    if db.startswith("postgresql"):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DELETE FROM streams WHERE id = 'orphanparent'")
    else:
        with contextlib.closing(sqlite3.connect(db)) as lite, lite:
            lite.execute("DELETE FROM streams WHERE id = 'orphanparent'")


def _held(db: str) -> Any:
    """What the database holds: equal values mean nothing was written."""
    if db.startswith("postgresql"):
        with psycopg.connect(db, autocommit=True) as conn:
            return dump(conn)
    return fingerprint(Path(db))


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    path = postgres_url() if request.param == "postgresql" else str(tmp_path / "orphan.db")
    _orphaned(path)
    yield path


READS: dict[str, Callable[[Store, str], Any]] = {
    "read": lambda store, t: list(store.read(t)),
    "read from an offset it cannot reach": lambda store, t: list(store.read(t, 2)),
    "read_data": lambda store, t: list(store.read_data(t)),
    "read_raw": lambda store, t: list(store.read_raw(t)),
    "event_at": lambda store, t: store.event_at(t, 0),
    "ancestry": lambda store, t: store.ancestry(t),
    "thread_state": thread_state,
    "thread_state at 4": lambda store, t: thread_state(store, t, 4),
    "display_rows": display_rows,
    "transcript": transcript,
    "anthropic_request": anthropic_request,
    "blame": blame,
    "lineage": lineage,
    "diff with a sound thread": lambda store, t: diff(store, "fine", t),
    "diff with itself": lambda store, t: diff(store, t, t),
    "export_events": lambda store, t: list(export_events(store, t)),
    "export_markdown": export_markdown,
    "save_snapshot": save_snapshot,
    "search of its history": lambda store, t: search(store, "hi", thread=t),
}


@pytest.mark.parametrize("thread", ["orphan", "below"])
def test_every_library_read_of_the_missing_events_is_refused_with_the_viewer_s_words(db: str, thread: str) -> None:
    before = _held(db)
    with Store(db) as store:
        for name, call in READS.items():
            with pytest.raises(Unreadable) as caught:
                call(store, thread)
            assert str(caught.value) == _refusal(thread), name
        # The offsets the file holds are read as asked: its own events, from the fork point on.
        assert [(e.offset, e.stream_id) for e in store.read(thread, 3)][:2] == [(3, "orphan"), (4, "orphan")]
        assert store.event_at(thread, 4).data["content"] == [{"type": "text", "text": "more"}]
        assert store.thread(thread).head == (5 if thread == "orphan" else 6)
        assert store.ancestry("fine")[0].head == 2 and len(list(store.read("fine"))) == 2
    assert _held(db) == before
    with Store(db) as store:  # a search of its own events alone reads what the file holds (and indexes it)
        assert [(hit.thread, hit.offset) for hit in search(store, "more", thread=thread, ancestors=False)] == \
            ([("orphan", 4)] if thread == "orphan" else [])


def _threadlog(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadlog", "--db", db, *args], capture_output=True, text=True, timeout=60)


def test_the_command_line_refuses_in_its_own_process(db: str) -> None:
    before = _held(db)
    shown = _threadlog(db, "show", "below")
    assert (shown.returncode, shown.stdout, shown.stderr) == (1, "", f"error: {_refusal('below')}\n"), shown
    # A part the user asked for that the file holds is printed, then what is missing is said.
    tail = _threadlog(db, "log", "orphan", "-n", "1", "--json")
    assert tail.returncode == 1 and [json.loads(line)["offset"] for line in tail.stdout.splitlines()] == [4], tail
    assert tail.stderr == f"error: {_refusal('orphan')}\n", tail.stderr
    assert _held(db) == before


COMMANDS = [["log", "{t}"], ["log", "{t}", "--json"], ["log", "{t}", "--stop", "4"], ["show", "{t}"], ["show", "{t}", "--json"],
            ["show", "{t}", "--at", "4"], ["rows", "{t}"], ["rows", "{t}", "--json"], ["transcript", "{t}"],
            ["transcript", "{t}", "--start", "3"], ["request", "{t}"], ["blame", "{t}"], ["tree", "{t}"], ["tree", "{t}", "--json"],
            ["diff", "{t}", "fine"], ["diff", "fine", "{t}"], ["export", "{t}"], ["export", "{t}", "--format", "markdown"],
            ["export", "{t}", "--format", "anthropic"], ["export", "{t}", "-o", "{dir}/out.jsonl"], ["snapshot", "{t}"]]


@pytest.mark.parametrize("thread", ["orphan", "below"])
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_each_command_reading_the_thread_is_refused(tmp_path: Path, thread: str, args: list[str]) -> None:
    db = str(tmp_path / "orphan.db")
    _orphaned(db)
    before = _held(db)
    done = CliRunner().invoke(cli, ["--db", db, *(a.format(t=thread, dir=tmp_path) for a in args)])
    assert (done.exit_code, done.stdout, done.stderr) == (1, "", f"error: {_refusal(thread)}\n"), done.output
    assert not (tmp_path / "out.jsonl").exists()
    assert _held(db) == before


@pytest.mark.parametrize(("args", "printed"), [
    (["log", "{t}", "--start", "4"], ["4"]),
    (["log", "{t}", "-n", "2"], ["3", "4"]),
], ids=["log --start", "log -n"])
def test_a_part_the_file_holds_is_printed_then_the_rest_is_said_missing(tmp_path: Path, args: list[str],
                                                                         printed: list[str]) -> None:
    db = str(tmp_path / "orphan.db")
    _orphaned(db)
    before = _held(db)
    done = CliRunner().invoke(cli, ["--db", db, *(a.format(t="orphan") for a in args)])
    assert done.exit_code == 1 and [line.split()[0] for line in done.stdout.splitlines()] == printed, done.output
    assert done.stderr == f"error: {_refusal('orphan')}\n"
    assert _held(db) == before
    whole = CliRunner().invoke(cli, ["--db", db, "log", "fine", "-n", "1"])  # a sound thread's part: nothing said
    assert whole.exit_code == 0 and whole.stderr == "", whole.output


def test_a_backup_of_the_whole_file_is_written_and_says_which_thread_it_cannot_restore(tmp_path: Path) -> None:
    db = str(tmp_path / "orphan.db")
    _orphaned(db)
    before = _held(db)
    done = CliRunner().invoke(cli, ["--db", db, "export", "--all", "-o", str(tmp_path / "all.jsonl")])
    assert done.exit_code == 1 and done.stdout == f"{tmp_path / 'all.jsonl'}\n", done.output
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert json.loads(lines[-1]) == {"end": {"streams": 3, "events": 8}}, lines[-1]
    assert done.stderr == f"error: the export is written, but a restore refuses it: {_refusal('orphan')}\n", done.stderr
    assert _held(db) == before


ORPHANED_HIT = ("a match is the event at position {position} of thread 'orphanparent', which is not in the file (that "
                "thread's row was deleted, or the event's stream_id altered, outside threadlog): no thread's history shows it; "
                "`threadlog verify` names the first event left without its thread")


def test_a_search_of_every_thread_matching_an_event_of_the_missing_parent_says_so(db: str) -> None:
    """The index holds the missing parent's events, whose rows are still in the log. A search of
    every thread matching one refused the search as an altered index, to be rebuilt; the rebuild
    indexed the same events, and the search was refused again. It names the thread that is gone."""
    with Store(db) as store:
        assert [hit.thread for hit in search(store, "fine")] == ["fine", "fine"]  # the index caught up
    before = _held(db)
    with Store(db) as store:
        with pytest.raises(Unreadable) as caught:
            search(store, "hello")
        assert str(caught.value) == ORPHANED_HIT.format(position=3)
        assert [(hit.thread, hit.offset) for hit in search(store, "more")] == [("orphan", 4)]
    searched = _threadlog(db, "search", "hello")
    assert (searched.returncode, searched.stdout, searched.stderr) == (1, "", f"error: {ORPHANED_HIT.format(position=3)}\n")
    assert _held(db) == before


def _ls(db: str, *args: str) -> dict[str, str]:
    done = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", *args])
    assert done.exit_code == 0 and "error" not in done.stderr, done.output
    return {line.split()[0]: line for line in done.stdout.splitlines()[1:]}


def test_ls_says_which_listed_fork_has_its_parent_not_in_the_file(db: str) -> None:
    """`ls --all` listed the fork whose parent's row is gone as any other, without a word, where
    `tree --all` says its parent "is not in the file" and every read of its history is refused.
    A fork whose parent is in the file, on another page or on none listed, is said nothing of."""
    before = _held(db)
    listed = _ls(db, "--all")
    assert "orphanparent at 3, not in the file" in listed["orphan"], listed
    assert all("not in the file" not in listed[thread] for thread in ("below", "fine")), listed
    assert "orphanparent at 3, not in the file" in _ls(db, "--root", "orphan")["orphan"]
    rows = json.loads(CliRunner().invoke(cli, ["--db", db, "ls", "--all", "--json"]).stdout)
    positions = {row["id"]: row["last_position"] for row in rows}
    assert {row["id"] for row in rows if row["parent_missing"]} == {"orphan"}, rows  # the JSON said nothing of it
    assert all(row["parent_missing"] is False for row in rows if row["id"] != "orphan")
    alone = _ls(db, "--all", "-n", "1", "--before", str(positions["below"] + 1))  # its parent `orphan` is on the next page
    assert list(alone) == ["below"] and "not in the file" not in alone["below"], alone
    assert "not in the file" in _ls(db, "--all", "-n", "1", "--before", str(positions["orphan"] + 1))["orphan"]
    assert _held(db) == before


def test_the_viewers_thread_list_says_which_fork_has_its_parent_not_in_the_file(db: str) -> None:
    """The viewer's list of threads with forks showed the fork whose parent's row is gone as any
    other, without a word, where `ls --all` says its parent is not in the file and the fork's own
    page refuses to show it."""
    before = _held(db)
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        page = client.get("/", params={"all": "1"})
    assert page.status_code == 200
    rows = {html.unescape(re.sub(r"<[^>]+>", "", cell)).split()[0]: " ".join(html.unescape(re.sub(r"<[^>]+>", "", row)).split())
            for row in re.findall(r'<tr class="thread-row">(.*?)</tr>', page.text, re.S)
            for cell in re.findall(r"<code[^>]*>(.*?)</code>", row)[:1]}
    assert "fork ⑃ of orphanparent at 3, not in the file" in rows["orphan"], rows
    assert "⑃ of orphan at 5" in rows["below"] and all("not in the file" not in rows[t] for t in ("below", "fine")), rows
    assert _held(db) == before


def test_forks_of_parents_on_no_page_are_looked_up_together(tmp_path: Path) -> None:
    """The forks of a page whose parents are not on it are looked up in one query, not one
    query each: a page of `ls --all` is a thousand rows."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        for i in range(40):
            store.append_message(store.create_thread(thread_id=f"root{i}"), "user", "hi")
        forks = [store.fork(f"root{i}", fork_id=f"fork{i}") for i in range(40)]
    with contextlib.closing(sqlite3.connect(db)) as lite, lite:
        lite.execute("DELETE FROM streams WHERE id IN ('root3', 'root30')")
    backend = SQLiteBackend(db)
    with Store(backend) as store:
        page = [store.thread(fork) for fork in forks]
        statements: list[str] = []
        backend.conn.set_trace_callback(statements.append)
        assert store.orphaned(page) == {"fork3", "fork30"}
        backend.conn.set_trace_callback(None)
    assert len([sql for sql in statements if "FROM streams" in sql]) == 1, statements


@pytest.mark.parametrize(("args", "last_out"), [(["log", "orphan", "--start", "4"], "user: more"), (["export", "--all"], '"end"'),
                                                (["usage", "fine"], "total")], ids=["log --start", "export --all", "usage"])
def test_what_stderr_says_after_the_output_comes_after_it_in_one_stream(tmp_path: Path, args: list[str], last_out: str) -> None:
    """`threadlog ... > out 2>&1`: the line on stderr follows every line of stdout, in a real
    process whose stdout is no terminal (each print is flushed before stderr is written)."""
    db = str(tmp_path / "orphan.db")
    _orphaned(db)
    with Store(db) as store:
        store.append_message("fine", "assistant", "a", usage={"input_tokens": -5})
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", db, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert last_out in lines[-2] and lines[-1].startswith(("error: ", "not counted: ")), done.stdout


def test_a_fork_whose_parent_id_names_a_shorter_thread_is_refused_naming_the_gap(tmp_path: Path) -> None:
    """A fork's parent_id altered to name another thread, one holding fewer events than the fork
    point: its history was read with those offsets skipped (offset 1 of 3 missing, `log` and
    `show` exit 0, no word). Every read reaching the gap is refused, naming it; the fork's own
    events, above it, are read as asked; the file is unchanged; `verify` names where."""
    db = str(tmp_path / "short.db")
    with Store(db) as store:
        store.create_thread(thread_id="p", title="p")
        store.append_message("p", "user", "hi")
        store.fork("p", fork_id="f")
        store.append_message("f", "user", "more")
        store.create_thread(thread_id="short", title="short")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE streams SET parent_id = 'short' WHERE id = 'f'")
    conn.commit()
    conn.close()
    before = fingerprint(Path(db))
    said = ("thread 'f' is forked from 'short' at offset 2, which holds only 1 event: its event at offset 1 cannot be "
            "read")
    with Store(db) as store:
        for read in (lambda: list(store.read("f")), lambda: thread_state(store, "f"), lambda: transcript(store, "f")):
            with pytest.raises(Unreadable) as refused:
                read()
            assert str(refused.value).startswith(said), refused.value
        assert [e.offset for e in store.read("f", 2)] == [2, 3]  # its fork event and its message
        with pytest.raises(IntegrityError):
            store.verify()
    for command in (["log", "f"], ["show", "f"]):
        done = CliRunner().invoke(cli, ["--db", db, *command])
        assert done.exit_code == 1 and said in done.stderr, (command, done.output)
    assert fingerprint(Path(db)) == before


def test_a_fork_whose_parent_id_was_emptied_names_the_empty_parent(tmp_path: Path) -> None:
    """A parent_id altered to '' printed as a root's `-` in `ls` (`-, not in the file`) and as no
    word in `tree` (`forked at 2 from , which is not in the file`)."""
    db = str(tmp_path / "empty.db")
    with Store(db) as store:
        store.create_thread(thread_id="P")
        store.append_message("P", "user", "hi")
        store.fork("P", fork_id="F")
    with contextlib.closing(sqlite3.connect(db)) as lite, lite:
        lite.execute("UPDATE streams SET parent_id = '' WHERE id = 'F'")
    assert "'' at 2, not in the file" in _ls(db, "--all")["F"]
    tree = CliRunner().invoke(cli, ["--db", db, "tree", "--all"])
    assert tree.exit_code == 1 and "⑃ F  fork, 3 events, forked at 2 from '', which is not in the file" in tree.stdout, tree.output
