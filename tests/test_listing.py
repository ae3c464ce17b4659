"""`Store.threads`: newest activity first, paged by `before`, forks included or not, on every
backend; the pages together are exactly the streams in that order, whatever was done."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import ThreadInfo
from eventstore.sqlite import RECENCY_SHIFT
from eventstore.errors import InvalidEvent
from threadlog import Store, StoreError
from threadlog.cli import cli
from tests.backends import BACKENDS, postgres_url

# (0, i): a new thread; (1, i): append to the i-th stream so far; (2, i): fork the i-th stream.
steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), min_size=1, max_size=25)


def _grow(store: Store, steps: list[tuple[int, int]], messages: Callable[[int], int]) -> list[str]:
    """Every thread of `store` after `steps` (`steps` above), oldest first: what earlier examples
    left in this store, then a thread started for (0, i), and for every step when there is
    none (a fork needs a message before it); `messages(i)` messages appended in one batch to
    the i-th for (1, i); the i-th forked for (2, i)."""
    made = [t.id for t in store.all_threads()]
    for action, pick in steps:
        if action == 0 or not made:
            made.append(store.create_thread(title="t"))
            store.append_message(made[-1], "user", "first")
        elif action == 1:
            store.append(made[pick % len(made)], [{"type": "message.appended", "data": {"role": "user", "content": "m"}}]
                         * messages(pick))
        else:
            made.append(store.fork(made[pick % len(made)]))
    return made


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, limit=st.integers(1, 4))
def test_pages_of_threads_are_every_stream_by_latest_activity(store: Store, steps: list[tuple[int, int]],
                                                              limit: int) -> None:
    _grow(store, steps, lambda pick: 1)
    every = sorted(store.all_threads(), key=lambda info: info.last_position, reverse=True)
    for forks in (True, False):
        expected = [info.id for info in every if forks or info.parent_id is None]
        pages: list[str] = []
        before = None
        while True:
            page = store.threads(limit=limit, before=before, forks=forks)
            assert len(page) <= limit
            pages += [info.id for info in page]
            if len(page) < limit:
                break
            before = page[-1].last_position
        assert pages == expected
        assert [info.id for info in store.threads(limit=None, forks=forks)] == expected


# (0, i): a new thread; (1, i): a batch of 200 + 97 * i messages to the i-th stream so far
# (crossing the 1,024-position keys streams are listed by); (2, i): fork the i-th stream.
long_steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12)), min_size=1, max_size=10)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=long_steps, limit=st.integers(1, 5), cuts=st.lists(st.integers(0, 12_000), max_size=6))
def test_listings_stay_in_order_across_long_runs_of_appends(store: Store, steps: list[tuple[int, int]], limit: int,
                                                            cuts: list[int]) -> None:
    """Streams appended to thousands of positions apart, listed whole, in pages, and from any
    `before` (a key's edges included): always by exact latest activity."""
    _grow(store, steps, lambda pick: 200 + 97 * pick)
    every = sorted(store.all_threads(), key=lambda info: info.last_position, reverse=True)
    edges = [1024 * k + d for k in range(1, 12) for d in (-1, 0, 1)]
    for forks in (True, False):
        expected = [info for info in every if forks or info.parent_id is None]
        for before in [*cuts, *edges]:
            want = [info.id for info in expected if info.last_position < before][:limit]
            assert [info.id for info in store.threads(limit=limit, before=before, forks=forks)] == want
        pages: list[str] = []
        before = None
        while page := store.threads(limit=limit, before=before, forks=forks):
            pages += [info.id for info in page]
            before = page[-1].last_position
        assert pages == [info.id for info in expected]


def _ls(db: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A file of 30 threads, each with a fork and some with a fork of the fork, and titles;
    (its path, the root whose subtree is largest)."""
    db = str(tmp_path_factory.mktemp("listed") / "listed.db")
    with Store(db) as store:
        for i in range(30):
            t = store.create_thread(title=f"thread {i}")
            store.append_message(t, "user", "hello")
            f = store.fork(t)
            store.append_message(f, "user", "in the fork")
            if i % 3 == 0:
                store.append_message(store.fork(f), "assistant", "deeper")
            if i % 4 == 0:
                store.append(t, [{"type": "title.set", "data": {"title": f"renamed {i}"}}])
        big = store.create_thread(title="big")
        store.append_message(big, "user", "hello")
        for _ in range(12):
            store.fork(big)
    return db, big


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(1, 120), before=st.none() | st.integers(1, 200), kind=st.sampled_from(["roots", "all", "root"]),
       together=st.integers(1, 9))
def test_ls_read_a_page_at_a_time_prints_what_one_read_prints(listed: tuple[str, str], limit: int, before: int | None,
                                                              kind: str, together: int) -> None:
    """`ls` reads threads `_LISTED_TOGETHER` at a time (a list of 202,000 threads' entries and
    their JSON held 906 MB): the table, the JSON and the next page's hint are those of one read
    of them all, whatever the page size, `-n`, `--before`, `--all` or `--root`."""
    db, big = listed
    args = ["-n", str(limit), *(["--before", str(before)] if before else []),
            *({"roots": [], "all": ["--all"], "root": ["--root", big]}[kind])]
    import threadlog.cli.reading as reading

    answers = []
    for size in (10**6, together):
        saved, reading._LISTED_TOGETHER = reading._LISTED_TOGETHER, size
        try:
            answers.append((_ls(db, *args), _ls(db, *args, "--json")))
        finally:
            reading._LISTED_TOGETHER = saved
    assert answers[0] == answers[1]
    (code, text, hint), (_, as_json, _) = answers[0]
    rows = json.loads(as_json)
    assert code == 0 and len(rows) <= limit
    assert [line.split()[0] for line in text.splitlines()[1:]] == [r["id"] for r in rows]
    with Store(db) as store:
        expected = store.threads(limit + 1, before, forks=kind != "roots", root=big if kind == "root" else None)
    assert [r["id"] for r in rows] == [info.id for info in expected[:limit]]
    more = len(expected) > limit
    assert ("next page" in hint) == more and (not more or f"--before {rows[-1]['last_position']})" in hint), hint


def test_ls_all_as_json_holds_a_page_not_the_file(tmp_path: Path) -> None:
    """5,000 threads: `ls --all --json` peaked at 18.5 MB of Python objects when it held every
    entry and their JSON at once, 7.1 MB a page at a time (2 MB of it the output CliRunner keeps)."""
    import tracemalloc

    db = str(tmp_path / "many.db")
    with Store(db) as store:
        for i in range(2500):
            t = store.create_thread(title=f"t{i}")
            store.append_message(t, "user", "hi")
            store.fork(t)
    tracemalloc.start()
    try:
        code, out, _ = _ls(db, "--all", "-n", "5000", "--json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0 and len(json.loads(out)) == 5000
    assert peak < 11_000_000, f"{peak:,} bytes"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_ls_lists_each_thread_once_where_rows_share_a_last_position_at_a_page_s_end(tmp_path: Path, backend: str) -> None:
    """Raw SQL can give threads one last_position. `ls` reads 1,000 threads at a time, each
    page from where the last ended: the threads tied with the 1,000th were skipped, which one
    read of `-n 2000` (the previous release's) listed."""
    db = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()
    with Store(db) as store:
        made = [store.create_thread(title=f"t{i}") for i in range(1003)]
        tied = store.thread(made[3]).last_position
    # Newest first, made[3] is the 1,000th row: the two after it take its position (all below
    # 1,024, so SQLite's listing key of each stays 0).
    altered = f"UPDATE streams SET last_position = {tied} WHERE id IN ('{made[1]}', '{made[2]}')"
    if backend == "sqlite":
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute(altered)
            conn.commit()
    else:
        import psycopg

        with psycopg.connect(db) as conn:  # committed as the block ends
            conn.execute(altered)
    with Store(db) as store:
        expected = [info.id for info in store.threads(limit=None)]
    assert len(expected) == 1003
    code, out, _ = _ls(db, "-n", "2000", "--json")
    listed = [row["id"] for row in json.loads(out)]
    assert code == 0 and sorted(listed) == sorted(expected), set(expected) - set(listed)
    code, out, _ = _ls(db, "-n", "2000")
    assert code == 0 and sorted(line.split()[0] for line in out.splitlines()[1:]) == sorted(expected)


@pytest.fixture(params=BACKENDS, ids=[case.id for case in BACKENDS])
def raw(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Callable[[str], object]]]:
    """A store on each backend, and how to run raw SQL on its connection (an edit outside threadlog)."""
    backend = request.param.make(tmp_path)
    store = Store(backend)
    yield store, backend.conn.execute
    store.close()


def _tie(sql: Callable[[str], object], ids: list[str], position: int) -> None:
    """Raw SQL gives the threads `ids` one last_position (SQLite's listing key kept in step,
    a column PostgreSQL has not), as only an edit outside threadlog does: the listing must
    still be a total order."""
    listed = ", ".join("'" + thread.replace("'", "''") + "'" for thread in ids)
    edit = f"UPDATE streams SET last_position = {position} WHERE id IN ({listed})"
    try:
        sql(edit.replace(" WHERE", f", recency = {position >> RECENCY_SHIFT} WHERE"))
    except Exception:  # PostgreSQL: no such column (autocommit: nothing was changed)
        sql(edit)


def _listing_order(infos: list[ThreadInfo]) -> list[str]:
    """Newest activity first, threads of one last_position by id, highest first."""
    return [info.id for info in sorted(infos, key=lambda info: (info.last_position, info.id), reverse=True)]


# Groups of threads (indices into those made) given one last_position by raw SQL.
tie_groups = st.lists(st.lists(st.integers(0, 50), min_size=2, max_size=5), max_size=3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), min_size=1, max_size=12), ties=tie_groups)
def test_pages_read_from_the_last_thread_listed_visit_each_thread_once_where_threads_tie(
        raw: tuple[Store, Callable[[str], object]], steps: list[tuple[int, int]], ties: list[list[int]]) -> None:
    """Threads tied at one last_position straddling a page's end: `before=` the last row's
    position skipped those not yet listed; `below=` (its position and id) continues the order
    of one unpaged listing exactly, with every page size, roots only, forks and a subtree."""
    store, sql = raw
    made = _grow(store, steps, lambda pick: 1)
    for group in ties:
        tied = [made[pick % len(made)] for pick in group]
        _tie(sql, tied, store.thread(tied[0]).last_position)
    every = store.all_threads()
    root = max({info.root_id for info in every}, key=lambda r: sum(info.root_id == r for info in every))
    for forks, subtree in ((True, None), (False, None), (True, root)):
        expected = _listing_order([info for info in every if (forks or info.parent_id is None)
                                   and (subtree is None or info.root_id == subtree)])
        assert [info.id for info in store.threads(limit=None, forks=forks, root=subtree)] == expected
        for size in range(1, len(expected) + 1):
            pages: list[str] = []
            below = None
            while page := store.threads(size, forks=forks, root=subtree, below=below):
                assert len(page) <= size
                pages += [info.id for info in page]
                below = (page[-1].last_position, page[-1].id)
            assert pages == expected, size


