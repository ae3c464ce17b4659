"""The CLI as people use it: finding threads, reading safely, paging, following, one shape of
output, and the bugs seen in real runs (issue 12). Real processes where a terminal, a signal,
a lock or file permissions matter; click's runner elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import queue
import re
import select
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from eventstore import ForkRefused, InvalidEvent, Store
from eventstore.sqlite import SCHEMA_VERSION, SQLiteBackend
from threadlog import update_index, write_transcript
from threadlog.cli import cli
from tests.backends import postgres_url
from tests.procs import bound_by_file_modes, ctrl_c, interruptible

THREADLOG = str(Path(sys.executable).with_name("threadlog"))
NASTY = "Evil\x1b]0;pwned\x07\x1b[31mred\rover\u202e\u200fmark"


def invoke(db: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [*args, "--db", str(db)], input=input)
    return result.exit_code, result.stdout, result.stderr


def ok(db: Path, *args: str, input: str | None = None) -> str:
    code, out, err = invoke(db, *args, input=input)
    assert code == 0, (out, err)
    return out


def fails(db: Path, *args: str, code: int = 1, input: str | None = None) -> str:
    got, out, err = invoke(db, *args, input=input)
    assert got == code and "Traceback" not in out + err, (got, out, err)
    if code == 1:
        assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "t.db"
    ok(path, "init")
    return path


# -- 1, 2: find and name threads -------------------------------------------------------------


def test_ls_lists_threads_newest_activity_first_with_paging(db: Path) -> None:
    a = ok(db, "new", "--title", "Alpha").strip()
    b = ok(db, "new", "--title", "Beta").strip()
    ok(db, "append", a, "--role", "user", "--text", "hello")  # a is now the most recent
    f = ok(db, "fork", a).strip()
    rows = json.loads(ok(db, "ls", "--json"))
    assert [r["id"] for r in rows] == [a, b]  # roots only, newest activity first
    assert rows[0]["title"] == "Alpha" and rows[0]["messages"] == 1 and rows[0]["last_activity"]
    everything = json.loads(ok(db, "ls", "--all", "--json"))
    assert [r["id"] for r in everything] == [f, a, b]
    assert everything[0]["parent_id"] == a and everything[0]["parent_offset"] == 2 and everything[0]["title"] == "Alpha"
    first = json.loads(ok(db, "ls", "--all", "-n", "2", "--json"))
    rest = json.loads(ok(db, "ls", "--all", "-n", "2", "--before", str(first[-1]["last_position"]), "--json"))
    assert [r["id"] for r in first + rest] == [f, a, b]
    assert [r["id"] for r in json.loads(ok(db, "ls", "--root", a, "--json"))] == [f, a]
    text = ok(db, "ls")
    assert text.splitlines()[0].split() [:2] == ["id", "kind"] and "Alpha" in text and "Beta" in text
    # A full text page says, on stderr, where the next begins; the last page says nothing.
    code, page, err = invoke(db, "ls", "--all", "-n", "2")
    assert code == 0 and [line.split()[0] for line in page.splitlines()[1:]] == [f, a]
    before = re.fullmatch(r"\(next page: the same command with --before (\d+)\)\n", err)
    assert before is not None, err
    code, page, err = invoke(db, "ls", "--all", "-n", "2", "--before", before[1])
    assert code == 0 and [line.split()[0] for line in page.splitlines()[1:]] == [b] and err == ""


def test_the_first_page_reads_an_index_not_every_thread(tmp_path: Path) -> None:
    """The first page of a big file reads the threads of its newest listing keys (a key spans
    1,024 positions), not every thread: counted in SQLite's virtual machine steps (a
    wall-clock bound failed on a loaded machine; steps do not vary)."""
    def listing_steps(path: Path, limit: int | None) -> int:
        backend = SQLiteBackend(path, read_only=True)
        with Store(backend) as store:
            conn = backend.conn
            steps = 0

            def count() -> int:
                nonlocal steps
                steps += 1
                return 0

            conn.set_progress_handler(count, 10)
            page = store.threads(limit=limit)
            conn.set_progress_handler(None, 0)
            assert len(page) == (limit or len(page)) and page
            return steps

    with Store(tmp_path / "small.db") as store:
        for _ in range(20):
            store.append_message(store.create_thread(), "user", "x")
    with Store(tmp_path / "big.db", synchronous="OFF") as store:
        store.append(store.create_thread(), [{"type": "message.appended", "data": {"role": "user", "content": "x"}}])
        for _ in range(20_000):
            store.create_thread()
    small, big = listing_steps(tmp_path / "small.db", 20), listing_steps(tmp_path / "big.db", 20)
    every = listing_steps(tmp_path / "big.db", None)
    print(f"\nfirst page: 20 threads {small * 10} steps, 20,001 threads {big * 10} steps (all of them: {every * 10})")
    assert 0 < small <= big
    assert big * 10 <= every  # at most 1,024 threads read of 20,001


def test_thread_arguments_take_prefixes_and_at_last(db: Path) -> None:
    with Store(db) as store:
        a = store.create_thread(thread_id="abc123", title="first")
        store.create_thread(thread_id="abd456", title="second")
        store.append_message(a, "user", "latest")
    assert json.loads(ok(db, "show", "abc", "--json"))["id"] == "abc123"
    assert json.loads(ok(db, "show", "@last", "--json"))["id"] == "abc123"
    err = fails(db, "show", "ab")
    assert "ambiguous" in err and "abc123" in err and "abd456" in err
    assert "not found" in fails(db, "show", "zzz")
    assert "@last" in fails(tmp_path_db(db), "show", "@last")


def test_a_mistyped_at_name_or_an_empty_thread_says_what_was_meant(db: Path) -> None:
    """`show @lst` said only that no thread id starts with it, and `show ""` (a shell variable
    never set) said `thread '' not found`, as if a thread could have no id."""
    with Store(db) as store:
        store.create_thread(thread_id="abc123")
    err = fails(db, "show", "@lst")
    assert err == ("error: thread '@lst' not found (no thread id starts with @; `@last` names the most recently active "
                   "thread); `threadlog ls --all` lists them\n"), err
    err = fails(db, "fork", "")
    assert err == ("error: the thread given is empty (a shell variable not set?); `threadlog ls --all` lists them\n"), err


@pytest.mark.parametrize(("typed", "says"), [(["ls", "{t}"], "`threadlog ls` takes a thread as --root {t}"),
                                             (["follow", "{t}"], "`threadlog follow` takes a thread as --thread {t}"),
                                             (["search", "ferry", "{t}"], "`threadlog search` takes a thread as --thread {t}")])
def test_a_thread_typed_where_a_command_takes_it_as_an_option_says_which(db: Path, typed: list[str], says: str) -> None:
    """`threadlog ls T` said only "Got unexpected extra argument (T)": `ls` takes a thread
    as `--root T` (`follow` and `search` as `--thread T`)."""
    t = ok(db, "new").strip()
    code, out, err = invoke(db, *[word.format(t=t) for word in typed])
    assert (code, out) == (2, ""), err
    assert err.splitlines()[-1] == f"Error: Got unexpected extra argument ({t}); {says.format(t=t)}", err


def tmp_path_db(db: Path) -> Path:
    empty = db.with_name("empty.db")
    ok(empty, "init")
    return empty


def test_tree_shows_titles(db: Path) -> None:
    t = ok(db, "new", "--title", "Trip to Lyon").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    ok(db, "fork", t)
    assert ok(db, "tree", t).count("Trip to Lyon") == 2


def test_a_full_page_of_trees_says_where_the_next_begins(db: Path) -> None:
    """`tree` pages root threads as `ls` does; a full page said nothing, so a file of 21 roots
    looked like one of 20."""
    a = ok(db, "new", "--title", "Alpha").strip()
    b = ok(db, "new", "--title", "Beta").strip()
    c = ok(db, "new", "--title", "Gamma").strip()
    code, page, err = invoke(db, "tree", "-n", "2")
    assert code == 0 and [line.split()[0] for line in page.splitlines()] == [c, b]
    before = re.fullmatch(r"\(next page: the same command with --before (\d+)\)\n", err)
    assert before is not None, err
    code, page, err = invoke(db, "tree", "-n", "2", "--before", before[1])
    assert code == 0 and [line.split()[0] for line in page.splitlines()] == [a] and err == ""
    code, page, err = invoke(db, "tree", "-n", "2", "--json")
    assert code == 0 and err == "" and [t["id"] for t in json.loads(page)] == [c, b]


def test_a_page_that_ends_the_list_names_no_next_page(db: Path) -> None:
    """`ls` and `tree` named a next page whenever a page was full, so a file of exactly N threads
    sent the user to `--before P`, which listed nothing (a header alone, for `ls`)."""
    a = ok(db, "new", "--title", "Alpha").strip()
    ok(db, "append", a, "--role", "user", "--text", "hello")
    f = ok(db, "fork", a).strip()
    for args, first in ((["ls", "-n", "1"], a), (["ls", "--all", "-n", "2"], f), (["tree", "-n", "1"], a)):
        code, page, err = invoke(db, *args)
        assert code == 0 and first in page and err == "", (args, err)
    code, page, err = invoke(db, "ls", "--all", "-n", "1")  # a page with one after it still names the next
    assert code == 0 and re.fullmatch(r"\(next page: the same command with --before \d+\)\n", err), err
    for command in ("ls", "tree"):  # the one more read to know was refused as too large, naming -n plus one
        code, page, err = invoke(db, command, "-n", str(2**63 - 1))
        assert code == 0 and a in page and err == "", (command, err)


def test_search_takes_limit_as_ls_and_tree_do(db: Path) -> None:
    """`-n` bounds `ls`, `tree` and `search` alike; `ls` and `tree` also spell it `--limit`,
    which `search` refused ("No such option")."""
    t = ok(db, "new").strip()
    for text in ("a ferry", "the ferry", "one ferry"):
        ok(db, "append", t, "--role", "user", "--text", text)
    short = json.loads(ok(db, "search", "ferry", "-n", "2", "--json"))["hits"]
    long = json.loads(ok(db, "search", "ferry", "--limit", "2", "--json"))["hits"]
    assert len(short) == 2 and long == short


def test_thread_ids_complete_in_the_shell(db: Path) -> None:
    with Store(db) as store:
        store.create_thread(thread_id="abc123")
        store.create_thread(thread_id="xyz789")
    env = {**os.environ, "_THREADLOG_COMPLETE": "bash_complete", "COMP_WORDS": "threadlog show ab", "COMP_CWORD": "2",
           "THREADLOG_DB": str(db)}
    done = subprocess.run([THREADLOG], env=env, capture_output=True, text=True, timeout=60)
    assert "abc123" in done.stdout and "xyz789" not in done.stdout, done


# -- 3, 4, 5: read safely ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [["verify"], ["log", "t"], ["show", "t"], ["tree"], ["ls"], ["checkpoint"], ["append", "t", "--role", "user", "--text", "x"]])
def test_a_command_on_a_missing_file_says_so_and_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    typo = tmp_path / "typo.db"
    assert f"no database at {typo}" in fails(typo, *command)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("command", [["ls"], ["show", "t"], ["verify"], ["export", "--all"], ["search", "x"], ["purge"]])
def test_a_command_where_no_store_is_says_how_to_make_one(tmp_path: Path, backend: str, command: list[str]) -> None:
    """A read command on a PostgreSQL database with no store said only that a read-only open
    creates nothing, where a write command there, and every command on a missing file, say to
    run `threadlog init` or check --db."""
    target = str(tmp_path / "typo.db") if backend == "sqlite" else postgres_url()
    result = CliRunner().invoke(cli, ["--db", target, *command])
    assert result.exit_code == 1 and "create one with `threadlog init` (or check --db / $THREADLOG_DB)" in result.stderr, \
        result.stderr
    if backend == "sqlite":
        assert list(tmp_path.iterdir()) == []
    else:
        import psycopg

        with psycopg.connect(target) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone() == (0,)


def test_a_read_only_file_in_a_read_only_directory_can_be_read_and_verified() -> None:
    """As a user who may not write the file or its directory (root may write anything, so the
    reader runs as `nobody`)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the reader as another user")
    probe = subprocess.run(["sh", "-c", f"test -x {sys.executable} && echo yes"], capture_output=True, text=True,
                           user=65534, group=65534, cwd="/")
    if probe.stdout.strip() != "yes":  # e.g. an interpreter under /root
        pytest.skip(f"user nobody cannot run {sys.executable}")
    home = Path(tempfile.mkdtemp())
    try:
        home.chmod(0o755)
        path = home / "ro.db"
        with Store(path) as store:
            t = store.create_thread(title="kept")
            store.append_message(t, "user", "read me")
        path.chmod(0o444)
        home.chmod(0o555)
        for command in (["verify", "--json"], ["show", t, "--json"], ["log", t]):
            done = subprocess.run([THREADLOG, *command, "--db", str(path)], capture_output=True, text=True, timeout=60,
                                  user=65534, group=65534, cwd="/")
            assert done.returncode == 0, (command, done.stderr)
        assert "read me" in done.stdout
        refused = subprocess.run([THREADLOG, "append", t, "--role", "user", "--text", "x", "--db", str(path)], capture_output=True,
                                 text=True, timeout=60, user=65534, group=65534, cwd="/")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert sorted(p.name for p in home.iterdir()) == ["ro.db"]
    finally:
        home.chmod(0o755)
        for p in home.iterdir():
            p.unlink()
        home.rmdir()


