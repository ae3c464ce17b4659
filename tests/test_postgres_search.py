"""Search on PostgreSQL: the same history restored into both backends gives the same hits
(ranking aside: `ts_rank` is not BM25), whatever text the events and the queries hold."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import textindex
from threadlog import Store, export_all, import_events, rebuild_index, search
from threadlog.cli import cli as main_cli
from threadlog.export import dump_lines
from projections.search import tools_in_other_case
from tests.backends import postgres_url


def _history(store: Store) -> str:
    t = store.create_thread(title="Ferry trip", thread_id="trip")
    store.append_message(t, "user", "Is there a ferry to Corsica from Nice?", event_id="e1")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"cmd": "ferry --to ajaccio"}}],
                         event_id="e2")
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu1", "content": "ferry at 08:00"}],
                         event_id="e3")
    f = store.fork(t, 2, fork_id="fork", event_id="e4")
    store.append_message(f, "user", "And a ferry back on Sunday?", event_id="e5")
    return f


def _hits(store: Store, query: str, **scope: Any) -> list[tuple[object, ...]]:
    return sorted((h.thread, h.title, h.stream, h.offset, h.position, h.role, h.kind, h.tool, h.time)
                  for h in search(store, query, limit=50, **scope))


def test_the_same_history_gives_the_same_hits_on_both_backends(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as lite, Store(postgres_url()) as pg:
        fork = _history(lite)
        backup = tmp_path / "all.jsonl"
        backup.write_text("".join(dump_lines(export_all(lite))), encoding="utf-8")
        import_events(pg, backup)
        for query, scope in [("ferry", {}), ("ferry", {"thread": fork}), ("corsica", {}), ("ajaccio", {"tool": "Bash"}),
                             ("trip", {})]:
            found = _hits(pg, query, **scope)
            assert found and found == _hits(lite, query, **scope), (query, scope)
        assert all("**" in hit.snippet for hit in search(pg, "ferry"))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_tool_named_in_another_case_is_found_in_the_searched_history(tmp_path: Path, backend: str) -> None:
    """The names a search's hint offers for `tool="bash"` where the calls are of `Bash`: the
    same on both backends, within the history searched."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        fork = _history(store)
        other = store.create_thread(thread_id="other")
        store.append_message(other, "user", "and the ferry?")
        store.append_message(other, "assistant", [{"type": "tool_use", "id": "tu9", "name": "BASH", "input": {"cmd": "ls"}}])
        assert search(store, "ferry", tool="bash") == []
        assert tools_in_other_case(store, "bash") == ["BASH", "Bash"]
        assert tools_in_other_case(store, "bash", "trip") == ["Bash"]
        assert tools_in_other_case(store, "bash", fork) == []  # forked below the call
        assert tools_in_other_case(store, "Bash") == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_text_holding_nul_is_indexed_and_found(tmp_path: Path, backend: str) -> None:
    """PostgreSQL text cannot hold U+0000, which events may (their JSON escapes it): the index
    takes it as the word separator it is on SQLite, in what it indexes and in what it is asked."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as pg:
        t = pg.create_thread(title="Trip\x00Lyon")
        pg.append_message(t, "user", "ferry\x00corsica", event_id="e1")
        pg.append_message(t, "assistant", [{"type": "tool_use", "id": "tu1", "name": "Ba\x00sh", "input": {"cmd": "ls\x00-la"}}],
                          event_id="e2")
        assert [h.offset for h in search(pg, "corsica")] == [1]
        assert [h.offset for h in search(pg, "ferry\x00corsica")] == [1]
        assert [h.kind for h in search(pg, "la", tool="Ba\x00sh")] == ["tool_use"]
        assert [h.kind for h in search(pg, "lyon")] == ["title"]
        assert search(pg, "\x00") == []
        for match in ("words", "any"):  # plain words: the query's U+0000 separates them too
            hits = textindex.search(pg, "ferry\x00corsica", match, None, limit=10)
            assert [h.offset for h in hits] == [1], match


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_words_after_a_nul_in_a_query_count(tmp_path: Path, backend: str) -> None:
    """FTS5 reads a query up to its first U+0000: `ferry\\x00sardinia` found every ferry on
    SQLite, the Corsican one too, where PostgreSQL (a space for it) found the Sardinian one."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "a ferry to corsica")
        store.append_message(t, "user", "a ferry to sardinia")
        assert [h.offset for h in search(store, "ferry\x00sardinia")] == [2]
        assert sorted(h.offset for h in search(store, "corsica\x00OR sardinia")) == [1, 2]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_hit_names_a_tool_holding_nul_as_the_log_does(tmp_path: Path, backend: str) -> None:
    """The index holds a space for U+0000, but a hit (`search --json`'s `tool`) names the tool of a
    call and of its result as the log does: PostgreSQL gave `"Ba sh"` where SQLite gave `"Ba\\u0000sh"`."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "list the files")
        for call, tool, listing in (("tu1", "Ba\x00sh", "notes.txt"), ("tu2", "Ba sh", "plan.txt")):
            store.append_message(t, "assistant", [{"type": "tool_use", "id": call, "name": tool, "input": {"cmd": "ls"}}])
            store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": call, "content": f"ls: {listing}"}])
        assert sorted((h.kind, h.tool) for h in search(store, "ls")) == sorted(
            [("tool_result", "Ba sh"), ("tool_result", "Ba\x00sh"), ("tool_use", "Ba sh"), ("tool_use", "Ba\x00sh")])
        assert [h.tool for h in search(store, "notes")] == ["Ba\x00sh"]
        assert [h.tool for h in search(store, "plan")] == ["Ba sh"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_document_naming_no_event_is_named_not_dropped(tmp_path: Path, backend: str) -> None:
    """A hit is joined to its event (for its time): a document whose position holds no event,
    which only raw SQL writes, silently dropped out of every search."""
    import sqlite3

    import psycopg

    from eventstore.errors import StoreError

    target = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()
    with Store(target) as store:
        t = store.create_thread(title="Trip")
        store.append_message(t, "user", "a ferry to corsica")
        assert [h.offset for h in search(store, "corsica")] == [1]
    alter = "UPDATE search_docs SET position = 99999 WHERE kind = 'text'"
    if backend == "sqlite":
        with sqlite3.connect(target) as conn:
            conn.execute(alter)
    else:
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(alter)
    with Store(target) as store:
        with pytest.raises(StoreError, match="a document names position 99999, where no event is.*threadlog index --rebuild"):
            search(store, "corsica")
        rebuild_index(store)
        assert [h.offset for h in search(store, "corsica")] == [1]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_index_whose_progress_was_moved_back_is_named_and_left_as_it_was(tmp_path: Path, backend: str) -> None:
    """With its progress moved back, a catch-up wrote documents the index already held: SQLite
    refused a second row under one key and sent the user to `verify`, which passes (it never
    reads the index); PostgreSQL said another writer stored the key, and to retry."""
    import sqlite3

    import psycopg

    from eventstore.errors import StoreError

    target = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()
    with Store(target) as store:
        t = store.create_thread(title="Trip")
        store.append_message(t, "user", "a ferry to corsica")
        assert [h.offset for h in search(store, "corsica")] == [1]
        store.append_message(t, "user", "and back from corsica")
    def run(statement: str) -> list[tuple[Any, ...]]:
        if backend == "sqlite":
            with sqlite3.connect(target) as lite:
                return lite.execute(statement).fetchall()
        with psycopg.connect(target, autocommit=True) as pg:
            cursor = pg.execute(statement)
            return cursor.fetchall() if cursor.description else []

    run("UPDATE search_progress SET position = 1 WHERE name = 'index'")
    index = "SELECT d.docid, d.text, p.position FROM search_docs d, search_progress p ORDER BY d.docid"
    before = run(index)
    with Store(target) as store:
        with pytest.raises(StoreError, match=r"search index was altered outside threadlog \(it holds documents of position 2 "
                                             r"and says it covers positions up to 1\).*threadlog index --rebuild"):
            search(store, "corsica")
        assert run(index) == before  # nothing written
        store.verify()  # the log is intact: only the cache was altered
        rebuild_index(store)
        assert [h.offset for h in search(store, "corsica")] == [1, 2]


# Documents removed or copied by raw SQL (`{first}`: the docid of the first message's text), by
# backend. A search gave fewer hits than the log holds (a document removed, the newest left in
# place; on SQLite, both of its tables emptied together), and a copy gave its hit twice.
DOC_TAMPERS = {
    "sqlite": {
        "both-emptied": ["INSERT INTO search_fts (search_fts) VALUES ('delete-all')", "DELETE FROM search_docs"],
        "removed-below-the-newest": ["INSERT INTO search_fts (search_fts, rowid, text) SELECT 'delete', docid, text FROM "
                                     "search_docs WHERE docid = {first}", "DELETE FROM search_docs WHERE docid = {first}"],
        "document-removed": ["DELETE FROM search_docs WHERE docid = {first}"],
        "fts-entry-removed": ["INSERT INTO search_fts (search_fts, rowid, text) SELECT 'delete', docid, text FROM "
                              "search_docs WHERE docid = {first}"],
        "copied": ["INSERT INTO search_docs SELECT docid + 1, position, stream_id, \"offset\", kind, role, tool, text "
                   "FROM search_docs WHERE docid = {first}",
                   "INSERT INTO search_fts (rowid, text) SELECT docid, text FROM search_docs WHERE docid = {first} + 1"],
    },
    "postgresql": {
        "emptied": ["DELETE FROM search_docs"],
        "removed-below-the-newest": ["DELETE FROM search_docs WHERE docid = {first}"],
        "copied": ["INSERT INTO search_docs (docid, position, stream_id, \"offset\", kind, role, tool, text) SELECT docid + 1, "
                   "position, stream_id, \"offset\", kind, role, tool, text FROM search_docs WHERE docid = {first}"],
    },
}


@pytest.mark.parametrize("backend, name", [(backend, name) for backend, tampers in DOC_TAMPERS.items() for name in tampers],
                         ids=[f"{backend}-{name}" for backend, tampers in DOC_TAMPERS.items() for name in tampers])
def test_documents_removed_or_copied_are_named_never_fewer_hits_nor_one_twice(tmp_path: Path, backend: str, name: str) -> None:
    """With nothing appended since, no catch-up runs: the search answered from what was left.
    On PostgreSQL a search refuses an emptied index; what needs a count of the documents (80 ms
    a million, too much for each search) `threadlog index` (`Store.check_index`) refuses."""
    tamper = DOC_TAMPERS[backend][name]
    import sqlite3

    import psycopg

    from eventstore.errors import StoreError

    target = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()

    def run(statement: str) -> list[tuple[Any, ...]]:
        if backend == "sqlite":
            with sqlite3.connect(target) as lite:
                rows = lite.execute(statement).fetchall()
            lite.close()
            return rows
        with psycopg.connect(target, autocommit=True) as pg:
            cursor = pg.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []

    with Store(target) as store:
        t = store.create_thread(title="Trip", thread_id="t")
        for text in ("a ferry to corsica", "the ferry leaves at eight", "a ferry back on sunday"):
            store.append_message(t, "user", text)
        assert sorted(h.offset for h in search(store, "ferry", limit=10)) == [1, 2, 3]
    ((first,),) = run("SELECT min(docid) FROM search_docs WHERE kind = 'text'")
    for statement in tamper:
        run(statement.format(first=first))
    index = "SELECT d.docid, d.text, p.name, p.position FROM search_docs d, search_progress p ORDER BY d.docid, p.name"
    before = run(index)
    altered = "search index was altered outside threadlog .*threadlog index --rebuild"
    with Store(target) as store:
        if backend == "postgresql" and name != "emptied":  # what a search does not count (80 ms a million), `threadlog index` does
            hits = search(store, "ferry", limit=10)
            assert len({h.offset for h in hits}) == len(hits), hits  # never one twice
            with pytest.raises(StoreError, match=altered):
                store.check_index()
        else:
            with pytest.raises(StoreError, match=altered):
                search(store, "ferry", limit=10)
        assert run(index) == before  # nothing written
        store.verify()  # the log is intact: only the cache was altered
    with Store(target) as store:
        store.append_message(t, "user", "one more ferry")  # for `index` to catch up: not before its check
    cli = CliRunner().invoke(main_cli, ["index", "--db", target])
    assert cli.exit_code == 1 and re.search(altered, cli.stderr), cli.stderr
    assert run(index) == before
    with Store(target) as store:
        rebuild_index(store)
        store.check_index()
        assert sorted(h.offset for h in search(store, "ferry", limit=10)) == [1, 2, 3, 4]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_emptied_index_is_named_in_the_same_words_by_search_and_index(tmp_path: Path, backend: str) -> None:
    """On PostgreSQL a search said an emptied index `holds none` and `threadlog index` that it
    `holds 0`, and SQLite said its engine's index `holds 0`: one sentence on both, file unchanged."""
    import sqlite3

    import psycopg

    target = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()
    with Store(target) as store:
        t = store.create_thread(title="Trip", thread_id="t")
        for text in ("a ferry to corsica", "the ferry leaves at eight"):
            store.append_message(t, "user", text)
        search(store, "ferry")
    if backend == "sqlite":
        with sqlite3.connect(target) as lite:
            lite.execute("INSERT INTO search_fts (search_fts) VALUES ('delete-all')")
            lite.execute("DELETE FROM search_docs")
        lite.close()
    else:
        with psycopg.connect(target, autocommit=True) as pg:
            pg.execute(b"DELETE FROM search_docs")
    said = "error: the search index was altered outside threadlog (the documents it wrote number 3, and it holds none); " \
           "rebuild it from the log with `threadlog index --rebuild`\n"
    with Store(target) as store:
        before = (list(export_all(store)), store.index_position())
    for command in (["search", "ferry"], ["index"]):
        cli = CliRunner().invoke(main_cli, [*command, "--db", target])
        assert (cli.exit_code, cli.stderr) == (1, said), command
    with Store(target) as store:
        assert (list(export_all(store)), store.index_position()) == before


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_index_an_earlier_release_built_is_searched_and_counted_on_its_next_catch_up(tmp_path: Path, backend: str) -> None:
    """An index built before it kept a count of its documents has none to compare: searched as it
    is, it is counted once by the next catch-up, and checked from then on."""
    import sqlite3

    import psycopg

    from eventstore.errors import StoreError

    target = str(tmp_path / "t.db") if backend == "sqlite" else postgres_url()

    def run(statement: str) -> None:
        if backend == "sqlite":
            with sqlite3.connect(target) as lite:
                lite.execute(statement)
            lite.close()
        else:
            with psycopg.connect(target, autocommit=True) as pg:
                pg.execute(statement.encode())

    with Store(target) as store:
        t = store.create_thread(title="Trip", thread_id="t")
        store.append_message(t, "user", "a ferry to corsica")
        assert [h.offset for h in search(store, "ferry")] == [1]
    run("DELETE FROM search_progress WHERE name = 'documents'")
    with Store(target) as store:
        assert [h.offset for h in search(store, "ferry")] == [1]
        store.append_message(t, "user", "a ferry back")
        assert sorted(h.offset for h in search(store, "ferry")) == [1, 2]
    run("DELETE FROM search_docs WHERE position = (SELECT min(position) FROM search_docs WHERE kind = 'text')")
    with Store(target) as store, pytest.raises(StoreError, match="search index was altered outside threadlog"):
        if backend == "postgresql":  # what a search there does not count (80 ms a million)
            assert [h.offset for h in search(store, "ferry")] == [2]
        store.check_index()