def _hinted(hint: str) -> str | None:
    """The `--before` value a page's hint on stderr names (quoted for a shell), None without one."""
    import shlex

    found = re.search(r"\(next page: the same command with --before (.*)\)$", hint.strip())
    return None if found is None else shlex.split(found.group(1))[0]


@pytest.mark.parametrize("command", ["ls", "tree"])
def test_following_the_next_page_hint_lists_each_thread_once_where_threads_tie(tmp_path: Path, command: str) -> None:
    """Roots and forks tied at one last_position (raw SQL), ids holding `:`, a space and a
    quote: following each page's hint by hand, with every `-n`, lists every thread once (the
    rows of `--json` with the same `--before`), in the order of one unpaged listing (`ls
    --all`, and `tree`'s roots)."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        roots = [store.create_thread(title=f"r{i}", thread_id=name) for i, name in enumerate(["a:b c", "a:b", "it's", "z", "a"])]
        for root in roots:
            store.append_message(root, "user", "hi")
        forks = [store.fork(roots[0], fork_id=f"f:{i}") for i in range(4)]
        tied, also = store.thread(roots[2]).last_position, store.thread(roots[0]).last_position
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        _tie(conn.execute, roots[1:4] + forks[:3], tied)
        _tie(conn.execute, [roots[0], roots[4]], also)
    with Store(db) as store:
        every = store.all_threads()
    wanted = _listing_order(every if command == "ls" else [info for info in every if info.parent_id is None])
    for size in range(1, len(wanted) + 1):
        listed: list[str] = []
        cursor: str | None = None
        while True:
            args = ["--db", db, command, "--no-pager", *(["--all"] if command == "ls" else []), "-n", str(size),
                    *(["--before", cursor] if cursor else [])]
            text, as_json = (CliRunner().invoke(cli, [*args, *extra]) for extra in ([], ["--json"]))
            assert text.exit_code == as_json.exit_code == 0, text.output + as_json.output
            listed += [row["id"] for row in json.loads(as_json.stdout) if command == "ls" or row["parent_id"] is None]
            cursor = _hinted(text.stderr)
            if cursor is None:
                break
        assert listed == wanted, size


# A stream row's last_position as only raw SQL writes it: SQL for the value, and whether
# PostgreSQL's bigint column can hold it.
ASTRAY = {"text": ("'zz'", False), "null": ("NULL", True), "blob": ("X'00ff'", False),
          "no-bound": (str(2**62), True), "past-every-bound": (str(2**63 - 1), True)}


def _listed_until_refused(store: Store, size: int, forks: bool, said: str) -> list[str]:
    """The ids `Store.threads` listed, `size` a page, each page from right after the last, until
    a page refused (by a message matching `said`, which it must)."""
    listed: list[str] = []
    with pytest.raises(StoreError, match=said):
        below = None
        while page := store.threads(size, forks=forks, below=below):
            listed += [info.id for info in page]
            below = (page[-1].last_position, page[-1].id)
    return listed


@pytest.mark.parametrize("kind", list(ASTRAY))
def test_a_thread_whose_last_position_is_no_position_is_refused_by_name_not_left_out(
        raw: tuple[Store, Callable[[str], object]], kind: str) -> None:
    """A last_position set by raw SQL to text, NULL, a blob or past every position: the
    thread fell out of every listing without a word (`verify` names it). Every page that
    reaches where the listing's index holds it, with any page size, roots only or forks
    too, is refused naming the thread, its column and `threadlog verify`."""
    store, sql = raw
    value, postgres_holds = ASTRAY[kind]
    made = []
    for i in range(12):
        made.append(store.create_thread(title=f"t{i}"))
        store.append_message(made[-1], "user", "hi")
        made.append(store.fork(made[-1]))
    astray = made[10]  # a root in the middle of the listing
    try:
        sql(f"UPDATE streams SET last_position = {value} WHERE id = '{astray}'")
    except Exception:  # PostgreSQL's bigint column refuses the value: no row holds it, none is hidden
        assert not postgres_holds
        assert sorted(info.id for info in store.threads(limit=None)) == sorted(made)
        return
    said = f"the stream row of '{astray}' was altered outside threadlog: its last_position is .*`threadlog verify` names"
    for forks in (True, False):
        with pytest.raises(StoreError, match=said):
            store.threads(limit=None, forks=forks)
        for size in (1, 3, 7, 30):
            assert astray not in _listed_until_refused(store, size, forks, said)


@pytest.mark.parametrize("kind", list(ASTRAY))
def test_ls_and_tree_refuse_a_file_holding_a_thread_whose_last_position_is_no_position(tmp_path: Path, kind: str) -> None:
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        made = [store.create_thread(title=f"t{i}") for i in range(5)]
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(f"UPDATE streams SET last_position = {ASTRAY[kind][0]} WHERE id = '{made[1]}'")
        was = list(conn.iterdump())
    for args in (["ls"], ["ls", "--all", "--json"], ["ls", "-n", "1", "--before", "3"], ["tree"]):
        result = CliRunner().invoke(cli, ["--db", db, *args, "--no-pager"])
        assert result.exit_code == 1 and result.stdout == "", (args, result.output)
        assert re.fullmatch(f"error: the stream row of '{made[1]}' was altered outside threadlog: its last_position is "
                            r".*, not a position; `threadlog verify` names where\n", result.stderr), result.stderr
    verified = CliRunner().invoke(cli, ["--db", db, "verify"])
    assert verified.exit_code != 0 and made[1] in verified.output
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert list(conn.iterdump()) == was


def test_ls_json_cut_short_by_a_refused_row_says_how_many_rows_it_printed(tmp_path: Path) -> None:
    """`ls --json` prints a page of 1,000 threads as it reads it: a row refused on a later page
    (raw SQL gave it no last_position) ended the output with an unclosed array and an error
    that did not say the listing was cut. The array stays unclosed (no JSON reader takes it
    whole), the status is 1, and the error says the listing is incomplete and how many rows
    were printed: exactly the rows before the refused one."""
    import subprocess
    import sys

    db = tmp_path / "t.db"
    with Store(db, synchronous="OFF") as store:
        made = [store.create_thread() for _ in range(2200)]  # positions 1..2200: listing keys 2, 1, 0
        expected = [info.id for info in store.threads(limit=None)]
    astray = made[5]  # under key 0, reached by the second page of 1,000
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(f"UPDATE streams SET last_position = NULL WHERE id = '{astray}'")
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), "ls", "--all", "-n", "5000", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)
    printed = json.loads(done.stdout + "\n]")  # what was printed, closed by hand: the rows before the refused one
    assert [row["id"] for row in printed] == expected[:len(printed)] and len(printed) == 1000
    assert re.fullmatch(f"error: the stream row of '{astray}' was altered outside threadlog: its last_position is None, "
                        r"not a position; `threadlog verify` names where; the listing is incomplete: the JSON array on "
                        r"stdout holds the 1000 rows printed before this error, left unclosed\n", done.stderr), done.stderr


# A stream row's listing key (SQLite's `recency`) as only raw SQL writes it, with or without
# its last_position altered too: SQL for each (None: left as it was).
MISFILED = {"null": ("NULL", None), "text": ("'zz'", None), "blob": ("X'00'", None), "negative": ("-1", None),
            "past-every-key": (str(2**62), None), "null-and-no-position": ("NULL", "NULL"),
            "text-and-no-position": ("'zz'", "'zz'")}


@pytest.mark.parametrize("kind", list(MISFILED))
def test_a_thread_whose_listing_key_is_no_key_is_refused_by_name_not_left_out(tmp_path: Path, kind: str) -> None:
    """Raw SQL setting a stream's listing key (`recency`) to NULL, text, a blob, a negative
    number or past every key put it in no range of `streams_recency` a page reads: `ls`,
    `tree` and `Store.threads` left the thread out, status 0, while `verify` named it. Every
    listing now refuses it by name, and the file is left as it was."""
    db = str(tmp_path / "t.db")
    with Store(db, synchronous="OFF") as store:
        made = [store.create_thread(title=f"t{i}") for i in range(1500)]  # positions 1..1500: keys 1 and 0
    misfiled, (recency, position) = made[1200], MISFILED[kind]
    edit = f"recency = {recency}" + ("" if position is None else f", last_position = {position}")
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(f"UPDATE streams SET {edit} WHERE id = '{misfiled}'")
        was = list(conn.iterdump())
    said = f"the stream row of '{misfiled}' was altered outside threadlog: its (recency|last_position) is .*`threadlog verify` names"
    with Store(db) as store:
        for forks in (True, False):
            for limit, before in ((None, None), (20, None), (20, 300), (2000, None)):
                with pytest.raises(StoreError, match=said):
                    store.threads(limit, before, forks=forks)
    for args in (["ls", "-n", "2000", "--json"], ["ls", "--all"], ["ls", "--before", "300"], ["tree", "-n", "2000"]):
        result = CliRunner().invoke(cli, ["--db", db, *args, "--no-pager"])
        assert result.exit_code == 1 and result.stdout == "", (args, result.output)
        assert re.match(f"error: {said}", result.stderr), result.stderr
    verified = CliRunner().invoke(cli, ["--db", db, "verify"])
    assert verified.exit_code != 0 and misfiled in verified.output
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert list(conn.iterdump()) == was


def test_a_thread_whose_listing_key_is_another_key_is_refused_by_the_pages_that_read_it(tmp_path: Path) -> None:
    """A listing key set by raw SQL to another thread's (the thread last active at 1,201 filed
    under key 0, with those of positions 1..1,023): pages read it out of order, and a page
    ending with it started the next at 1,201, skipping the 299 threads above it under key 1.
    The pages that read it refuse it by name; none lists it, or skips, without a word."""
    db = str(tmp_path / "t.db")
    with Store(db, synchronous="OFF") as store:
        made = [store.create_thread(title=f"t{i}") for i in range(1500)]
    misfiled = made[1200]
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(f"UPDATE streams SET recency = 0 WHERE id = '{misfiled}'")
    said = f"the stream row of '{misfiled}' was altered outside threadlog: its recency is 0, .*`threadlog verify` names"
    with Store(db) as store:
        assert misfiled not in [info.id for info in store.threads(20)]  # key 1's page: not read
        for size in (1, 7, 476, 477, 1000):
            listed: list[str] = []
            with pytest.raises(StoreError, match=said):
                below = None
                while page := store.threads(size, below=below):
                    listed += [info.id for info in page]
                    below = (page[-1].last_position, page[-1].id)
            assert misfiled not in listed and len(listed) == len(set(listed))


# A last_position set by raw SQL to what both backends' columns hold and is no position (SQLite's
# listing key, a column PostgreSQL has not, left as it was): SQL for the value.
NO_POSITION = {"null": "NULL", "negative": "-7", "no-bound": str(2**62), "past-every-bound": str(2**63 - 1)}


def _contents(db: str) -> list[str]:
    """Every row of the SQLite file or PostgreSQL schema `db`, as text: equal lists, an unchanged database."""
    if db.startswith("postgresql://"):
        from eventstore.postgres import PostgresBackend

        backend = PostgresBackend(db)
        try:
            return backend.dump()
        finally:
            backend.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize("kind", list(NO_POSITION))
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_page_that_reaches_a_thread_with_no_position_refuses_it_on_both_backends(
        tmp_path: Path, backend: str, kind: str) -> None:
    """30 threads, one root's last_position set by raw SQL to NULL, a negative number or past
    every position. SQLite keeps the row under its listing key, which every page of these
    threads reaches, and refuses it there; PostgreSQL refused it only on the first page (its
    index puts NULL and the largest numbers first, a negative number last), so `ls --before N`
    and `Store.threads(below=)` past the thread listed the threads around it without a word.
    Every page, roots or forks, from any start, now refuses it by name on both (exit 1,
    nothing printed), and the database is left as it was."""
    db = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()
    with Store(db) as store:
        made = []
        for i in range(15):
            made.append(store.create_thread(title=f"t{i}"))
            store.append_message(made[-1], "user", "hi")
            made.append(store.fork(made[-1]))
            store.append_message(made[-1], "user", "in the fork")
        infos = {info.id: info for info in store.all_threads()}
    altered, past = made[16], infos[made[6]]  # a root in the middle; a thread listed after it
    edit = f"UPDATE streams SET last_position = {NO_POSITION[kind]} WHERE id = '{altered}'"
    if backend == "sqlite":
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute(edit)
    else:
        import psycopg

        with psycopg.connect(db) as pg:  # committed as the block ends
            pg.execute(edit)
    was = _contents(db)
    said = (f"the stream row of '{altered}' was altered outside threadlog: its last_position is .*, not a position; "
            "`threadlog verify` names where")
    with Store(db) as store:
        for forks in (True, False):
            for limit, before, below in ((None, None, None), (5, None, None), (3, past.last_position, None),
                                         (3, 2, None), (None, past.last_position, None),
                                         (3, None, (past.last_position, past.id)), (None, None, (3, made[1]))):
                with pytest.raises(StoreError, match=said):
                    store.threads(limit, before, forks=forks, below=below)
            for size in (1, 4, 30):
                assert altered not in _listed_until_refused(store, size, forks, said)
    for args in (["ls"], ["ls", "--json"], ["ls", "--before", str(past.last_position)],
                 ["ls", "--all", "-n", "2", "--before", f"{past.last_position}:{past.id}", "--json"],
                 ["tree", "--before", str(past.last_position)]):
        result = CliRunner().invoke(cli, ["--db", db, *args, "--no-pager"])
        assert result.exit_code == 1 and result.stdout == "", (args, result.output)
        assert re.fullmatch(f"error: {said}\n", result.stderr), (args, result.stderr)
    assert _contents(db) == was


@pytest.mark.parametrize("thread", ["a\x00b", "\ud800", "x\n", "", "y" * 201])
def test_a_page_below_an_id_no_thread_can_have_is_refused_on_every_backend(
        raw: tuple[Store, Callable[[str], object]], thread: str) -> None:
    """`below=`'s id is a listed thread's: one holding a NUL listed on SQLite and failed on
    PostgreSQL as a database error; a lone surrogate failed as text the file cannot take,
    except for a subtree (`root=`), which listed; a newline or the empty id listed. All are
    refused naming `below`, on every backend, roots, forks and subtrees alike."""
    store, _ = raw
    root = store.create_thread(thread_id="r")
    store.append_message(root, "user", "hi")
    store.fork(root, fork_id="f")
    last = store.thread("r").last_position
    for options in ({}, {"forks": False}, {"root": root}):
        with pytest.raises(InvalidEvent, match=r"^below: "):
            store.threads(10, below=(last, thread), **options)


@pytest.mark.parametrize("value", ["3:x\ny", "3:\x7f", "3:" + "y" * 201])
def test_before_refuses_an_id_no_thread_can_have(tmp_path: Path, value: str) -> None:
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        store.create_thread(thread_id="x")
    for command in ("ls", "tree"):
        result = CliRunner().invoke(cli, ["--db", db, command, "--no-pager", "--before", value])
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert re.search(r"Invalid value for '--before': .*: the thread id (holds .*ids must be printable|must be a string of 1 to 200)",
                         result.stderr.replace("\n", " ")), result.stderr


def test_a_before_with_leading_zeros_is_the_position_it_spells(tmp_path: Path) -> None:
    """Leading zeros were counted as digits: `--before 0000000000000000000005` was refused as
    past the largest position."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        ids = [store.create_thread(title=f"t{i}") for i in range(3)]
        cut = store.thread(ids[1]).last_position
    for value in (str(cut), "0" * 30 + str(cut), "0" * 30 + f"{cut}:{ids[1]}"):
        result = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", "--before", value, "--json"])
        assert result.exit_code == 0, result.output
        assert [row["id"] for row in json.loads(result.stdout)] == [ids[0]], value