@pytest.mark.parametrize("cause", ["shm-left-by-a-reader", "read-only-directory"])
def test_a_writable_file_refused_as_read_only_names_what_is_not_writable(tmp_path: Path, cause: str) -> None:
    """A write to a file this user may write said "x.db is read-only; open a writable copy",
    naming the one thing that was not: the `-shm` file a reader had left beside it while the
    file was read-only (SQLite leaves it with the file's mode then), or the directory, where
    SQLite must write its write-ahead log. The error names that, and nothing is written."""
    prefix = bound_by_file_modes("dac_override", "fowner")
    home = tmp_path / "home"
    home.mkdir()
    path = home / "x.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
    if cause == "shm-left-by-a-reader":
        path.chmod(0o444)
        read = subprocess.run([*prefix, THREADLOG, "ls", "--db", str(path)], capture_output=True, text=True, timeout=60)
        assert read.returncode == 0, read.stderr
        if not Path(f"{path}-shm").exists():
            pytest.skip("this SQLite left no -shm file after a read-only reader")
        path.chmod(0o644)
        named = f"{path}-shm, which SQLite keeps beside {path}, is read-only, though {path} is not"
    else:
        home.chmod(0o555)
        named = f"{path} is in a read-only directory, {home}, where SQLite must write its write-ahead log"
    try:
        done = subprocess.run([*prefix, THREADLOG, "append", "t", "--role", "user", "--text", "hi", "--db", str(path)],
                              capture_output=True, text=True, timeout=60)
    finally:
        home.chmod(0o755)
    assert done.returncode == 1 and done.stderr.startswith(f"error: {named}") and done.stderr.count("\n") == 1, done.stderr
    with Store(path, read_only=True) as store:
        assert store.counts().events == 1


def _half_indexed(path: Path) -> None:
    """A file whose search index covers its first message and not the one after."""
    with Store(path) as store:
        t = store.create_thread(title="kept")
        store.append_message(t, "user", "read me")
        update_index(store)
        store.append_message(t, "user", "searched later")