# Raw SQL on PostgreSQL's index tables, and whether a search can tell (a column of words no longer
# generated from the text is only empty: the rebuild mends it all the same).
TABLE_TAMPERS = {
    "docs-dropped": ("DROP TABLE search_docs", True),
    "progress-dropped": ("DROP TABLE search_progress", True),
    "progress-row-removed": ("DELETE FROM search_progress", True),
    "words-dropped": ("ALTER TABLE search_docs DROP COLUMN tsv", True),
    "words-not-generated": ("ALTER TABLE search_docs DROP COLUMN tsv; ALTER TABLE search_docs ADD COLUMN tsv tsvector", False),
}


@pytest.mark.parametrize("tamper, named", list(TABLE_TAMPERS.values()), ids=list(TABLE_TAMPERS))
def test_an_index_whose_tables_were_altered_is_named_and_a_rebuild_makes_them_again(tamper: str, named: bool) -> None:
    """SQLite names an index whose tables raw SQL dropped or altered, and `index --rebuild` makes
    them again. PostgreSQL said "relation search_docs does not exist" (`verify` too, which never
    reads the index), and the rebuild failed the same way, or (the progress row removed)
    succeeded and left the index saying it covers nothing, so every search sent the user to
    rebuild it again."""
    import psycopg
    from click.testing import CliRunner

    from threadlog.cli import cli

    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="trip", thread_id="t")
        for i in range(5):
            store.append_message(thread, "user" if i % 2 else "assistant", f"train to lyon {i}")
        assert search(store, "lyon")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(tamper.encode())
    with Store(url) as store:
        store.append_message("t", "user", "a bike on the lyon train")
    runner = CliRunner()
    verified = runner.invoke(cli, ["--db", url, "verify"])
    assert verified.exit_code == 0, verified.output
    if named:
        for args in (["search", "lyon"], ["search", "lyon", "--json"]):
            result = runner.invoke(cli, ["--db", url, *args])
            assert result.exit_code == 1, result.output
            assert "the search index was altered outside threadlog" in result.output
            assert "threadlog index --rebuild" in result.output and "Traceback" not in result.output
    rebuilt = runner.invoke(cli, ["--db", url, "index", "--rebuild"])
    assert rebuilt.exit_code == 0, rebuilt.output
    with Store(url) as store:
        store.append_message("t", "user", "and a bike back")
        for _ in range(2):  # the second search reads what the first one's catch-up recorded
            assert sorted(hit.offset for hit in search(store, "bike")) == [6, 7]
            assert len(search(store, "lyon", limit=50)) == 6


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_text_longer_than_a_tsvector_holds_is_indexed_and_search_goes_on(tmp_path: Path, backend: str) -> None:
    """A 1.35 MB tool output of distinct words made PostgreSQL refuse its tsvector ("string is
    too long for tsvector"): that search and every later one failed, the index stuck before it.
    It is indexed in parts now, each word found, and what follows it too."""
    import random
    import string

    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(150_000)]
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread(title="big")
        store.append_message(t, "user", "\n".join(" ".join(words[i:i + 10]) for i in range(0, len(words), 10)))
        store.append_message(t, "user", "needle")
        assert [h.offset for h in search(store, "needle")] == [2]
        for word in (words[0], words[75_000], words[-1]):
            assert {h.offset for h in search(store, word)} == {1}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_long_event_matching_in_every_piece_is_one_hit(tmp_path: Path, backend: str) -> None:
    """On PostgreSQL a text indexed in pieces matched once a piece: `ferry` 120,000 times came
    back as five hits of one event, and the other thread that says it was left out of `-n 5`."""
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        big = store.create_thread(title="big")
        store.append_message(big, "user", "ferry " * 120_000)
        small = store.create_thread(title="small")
        store.append_message(small, "user", "one ferry to Corsica")
        hits = search(store, "ferry", limit=5)
        assert sorted((h.stream, h.offset) for h in hits) == sorted([(big, 1), (small, 1)])
        # The documents of one event stay hits of their own: its text and its call.
        store.append_message(small, "assistant", [{"type": "text", "text": "I will grep for the ferry"},
                                                  {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "grep ferry a"}}])
        assert sorted((h.kind, h.tool) for h in search(store, "grep", limit=5)) == [("text", None), ("tool_use", "Bash")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_each_tool_result_of_a_message_is_a_hit_of_its_own(tmp_path: Path, backend: str) -> None:
    """A hit is a document: a message's text, each call, each result. PostgreSQL gave one hit
    for all the results of one tool in a message (two `ls` outputs alike, or two unlike, were
    one), SQLite one each; a long text's pieces stay one hit beside them."""
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread(title="twice")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": f"c{n}", "name": "Bash", "input": {"cmd": "ls"}}
                                              for n in range(4)])
        store.append_message(t, "user", [
            {"type": "tool_result", "tool_use_id": "c0", "content": "ferry.txt"},
            {"type": "tool_result", "tool_use_id": "c1", "content": "ferry.txt"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "ferry " * 60_000},
            {"type": "tool_result", "tool_use_id": "c3", "content": "a ferry timetable"}])
        hits = search(store, "ferry", limit=10)
        assert sorted((h.offset, h.kind, h.tool) for h in hits) == [(2, "tool_result", "Bash")] * 4
        assert len(search(store, "ferry", limit=3)) == 3
        assert len(search(store, "ferry", tool="Bash", limit=10)) == 4
        assert sorted(h.snippet for h in hits if "timetable" in h.snippet or "txt" in h.snippet) == \
            ["**ferry**.txt", "**ferry**.txt", "a **ferry** timetable"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_long_text_without_spaces_is_cut_between_words_not_inside_one(tmp_path: Path, backend: str) -> None:
    """PostgreSQL indexes a text over 100,000 characters in pieces, cut at a space, tab or
    newline, else at the 100,000th character: minified JSON, a comma-separated dump, had the word
    there cut in two, so it was not found and its two halves were (on SQLite, neither is). The
    rest of a word too long to index (over 2,047 bytes there) made a word of its own too."""
    import random
    import string

    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=11)) for _ in range(10_000)]
    text = ",".join(words)
    start = text.rindex(",", 0, 100_000) + 1  # the word across the 100,000th character
    cut = words[start // 12]
    assert text[start:start + 11] == cut and start < 100_000 - 1
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread(title="big")
        store.append_message(t, "user", text)
        store.append_message(t, "user", "y" * 100_000 + "ystub tail")
        assert [h.offset for h in search(store, cut)] == [1]
        assert search(store, cut[: 100_000 - start]) == search(store, cut[100_000 - start:]) == []
        assert [h.offset for h in search(store, "tail")] == [2] and search(store, "ystub") == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_snippet_shows_each_run_of_whitespace_as_one_space(tmp_path: Path, backend: str) -> None:
    """SQLite's own snippet of a short text kept its newlines and tabs ("Bash\\ncommand: ls
    **ferry**"), where a snippet threadlog cuts (PostgreSQL's, and SQLite's of a long text)
    shows one space for each run of them: a JSON consumer got other text from each backend."""
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "  line one\nferry\t\tthere\u2028end\n")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls ferry"}}])
        assert sorted(h.snippet for h in search(store, "ferry")) == ["Bash command: ls **ferry**",
                                                                     "line one **ferry** there end"]