def test_a_before_of_thousands_of_digits_is_refused_in_a_short_message(tmp_path: Path) -> None:
    """The refusal named the value whole: 5,000 digits of message for 5,000 digits given."""
    db = str(tmp_path / "t.db")
    Store(db).close()
    for value in ("9" * 5000, "1:" + "x" * 5000):
        result = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", "--before", value])
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert "Invalid value for '--before'" in result.stderr and len(result.stderr) < 1000, result.stderr


def test_a_next_page_hint_naming_an_id_with_invisible_characters_reads_back_in_a_shell(tmp_path: Path) -> None:
    """The hint's id is shown with what could drive a terminal escaped (`\\u202e`), and was
    quoted as it was printed: pasted into a shell, `'8:x\\u202ey'` named the id with a
    backslash in it, and the next page silently skipped the tied threads sorting between
    the two (`xa`). Such an id is now quoted as `$'…'`, whose escapes the shell reads back
    to the id itself: following each hint through bash lists every thread once, in order."""
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to read the hint")
    db = str(tmp_path / "t.db")
    names = ["x\u202ey", "xa", "w", "z\u200b", "q'\u2066\\", "a"]
    with Store(db) as store:
        for name in names:
            store.create_thread(thread_id=name, title=name)
        tied = store.thread("xa").last_position
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        _tie(conn.execute, names[:5], tied)
    with Store(db) as store:
        wanted = _listing_order(store.all_threads())
    listed: list[str] = []
    cursor: str | None = None
    while True:
        result = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", "-n", "1", "--json",
                                          *(["--before", cursor] if cursor else [])])
        assert result.exit_code == 0, result.output
        listed += [row["id"] for row in json.loads(result.stdout)]
        hint = CliRunner().invoke(cli, ["--db", db, "ls", "--no-pager", "-n", "1", *(["--before", cursor] if cursor else [])])
        found = re.search(r"\(next page: the same command with --before (.*)\)$", hint.stderr.strip())
        if found is None:
            break
        assert all(char.isprintable() for char in found.group(1)), found.group(1)
        cursor = subprocess.run([bash, "-c", f"printf %s {found.group(1)}"], capture_output=True, text=True,
                                env={"LC_ALL": "C.UTF-8"}, check=True).stdout
    assert listed == wanted


