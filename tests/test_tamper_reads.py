"""Every read path over a file altered with raw SQL: a clear refusal or an answer, never a crash.

One column of one row of `streams` or `events` holds a value of another kind (NULL, a blob,
a number where text was, text where a number was, text that is not UTF-8, a negative or huge
number, a very long string). SQLite keeps whatever it is given, even NULL in a TEXT PRIMARY
KEY, so the readers met these as TypeError, AttributeError or KeyError deep in a projection
or a renderer: a traceback from the CLI. Now each command either answers or prints one
`error:` line (exit 1), each library call answers or raises `StoreError`, no reading
command changes the file, and `verify` names a position.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import blame, diff, display_rows, lineage, thread_state, transcript, usage
from projections.request import anthropic_request
from threadlog import IntegrityError, Store, StoreError
from threadlog.cli import cli
from threadlog.export import export_all, export_events, export_markdown
from threadlog.listing import listing
from tests.backends import file_dump

STREAM_COLUMNS = ("id", "parent_id", "parent_offset", "root_id", "depth", "head", "created_position", "kind",
                  "head_hash", "facts", "first_message_offset", "last_position")
EVENT_COLUMNS = ("position", "stream_id", "offset", "event_id", "type", "schema_version", "data", "meta", "recorded_at",
                 "data_digest", "hash", "pending", "redacted_by")

# A value of each kind, as SQL (so that text that is not UTF-8 can be written at all).
KINDS = {
    "null": "NULL",
    "blob": "X'00ff'",
    "integer": "7",
    "real": "1.5",
    "negative": "-3",
    "huge": str(2**63 - 1),
    "text": "'zz'",
    "not-utf8": "CAST(X'74ff' AS TEXT)",
    "long": "printf('%.*c', 100000, 'x')",
    "json-list": "'[1]'",
}


class Template(NamedTuple):
    path: Path
    checkpoint: str  # of the file before its last few events
    sub: str  # the sub-agent fork's id


def build(s: Store) -> tuple[str, str]:
    """Every kind of row: messages, tool calls and results, a run, an interrupt, a title, a
    fork of a fork, a fan-out and a redaction; (a checkpoint of all but its last few events, the
    sub-agent fork's id). Positions: T's events 1-11, F's 12-13, G's 14-15, then 16-20."""
    t = s.create_thread(title="plain", system="be brief", thread_id="T")
    s.append_message(t, "user", 'a "quoted" word')
    s.append_message(t, "assistant", "déjà vu")
    s.append(t, [{"type": "run.started", "data": {"run_id": "r1"}}])
    s.append_message(t, "assistant", [{"type": "text", "text": "let me look"},
                                      {"type": "tool_use", "id": "tu1", "name": "search", "input": {"q": "x"}}])
    s.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu1", "content": "found"}])
    s.append(t, [{"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
    s.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "i1", "question": "go on?"}}])
    s.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "i1", "answer": "yes"}}])
    s.append(t, [{"type": "title.set", "data": {"title": "renamed"}}])
    secret = s.append_message(t, "user", "my password is hunter2")
    f = s.fork(t, at=9, fork_id="F")
    s.append_message(f, "user", "in the fork")
    g = s.fork(f, fork_id="G")
    s.append_message(g, "user", "in the fork of the fork")
    checkpoint = s.checkpoint()  # `verify --since` checks what follows
    s.append_message(t, "assistant", [{"type": "tool_use", "id": "tu2", "name": "search", "input": {}}])
    sub = s.fan_out(t, directives=["one"])[0]
    s.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu2", "content": "done"}])
    s.redact(secret.position, reason="leak", actor="test")
    s.verify()
    return checkpoint, sub


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A file `build` filled."""
    db = tmp_path_factory.mktemp("tamper") / "template.db"
    with Store(db) as s:
        checkpoint, sub = build(s)
    return Template(db, checkpoint, sub)


def _copy(template: Template, directory: Path) -> Path:
    path = directory / "t.db"
    shutil.copy(template.path, path)
    return path


def _tamper(path: Path, table: str, column: str, row: int, kind: str) -> bool:
    """Set `column` of the `row`-th row (in rowid order) of `table` to a value of `kind`;
    False when SQLite refuses it (a constraint) or it changes nothing."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rowid = conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid LIMIT 1 OFFSET ?", (row,)).fetchone()
        if rowid is None:
            return False
        stored = f'SELECT typeof("{column}"), CAST("{column}" AS BLOB) FROM {table} WHERE rowid = ?'
        before = conn.execute(stored, rowid).fetchone()
        conn.execute(f'UPDATE {table} SET "{column}" = {KINDS[kind]} WHERE rowid = ?', rowid)
        return bool(before != conn.execute(stored, rowid).fetchone())
    except sqlite3.IntegrityError:
        return False
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commands(checkpoint: str, sub: str) -> dict[str, list[str]]:
    """The reading commands (`search` writes its index, so it is run apart)."""
    return {
        "ls": ["ls"], "ls-all-json": ["ls", "--all", "--json"], "ls-root": ["ls", "--root", "T"],
        "tree": ["tree"], "tree-all": ["tree", "--all"], "tree-G": ["tree", "G", "--json"],
        "show-G": ["show", "G"], "show-T-json": ["show", "T", "--json"], "show-sub": ["show", sub],
        "log-G": ["log", "G"], "log-T-json": ["log", "T", "--json"],
        "rows-G": ["rows", "G"], "rows-T": ["rows", "T", "--json"],
        "transcript-G": ["transcript", "G"], "transcript-T": ["transcript", "T"],
        "blame-G": ["blame", "G"], "diff": ["diff", "T", "G"], "usage": ["usage", "T"],
        "request-G": ["request", "G"], "request-T": ["request", "T", "--json"],
        "export-G": ["export", "G"], "export-all": ["export", "--all"],
        "export-markdown": ["export", "T", "--format", "markdown"], "export-anthropic": ["export", "G", "--format", "anthropic"],
        "verify": ["verify"], "verify-json": ["verify", "--json"], "verify-since": ["verify", "--since", checkpoint],
        "checkpoint": ["checkpoint"], "last": ["show", "@last"],
    }


def run_command(path: Path | str, args: list[str]) -> None:
    """Run one command: it answers (exit 0), or refuses with one `error:` line (exit 1)."""
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"threadlog {' '.join(args)} crashed") from result.exception
    assert result.exit_code in (0, 1), (args, result.exit_code, result.output)
    if result.exit_code == 1 and args[0] != "verify":
        assert result.output.count("error:") == 1 and "Traceback" not in result.output, result.output
    if result.exit_code == 1 and args[:2] == ["verify", "--since"]:
        assert "error: integrity check failed at " in result.output, result.output
    if result.exit_code == 1 and args == ["verify"]:
        assert "error: integrity check failed at position " in result.output, result.output
    if result.exit_code == 1 and args == ["verify", "--json"]:
        assert isinstance(json.loads(result.output)["position"], int), result.output


LIBRARY: dict[str, Callable[[Store, str], Any]] = {
    "threads": lambda s, sub: s.threads(None),
    "threads-root": lambda s, sub: s.threads(root="T"),
    "all-threads": lambda s, sub: s.all_threads(),
    "listing": lambda s, sub: listing(s, s.threads(None)),
    "subtree": lambda s, sub: s.subtree("T"),
    "ancestry": lambda s, sub: s.ancestry("G"),
    "title": lambda s, sub: [s.title(t) for t in ("T", "F", "G", sub)],
    "count": lambda s, sub: s.count("G", "message.appended"),
    "pending": lambda s, sub: s.pending_tool_uses("T"),
    "read": lambda s, sub: list(s.read("G")) + list(s.read(sub)),
    "read-all": lambda s, sub: list(s.read_all()),
    "read-data": lambda s, sub: list(s.read_data("T")),
    "event-at": lambda s, sub: [s.event_at("G", n) for n in range(s.head("G"))],
    "state": lambda s, sub: [thread_state(s, t).to_json() for t in ("T", "G", sub)],
    "state-at": lambda s, sub: thread_state(s, "G", 5).to_json(),
    "rows": lambda s, sub: display_rows(s, "G"),
    "transcript": lambda s, sub: transcript(s, "T"),
    "request": lambda s, sub: anthropic_request(s, "G"),
    "usage": lambda s, sub: usage(s, "T"),
    "lineage": lambda s, sub: (lineage(s, "G"), blame(s, "G"), diff(s, "T", "G")),
    "export": lambda s, sub: (list(export_events(s, "G")), list(export_all(s)), export_markdown(s, "T")),
    "checkpoint": lambda s, sub: s.checkpoint(),
}


def run_library(path: Path | str, name: str, sub: str) -> None:
    """One library call on a read-only store: it answers or raises `StoreError`."""
    with Store(path, read_only=True) as store:
        try:
            LIBRARY[name](store, sub)
        except StoreError:
            pass


def check_verify(path: Path | str) -> None:
    """`verify` passes (the value changed nothing hashed or checked) or names a position."""
    with Store(path, read_only=True) as store:
        try:
            store.verify()
        except IntegrityError as error:
            assert isinstance(error.position, int), error
            # in the user's words, not the name of the Python exception that read the value
            assert not re.search(r"[A-Z][a-z]+(Decode)?Error|object has no attribute", str(error)), error


TABLES = st.sampled_from([("streams", c) for c in STREAM_COLUMNS] + [("events", c) for c in EVENT_COLUMNS])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=TABLES, row=st.integers(0, 22), kind=st.sampled_from(list(KINDS)), which=st.data())
def test_a_value_of_another_kind_anywhere_is_read_or_refused_clearly(
        template: Template, tmp_path_factory: pytest.TempPathFactory, where: tuple[str, str], row: int,
        kind: str, which: st.DataObject) -> None:
    table, column = where
    path = _copy(template, tmp_path_factory.mktemp("t"))
    if table == "streams":
        row %= 5
    if not _tamper(path, table, column, row, kind):
        return
    before = _digest(path)
    cli_commands = commands(template.checkpoint, template.sub)
    name = which.draw(st.sampled_from(sorted(cli_commands) + [f"lib:{n}" for n in sorted(LIBRARY)] + ["verify"]))
    if name.startswith("lib:"):
        run_library(path, name[4:], template.sub)
    elif name == "verify":
        check_verify(path)
    else:
        run_command(path, cli_commands[name])
    assert _digest(path) == before, f"{name} changed the file"


# What each did before, found by the test above: (table, row's key, column, value as SQL, command, what the
# refusal names). Every one is now a one-line `error:` (exit 1).
FOUND = {
    "ls-stream-id-null": ("streams", "T", "id", "NULL", ["ls"], "its id is None, not text"),  # "thread None not found"
    "tree-parent-offset-text": ("streams", "F", "parent_offset", "'zz'", ["tree"], "its parent_offset is 'zz'"),  # TypeError
    "show-head-text": ("streams", "T", "head", "'zz'", ["show", "T"], "its head is 'zz'"),  # TypeError
    "ls-root-last-position-null": ("streams", "F", "last_position", "NULL", ["ls", "--root", "T"],
                                   "its last_position is None"),  # TypeError
    "ls-json-kind-blob": ("streams", "F", "kind", "X'00ff'", ["ls", "--all", "--json"], "its kind is b'\\x00\\xff'"),  # TypeError
    "tree-root-id-unknown": ("streams", "G", "root_id", "'zz'", ["tree", "G"], "names 'zz' as its root"),  # "thread 'zz' not found"
    "log-data-blob": ("events", 2, "data", "X'00ff'", ["log", "T"], "position 2 cannot be read: its data is b'"),  # AttributeError
    "show-data-number": ("events", 2, "data", "7", ["show", "T"], "its data is int JSON, not an object"),  # TypeError
    "show-version-negative": ("events", 2, "schema_version", "-3", ["show", "T"], "its schema_version is -3"),  # KeyError
    "rows-meta-number": ("events", 2, "meta", "7", ["rows", "T"], "its meta is int JSON"),  # AttributeError
    "rows-event-id-number": ("events", 2, "event_id", "7", ["rows", "T"], "its event_id is 7, not text"),  # TypeError
    "export-type-blob": ("events", 2, "type", "X'00ff'", ["export", "--all"], "its type is b'\\x00\\xff'"),  # TypeError
    "search-position-huge": ("events", 2, "position", str(2**63 - 1), ["search", "found"],
                             "position 9223372036854775807 cannot be indexed"),  # OverflowError
}


@pytest.mark.parametrize("case", list(FOUND.values()), ids=list(FOUND))
def test_each_value_found_is_refused_naming_it(template: Template, tmp_path: Path, case: tuple[Any, ...]) -> None:
    table, key, column, value, args, named = case
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(f'UPDATE {table} SET "{column}" = {value} WHERE {"id" if table == "streams" else "position"} = ?', (key,))
    conn.commit()
    conn.close()
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1 and named in result.output, result.output


def test_usage_of_a_fork_whose_depth_was_altered_answers(template: Template, tmp_path: Path) -> None:
    """`threadlog usage` indented each row by its depth: a huge one raised OverflowError. A depth
    has no bound to check it against (forks of forks at offset 1 nest without growing), so the
    table indents at most one level a row."""
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE streams SET depth = {2**63 - 1} WHERE id = 'F'")
    conn.commit()
    conn.close()
    result = CliRunner().invoke(cli, ["--db", str(path), "usage", "T"])
    assert result.exit_code == 0 and "F" in result.output, result.output


def test_a_fork_point_past_the_fork_s_head_is_refused_by_every_reader(template: Template, tmp_path: Path) -> None:
    """G forks F at 11 and holds offsets 11-12. With its parent_offset moved past its head, readers
    took its whole history from F: `show`, `log` and `transcript` printed G without its own
    messages (and `request` blamed an offset it was never given); a fork point at 0 was already
    refused. Now each names the row and column, and verify the position."""
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE streams SET parent_offset = 20 WHERE id = 'G'")
    conn.commit()
    conn.close()
    for args in (["show", "G"], ["log", "G"], ["transcript", "G"], ["request", "G", "--model", "m"], ["rows", "G"],
                 ["export", "G"], ["tree"], ["ls", "--all"]):
        result = CliRunner().invoke(cli, ["--db", str(path), *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code == 1, (args, result.output)
        assert result.output == ("error: the stream row of 'G' was altered outside threadlog: its parent_offset is 20, "
                                 "not a fork point at or below its head 13; `threadlog verify` names where\n"), args
    with Store(path, read_only=True) as store, pytest.raises(IntegrityError) as failed:
        store.verify()
    assert failed.value.position == 14


# Text that is not UTF-8 in a stream row: the driver refused to read the row, and verify ended
# with a StoreError naming no position (`threadlog verify` printed no position either).
@pytest.mark.parametrize(("key", "column", "position"), [("F", "id", 1), ("T", "parent_id", 1), ("F", "root_id", 1),
                                                          ("G", "kind", 1), ("T", "head_hash", 1), ("T", "facts", 1)],
                         ids=["id", "parent_id", "root_id", "kind", "head_hash", "facts"])
def test_a_stream_row_holding_text_that_is_not_utf8_is_named_by_verify(template: Template, tmp_path: Path, key: str,
                                                                       column: str, position: int) -> None:
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE streams SET {column} = CAST(X'74ff' AS TEXT) WHERE id = ?", (key,))
    conn.commit()
    conn.close()
    with Store(path, read_only=True) as store, pytest.raises(IntegrityError) as failed:
        store.verify()
    assert isinstance(failed.value.position, int)
    result = CliRunner().invoke(cli, ["--db", str(path), "verify"])
    assert result.exit_code == 1 and "integrity check failed at position " in result.output, result.output
    with Store(path, read_only=True) as store, pytest.raises(StoreError):  # named, not a driver error
        store.thread(key if column != "id" else "F")


# `verify --since` over the events after the checkpoint (positions 16..20: a tool call at 16 that
# the sub-agent fork at 17 forks after, the redaction of position 11 at 20). Each raised a
# TypeError or AttributeError, or a StoreError naming no position.
SINCE = {
    "new-event-not-utf8": ("UPDATE events SET meta = CAST(X'7bff7d' AS TEXT) WHERE position = 18", 18),
    "fork-point-not-utf8": ("UPDATE events SET data = CAST(X'7b22ff227d' AS TEXT) WHERE position = 16", 16),
    "root-parent-offset-blob": ("UPDATE streams SET parent_offset = X'00ff' WHERE id = 'T'", 16),
    "redaction-data-blob": ("UPDATE events SET data = CAST(data AS BLOB) WHERE position = 20", 20),
    "redacted-row-data-blob": ("UPDATE events SET data = CAST(data AS BLOB) WHERE position = 11", 11),
    "redacted-row-stream-id-not-utf8": ("UPDATE events SET stream_id = CAST(X'74ff' AS TEXT) WHERE position = 11", 11),
}


@pytest.mark.parametrize("case", list(SINCE.values()), ids=list(SINCE))
def test_verify_since_names_the_altered_position(template: Template, tmp_path: Path, case: tuple[str, int]) -> None:
    statement, position = case
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()
    with Store(path, read_only=True) as store, pytest.raises(IntegrityError) as failed:
        store.verify(since=template.checkpoint)
    assert failed.value.position == position, failed.value
    result = CliRunner().invoke(cli, ["--db", str(path), "verify", "--since", template.checkpoint])
    assert result.exit_code == 1 and f"integrity check failed at position {position}:" in result.output, result.output


# Writes to a stream whose head or head_hash holds a value of another kind: numbering the batch
# raised TypeError, inserting a head past SQLite's integers OverflowError, hashing a blob head_hash
# TypeError. Now each is refused before anything is written.
@pytest.mark.parametrize(("column", "value"), [("head", "'zz'"), ("head", "X'00ff'"), ("head", str(2**63 - 1)),
                                               ("head_hash", "X'00ff'")], ids=["head-text", "head-blob", "head-huge", "hash-blob"])
@pytest.mark.parametrize("args", [["append", "T", "--role", "user", "--text", "hi"], ["emit", "T", "title.set", "--data", '{"title": "x"}'],
                                  ["redact", "2", "--reason", "r", "--actor", "a"], ["interrupt", "raise", "T", "q1"]],
                         ids=["append", "emit", "redact", "interrupt"])
def test_a_write_to_a_stream_whose_head_was_altered_is_refused(template: Template, tmp_path: Path, column: str, value: str,
                                                               args: list[str]) -> None:
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE streams SET {column} = {value} WHERE id = 'T'")
    conn.commit()
    conn.close()
    before = file_dump(path)
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1 and "error: the head stored for 'T' cannot be appended to" in result.output, result.output
    assert file_dump(path) == before


@pytest.mark.parametrize("position", [1, 6], ids=["thread.created", "a message"])
def test_data_that_is_not_json_is_named_by_its_position_and_show_prints_nothing_first(tmp_path: Path, position: int) -> None:
    """`thread_state` (and `show`) said "an event cannot be read" where every other reader
    names the position, and `show` printed half the state before its error."""
    db = tmp_path / "t.db"
    assert CliRunner().invoke(cli, ["--db", str(db), "demo"]).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET data = '{bad json' WHERE position = ?", (position,))
    conn.close()
    with Store(db) as store:
        with pytest.raises(StoreError, match=rf"^the event at position {position} cannot be read: its stored data"):
            thread_state(store, "demo-trip-to-lyon").messages
    shown = CliRunner().invoke(cli, ["--db", str(db), "show", "demo-trip-to-lyon"])
    assert shown.exit_code == 1 and shown.stdout == "", shown.stdout
    assert shown.stderr.startswith(f"error: the event at position {position} cannot be read"), shown.stderr


def test_blame_of_a_fork_whose_parent_was_renamed_under_a_snapshot_is_refused(tmp_path: Path) -> None:
    """A fork's snapshot holds the parent's compaction; with the fork's parent_id renamed, the
    compaction's event no longer reads, and `threadlog blame` raised StopIteration out of a
    generator: a RuntimeError traceback. Its parent is then a thread the file does not hold,
    and the read of its history is refused as that of a fork whose parent's row is gone."""
    path = tmp_path / "a.db"
    with Store(path) as store:
        t = store.create_thread(title="trip")
        store.append_message(t, "user", "Find me a train")
        store.append_message(t, "assistant", "The 9am")
        store.append(t, [{"type": "compaction.recorded", "data": {"summary": "a train", "through_offset": 3}}])
        f = store.fork(t)
        store.append_message(f, "user", "and back?")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(path), "snapshot", f]).exit_code == 0
    conn = sqlite3.connect(path)
    conn.execute("UPDATE streams SET parent_id = 'elsewhere' WHERE id = ?", (f,))
    conn.commit()
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for args in (["blame", f], ["blame", f, "--json"]):
        result = runner.invoke(cli, ["--db", str(path), *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr == (f"error: thread '{f}' is forked from 'elsewhere', which is not in the file: its first 4 "
                                 "events cannot be read (that thread's row was deleted, or the fork's parent_id altered, "
                                 "outside threadlog); `threadlog verify` names where\n"), args
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


HOLES = {
    # (SQL, the thread read, the first offset missing, the thread whose it is when not the one read)
    "inherited": ('DELETE FROM events WHERE stream_id = \'T\' AND "offset" = 3', "G", 3, "T"),
    "own-tail": ('DELETE FROM events WHERE stream_id = \'G\' AND "offset" = 12', "G", 12, None),
    "fork-point-lowered": ("UPDATE streams SET parent_offset = 9 WHERE id = 'G'", "G", 9, None),  # 9..10 are F's
}


@pytest.mark.parametrize("hole", list(HOLES))
def test_a_history_with_a_hole_is_refused_by_every_reader_naming_the_offsets(template: Template, tmp_path: Path,
                                                                            hole: str) -> None:
    """An event deleted with raw SQL, or a fork point lowered below the fork's first own event:
    `read`, every projection and `show`, `log`, `transcript` gave the history without those
    offsets and said nothing (only `verify` found it). Now each names the missing offsets; what
    lies before them still reads, and no reader changes the file."""
    sql, thread, first, owner = HOLES[hole]
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    before = _digest(path)
    whose = f" [^;]*\\(it belongs to '{owner}', a thread it is forked from\\)" if owner else ""
    said = re.compile(rf"thread '(?P<read>\w)' cannot be read whole: its events? at offsets? {first}\b{whose}.*"
                      "`threadlog verify` names where")
    with Store(path, read_only=True) as store:
        for name, call in {
            "read": lambda: list(store.read(thread)), "read_data": lambda: list(store.read_data(thread)),
            "read_raw": lambda: list(store.read_raw(thread)), "thread_state": lambda: thread_state(store, thread).to_json(),
            "transcript": lambda: transcript(store, thread), "request": lambda: anthropic_request(store, thread),
            "rows": lambda: display_rows(store, thread), "export": lambda: list(export_events(store, thread)),
        }.items():
            with pytest.raises(StoreError) as refused:
                call()
            found = said.search(str(refused.value)) if name != "export" else re.search(
                rf"thread '{owner or thread}' cannot be read whole: its events? at offsets? {first}\b", str(refused.value))
            assert found and (name == "export" or found["read"] == thread), (name, str(refused.value))
        assert [e.offset for e in store.read(thread, 0, first)] == list(range(first))
        with pytest.raises(IntegrityError):
            store.verify()
    for args in (["show", thread], ["log", thread], ["transcript", thread], ["rows", thread]):
        result = CliRunner().invoke(cli, ["--db", str(path), *args])
        # `log` streams: the events before the hole, then the refusal as its last line
        last = result.output.splitlines()[-1] if args[0] == "log" else result.output
        assert result.exit_code == 1 and last.startswith("error: ") and said.search(last), (args, result.output)
    assert _digest(path) == before


def test_an_offset_altered_to_a_fraction_is_named_as_no_offset(template: Template, tmp_path: Path) -> None:
    """An offset of 2.5 sorts between 2 and 3, and the hole check read it as the end of a range of
    missing offsets: `its events at offsets 3..1.5 are missing`."""
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute('UPDATE events SET "offset" = 3.5 WHERE stream_id = \'T\' AND "offset" = 3')
    conn.commit()
    conn.close()
    with Store(path, read_only=True) as store:
        for read in (store.read, store.read_data, store.read_raw):
            with pytest.raises(StoreError) as refused:
                list(read("T"))
            assert str(refused.value) == ("thread 'T' cannot be read whole: the event after offset 2 of 'T' is stored at offset "
                                          "3.5, not an offset (an integer); the row was altered outside threadlog, and "
                                          "`threadlog verify` names where")