def test_a_search_in_a_file_it_may_not_write_in_a_directory_it_may_searches_what_the_index_covers(tmp_path: Path) -> None:
    """SQLite opens a file it may not write read-only without a word when the directory is
    writable: the store took itself for writable, and the catch-up's write was refused (" …
    is read-only; open a writable copy")."""
    path = tmp_path / "ro.db"
    _half_indexed(path)
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        done = subprocess.run([THREADLOG, "search", "read", "--db", str(path)], capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert done.returncode == 0 and "**read** me" in done.stdout and "newer events are not searched" in done.stderr, done.stderr


def test_a_search_in_a_file_it_may_not_write_searches_what_the_index_covers(tmp_path: Path) -> None:
    """`search` brings the index up to date first, a write: in a file this user may not write
    (here immutable, which binds root too) it refused ("… is read-only; open a writable copy
    to change it") although the viewer searches the same file. It now searches the index as
    it is and says how far it reaches."""
    home = tmp_path / "ro"
    home.mkdir()
    path = home / "ro.db"
    _half_indexed(path)
    before = path.read_bytes()
    if subprocess.run(["chattr", "+i", str(path), str(home)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        done = subprocess.run([THREADLOG, "search", "read", "--db", str(path)], capture_output=True, text=True, timeout=60)
        later = subprocess.run([THREADLOG, "search", "later", "--db", str(path)], capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["chattr", "-i", str(path), str(home)], check=True)
    assert done.returncode == 0 and "**read** me" in done.stdout, done.stderr
    note = f"note: {path} is read-only: its search index covers positions up to 2 of 3; newer events are not searched\n"
    assert done.stderr == note
    assert later.returncode == 0 and later.stdout == "" and later.stderr == note + "no match\n"
    assert path.read_bytes() == before and sorted(p.name for p in home.iterdir()) == ["ro.db"]


def test_read_commands_leave_the_file_byte_for_byte_as_it_was(db: Path) -> None:
    t = ok(db, "new", "--title", "kept").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    with Store(db) as store:
        store.purge()  # everything in the main file, no WAL
    before = db.read_bytes(), db.stat().st_mtime_ns
    for command in (["verify"], ["log", t], ["show", t], ["ls"], ["tree"], ["checkpoint"], ["transcript", t]):
        ok(db, *command)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def test_stored_control_characters_are_printed_escaped(db: Path) -> None:
    t = ok(db, "new", "--title", NASTY).strip()
    ok(db, "append", t, "--role", "user", "--text", NASTY)
    for command in (["ls"], ["tree"], ["show", t], ["log", t], ["rows", t], ["transcript", t], ["blame", t],
                    ["export", t, "--format", "markdown"]):
        out = ok(db, *command)
        assert not any(c in out for c in "\x1b\x07\r\u202e\u200f"), (command, out)
        assert command == ["blame", t] or "\\x1b" in out or "\\u001b" in out, (command, out)  # a transcript's own escape
    as_json = ok(db, "show", t, "--json")
    assert "\\u001b" in as_json and json.loads(as_json)["title"] == NASTY


def test_a_title_of_a_megabyte_is_shown_shortened_as_ls_shows_it_and_kept_whole_in_json(db: Path) -> None:
    """`show` printed a thread's title whole: a title of 1 MB (an imported session's, or one a
    caller set with `title.set`) filled the screen, and a `search` hit cut it at 40 characters
    saying nothing. Every view prints a title on one line, cut and ended with `…` as `ls` does;
    `--json` keeps it whole."""
    title = "Trip to\nLyon " + "x" * (1 << 20)
    with Store(db) as store:
        t = store.create_thread()
        store.append(t, [{"type": "title.set", "data": {"title": title}}])
    [shown] = [line for line in ok(db, "show", t).splitlines() if line.startswith("title ")]
    assert shown.startswith("title       Trip to Lyon xxx") and shown.endswith("x…") and len(shown) <= 12 + 100, shown[:200]
    [listed] = [line for line in ok(db, "ls").splitlines() if line.startswith(t)]
    assert listed.endswith("Trip to Lyon xxx" + "x" * 33 + "…")
    [hit] = ok(db, "search", "Lyon").splitlines()
    assert hit.startswith(f"{t} (Trip to Lyon " + "x" * 26 + "…) @1 "), hit[:200]
    for command in (["tree"], ["log", t], ["search", "Lyon"]):
        assert max(map(len, ok(db, *command).splitlines())) < 200, command
    assert json.loads(ok(db, "show", t, "--json"))["title"] == title
    assert json.loads(ok(db, "ls", "--json"))[0]["title"] == title


def test_a_title_or_system_prompt_of_whitespace_alone_is_shown_as_none(db: Path) -> None:
    """Cut to one line, a title of spaces and line breaks printed as nothing (`title` and a
    blank), where a thread without one shows `-`."""
    with Store(db) as store:
        t = store.create_thread(title=" \n\t ", system="\n\n")
    lines = ok(db, "show", t).splitlines()
    assert "title       -" in lines and "system      -" in lines
    [listed] = [line for line in ok(db, "ls").splitlines() if line.startswith(t)]
    assert listed.endswith(" -")


def test_tree_and_search_show_a_title_of_whitespace_alone_as_none(db: Path) -> None:
    """`tree` printed such a fork's title as two spaces before `, forked at` and `search` as
    `()`, where `ls` and `show` show none: every one-line view drops it as a missing title."""
    with Store(db) as store:
        t = store.create_thread(title="Trip")
        store.append_message(t, "user", "Find me a train to Lyon")
        fork = store.fork(t, title=" \n\t ")
    assert f"└─ ⑃ {fork}  fork, 4 events, forked at 2" in ok(db, "tree").splitlines()
    hits = [line for line in ok(db, "search", "Lyon", "--thread", fork).splitlines()]
    assert hits == [f"{fork} @1 user: Find me a train to **Lyon**"]


def test_tree_shows_a_sub_agents_agent_and_call_escaped_and_cut_as_titles_are(db: Path) -> None:
    """A sub-agent fork's agent and call come from its metadata, which an imported file or a
    caller writes: `tree` prints them escaped and cut to one short line as it does a title;
    `--json` keeps them whole. A value that is no text, and a plain fork's, are not shown."""
    call = "toolu_" + "x" * 5000
    with Store(db) as store:
        t = store.create_thread()
        store.append_message(t, "user", "Review both modules")
        agent = store.fork(t, kind="subagent", metadata={"agentId": NASTY, "parentToolUseID": call})
        odd = store.fork(t, kind="subagent", metadata={"agentId": {"id": 1}, "parentToolUseID": 7})
        plain = store.fork(t, metadata={"agentId": "a1", "parentToolUseID": "toolu_1"})
    lines = {line.split("⑃ ", 1)[1].split()[0]: line for line in ok(db, "tree").splitlines() if "⑃" in line}
    assert not any(c in lines[agent] for c in "\x1b\x07\r\u202e\u200f") and "\\x1b" in lines[agent]
    assert ", agent Evil\\x1b]0;pwned" in lines[agent] and ", call toolu_xxx" in lines[agent] and len(lines[agent]) < 200
    assert lines[odd].endswith("forked at 2") and lines[plain].endswith("forked at 2")
    shown = {entry["id"]: entry for entry in json.loads(ok(db, "tree", "--json"))}
    assert (shown[agent]["agent_id"], shown[agent]["tool_use_id"]) == (NASTY, call)
    assert (shown[odd]["agent_id"], shown[odd]["tool_use_id"], shown[plain]["agent_id"]) == (None, None, None)


def test_show_and_blame_cut_what_a_caller_wrote_to_one_short_line(db: Path) -> None:
    """A megabyte metadata value, todo, interrupt question, model or actor was printed whole by
    `show` and `blame`: one line of a megabyte, where the title beside it is cut. Each is cut
    as the title is, a metadata key a line as settings are; `--json` keeps them whole."""
    huge = "x" * (1 << 20)
    with Store(db) as store:
        t = store.create_thread(model="m" + huge, metadata={"note": huge, "user": "ana"})
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": "hi"}, "meta": {"actor": huge}},
                         {"type": "todos.set", "data": {"todos": [{"content": huge}, {"content": "pack"}]}},
                         {"type": "interrupt.raised", "data": {"interrupt_id": "i1", "question": huge}}])
    shown = ok(db, "show", t)
    assert max(map(len, shown.splitlines())) < 200, [line[:120] for line in shown.splitlines()]
    assert 'metadata    note "xxx' in shown and '\n            user "ana"\n' in shown
    assert "\ntodos       xxx" in shown and "\n            pack\n" in shown and "\ninterrupts  i1 (xxx" in shown
    blamed = ok(db, "blame", t)
    assert len(blamed) < 400 and "  xxx" in blamed
    state = json.loads(ok(db, "show", t, "--json"))
    assert (state["metadata"]["note"], state["todos"][0]["content"], state["model"]) == (huge, huge, "m" + huge)
    assert json.loads(ok(db, "blame", t, "--json"))[0]["actor"] == huge


def _tree_lines_by_id(db: Path, *args: str) -> dict[str, str]:
    """`tree`'s lines of forks, by the id each names."""
    return {line.split("⑃ ", 1)[1].split()[0]: line for line in ok(db, "tree", *args).splitlines() if "⑃" in line}


def test_tree_tells_apart_the_sub_agents_fan_out_made_by_their_directive_and_call(tmp_path: Path) -> None:
    """The demo's two sub-agents, made by `fan-out` from one tool call, carry no agent id: their
    lines differed by their ids alone. Each names the call it answers and its directive now,
    and `--json` gives them as `tool_use_id` and `directive`."""
    db = tmp_path / "demo.db"
    made = json.loads(ok(db, "demo", "--json"))
    hotel, weather = made["subagents"]
    lines = _tree_lines_by_id(db)
    assert lines[hotel].endswith('forked at 12, call toolu_02, directive "Find a hotel near Lyon Part-Dieu."'), lines
    assert lines[weather].endswith('forked at 12, call toolu_02, directive "Check Friday\'s weather in Lyon."'), lines
    assert lines[made["fork"]].endswith("forked at 2")  # a fork of the user's: nothing added
    shown = {entry["id"]: entry for entry in json.loads(ok(db, "tree", "--json"))}
    assert (shown[hotel]["tool_use_id"], shown[hotel]["directive"]) == ("toolu_02", "Find a hotel near Lyon Part-Dieu.")
    assert (shown[made["fork"]]["tool_use_id"], shown[made["fork"]]["directive"]) == (None, None)
    assert shown[made["thread"]]["directive"] is None
    # The demo's own tree (its step 2) is the one `tree` prints.
    again = ok(db, "demo")
    assert lines[hotel] in again and lines[weather] in again


def _fanned_out(db: Path, directives: list[str], calls: tuple[str, ...] = ("toolu_9",)) -> tuple[str, list[str]]:
    """A thread waiting on tool calls, and the sub-agents `fan_out` launched from them."""
    with Store(db) as store:
        t = store.create_thread(title="Review")
        store.append_message(t, "user", "Review the modules")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": call, "name": "Agent", "input": {}} for call in calls])
        return t, store.fan_out(t, directives)


def test_tree_names_no_call_for_a_sub_agent_launched_from_several(db: Path) -> None:
    """A fan-out from a turn waiting on two calls answers both in every fork: no one call
    started it, and neither its line nor `--json` names one; its directive still tells it apart."""
    t, (kid,) = _fanned_out(db, ["Check the tests"], ("toolu_a", "toolu_b"))
    assert _tree_lines_by_id(db)[kid].endswith('forked at 3, directive "Check the tests"')
    [shown] = [entry for entry in json.loads(ok(db, "tree", "--json")) if entry["id"] == kid]
    assert (shown["agent_id"], shown["tool_use_id"], shown["directive"]) == (None, None, "Check the tests")


def test_tree_shows_a_hostile_directive_on_one_short_line_escaped_and_json_whole(db: Path) -> None:
    """A directive is a caller's text: escape sequences, line breaks, 5,000 characters. `tree`
    folds and cuts it as a title (one line a thread, the layout kept) and escapes it; `--json`
    keeps it whole."""
    directives = [NASTY, "first line\nsecond line\r\n\tthird", "d" * 5000, "Check\x00 the \x85 tests"]
    t, kids = _fanned_out(db, directives)
    out = ok(db, "tree")
    assert len(out.splitlines()) == 1 + len(kids), out
    assert not any(c in out for c in "\x1b\x07\r\x00\x85\u202e\u200f") and "\\x1b]0;pwned" in out
    lines = _tree_lines_by_id(db)
    assert lines[kids[1]].endswith('call toolu_9, directive "first line second line third"'), lines[kids[1]]
    assert lines[kids[2]].endswith('directive "' + "d" * 49 + '…"') and len(lines[kids[2]]) < 150
    assert all(len(line) < 200 for line in lines.values())
    shown = {entry["id"]: entry["directive"] for entry in json.loads(ok(db, "tree", "--json"))}
    assert [shown[kid] for kid in kids] == directives



def test_show_prints_a_hostile_directive_folded_cut_and_escaped(db: Path) -> None:
    t, (nasty, long) = _fanned_out(db, [NASTY + "\nnext line", "d" * 5000])
    [line] = [line for line in ok(db, "show", nasty).splitlines() if line.startswith("directive")]
    assert not any(c in line for c in "\x1b\x07\r\u202e\u200f") and line.endswith("mark next line"), line
    [line] = [line for line in ok(db, "show", long).splitlines() if line.startswith("directive")]
    assert line == "directive   " + "d" * 99 + "…"


def test_tree_shows_what_the_redaction_of_a_sub_agents_directive_leaves(db: Path) -> None:
    """`redact` erases a sub-agent's directive from its fork event and its primed message, and
    drops the snapshots: `tree` shows no copy of it, only that it was redacted, and the call
    its primed message still answers."""
    t, (kid, sibling) = _fanned_out(db, ["Read the secret plan", "Check the tests"])
    ok(db, "snapshot", kid)
    with Store(db) as store:
        info = store.thread(kid)
        for offset in (info.parent_offset, info.parent_offset + 1):  # the fork event, the primed message
            store.redact(store.event_at(kid, offset).position, "leaked", "ana")
    out = ok(db, "tree")
    assert "secret" not in out
    lines = _tree_lines_by_id(db)
    assert lines[kid].endswith("forked at 3, call toolu_9, directive [redacted]"), lines[kid]
    assert lines[sibling].endswith('forked at 3, call toolu_9, directive "Check the tests"')
    shown = {entry["id"]: entry for entry in json.loads(ok(db, "tree", "--json"))}
    assert (shown[kid]["tool_use_id"], shown[kid]["directive"]) == ("toolu_9", None)
    assert "secret" not in json.dumps(shown)


def test_tree_names_a_sub_agents_call_and_directive_when_its_parent_is_gone(db: Path) -> None:
    """A fork whose parent's row is gone (raw SQL) is printed at the top of its own tree; its
    line said nothing of the agent or call a sub-agent's line names in its place."""
    t, (kid,) = _fanned_out(db, ["Check the tests"])
    with Store(db) as store:
        agent = store.fork(t, kind="subagent", unanswered="keep", metadata={"agentId": "a7", "parentToolUseID": "toolu_9"})
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM streams WHERE id = ?", (t,))
    code, out, err = invoke(db, "tree", "--all")
    assert code == 1 and "not in the file" in err, (out, err)
    tops = [line for line in out.splitlines() if line.startswith("⑃")]
    assert tops == [f'⑃ {kid}  subagent, 5 events, forked at 3 from {t}, which is not in the file, call toolu_9, '
                    'directive "Check the tests"',
                    f"⑃ {agent}  subagent, 4 events, forked at 3 from {t}, which is not in the file, agent a7, "
                    "call toolu_9"], out


# -- 6, 7: page, limit, follow ----------------------------------------------------------------


def test_log_tail_and_show_last(db: Path) -> None:
    t = ok(db, "new").strip()
    for i in range(5):
        ok(db, "append", t, "--role", "user" if i % 2 == 0 else "assistant", "--text", f"m{i}")
    lines = ok(db, "log", t, "-n", "2", "--json").splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [4, 5]
    # `show` and `transcript` spell it --last: so does `log` (it refused --last as no such option)
    assert ok(db, "log", t, "--last", "2", "--json").splitlines() == lines
    shown = ok(db, "show", t, "--last", "2")
    assert "m4" in shown and "m3" in shown and "m2" not in shown and "the last 2 shown" in shown


def test_log_lines_say_how_a_run_ended_and_what_metadata_and_todos_set(db: Path) -> None:
    """A cancelled or failed run read as `run_id=r2`, as an ok one did, and a metadata.set or
    todos.set line said nothing: an audit of a session read through `log` saw none of it."""
    t = ok(db, "new").strip()
    for event, data in [("run.started", {"run_id": "r1"}), ("run.finished", {"run_id": "r1", "status": "ok"}),
                        ("run.started", {"run_id": "r2"}),
                        ("run.finished", {"run_id": "r2", "status": "error", "error": "overloaded"}),
                        ("metadata.set", {"patch": {"cwd": "/src", "draft": None, "tags": ["a"]}}),
                        ("todos.set", {"todos": [{"content": "a", "status": "completed"}, {"content": "b"}]})]:
        ok(db, "emit", t, event, "--data", json.dumps(data))
    hints = [(line.split(maxsplit=5) + [""])[5] for line in ok(db, "log", t, "--start", "1").splitlines()]
    assert hints == ["run_id=r1", "run_id=r1 ok", "run_id=r2", "run_id=r2 error: overloaded",
                     'patch: cwd="/src", draft=null, tags=[…]', "todos: 2 (1 completed)"], hints


def test_usage_does_not_call_its_count_of_answers_msgs_as_ls_does_every_message(db: Path) -> None:
    """`ls` and `usage` both headed a column `msgs`: 2 in one and 1 in the other for the same
    thread, since usage counts the assistant messages that carry usage."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    answer = json.dumps([{"type": "text", "text": "hello"}])
    ok(db, "emit", t, "message.appended", "--data",
       json.dumps({"role": "assistant", "content": json.loads(answer), "usage": {"input_tokens": 3, "output_tokens": 4}}))
    listed, listed_row = ok(db, "ls").splitlines()
    assert listed.split()[4] == "msgs" and listed_row.split()[3] == "2"
    header, row, _ = ok(db, "usage", t).splitlines()
    assert header.split()[:3] == ["thread", "kind", "answers"] and row.split()[2] == "1"
    assert json.loads(ok(db, "usage", t, "--json"))["total"]["messages"] == 1  # the field name stays


_BLAME_PEAK = """
import os, sys, tracemalloc
from threadlog.cli import cli
sys.stdout = open(os.devnull, "w")
tracemalloc.start()
try:
    cli.main(sys.argv[1:], standalone_mode=False)
finally:
    print(tracemalloc.get_traced_memory()[1], file=sys.stderr)
"""


def _blame_peak(tmp_path: Path, n: int, *options: str) -> int:
    """The peak Python memory of `threadlog blame` (stdout discarded) on an n-message thread."""
    db = tmp_path / f"{n}.db"
    with Store(db) as store:
        t = store.create_thread()
        body = [{"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": "x" * 200}]}}] * 1000
        for _ in range(n // 1000):
            store.append(t, body)
    done = subprocess.run([sys.executable, "-c", _BLAME_PEAK, "--db", str(db), "blame", t, "--no-pager", *options],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.split()[-1])


@pytest.mark.parametrize("options", [(), ("--json",)], ids=["text", "json"])
def test_blame_of_a_long_thread_streams_in_bounded_memory(tmp_path: Path, options: tuple[str, ...]) -> None:
    small, large = _blame_peak(tmp_path, 1_000, *options), _blame_peak(tmp_path, 10_000, *options)
    assert large < small * 1.5 + 256 * 1024, (small, large)  # ten times the messages, not ten times the memory


def _tree_all_peak(tmp_path: Path, n: int, *options: str) -> int:
    """The peak Python memory of `threadlog tree --all` (stdout discarded) on a file of n
    titled threads, each with a fork."""
    db = tmp_path / f"{n}.db"
    with Store(db) as store:
        for i in range(n):
            t = store.create_thread(title=f"thread {i}")
            store.append_message(t, "user", "x" * 100)
            store.fork(t)
    done = subprocess.run([sys.executable, "-c", _BLAME_PEAK, "--db", str(db), "tree", "--all", "--no-pager", *options],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.split()[-1])


@pytest.mark.parametrize("options", [(), ("--json",)], ids=["text", "json"])
def test_tree_of_every_tree_is_printed_as_read_in_bounded_memory(tmp_path: Path, options: tuple[str, ...]) -> None:
    """`tree --all` of 202,000 threads printed nothing for 7 s, then everything, at 259 MB: every
    thread and title was gathered first. It prints tree by tree (`--json`, a hundred threads at
    a time, in its order), the same bytes."""
    small, large = _tree_all_peak(tmp_path, 300, *options), _tree_all_peak(tmp_path, 3_000, *options)
    assert large < small * 1.5 + 256 * 1024, (small, large)  # ten times the threads, not ten times the memory


def _on_a_terminal(args: list[str], env: dict[str, str], stdin: int | None = None, ctrl_c: bool = False) -> tuple[int, str]:
    """Run the console script with stdout and stderr on a pseudo-terminal, and stdin too unless
    given; (status, output). With `ctrl_c`, it takes SIGINT as Ctrl-C however this test runs
    (`procs.interruptible`: a worker of the test runner may ignore it, and a child inherits that)."""
    leader, follower = pty.openpty()
    start = interruptible if ctrl_c else subprocess.Popen
    proc = start([THREADLOG, *args], stdin=follower if stdin is None else stdin, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def test_checkpoint_on_a_terminal_shows_its_progress_and_prints_the_checkpoint(db: Path) -> None:
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    code, out = _on_a_terminal(["checkpoint", "--db", str(db)], dict(os.environ))
    assert code == 0 and "reading every hash" in out, out
    assert re.search(r"^tlc1:2:[0-9a-f]{64}:[0-9a-f]{16}\r?$", out, flags=re.M), out


def test_a_backup_and_its_restore_on_a_terminal_say_how_far_they_are(db: Path, tmp_path: Path) -> None:
    """`export --all -o FILE` of a 2.2M-event file ran a minute and `import events` of it four,
    both without a word on a terminal: each now shows a bar on stderr, and writes what it wrote."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    backup, copy = tmp_path / "backup.jsonl", tmp_path / "copy.db"
    code, out = _on_a_terminal(["export", "--all", "-o", str(backup), "--db", str(db)], dict(os.environ))
    assert code == 0 and "exporting" in out and "100%" in out, out
    code, out = _on_a_terminal(["import", "events", str(backup), "--db", str(copy)], dict(os.environ))
    assert code == 0 and "restoring" in out and "100%" in out and "2 event(s) added" in out, out
    assert "checking what was restored, then committing" in out, out  # what it does once every line is read
    assert ok(copy, "checkpoint") == ok(db, "checkpoint")


def test_a_backup_of_an_empty_file_on_a_terminal_ends_at_100_percent(tmp_path: Path) -> None:
    """A file of no threads is backed up whole, but its bar, told a total of 0, ended at 0%."""
    empty, backup = tmp_path / "empty.db", tmp_path / "backup.jsonl"
    Store(empty).close()
    code, out = _on_a_terminal(["export", "--all", "-o", str(backup), "--db", str(empty)], dict(os.environ))
    assert code == 0 and "exporting" in out and "100%" in out, out
    assert backup.read_text().splitlines()[-1] == '{"end":{"streams":0,"events":0}}'
    code, out = _on_a_terminal(["checkpoint", "--db", str(empty)], dict(os.environ))
    assert code == 0 and "reading every hash" in out and "100%" in out, out


def test_a_restore_from_a_pipe_on_a_terminal_says_what_it_read_not_a_share(db: Path, tmp_path: Path) -> None:
    """A pipe's size is unknown until it ends: the bar said 99% from its first megabyte on."""
    t = ok(db, "new").strip()
    with Store(db) as store:
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": "x" * 2000}}] * 1500)
    backup, fifo = tmp_path / "backup.jsonl", tmp_path / "fifo"
    ok(db, "export", "--all", "-o", str(backup))
    assert backup.stat().st_size > 3 * 2**20
    os.mkfifo(fifo)
    writer = subprocess.Popen(["cp", str(backup), str(fifo)])
    code, out = _on_a_terminal(["import", "events", str(fifo), "--db", str(tmp_path / "copy.db")], dict(os.environ))
    assert writer.wait(timeout=30) == 0
    assert code == 0 and "1501 event(s) added" in out, out
    assert re.search(r"restoring: [1-3]\.0 MiB read", out) and "99%" not in out, out
    assert "checking what was restored, then committing" in out and "100%" in out, out


def test_verify_since_on_a_terminal_shows_its_progress(db: Path) -> None:
    t = ok(db, "new").strip()
    before = ok(db, "checkpoint").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    code, out = _on_a_terminal(["verify", "--since", before, "--db", str(db)], dict(os.environ))
    assert code == 0 and "verifying" in out and "1 event appended since the checkpoint verified" in out, out


def test_a_file_an_older_release_wrote_says_on_a_terminal_that_it_is_migrated(tmp_path: Path) -> None:
    """Opening a file of schema 6 ran its migration 16 s at 2.2M events, without a word: the
    command looked hung. On a terminal it is said as it starts, once."""
    db = tmp_path / "v1.db"
    shutil.copy(Path(__file__).parent / "fixtures" / "v1.db", db)
    code, out = _on_a_terminal(["ls", "--no-pager", "--db", str(db)], dict(os.environ))
    assert code == 0 and f"migrating {db} from schema 1 to {SCHEMA_VERSION} (once; a large file takes a while)" in out, out
    code, out = _on_a_terminal(["ls", "--no-pager", "--db", str(db)], dict(os.environ))
    assert code == 0 and "migrating" not in out, out


def test_a_terminal_gets_a_pager_and_colour_unless_told_otherwise(db: Path, tmp_path: Path) -> None:
    t = ok(db, "new").strip()
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {paged}\n")
    pager.chmod(0o755)
    env = {**os.environ, "PAGER": str(pager)}
    env.pop("NO_COLOR", None)
    code, _ = _on_a_terminal(["log", t, "--db", str(db)], env)
    assert code == 0 and "thread.created" in paged.read_text()
    paged.unlink()
    code, out = _on_a_terminal(["log", t, "--no-pager", "--db", str(db)], env)
    assert code == 0 and "thread.created" in out and not paged.exists()
    code, out = _on_a_terminal(["show", "nope", "--db", str(db)], env)
    assert code == 1 and "\x1b[" in out  # a coloured `error:` on a terminal
    code, out = _on_a_terminal(["show", "nope", "--db", str(db)], {**env, "NO_COLOR": "1"})
    assert code == 1 and "\x1b" not in out and "error: " in out


def _script(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def test_a_pager_that_fails_says_so_instead_of_showing_nothing(db: Path, tmp_path: Path) -> None:
    """`PAGER=false threadlog log T` on a terminal showed nothing and exited 0: the pager's
    status was not looked at. A pager that exits non-zero (before reading, or after) fails the
    command, naming PAGER and what prints the output without it."""
    t = ok(db, "new").strip()
    read_then_fail = _script(tmp_path / "pager", "#!/bin/sh\ncat > /dev/null\nexit 3\n")
    for pager, status in [("false", "status 1"), (read_then_fail, "status 3")]:
        for command in (["log", t], ["ls"], ["tree", "--all"]):
            code, out = _on_a_terminal([*command, "--db", str(db)], {**os.environ, "PAGER": pager, "NO_COLOR": "1"})
            assert code == 1, (command, out)
            assert f"error: the pager failed: PAGER={pager!r} exited with {status}, so the output may not have been " \
                   "shown; give --no-pager to print it without one, or set PAGER to a pager that works" in out, out
    code, out = _on_a_terminal(["log", t, "--no-pager", "--db", str(db)], {**os.environ, "PAGER": "false"})
    assert code == 0 and "thread.created" in out, out
    # A pager quit before the end (`q` in less) exits 0: the rest is left unprinted, quietly, as before.
    code, out = _on_a_terminal(["log", t, "--db", str(db)], {**os.environ, "PAGER": "head -c 1"})
    assert code == 0 and "error" not in out, out


def test_a_pager_that_cannot_be_started_is_said_and_the_output_printed_without_it(db: Path, tmp_path: Path) -> None:
    """As git does: `PAGER=/nonexistent` printed the output without a word of the pager, and a
    script whose interpreter is missing printed only `error: No such file or directory`."""
    t = ok(db, "new").strip()
    missing_interpreter = _script(tmp_path / "pager", "#!/nonexistent/sh\ncat\n")
    for pager, why in [("/nonexistent", "not found, or not executable"), (missing_interpreter, "No such file or directory"),
                       ("'unclosed", "No closing quotation")]:
        code, out = _on_a_terminal(["log", t, "--db", str(db)], {**os.environ, "PAGER": pager, "NO_COLOR": "1"})
        assert code == 0 and "thread.created" in out, out
        assert f"note: the pager PAGER={pager!r} cannot be run ({why}): printed without it" in out, out


def test_a_pager_in_shell_syntax_runs_through_the_shell_as_git_runs_it(db: Path, tmp_path: Path) -> None:
    """PAGER was split into words and run without a shell: `LESS=-R less` and `$HOME/bin/pager`
    were not found (a note, the output printed without them), and `less -R | cat` gave less the
    files `|` and `cat` and failed the command. As git does, a PAGER holding shell syntax runs
    through `sh -c`: the assignment, the pipe, the quotes and the expansion all reach the pager."""
    t = ok(db, "new").strip()
    paged = tmp_path / "paged.txt"
    body = f'#!/bin/sh\nprintf \'LESS=%s args=%s\\n\' "$LESS" "$*" > {paged}\ncat >> {paged}\n'
    (tmp_path / "home" / "bin").mkdir(parents=True)
    (tmp_path / "my pager").mkdir()
    pager = _script(tmp_path / "home" / "bin" / "pager", body)
    spaced = _script(tmp_path / "my pager" / "pager", body)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    for given, said in [(f"LESS=-R {pager}", "LESS=-R args="), (f'"{spaced}" -R', "LESS= args=-R"),
                        ("$HOME/bin/pager", "LESS= args="), (f"tr a-z A-Z | cat > {paged}", "THREAD.CREATED"),
                        (f"{pager} -R | cat", "LESS= args=-R")]:
        paged.unlink(missing_ok=True)
        code, out = _on_a_terminal(["log", t, "--db", str(db)], {**env, "PAGER": given})
        assert code == 0 and "note:" not in out and "thread.created" not in out, (given, out)
        assert said in paged.read_text() and "thread.created" in paged.read_text().lower(), (given, paged.read_text())
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8").split())
    assert "a PAGER holding shell syntax (`LESS=-R less`, `less -R | cat`, quotes, `$HOME/bin/pager`) runs through `sh -c`" \
           in readme


def test_a_pager_line_the_shell_cannot_start_is_said_and_the_output_printed_whole(db: Path, tmp_path: Path) -> None:
    """Through a shell, a pager that cannot be started is the shell's status 127 (no such command)
    or 126 (not executable), after the text has gone into the pipe: it is said, as one not found
    without a shell is, and the text printed whole, beyond what a pipe holds. A pager line that
    fails once started fails the command, naming PAGER."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "\n".join(f"line {i:04d} " + "x" * 50 for i in range(4000)))
    unrunnable = tmp_path / "pager"
    unrunnable.write_text("#!/bin/sh\ncat\n")  # no x bit
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1"}
    command = ["transcript", t, "--max-bytes", "1000000", "--max-message-bytes", "1000000", "--db", str(db)]
    for given, why in [("LESS=-R /nonexistent/pager", "the shell found no such command, status 127"),
                       ("$HOME/pager", "the shell could not execute it, status 126")]:
        code, out = _on_a_terminal(command, {**env, "PAGER": given})
        assert code == 0, (given, out)
        assert f"note: the pager PAGER={given!r} cannot be run ({why}): printed without it" in out, out
        assert [int(n) for n in re.findall(r"^    line (\d{4}) x+\r?$", out, flags=re.M)] == list(range(4000)), given
    given = "cat > /dev/null; exit 3"
    code, out = _on_a_terminal(["log", t, "--db", str(db)], {**env, "PAGER": given})
    assert code == 1 and "note:" not in out, out
    assert f"error: the pager failed: PAGER={given!r} exited with status 3, so the output may not have been shown" in out, out


def test_ctrl_c_while_a_pager_shows_the_output_ends_the_command_as_interrupted(db: Path, tmp_path: Path) -> None:
    """Ctrl-C on a terminal reaches the command and its pager alike. less ignores it; a pager
    that it ends (`more`, a script) made the command say "the pager failed ... stopped by signal
    2" and exit 1, as if the pager had broken. It exits 130, as any command stopped by Ctrl-C.
    The pager here, once it has read the text, sends the command its SIGINT, then ends by its own."""
    t = ok(db, "new").strip()
    pager = _script(tmp_path / "pager", f"#!{sys.executable}\nimport os, signal, sys\nsys.stdin.read()\n"
                    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                    "os.kill(os.getppid(), signal.SIGINT)\nos.kill(os.getpid(), signal.SIGINT)\n")
    code, out = _on_a_terminal(["log", t, "--db", str(db)], {**os.environ, "NO_COLOR": "1", "PAGER": pager}, ctrl_c=True)
    assert code == 130, out
    assert "pager failed" not in out and "Traceback" not in out, out


def test_any_text_of_a_listing_is_paged_on_a_terminal_and_its_json_never_as_the_help_and_readme_say(
        db: Path, tmp_path: Path) -> None:
    """The help and README said "long output goes through $PAGER": a listing of one line went
    through it too, `--json` never did, and stdin not a terminal left it out. They now say
    what is paged and when, and it is: `ls` of one thread on a terminal reaches the pager,
    its `--json` does not, nor its text once stdin is a file."""
    ok(db, "new", "--title", "only")
    paged = tmp_path / "paged.txt"
    pager = _script(tmp_path / "pager", f"#!/bin/sh\ncat >> {paged}\n")
    env = {**os.environ, "PAGER": pager, "NO_COLOR": "1"}
    code, _ = _on_a_terminal(["ls", "--db", str(db)], env)
    assert code == 0 and len(paged.read_text().splitlines()) == 2  # the header and the one thread
    paged.unlink()
    code, out = _on_a_terminal(["ls", "--json", "--db", str(db)], env)
    assert code == 0 and '"title": "only"' in out and not paged.exists(), out
    code, out = _on_a_terminal(["ls", "--db", str(db)], env, stdin=subprocess.DEVNULL)
    assert code == 0 and "only" in out and not paged.exists(), out
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8").split())
    assert "however short, goes through `$PAGER` (unset: `less`) when stdin and stdout are terminals" in readme
    assert "`--json` never does" in readme
    shown = " ".join(CliRunner().invoke(cli, ["ls", "--help"]).stdout.split())
    assert "the text, however short, goes through $PAGER, or less, when stdin and stdout are terminals" in shown


@contextlib.contextmanager
def _following(db: Path, thread: str, after: int) -> Iterator[Callable[[int], list[tuple[str, str]]]]:
    """`threadlog follow --thread THREAD --forks --json` from `after`, in a real process; yields
    a function that waits for the next N events it prints, as (stream, type). Ctrl-C ends it:
    it must exit 130 with no traceback."""
    proc = interruptible([THREADLOG, "follow", "--thread", thread, "--forks", "--json", "--interval", "0.05", "--after",
                          str(after), "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [got.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def printed(count: int) -> list[tuple[str, str]]:
        return [(e["stream_id"], e["type"]) for e in (json.loads(got.get(timeout=60)) for _ in range(count))]

    try:
        yield printed
    finally:
        _, err = ctrl_c(proc)
    assert proc.returncode == 130 and "Traceback" not in err


def test_follow_prints_events_as_they_are_committed_and_ctrl_c_exits_130(db: Path) -> None:
    t = ok(db, "new").strip()
    other = ok(db, "new").strip()
    with Store(db) as store:
        after = store.last_position()
    with _following(db, t, after) as printed, Store(db) as store:
        store.append_message(other, "user", "not followed")
        store.append_message(t, "user", "followed")
        f = store.fork(t)
        store.append_message(f, "user", "in the fork")
        assert printed(3) == [(t, "message.appended"), (f, "thread.forked"), (f, "message.appended")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_follow_stopped_by_a_signal_exits_as_a_shell_reports_that_signal(db: Path, signum: int) -> None:
    """`follow` stopped by SIGTERM (a service manager's stop) or SIGHUP (its terminal closed)
    exited 130, Ctrl-C's status, where every other command (and `import --follow`) exits 128 +
    the signal's number: a supervisor could not tell its own stop from a Ctrl-C."""
    t = ok(db, "new").strip()
    with Store(db) as store:
        after = store.last_position()
    proc = subprocess.Popen([THREADLOG, "follow", "--json", "--interval", "0.05", "--after", str(after), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ok(db, "append", t, "--role", "user", "--text", "followed")
        assert json.loads(proc.stdout.readline())["type"] == "message.appended"  # type: ignore[union-attr]  # running, its handlers set
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, out, err) == (128 + signum, "", "")


def test_follow_forks_takes_in_the_forks_made_before_it_started(db: Path) -> None:
    """`--forks` followed only forks whose `thread.forked` it read: appends to a fork made
    before it started (and to that fork's own forks) were never printed."""
    t = ok(db, "new").strip()
    with Store(db) as store:
        store.append_message(t, "user", "a question")
        old = store.fork(t)
        older = store.fork(old)
        stranger = store.create_thread(title="not followed")
        after = store.last_position()  # the forks' thread.forked events are behind this
    with _following(db, t, after) as printed, Store(db) as store:
        store.append_message(stranger, "user", "not followed")
        store.append_message(old, "user", "in the old fork")
        store.append_message(older, "user", "in its fork")
        new = store.fork(older)
        store.append_message(new, "user", "in a new fork of it")
        assert printed(4) == [(old, "message.appended"), (older, "message.appended"), (new, "thread.forked"),
                              (new, "message.appended")]

# -- 8, 9, 10: one shape of output -------------------------------------------------------------


def _leaves(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _leaves(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_has_json_and_every_option_has_help() -> None:
    for path, command in _leaves():
        names = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if path != ("export",):  # export writes its own formats (events are JSON lines already)
            assert "--json" in names, path
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, (path, param.name)


def test_write_commands_print_json_with_the_librarys_field_names(db: Path) -> None:
    t = json.loads(ok(db, "new", "--title", "T", "--json"))
    assert t["kind"] == "thread" and t["head"] == 1
    event = json.loads(ok(db, "append", t["id"], "--role", "user", "--text", "hi", "--json"))
    assert event["offset"] == 1 and event["type"] == "message.appended" and event["stream_id"] == t["id"]
    emitted = json.loads(ok(db, "emit", t["id"], "title.set", "--data", '{"title": "U"}', "--json"))
    assert emitted["data"] == {"title": "U"}
    assert json.loads(ok(db, "fork", t["id"], "--json"))["parent_id"] == t["id"]
    assert json.loads(ok(db, "init", "--json"))["threads"] == 2
    assert json.loads(ok(db, "snapshot", t["id"], "--json"))["offset"] == 3


def test_errors_use_the_clis_words(db: Path) -> None:
    t = ok(db, "new").strip()
    blocks = json.dumps([{"type": "tool_use", "id": "toolu_1", "name": "s", "input": {}}])
    ok(db, "append", t, "--role", "assistant", "--content", "-", input=blocks)
    err = fails(db, "fork", t)
    assert "--unanswered drop (or keep)" in err and "unanswered='drop'" not in err


def test_fork_keeps_waiting_tool_calls_for_its_own_result(db: Path) -> None:
    """`threadlog fork --unanswered keep`: the call waits in the fork, whose next message
    answers it; a note fork refuses keep (exit 1, nothing written)."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "run it")
    call = json.dumps([{"type": "tool_use", "id": "toolu_1", "name": "s", "input": {}}])
    ok(db, "append", t, "--role", "assistant", "--content", "-", input=call)
    fork = json.loads(ok(db, "fork", t, "--unanswered", "keep", "--json"))
    result = json.dumps([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "again"}])
    ok(db, "append", fork["id"], "--role", "user", "--content", "-", input=result)
    err = fails(db, "append", fork["id"], "--role", "user", "--content", "-", input=result)
    assert "not pending" in err
    err = fails(db, "fork", t, "--context", "note", "--unanswered", "keep")
    assert "'keep' applies to context='full' forks only" in err
    assert len(json.loads(ok(db, "ls", "--all", "--json"))) == 2
    err = fails(db, "emit", t, "thread.created", "--data", "{}")
    assert "expect=" not in err
    assert "Invalid control character at (line 1" in fails(db, "emit", t, "title.set", "--data", '{"title": "a\x01"}', code=2)


def test_fan_out_interrupts_and_version(db: Path) -> None:
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "plan")
    blocks = json.dumps([{"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {}}])
    ok(db, "append", t, "--role", "assistant", "--content", "-", input=blocks)
    kids = ok(db, "fan-out", t, "hotels", "weather").split()
    assert len(kids) == 2 and all(json.loads(ok(db, "show", k, "--json"))["kind"] == "subagent" for k in kids)
    refused = fails(db, "fan-out", t, "trains")  # the call has its sub-agents: launched once
    assert f"already launched sub-agents for its tool calls 'toolu_1': {kids[0]!r}, {kids[1]!r}" in refused
    ok(db, "append", t, "--role", "user", "--content", "-",
       input=json.dumps([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "started"}]))
    ok(db, "append", t, "--role", "assistant", "--content", "-", input=blocks.replace("toolu_1", "toolu_2"))
    [ruled] = ok(db, "fan-out", t, "trains", "--boilerplate").split()
    primed = json.loads(ok(db, "log", ruled, "--json").splitlines()[-1])["data"]["content"]
    assert [b.get("text", "")[:18] for b in primed[1:]] == ["<fork-boilerplate>", "trains"]
    ok(db, "interrupt", "raise", kids[0], "q1", "--question", "Which one?")
    assert json.loads(ok(db, "show", kids[0], "--json"))["pending_interrupts"][0]["interrupt_id"] == "q1"
    ok(db, "interrupt", "resolve", kids[0], "q1", "--answer", "the first")
    ok(db, "interrupt", "raise", kids[1], "q2")
    ok(db, "interrupt", "cancel", kids[1], "q2")
    assert all(json.loads(ok(db, "show", k, "--json"))["pending_interrupts"] == [] for k in kids)
    version = CliRunner().invoke(cli, ["--version"])
    assert version.exit_code == 0 and "version" in version.output


# -- 14: waiting on the lock ----------------------------------------------------------------


def test_a_writer_says_it_waits_for_the_lock_and_gives_up_after_timeout(db: Path) -> None:
    t = ok(db, "new").strip()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        done = subprocess.run([THREADLOG, "append", t, "--role", "user", "--text", "x", "--timeout", "2", "--db", str(db)],
                              capture_output=True, text=True, timeout=60)
        took = time.monotonic() - start
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 1 and "waiting for another writer" in done.stderr and "locked" in done.stderr, done
    assert 1.5 < took < 20


# -- 15-18: bugs seen ---------------------------------------------------------------------------


def test_huge_offsets_are_refused_not_overflowing(db: Path) -> None:
    t = ok(db, "new").strip()
    for option in ("--start", "--stop"):
        got, out, err = invoke(db, "log", t, option, "9223372036854775808")
        assert got in (1, 2) and "Traceback" not in out + err and "OverflowError" not in err
    with Store(db) as store, pytest.raises(InvalidEvent, match="too large"):
        list(store.read(t, start=2**70))


def test_verify_json_reports_a_failure_on_stdout(db: Path) -> None:
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hello")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = replace(data, 'hello', 'HELLO')")
    conn.commit()
    conn.close()
    code, out, _ = invoke(db, "verify", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["position"] == 2 and "digest" in report["error"]


def test_snapshot_says_how_many_events_it_holds_in_the_words_of_log(db: Path) -> None:
    """`threadlog snapshot T` of a thread of two events said `snapshot of T at offset 2`, an
    offset `threadlog log T` never shows (it holds offsets 0..1): the snapshot is the state
    after the first 2 events, as `show --at 2` is."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "x")
    assert ok(db, "snapshot", t) == f"snapshot of {t} after its first 2 events (offsets 0..1, as `show --at 2`)\n"


def test_snapshot_drop_of_one_thread_keeps_the_others(db: Path) -> None:
    a, b = ok(db, "new").strip(), ok(db, "new").strip()
    for t in (a, b):
        ok(db, "append", t, "--role", "user", "--text", "x")
        ok(db, "snapshot", t)
    assert "dropped 1 " in ok(db, "snapshot", a, "--drop")
    assert "dropped 1 " in ok(db, "snapshot", "--drop")


def test_range_and_type_errors_are_consistent(db: Path, tmp_path: Path) -> None:
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "x")
    assert "below start" in fails(db, "log", t, "--start", "2", "--stop", "1")
    assert "outside thread" in fails(db, "log", t, "--start", "1000")
    assert "outside thread" in fails(db, "show", t, "--at", "1000")
    outside = f"--start 1000 is outside thread {t!r} (0..2)"
    for command in ("log", "transcript"):  # the same words, exit 1 (fails() checks the status)
        assert outside in fails(db, command, t, "--start", "1000")
        assert outside.replace("start", "stop") in fails(db, command, t, "--stop", "1000")
        assert "stop: 1 is below start 2" in fails(db, command, t, "--start", "2", "--stop", "1")
    assert outside.replace("start", "at") in fails(db, "rows", t, "--at", "1000")
    # request names the points a request takes, as fork does: it said 0..2, though at 0 and 1 hold no message
    assert f"--at: cannot build a request of {t!r} at 1000: it holds offsets 0..1, so --at must be 2..2" in fails(
        db, "request", t, "--at", "1000")
    # show replays at least thread.created: it said 0..2, then refused --at 0 as a usage error
    assert f"--at 1000 is outside thread {t!r} (1..2)" in fails(db, "show", t, "--at", "1000")
    # --check --at names a message's offset, 0..1 here: it said 0..2, then refused --at 2 as `offset: 2 … (0..1)`
    for at in ("1000", "2"):
        assert f"--at {at} is outside thread {t!r} (0..1)" in fails(db, "request", t, "--at", at, "--check")
    with Store(db) as store:
        with pytest.raises(ForkRefused, match=r"an integer\), not str"):
            store.fork(t, at="2")  # type: ignore[arg-type]
        with pytest.raises(IsADirectoryError) as caught:
            write_transcript(store, t, tmp_path)
    assert caught.value.filename == str(tmp_path) and ".tmp" not in str(caught.value)
    assert stat.S_ISDIR(os.stat(tmp_path).st_mode)


# -- 11, 12: transcripts people can read -------------------------------------------------------


def test_a_tool_call_line_shows_the_identifying_argument_first(db: Path) -> None:
    t = ok(db, "new").strip()
    body = "x" * 500
    blocks = [{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"content": body, "file_path": "/src/app.py"}},
              {"type": "tool_use", "id": "toolu_2", "name": "Grep", "input": {"-n": True, "glob": "*.py", "pattern": "def main"}}]
    ok(db, "append", t, "--role", "assistant", "--content", "-", input=json.dumps(blocks))
    lines = [line for line in ok(db, "transcript", t).splitlines() if line.startswith("tool call")]
    assert '`{"file_path":"/src/app.py","content":"xxx' in lines[0] and len(lines[0]) < 140
    assert '`{"pattern":"def main","glob":"*.py","-n":true}`' in lines[1]


@pytest.mark.parametrize("checkpointed", [False, True], ids=["commits-in-wal", "wal-checkpointed"])
def test_a_read_only_copy_whose_wal_holds_commits_is_refused_not_read_stale(tmp_path: Path, checkpointed: bool) -> None:
    """A writer killed before its checkpoint leaves its last commits in the -wal file; copied
    without the -shm into a directory no one may write, the file was opened `immutable`, which
    reads the main file alone: `verify` said "ok: 11 events" of a log of 21, and `ls` and
    `checkpoint` answered from it. It is refused, naming the WAL. A WAL whose pages were all
    checkpointed into the file (a copy of a live database) is read. (Root writes any
    directory: as root the reader runs without the capability that lets it.)"""
    import shutil

    from tests.procs import bound_by_file_modes

    prefix = bound_by_file_modes("dac_override")
    source = tmp_path / "src"
    source.mkdir()
    script = ("import os, signal\nfrom threadlog import Store\n"
              f"s = Store({str(source / 'r.db')!r})\nt = s.create_thread(title='ro')\n"
              "for i in range(10): s.append_message(t, 'user', f'early {i}')\ns.purge()\n"
              "for i in range(10): s.append_message(t, 'user', f'late {i}')\n"
              + ("import sqlite3\nsqlite3.connect(s.path).execute('PRAGMA wal_checkpoint(FULL)')\n" if checkpointed else "")
              + "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", script], timeout=60)
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    for name in ("r.db", "r.db-wal"):  # a backup that skipped the -shm file
        shutil.copy(source / name, shelf / name)
    assert (shelf / "r.db-wal").stat().st_size > 0
    shelf.chmod(0o555)
    try:
        done = subprocess.run([*prefix, THREADLOG, "verify", "--db", str(shelf / "r.db")], capture_output=True, text=True,
                              timeout=60)
    finally:
        shelf.chmod(0o755)
    if checkpointed:
        assert done.returncode == 0 and "21 events" in done.stdout, done.stdout + done.stderr
        return
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {shelf / 'r.db'}-wal holds changes not yet in {shelf / 'r.db'}"), done.stderr
    ok = subprocess.run([THREADLOG, "verify", "--db", str(shelf / "r.db")], capture_output=True, text=True, timeout=60)
    assert "21 events" in ok.stdout, ok.stdout + ok.stderr  # in a directory it may write, all of it is read


def test_counts_of_one_read_in_the_singular(tmp_path: Path) -> None:
    """A store with one thread of one event said "1 threads, 1 events" (`init`, `verify`,
    `tree`); a count of one reads in the singular, any other in the plural."""
    db = tmp_path / "t.db"
    assert invoke(db, "init")[1].endswith(", 0 threads, 0 events\n")
    with Store(db) as store:
        thread = store.create_thread()
    assert invoke(db, "init")[1].endswith(", 1 thread, 1 event\n")
    assert invoke(db, "verify")[1] == "ok: 1 event in 1 thread verified (0 redacted)\n"
    assert invoke(db, "tree", thread)[1].startswith(f"{thread}  thread, 1 event\n")
    with Store(db) as store:
        store.append_message(thread, "user", "two")
        store.fork(thread)
    assert invoke(db, "verify")[1] == "ok: 3 events in 2 threads verified (0 redacted)\n"


def test_a_search_hit_cuts_a_long_tool_name_with_a_mark(db: Path) -> None:
    """The tool name of a hit was cut at 80 characters with nothing to show it was cut, as if
    the call had named a tool of those 80 (every other one-line view ends a cut with `…`)."""
    name = "lookup_" + "x" * 120
    with Store(db) as store:
        t = store.create_thread()
        store.append_message(t, "user", "Find trains")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": name, "input": {"q": "Lyon"}}])
    (hit,) = ok(db, "search", "Lyon").splitlines()
    assert f"assistant tool_use {name[:79]}…: " in hit and name not in hit


def _restored_into_place(db: Path, change: Callable[[Store], None]) -> None:
    """`db` exported, removed (with its -wal and -shm), restored from the export at the same
    path, then `change`d: what `threadlog import events --db DB backup.jsonl` after `rm DB*` does."""
    backup = db.with_name("backup.jsonl")
    ok(db, "export", "--all", "-o", str(backup))
    for path in db.parent.glob(db.name + "*"):
        path.unlink()
    ok(db, "import", "events", str(backup))
    with Store(db) as store:
        change(store)


def test_follow_goes_on_in_a_file_restored_into_its_place(db: Path) -> None:
    """A follower kept reading the file it opened: once a restore put a new file at its path,
    it printed nothing more, whatever was appended, and said nothing. It now says the file was
    replaced and follows the new one after the last position it read."""
    t = ok(db, "new").strip()
    proc = interruptible([THREADLOG, "follow", "--json", "--interval", "0.05", "--after", "1", "--db", str(db)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [got.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        ok(db, "append", t, "--role", "user", "--text", "before")
        assert json.loads(got.get(timeout=60))["data"]["content"][0]["text"] == "before"
        _restored_into_place(db, lambda store: store.append_message(t, "user", "after"))
        assert json.loads(got.get(timeout=60))["data"]["content"][0]["text"] == "after"
    finally:
        _, err = ctrl_c(proc)
    assert proc.returncode == 130 and f"{db} was replaced by another file; following it after position 2" in err, err


def test_follow_stops_where_a_file_put_in_its_place_holds_another_history(db: Path) -> None:
    """A file of another history put at the path (a restore of another backup) was followed as
    if it went on from the old one: its events past the position read were printed as the next."""
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "before")
    proc = subprocess.Popen([THREADLOG, "follow", "--json", "--interval", "0.05", "--after", "2", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # It has opened the file and read to its end once it prints the event after position 2
        # (a second's sleep was not always enough on a busy machine: it then opened the other
        # file first, and followed it as its own).
        ok(db, "append", t, "--role", "user", "--text", "followed")
        assert proc.stdout is not None and select.select([proc.stdout], [], [], 60)[0], "the follower printed nothing"
        assert json.loads(proc.stdout.readline())["position"] == 3
        for path in db.parent.glob(db.name + "*"):
            path.unlink()
        other = ok(db, "new").strip()
        for text in ("another history", "and more", "not printed"):
            ok(db, "append", other, "--role", "user", "--text", text)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1 and out == "", (out, err)
    assert f"{db} was replaced by a file that holds another event at position 3" in err, err