@pytest.mark.parametrize("command", ["ls", "tree"])
def test_a_json_page_names_no_next_page_and_its_last_row_s_position_and_id_go_on_as_the_help_says(
        tmp_path: Path, command: str) -> None:
    """The help said `--json` "prints both on every row: `--before` the last row's
    `last_position:id` never skips one", and nothing of the hint on stderr, which `--json`
    does not print. It now says so, and what it says holds: with threads tied at a page's
    end (raw SQL), pages of `--json` each started from the last row's (or root's)
    `last_position:id` list every thread once, in order, and stderr stays empty."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        made = [store.create_thread(thread_id=f"r{i}") for i in range(6)]
        tied = store.thread(made[3]).last_position
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        _tie(conn.execute, made[1:5], tied)
    with Store(db) as store:
        wanted = _listing_order(store.all_threads())
    listed: list[str] = []
    cursor: str | None = None
    while True:
        result = CliRunner().invoke(cli, ["--db", db, command, "--no-pager", "-n", "2", "--json",
                                          *(["--before", cursor] if cursor else [])])
        assert result.exit_code == 0 and result.stderr == "", result.output
        rows = json.loads(result.stdout)
        if not rows:
            break
        listed += [row["id"] for row in rows]
        cursor = f"{rows[-1]['last_position']}:{rows[-1]['id']}"
    assert listed == wanted
    shown = " ".join(CliRunner().invoke(cli, [command, "--help"]).stdout.split())
    assert "`--json` prints no such line" in shown and "last_position" in shown