def test_a_snippet_of_a_long_text_shows_where_it_is_cut_on_both_backends(tmp_path: Path) -> None:
    """PostgreSQL indexes a text over 100,000 characters in pieces, and cut a hit's snippet from
    the piece that matched: of 3 million characters then `ferry tail`, "**ferry** tail", with no
    "…" before it, read as the whole text, where SQLite showed the characters before the match."""
    text = "x" * 300_000 + " ferry tail " + "y" * 300_000 + " boat"
    snippets = []
    for target in (tmp_path / "a.db", postgres_url()):
        with Store(target) as store:
            t = store.create_thread()
            store.append_message(t, "user", text)
            snippets.append([(h.snippet, h.offset) for h in search(store, "tail")] + [(h.snippet, h.offset) for h in search(store, "boat")])
    assert snippets[0][0][0].startswith("…x") and " ferry **tail** y" in snippets[0][0][0]
    assert snippets[1] == snippets[0]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_nul_in_an_events_json_fails_neither_search_nor_a_snapshots_save(tmp_path: Path, backend: str) -> None:
    """PostgreSQL's jsonb refuses `\\u0000`, which an actor or a redaction's reason can hold: the
    search read the hit's time through it, and a snapshot's save the redaction's position."""
    with Store(tmp_path / "a.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread(title="x")
        store.append_message(t, "user", "findme", actor="bot\x00", occurred_at="2026-01-02T03:04:05Z")
        hits = search(store, "findme")
        assert [(h.offset, h.time) for h in hits] == [(1, "2026-01-02T03:04:05Z")]
        as_of = store.last_position()
        secret = store.append_message(t, "user", "secret")
        store.redact(secret.position, reason="pii\x00", actor="ops\x00")
        store.save_snapshot("p", 1, t, 1, {"n": 1}, as_of=as_of)  # a redaction since `as_of`, of a later offset
        assert store.nearest_snapshot("p", 1, t, 3) == (1, {"n": 1})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_snippet_of_text_holding_nul_keeps_the_words_around_it(tmp_path: Path, backend: str) -> None:
    """FTS5's snippet of "before\\x00 nulsecretword after" cut the text at the U+0000: searched for
    "after", it read "before**after**"."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "before\x00 nulsecretword after")
        # (PostgreSQL's snippet keeps the space in place of U+0000 and the one after it)
        assert [" ".join(h.snippet.split()) for h in search(store, "after")] == ["before nulsecretword **after**"]
        assert [" ".join(h.snippet.split()) for h in search(store, "nulsecretword")] == ["before **nulsecretword** after"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_snippet_shows_a_short_text_whole_and_marks_where_a_long_one_is_cut(tmp_path: Path, backend: str) -> None:
    """PostgreSQL's `ts_headline` showed "**9998** about the fjord" for "message number 9998 about
    the fjord" (its first words left out, unmarked), and a fragment of a long text with no "…"
    where it was cut: either read as the message's whole text."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "message number 9998 about the fjord")
        words = [f"w{i}" for i in range(60)]
        store.append_message(t, "user", " ".join([*words[:30], "ferry", *words[30:]]))
        assert [h.snippet for h in search(store, "9998")] == ["message number **9998** about the fjord"]
        (cut,) = [h.snippet for h in search(store, "ferry")]
        assert cut.startswith("…") and cut.endswith("…") and "w29 **ferry** w30" in cut, cut


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_snippet_near_the_end_of_a_short_text_shows_it_whole(tmp_path: Path, backend: str) -> None:
    """Cut from the text, a snippet began three words before the match and ended in "…" at a
    full stop, and after "…" where only "## " was left out: "…seven eight nine **ferry**" of a
    ten-word message, "Take a **hat**…", "…Plan: take the **boat**."."""
    with Store(tmp_path / "t.db" if backend == "sqlite" else postgres_url()) as store:
        t = store.create_thread()
        store.append_message(t, "user", "one two three four five six seven eight nine ferry")
        store.append_message(t, "user", "Take a hat.")
        assert [h.snippet for h in search(store, "ferry")] == ["one two three four five six seven eight nine **ferry**"]
        assert [h.snippet for h in search(store, "hat")] == ["Take a **hat**."]
        store.append_message(t, "user", "## Plan: take the boat.")
        assert [h.snippet for h in search(store, "boat")] == ["## Plan: take the **boat**."]


# Texts as agents write them, and a query each: FTS5's unicode61 tokenizer on SQLite splits
# every run of letters and digits into a word (case and Latin accents folded), where
# PostgreSQL's parser kept a path, a file name, a URL, an address or a version whole and left
# out a markup tag, so none of these was found there.
_SPLIT_TEXTS = [
    "<thinking>Check the ferry first</thinking>",
    "edit foo.py and then bar.txt",
    "the file is in a/b/c/notes.md",
    "mail ana@example.com about it",
    "see https://docs.example.org/guide/intro?x=1",
    "rename snake_case to CamelCase",
    "released v1.2.3 yesterday",
    "<tool_use_error>File not found</tool_use_error>",
    "Une ÉCOLE à Nice, près de la mer",
    "/home/ana/src/main.py:12: error",
]
_SPLIT_QUERIES = ["thinking", "foo", "py", "notes", "ana", "example", "com", "host", "docs", "guide", "intro", "snake",
                  "case", "v1", "2", "tool_use_error", "use", "ecole", "école", "PRES", "main.py", "src/main.py",
                  '"a b c"', "foo.py", 'ferry OR "foo.py"', "<thinking>", "guide/intro", "ana@example.com"]


@pytest.mark.parametrize("match", ["query", "words", "any"])
def test_words_inside_paths_tags_and_addresses_are_found_on_both_backends(tmp_path: Path, match: str) -> None:
    with Store(tmp_path / "a.db") as lite, Store(postgres_url()) as pg:
        for store in (lite, pg):
            t = store.create_thread(title="split", thread_id="split")
            for n, text in enumerate(_SPLIT_TEXTS):
                store.append_message(t, "user", text, event_id=f"e{n}")
            search(store, "ferry")  # the index caught up
        for query in _SPLIT_QUERIES:
            hits = {store: sorted(h.offset for h in textindex.search(store, query, match, None, limit=50))
                    for store in (lite, pg)}
            assert hits[pg] == hits[lite], (query, match)
        assert [h.offset for h in search(pg, "thinking")] == [1]
        assert [h.offset for h in search(pg, "notes")] == [3]
        # PostgreSQL's own query syntax still reads: `-` and `or` (FTS5's are `NOT` and `OR`).
        assert [h.offset for h in search(pg, "-foo.py ferry")] == [1]
        assert sorted(h.offset for h in search(pg, "ferry or foo.py")) == [1, 2]


def _made_by_schema_1(url: str) -> None:
    """Give the database the search column of schema 1, whose words PostgreSQL's parser split."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("ALTER TABLE search_docs DROP COLUMN tsv")
        conn.execute("ALTER TABLE search_docs ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED")
        conn.execute("CREATE INDEX search_tsv ON search_docs USING gin (tsv)")
        conn.execute("UPDATE threadlog_schema SET version = 1")


def _search_table(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(
            "SELECT t::text FROM search_docs t UNION ALL SELECT v::text FROM threadlog_schema v "
            "UNION ALL SELECT indexdef FROM pg_indexes WHERE tablename = 'search_docs' ORDER BY 1").fetchall()]


def test_a_database_of_schema_1_is_migrated_and_finds_the_split_words() -> None:
    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="split")
        for text in _SPLIT_TEXTS:
            store.append_message(t, "user", text)
        search(store, "ferry")
    _made_by_schema_1(url)
    with Store(url) as store:
        assert store.schema_version() == 2
        assert [h.offset for h in search(store, "notes")] == [3]  # indexed before the migration
        assert [h.offset for h in search(store, "thinking")] == [1]
        store.append_message(t, "user", "and <thinking>again</thinking>")
        assert sorted(h.offset for h in search(store, "thinking")) == [1, 11]


def test_a_migration_refused_or_failed_leaves_the_database_as_it_was() -> None:
    import psycopg

    from eventstore.errors import SchemaTooOld, StoreError

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="split")
        store.append_message(t, "user", "edit foo.py")
        search(store, "ferry")
    _made_by_schema_1(url)
    before = _search_table(url)
    with pytest.raises(SchemaTooOld, match="schema version 1: open it writable once to migrate it"):
        Store(url, read_only=True)
    assert _search_table(url) == before
    # Another session reading the search table: the migration waits for its lock, gives up, and
    # rolls back.
    with psycopg.connect(url) as reader:
        reader.execute("SELECT count(*) FROM search_docs")
        with pytest.raises(StoreError, match="stayed locked by another writer"):
            Store(url, timeout=1)
    assert _search_table(url) == before
    with Store(url) as store:
        assert [h.offset for h in search(store, "py")] == [1]


def test_a_server_without_icu_splits_the_words_with_the_databases_own_collation() -> None:
    """A PostgreSQL built without ICU has no collation "und-x-icu": the search table, which
    named it, could not be created, and no threadlog database could be made there."""
    from tests.backends import postgres_cluster

    postgres_url()  # the cluster started (or the test skipped)
    cluster = postgres_cluster()
    cluster.execute("DROP DATABASE IF EXISTS threadlog_no_icu")
    cluster.execute("CREATE DATABASE threadlog_no_icu")
    try:
        cluster.execute('DROP COLLATION pg_catalog."und-x-icu"', database="threadlog_no_icu")
        with Store(cluster.url("threadlog_no_icu")) as store:
            t = store.create_thread(title="split")
            for text in _SPLIT_TEXTS:
                store.append_message(t, "user", text)
            assert [h.offset for h in search(store, "notes")] == [3]
            assert [h.offset for h in search(store, "thinking")] == [1]
            assert [h.offset for h in search(store, "ecole")] == [9]  # the cluster's locale is C.UTF-8
    finally:
        cluster.execute("DROP DATABASE threadlog_no_icu WITH (FORCE)")


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "EUC_JIS_2004"])
def test_a_database_in_an_encoding_icu_does_not_take_gets_a_store(encoding: str) -> None:
    """ICU's collation is in every database of a server built with it, but unusable in the
    encodings ICU does not take: SQL_ASCII (what initdb gives a cluster under the C locale),
    EUC_JIS_2004. `threadlog init` there failed with 'collation "und-x-icu" for
    encoding "SQL_ASCII" does not exist (SQLSTATE 42704)', and no store could be made.
    (MULE_INTERNAL is refused by the server itself: it converts none of it to UTF8.)"""
    with _database_in(encoding, "threadlog") as url, Store(url) as store:
        t = store.create_thread(title="split")
        store.append_message(t, "user", "Read src/notes.md first")
        store.append_message(t, "user", "Then the ferry timetable")
        assert [h.offset for h in search(store, "notes")] == [1]
        assert [h.offset for h in search(store, "FERRY")] == [2]
        store.verify()


@contextlib.contextmanager
def _database_in(encoding: str, prefix: str) -> Iterator[str]:
    """The URL of a new database of the test cluster in `encoding` (C collation), dropped after."""
    from tests.backends import postgres_cluster

    postgres_url()  # the cluster started (or the test skipped)
    cluster = postgres_cluster()
    name = f"{prefix}_{encoding.lower()}"
    cluster.execute(f"DROP DATABASE IF EXISTS {name}")
    cluster.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        yield cluster.url(name)
    finally:
        cluster.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "EUC_JIS_2004", "LATIN1"])
def test_a_thread_named_beyond_ascii_is_searched_within_its_history_in_any_encoding(encoding: str) -> None:
    """A scope is bound as one JSON array: its thread ids written as `\\u` escapes, which a
    database in SQL_ASCII cannot read ("conversion between UTF8 and SQL_ASCII is not
    supported"), so a search within a thread named beyond ASCII, or of its fork, failed
    as a database error there; the ids are sent as the text they are."""
    with _database_in(encoding, "threadlog_scope") as url, Store(url) as store:
        t = store.create_thread(title="Trip", thread_id="Café-trip")
        store.append_message(t, "user", "the ferry timetable")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "c1", "name": "Grep", "input": {"q": "boat"}}])
        store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": "no ferry"}])
        fork = store.fork(t, fork_id="Café-fork")
        store.append_message(fork, "user", "the ferry again")
        assert [h.offset for h in search(store, "ferry", thread=t)] == [1, 3]
        assert sorted(h.offset for h in search(store, "ferry", thread=fork)) == [1, 3, 5]
        assert [h.offset for h in search(store, "ferry", thread=fork, ancestors=False)] == [5]
        assert [h.offset for h in search(store, "ferry", thread=fork, tool="Grep")] == [3]
        assert tools_in_other_case(store, "grep", thread=fork) == ["Grep"]


@pytest.mark.parametrize("match", ["words", "any"])
def test_a_word_of_thousands_of_parts_is_searched_on_both_backends(tmp_path: Path, match: str) -> None:
    """A message's text is a retrieval's plain-words query: one word of 20,000 parts (a CSV
    line, minified code) was one phrase of as many words, which PostgreSQL failed to build
    ("database error: stack depth limit exceeded"); an `ask` on it failed."""
    long_word = ",".join(str(n) for n in range(20_000))
    with Store(tmp_path / "a.db") as lite, Store(postgres_url()) as pg:
        for store in (lite, pg):
            t = store.create_thread(title="split", thread_id="split")
            store.append_message(t, "user", f"the numbers {long_word}", event_id="e0")
            store.append_message(t, "user", "a ferry to corsica", event_id="e1")
            search(store, "ferry")  # the index caught up
        for query in (long_word, f"ferry {long_word}", "x-" * 20_000):
            hits = {store: sorted(h.offset for h in textindex.search(store, query, match, None, limit=50))
                    for store in (lite, pg)}
            assert hits[pg] == hits[lite], (query[:20], match)
        assert [h.offset for h in textindex.search(pg, long_word, match, None, limit=5)] == [1]
