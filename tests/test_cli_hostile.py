"""The CLI fed what a hostile or careless user types: a refusal is one short `error:` line,
exit status 1, and no file changed or left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import Store, StoreError, export_events, import_claude_code, thread_state
from threadlog.export import dump_lines
from threadlog.importers.lines import BadLine
from threadlog.cli import cli
from tests.backends import file_dump

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PI = next((FIXTURES / "pi").rglob("*.jsonl"))


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


REFUSED_INTO_A_NEW_FILE = [
    ("new-text-not-utf8", ["new", "--title", "caf\udce9"], None),
    ("import-events-not-json", ["import", "events", "{file}"], b"not json\n"),
    ("import-events-not-an-export", ["import", "events", "{file}"], b'{"format": "other"}\n'),
    ("import-pi-bad-line", ["import", "pi", "{file}"], b"{\n"),
    ("import-claude-code-bad-line", ["import", "claude-code", "{file}"], b'{"type": "user"}\n'),
]


@pytest.mark.parametrize(("args", "content"), [c[1:] for c in REFUSED_INTO_A_NEW_FILE], ids=[c[0] for c in REFUSED_INTO_A_NEW_FILE])
def test_a_command_refused_leaves_no_new_database_behind(tmp_path: Path, args: list[str], content: bytes | None) -> None:
    source = tmp_path / "session.jsonl"
    if content is not None:
        source.write_bytes(content)
    db = tmp_path / "typo.db"
    code, out, err = invoke("--db", str(db), *(a.replace("{file}", str(source)) for a in args))
    if content is None:  # text that is not UTF-8: a usage error naming the option, before anything opens
        assert code == 2 and out == "" and "Invalid value for '--title': is not UTF-8 text" in err, (code, out, err)
    else:
        assert code == 1 and out == "" and err.startswith("error: ") and len(err.splitlines()) == 1, (code, out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["session.jsonl"] if content is not None else [])


def test_a_command_refused_on_an_existing_empty_database_keeps_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    Store(db).close()
    code, _, _ = invoke("--db", str(db), "new", "--title", "caf\udce9")
    assert code == 2 and db.is_file()
    code, out, _ = invoke("--db", str(db), "init", "--json")
    assert code == 0 and json.loads(out)["threads"] == 0


def test_an_import_refused_by_its_last_file_writes_none_of_the_files_before_it(tmp_path: Path) -> None:
    """Every file is checked before the first is written: a bad line in the last one leaves
    the database exactly as it was (the good files before it were written, and stayed)."""
    good = tmp_path / "a.jsonl"
    good.write_bytes(PI.read_bytes())
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(b"{\n")
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(title="kept"), "user", "hello")
    before = file_dump(db)
    code, _, err = invoke("--db", str(db), "import", "pi", str(good), str(bad))
    assert code == 1 and len(err.splitlines()) == 1 and err.startswith(f"error: {bad}:1: not JSON"), err
    assert "before it were imported" not in err
    assert file_dump(db) == before
    code, out, _ = invoke("--db", str(db), "import", "pi", "--skip-bad", "--json", str(good), str(bad))
    _, alone, _ = invoke("--db", str(tmp_path / "alone.db"), "import", "pi", "--json", str(good))
    assert code == 0 and json.loads(out)["added"] == json.loads(alone)["added"] > 0  # the good file whole


def _pi_session(path: Path, session: str, turns: int) -> None:
    """A finished pi session of `turns` questions and answers, last written an hour ago."""
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session, "timestamp": "2026-01-01T00:00:00.000Z",
                                    "cwd": "/tmp"}]
    for i in range(2 * turns):
        message: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": f"line {i}"}], "timestamp": 1767225600000}
        if i % 2:
            message.update(role="assistant", provider="anthropic", model="claude-x", stopReason="stop")
        lines.append({"type": "message", "id": f"e{i}", "parentId": f"e{i - 1}" if i else None,
                      "timestamp": "2026-01-01T00:00:01.000Z", "message": message})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    os.utime(path, (time.time() - 3600,) * 2)


def test_ctrl_c_in_the_middle_of_an_import_says_what_it_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the second of two sessions was being written printed `interrupted` alone,
    though the first session and the second's first write were committed and stay: a user
    took the import for undone. The note names what is kept, and importing again finishes it."""
    from threadlog.importers.plan import stable_id

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _pi_session(first, "s-a", 2)
    _pi_session(second, "s-b", 2)
    db = tmp_path / "t.db"
    append_prepared = Store.append_prepared
    writes: list[str] = []

    def interrupted(self: Store, thread: str, *args: Any, **kwargs: Any) -> Any:
        if writes.count(thread) == 1 and thread == stable_id("pi", "s-b"):  # the second session's second write
            raise KeyboardInterrupt
        writes.append(thread)
        return append_prepared(self, thread, *args, **kwargs)

    monkeypatch.setattr(Store, "append_prepared", interrupted)
    code, _, err = invoke("--db", str(db), "import", "pi", str(first), str(second))
    assert code == 130
    assert err == (f"interrupted; the 1 file(s) before it were imported (5 event(s) added) and 1 event(s) of {second} were "
                   "written; importing again adds only what is missing\n")
    with Store(db) as store:
        assert store.counts().events == 6
    monkeypatch.undo()
    code, out, _ = invoke("--db", str(db), "import", "pi", "--json", str(first), str(second))
    assert code == 0 and json.loads(out)["added"] == 4


@pytest.mark.parametrize("session", ["-experiments-ideas/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl", "dag/dag_compact_after_rewind.jsonl"],
                         ids=["file-history-snapshot-first", "user-line-first"])
def test_a_claude_code_session_given_to_the_pi_importer_names_the_right_one(tmp_path: Path, session: str) -> None:
    """`import pi` of a Claude Code session said only that a pi file starts with a session
    header, and to fix or delete that line (or skip it): a good session, named to the wrong
    importer. The refusal names the importer to run, as `import claude-code` of a pi
    session does, and leaves no database behind."""
    db = tmp_path / "t.db"
    code, out, err = invoke("--db", str(db), "import", "pi", str(FIXTURES / "claude-code" / session))
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert "for a Claude Code session, run `threadlog import claude-code`" in err and not db.exists()


@pytest.mark.parametrize("text", ["", "  \n"], ids=["empty", "blank"])
def test_append_of_an_empty_text_is_refused_and_writes_nothing(tmp_path: Path, text: str) -> None:
    """`threadlog append T --role user --text "$MSG"` with MSG unset recorded a blank message,
    for good (the log is never rewritten), which no request sends; `ask` refuses one. It is a
    usage error now, and the file is left as it was."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread(title="t")
    before = file_dump(db)
    code, out, err = invoke("--db", str(db), "append", thread, "--role", "user", "--text", text)
    assert code == 2 and out == "" and "Invalid value for --text: is empty: give the message text" in err, err
    assert file_dump(db) == before


def test_lines_skipped_are_named_in_the_order_of_the_file(tmp_path: Path) -> None:
    """--skip-bad named a line that is no JSON object (found as the file is read) before one
    of the wrong shape above it (found as each record is checked): `skipped F:3`, then
    `F:2`. They are named in the file's order, in the text and in --json alike."""
    head = {"timestamp": "2025-06-14T11:00:00Z", "parentUuid": None, "isSidechain": False, "cwd": "/tmp", "sessionId": "s",
            "version": "1.0.0"}
    lines = [{**head, "type": "user", "uuid": "u1", "message": {"role": "user", "content": "hello"}},
             {**head, "type": "user", "uuid": "u2", "message": "error"}, 42]
    session = tmp_path / "s.jsonl"
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    os.utime(session, (time.time() - 3600,) * 2)
    code, out, err = invoke("--db", str(tmp_path / "t.db"), "import", "claude-code", "--skip-bad", str(session))
    assert code == 0, err
    assert [line.split(": ")[0] for line in out.splitlines() if line.startswith("skipped")] == [f"skipped {session}:2",
                                                                                                f"skipped {session}:3"]
    code, out, err = invoke("--db", str(tmp_path / "t.db"), "import", "claude-code", "--skip-bad", "--json", str(session))
    assert code == 0 and [bad["line"] for bad in json.loads(out)["bad"]] == [2, 3], err


def test_a_mistyped_interrupt_id_is_refused_naming_those_pending(tmp_path: Path) -> None:
    """`threadlog interrupt resolve T q2` for the pending q1 said only that q2 is not pending:
    the user went to `interrupt list` to find the id. The refusal names what is pending (or
    that nothing is), and the file is left as it was."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread(title="t")
        store.append(thread, [{"type": "interrupt.raised", "data": {"interrupt_id": "q1", "question": "Which train?"}}])
    before = file_dump(db)
    code, _, err = invoke("--db", str(db), "interrupt", "resolve", thread, "q2", "--answer", "08:00")
    assert code == 1 and err == ("error: INTERRUPT_ID: interrupt 'q2' is not pending in this thread "
                                 "(pending: 'q1')\n"), err
    assert file_dump(db) == before
    assert invoke("--db", str(db), "interrupt", "resolve", thread, "q1", "--answer", "08:00")[0] == 0
    code, _, err = invoke("--db", str(db), "interrupt", "cancel", thread, "q1")
    assert code == 1 and err.endswith("interrupt 'q1' is not pending in this thread (no interrupt is)\n"), err


def test_an_interrupt_on_a_tool_call_not_waiting_is_refused_naming_those_waiting(tmp_path: Path) -> None:
    """`threadlog interrupt raise T q --tool-use-id ID` was recorded for any ID: one mistyped, or
    of a call already answered, left the human's answer to be the result of no call. The refusal
    names the calls waiting for their results, and the file is left as it was."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread(title="t")
        store.append_message(thread, "user", "book a train")
        store.append_message(thread, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
                                                   {"type": "tool_use", "id": "toolu_2", "name": "book", "input": {}}])
        store.append_message(thread, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "08:00, 09:00"}])
    before = file_dump(db)
    for answered_or_mistyped in ("toolu_1", "toolu_3"):
        code, out, err = invoke("--db", str(db), "interrupt", "raise", thread, "q1", "--question", "Which train?",
                                "--tool-use-id", answered_or_mistyped)
        assert (code, out) == (1, ""), (code, out, err)
        assert err == (f"error: --tool-use-id: tool_use '{answered_or_mistyped}' is not waiting for its result "
                       "in this thread (pending: 'toolu_2'); an interrupt's tool_use_id names the waiting call its answer "
                       "becomes the result of\n"), err
        assert file_dump(db) == before
    code, _, err = invoke("--db", str(db), "interrupt", "raise", thread, "q1", "--question", "Which train?",
                          "--tool-use-id", "toolu_2")
    assert code == 0, err
    with Store(db) as store:
        assert [i["tool_use_id"] for i in thread_state(store, thread).pending_interrupts] == ["toolu_2"]


def _conflicting(store: Store, session: Path) -> None:
    """A thread under the id the session's import would give its thread, not imported from it."""
    from threadlog.importers.plan import stable_id

    store.create_thread(thread_id=stable_id("claude-code", session.stem))


def test_a_refused_claude_code_session_writes_nothing_or_notes_what_was_written(tmp_path: Path) -> None:
    """A bad line, or a thread in the way, in the second of two sessions: nothing is written.
    With --skip-bad the sessions are written as they are read; the one in the way is refused
    then, and the error notes what the one before it wrote."""
    session = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / session.name).write_bytes(session.read_bytes())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "bad.jsonl").write_bytes(b"[]\n")
    with Store(tmp_path / "t.db") as store:
        with pytest.raises(BadLine) as caught:
            import_claude_code(store, [tmp_path / "a", tmp_path / "b"])
        assert (caught.value.file, caught.value.line) == (str(tmp_path / "b" / "bad.jsonl"), 1)
        assert not getattr(caught.value, "__notes__", None) and store.counts().events == 0
        (tmp_path / "b" / "bad.jsonl").unlink()
        other = tmp_path / "b" / "2c7ab4e4-0000-4000-8000-000000000000.jsonl"
        other.write_bytes(session.read_bytes().replace(session.stem.encode(), other.stem.encode()))
        _conflicting(store, other)
        held = store.counts().events
        with pytest.raises(StoreError, match="exists but was not imported from this source") as conflict:
            import_claude_code(store, [tmp_path / "a", tmp_path / "b"])
        assert conflict.value.__notes__ == [f"the session is {other}"] and store.counts().events == held  # nothing written
        with pytest.raises(StoreError, match="exists but was not imported from this source") as conflict:
            import_claude_code(store, [tmp_path / "a", tmp_path / "b"], skip_bad=True)
        assert conflict.value.__notes__ == [f"the session is {other}", "the 1 session(s) before it were imported (37 event(s) "
                                            "added); importing again adds only what is missing"]


def test_two_different_sessions_under_one_name_are_refused_before_either_is_written(tmp_path: Path) -> None:
    """Two session files of one name (two copies of a project folder, one holding another
    session) become the same threads: the second conflicts with the first. Both are checked
    before either is written, so the refusal leaves the database as it was and a new file is
    not left behind; the first was written and stayed."""
    session = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    other = next((FIXTURES / "claude-code" / "-src-deep-manifest").glob("*.jsonl"))
    for folder, source in (("a", session), ("b", other)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / session.name).write_bytes(source.read_bytes())
    db = tmp_path / "new.db"
    code, _, err = invoke("--db", str(db), "import", "claude-code", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1 and len(err.splitlines()) == 1 and "holds events the source no longer has" in err, err
    assert "before it were imported" not in err and not db.exists()
    with Store(db) as store:
        store.append_message(store.create_thread(title="kept"), "user", "hello")
    before = file_dump(db)
    code, _, err = invoke("--db", str(db), "import", "claude-code", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1 and "holds events the source no longer has" in err and "before it were imported" not in err, err
    assert file_dump(db) == before


def test_an_error_naming_a_huge_value_stays_one_short_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    invoke("--db", str(db), "new")
    code, _, err = invoke("--db", str(db), "log", "Q" * 100_000)
    assert code == 1 and len(err.splitlines()) == 1 and len(err) < 1200, len(err)
    assert err.startswith("error: thread 'QQQ") and "QQQ...QQQ" in err and err.rstrip().endswith("lists them")


def pi_with_role(tmp_path: Path, role: str) -> tuple[Path, int]:
    lines = PI.read_bytes().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if json.loads(line).get("type") == "message")
    record = json.loads(lines[number - 1])
    record["message"]["role"] = role
    lines[number - 1] = json.dumps(record).encode()
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, number


def test_a_session_line_with_a_huge_value_is_named_in_one_short_line(tmp_path: Path) -> None:
    path, number = pi_with_role(tmp_path, "x" * 3_000_000)
    db = tmp_path / "t.db"
    code, _, err = invoke("--db", str(db), "import", "pi", str(path))
    assert code == 1 and len(err) < 1200 and f"{path}:{number}: unknown message role 'xxx" in err
    code, out, _ = invoke("--db", str(db), "import", "pi", "--skip-bad", "--json", str(path))
    assert code == 0
    [(file, line, why)] = [(b["file"], b["line"], b["why"]) for b in json.loads(out)["bad"]]
    assert (file, line) == (str(path), number) and len(why) < 200


SECONDS = [("timeout", ["append", "T", "--role", "user", "--text", "x", "--timeout"]),
           ("follow-interval", ["follow", "--interval"]),
           ("import-follow-interval", ["import", "claude-code", "{dir}", "--follow", "--interval"])]


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1"])
@pytest.mark.parametrize("args", [c[1] for c in SECONDS], ids=[c[0] for c in SECONDS])
def test_a_number_of_seconds_that_is_not_finite_is_a_usage_error(tmp_path: Path, args: list[str], value: str) -> None:
    db = tmp_path / "t.db"
    _, thread, _ = invoke("--db", str(db), "new")
    # `inf` and `1e308` overflowed a sleep or SQLite's lock timeout (a traceback); `nan` waited not at all.
    given = {"T": thread.strip(), "{dir}": str(tmp_path)}
    code, out, err = invoke("--db", str(db), *(given.get(a, a) for a in args), value)
    assert code == 2 and out == "" and "Invalid value for '--" in err and "Traceback" not in err, err


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0, 1e308], ids=["nan", "inf", "negative", "huge"])
def test_the_library_refuses_a_timeout_it_cannot_wait(tmp_path: Path, timeout: float) -> None:
    with pytest.raises(StoreError, match="timeout must be a number of seconds from 0 to"):
        Store(tmp_path / "t.db", timeout=timeout)
    assert not (tmp_path / "t.db").exists()


EMPTY_PATH = [("db-before-the-command", ["--db", "", "new"]), ("db-after-the-command", ["new", "--db", ""]),
              ("db-of-a-group", ["import", "--db", "", "pi", "{file}"]),
              ("transcript-output", ["transcript", "T", "-o", ""]), ("export-output", ["export", "T", "-o", ""]),
              ("fork-transcript", ["fork", "T", "--context", "note", "--transcript", ""])]
# A path ending in a slash names a directory: it was written as a file without the slash,
# while a fork note named the path as typed.
SLASHED = [("db", ["--db", "new/", "new"]), ("transcript-output", ["transcript", "T", "-o", "notes/"]),
           ("fork-transcript", ["fork", "T", "--context", "note", "--transcript", "notes/"])]


@pytest.mark.parametrize(("args", "says"), [(c[1], "an empty path names no file") for c in EMPTY_PATH]
                         + [(c[1], "ends with a slash, so it names a directory") for c in SLASHED],
                         ids=[f"empty-{c[0]}" for c in EMPTY_PATH] + [f"slash-{c[0]}" for c in SLASHED])
def test_a_path_that_names_no_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                    says: str) -> None:
    # `--db "$DB"` with DB unset: it used ./threadlog.db (and `-o ""` printed to stdout).
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("THREADLOG_DB", raising=False)
    db = tmp_path / "kept.db"
    _, thread, _ = invoke("--db", str(db), "new")
    given = {"T": thread.strip(), "{file}": str(PI)}
    code, out, err = invoke(*(["--db", str(db)] if "T" in args else []), *(given.get(a, a) for a in args))
    assert code == 2 and out == "" and says in err, (code, out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.db"]
    assert json.loads(invoke("--db", str(db), "ls", "--all", "--json")[1])[0]["kind"] == "thread"  # no fork was made


def checkpoint(db: Path) -> str:
    with Store(db, read_only=True) as store:
        return store.checkpoint()


def test_an_interrupt_answer_nested_too_deeply_is_named_as_the_answer(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    thread = invoke("--db", str(db), "new")[1].strip()
    assert invoke("--db", str(db), "interrupt", "raise", thread, "ask", "--question", "go?")[0] == 0
    before = checkpoint(db)
    # It said "an event is nested too deeply to show; `threadlog verify` names its position".
    code, _, err = invoke("--db", str(db), "interrupt", "resolve", thread, "ask", "--answer", "[" * 20_000 + "]" * 20_000)
    assert code == 2 and "Invalid value for '--answer': is JSON nested too deeply; an event holds at most 100 levels" in err
    assert checkpoint(db) == before
    code, out, _ = invoke("--db", str(db), "interrupt", "resolve", thread, "ask", "--answer", "{not json", "--json")
    assert code == 0 and json.loads(out)["data"]["answer"] == "{not json"


@pytest.mark.parametrize("answer", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_an_answer_python_reads_as_a_number_json_has_not_is_kept_as_text(tmp_path: Path, answer: str) -> None:
    """`--answer` is JSON when it parses as JSON, else text: Python parses `NaN`, `Infinity` and
    `1e999` into numbers no event stores, and the answer was refused ("events[0].data: not
    storable as UTF-8 JSON"), naming neither the answer nor the option."""
    db = tmp_path / "t.db"
    thread = invoke("--db", str(db), "new")[1].strip()
    assert invoke("--db", str(db), "interrupt", "raise", thread, "ask", "--question", "how many?")[0] == 0
    code, out, err = invoke("--db", str(db), "interrupt", "resolve", thread, "ask", "--answer", answer, "--json")
    assert code == 0 and json.loads(out)["data"]["answer"] == answer, err


@pytest.mark.parametrize("meta", ["[]", "0", "false", '""', "[1]"])
def test_event_meta_that_is_no_object_is_refused_whatever_its_truth(tmp_path: Path, meta: str) -> None:
    """`--event-meta '[1]'` was refused, but `[]`, `0`, `false` and `""` were taken as no meta."""
    db = tmp_path / "t.db"
    thread = invoke("--db", str(db), "new")[1].strip()
    before = checkpoint(db)
    for args in (["emit", thread, "title.set", "--data", '{"title": "x"}'],
                 ["emit", thread, "message.appended", "--data", '{"role": "user", "content": "hi"}']):
        code, _, err = invoke("--db", str(db), *args, "--event-meta", meta)
        assert code == 1 and "meta" in err and ("must be an object" in err or "valid dictionary" in err), err
    assert checkpoint(db) == before


def test_json_with_a_number_python_will_not_read_is_named_as_the_option_not_as_tampering(tmp_path: Path) -> None:
    """An integer of over 4,300 digits is valid JSON that Python refuses to read (ValueError):
    it was reported as a stored event altered outside threadlog."""
    db = tmp_path / "t.db"
    thread = invoke("--db", str(db), "new")[1].strip()
    before = checkpoint(db)
    huge = "9" * 5_000
    blocks = tmp_path / "blocks.json"
    blocks.write_text(f'[{{"type": "tool_use", "id": "t1", "name": "x", "input": {{"n": {huge}}}}}]')
    said = "holds JSON threadlog cannot read: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits"
    code, out, err = invoke("--db", str(db), "append", thread, "--role", "assistant", "--content", str(blocks))
    assert (code, out, err) == (1, "", f"error: --content {said}\n")  # a file's text: input, refused as input is
    code, out, err = invoke("--db", str(db), "emit", thread, "run.started", "--data", f'{{"run_id": "r", "n": {huge}}}')
    assert (code, out) == (2, "") and f"Invalid value for '--data': {said}" in err, err  # an option's value: a usage error
    assert checkpoint(db) == before
    assert invoke("--db", str(db), "interrupt", "raise", thread, "ask", "--question", "n?")[0] == 0
    code, out, _ = invoke("--db", str(db), "interrupt", "resolve", thread, "ask", "--answer", huge, "--json")
    assert code == 0 and json.loads(out)["data"]["answer"] == huge  # an answer that is no JSON stays text


def test_an_older_copy_of_an_imported_session_adds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert invoke("--db", str(db), "import", "pi", str(PI))[0] == 0
    older = tmp_path / "backup" / PI.name
    older.parent.mkdir()
    older.write_bytes(b"".join(PI.read_bytes().splitlines(keepends=True)[:40]))  # the session as it was earlier
    before = file_dump(db)
    # It was refused: "holds events the source no longer has in that order (was the session file rewritten?)".
    code, out, err = invoke("--db", str(db), "import", "pi", "--json", str(older))
    assert code == 0 and json.loads(out)["added"] == 0, err
    assert file_dump(db) == before


# Event data of the wrong shape for its type, written by raw SQL (appends validate every event):
# the commands that fold a thread ended in a traceback (AttributeError, KeyError, TypeError).
WRONG_SHAPES = {
    "fork-options-a-number": ("F", 2, {"options": 5, "parent_id": "T", "parent_offset": 2}),
    "fork-note-without-parent": ("F", 2, {"options": {"context": "note"}}),
    "fork-dropped-a-number": ("F", 2, {"options": {}, "parent_id": "T", "parent_offset": 2, "dropped_tool_use_ids": 5}),
    "message-content-a-number": ("T", 1, {"role": "user", "content": 5}),
}


@pytest.mark.parametrize("thread, offset, data", WRONG_SHAPES.values(), ids=list(WRONG_SHAPES))
def test_a_stored_event_of_the_wrong_shape_is_one_error_line(tmp_path: Path, thread: str, offset: int, data: dict[str, object]) -> None:
    import sqlite3

    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(title="x", thread_id="T", model="m")
        store.append_message("T", "user", "hi")
        store.fork("T", fork_id="F")
        store.append_message("F", "user", "more")
    with sqlite3.connect(db) as conn:
        conn.execute('UPDATE events SET data = ? WHERE stream_id = ? AND "offset" = ?', (json.dumps(data), thread, offset))
    conn.close()
    for command in ("show", "rows", "transcript", "request"):
        result = CliRunner().invoke(cli, ["--db", str(db), command, "F"])
        assert isinstance(result.exception, SystemExit) or result.exception is None, (command, result.exception)
        if result.exit_code:
            assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "error:" in result.stderr, (command, result.stderr)
            assert "verify" in result.stderr, (command, result.stderr)
    verified = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert verified.exit_code == 1 and "integrity check failed" in verified.stderr


@pytest.mark.parametrize("args", [["verify"], ["ls"], ["log", "x"], ["checkpoint"], ["search", "x"], ["append", "x", "--role", "user", "--text", "hi"]],
                         ids=lambda a: a[0])
def test_a_command_on_an_empty_file_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    """An empty file (a mistyped --db, a file another tool just created) is not a threadlog
    file to migrate: a command other than init says so and leaves it empty, with no log beside it."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    code, _, err = invoke("--db", str(empty), *args)
    assert code == 1 and "is empty, not a threadlog database yet" in err, err
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_follow_forks_without_a_thread_is_a_usage_error(tmp_path: Path) -> None:
    """`--forks` means a thread's forks: alone it used to follow everything, silently."""
    db = tmp_path / "t.db"
    Store(db).close()
    code, _, err = invoke("--db", str(db), "follow", "--forks")
    assert code == 2 and "--forks follows a thread's forks" in err, err


def test_what_a_command_prints_back_of_its_own_arguments_is_escaped(tmp_path: Path) -> None:
    """A path or a model name typed (or pasted) with a terminal escape in it is shown escaped,
    or refused: never sent to the terminal, nor written into JSON as a byte that is not UTF-8."""
    db = str(tmp_path / "t.db")
    code, thread, _ = invoke("--db", db, "new", "--model", "claude-x")
    invoke("--db", db, "append", thread.strip(), "--role", "user", "--text", "hi")
    target = tmp_path / "out\x1b]0;PWNED\x07.jsonl"
    code, out, err = invoke("--db", db, "export", thread.strip(), "-o", str(target))
    assert code == 0 and out == f"{tmp_path}/out\\x1b]0;PWNED\\x07.jsonl\n" and target.is_file(), (out, err)
    for command in ("request", "export"):
        args = [command, thread.strip(), "--model", "\udcff"] + (["--format", "anthropic"] if command == "export" else [])
        code, out, err = invoke("--db", db, *args)
        assert (code, out) == (2, "") and "'--model': is not UTF-8 text (byte 0xff at character 1)" in err, err
        assert "\udcff" not in err  # the byte itself never printed


@pytest.mark.parametrize("args", [["append", "T", "--role", "user", "--content", "PATH"], ["emit", "T", "title.set", "--data-file", "PATH"],
                                  ["import", "pi", "DIR"], ["import", "claude-code", "DIR"]],
                         ids=["content", "data-file", "import-pi", "import-claude-code"])
def test_a_usage_error_quoting_a_typed_path_shows_its_escapes(tmp_path: Path, args: list[str]) -> None:
    """A usage error naming the path it was given (a file that cannot be read, a directory
    holding no session) printed it raw: a title-setting OSC sequence and a right-to-left
    override reached the terminal."""
    db = str(tmp_path / "t.db")
    thread = invoke("--db", db, "new")[1].strip()
    hostile = "x\x1b]0;PWNED\x07\u202eyz"
    (tmp_path / f"dir{hostile}").mkdir()
    values = {"T": thread, "PATH": str(tmp_path / f"missing{hostile}.json"), "DIR": str(tmp_path / f"dir{hostile}")}
    code, _, err = invoke("--db", db, *[values.get(a, a) for a in args])
    assert code == 2 and "x\\x1b]0;PWNED\\x07\\u202eyz" in err, err
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err


def test_a_thread_without_a_model_is_told_to_pass_the_option_not_the_parameter(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    _, thread, _ = invoke("--db", db, "new")
    invoke("--db", db, "append", thread.strip(), "--role", "user", "--text", "hi")
    code, out, err = invoke("--db", db, "request", thread.strip())
    assert code == 1 and out == "" and ("pass --model (or make a thread that names one: `threadlog fork --model` of this one, or "
                                        "`threadlog new --model`)") in err, err
    assert "model=" not in err


def test_a_pi_session_given_to_the_claude_code_importer_is_refused_and_leaves_no_database(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    code, out, err = invoke("--db", str(db), "import", "claude-code", str(PI))
    assert (code, out) == (1, "") and err.startswith(f"error: {PI}:1: a pi session's header, so not a Claude Code session") and \
        "run `threadlog import pi`" in err and len(err.splitlines()) == 1, err
    assert not db.exists()


def test_ls_and_usage_align_columns_as_printed_with_escaped_ids(tmp_path: Path) -> None:
    """Widths were measured before `\\u202e` became six characters: the columns after it slid."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        odd = store.create_thread(title="alpha", thread_id="a\u202ebc\u202c")
        store.append_message(odd, "user", "hi")
        store.create_thread(title="beta", thread_id="plain-id")
        store.fork(odd)
    code, listed, _ = invoke("--db", str(db), "ls", "--all")
    assert code == 0 and "a\\u202ebc\\u202c" in listed
    rows = listed.splitlines()[1:]
    assert len({row.index(" thread ") if " thread " in row else row.index(" fork ") for row in rows}) == 1, rows
    assert len({re.search(r"\d{4}-\d\d-\d\d ", row).start() for row in rows}) == 1, rows  # type: ignore[union-attr]
    code, usage, _ = invoke("--db", str(db), "usage", odd)
    assert code == 0 and len({len(row) for row in usage.splitlines()}) == 1, usage  # every row ends at one column


def test_usage_counts_only_token_counts_a_response_could_hold(tmp_path: Path) -> None:
    """`usage` holds any JSON: two counts of 4,300 digits added up past what Python prints, and
    `threadlog usage` failed, calling the file altered; a negative count printed -100% cached."""
    db = tmp_path / "t.db"
    huge = 9 * 10**4299
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        for spent in ({"input_tokens": huge, "output_tokens": 1}, {"input_tokens": huge, "output_tokens": 1},
                      {"input_tokens": -100, "cache_read_input_tokens": 50}, {"input_tokens": 30, "output_tokens": 2}):
            store.append_message(t, "user", "q")
            store.append_message(t, "assistant", "a", usage=spent)
    code, out, err = invoke("--db", str(db), "usage", "t", "--json")
    assert code == 0, err
    total = json.loads(out)["total"]
    assert (total["messages"], total["input_tokens"], total["output_tokens"], total["cache_read_input_tokens"]) == (4, 30, 4, 50)
    code, out, err = invoke("--db", str(db), "usage", "t")
    assert code == 0 and "-" not in out.splitlines()[-1], out + err


@pytest.mark.parametrize("spent", [{"input_tokens": -5, "output_tokens": -1}, {"input_tokens": "5"}, {"output_tokens": 2.0},
                                   {"cache_read_input_tokens": True}], ids=["negative", "text", "float", "bool"])
def test_usage_says_which_answers_hold_counts_it_left_out(tmp_path: Path, spent: dict[str, object]) -> None:
    """A count no response could hold counted nothing, unsaid: the totals read as whole while an
    answer's usage was left out. It is kept as recorded (the log is the audit record), and
    `usage` says whose answers held what it did not count, on stderr beside the table and in
    --json, per thread and in the total."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        store.append_message(t, "user", "q")
        store.append_message(t, "assistant", "a", usage=spent)
        store.append_message(t, "user", "q")
        store.append_message(t, "assistant", "b", usage={"input_tokens": 30, "output_tokens": 2})
        fork = store.fork(t)
        store.append_message(fork, "user", "q")
        store.append_message(fork, "assistant", "c", usage={"input_tokens": 7, "output_tokens": 1})
        before = store.last_position()
    code, out, err = invoke("--db", str(db), "usage", "t", "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert [(r["thread"], r["messages"], r["left_out"]) for r in shown["threads"]] == [("t", 2, 1), (fork, 1, 0)]
    total = shown["total"]
    assert (total["messages"], total["left_out"], total["input_tokens"], total["output_tokens"]) == (3, 1, 37, 3)
    code, out, err = invoke("--db", str(db), "usage", "t")
    assert code == 0 and out.splitlines()[-1].split()[:5] == ["total", "total", "3", "37", "3"], out
    assert err == ("not counted: thread t: 1 answer's usage holds a token count that is no whole number from 0 to "
                   "2**63 - 1; the totals leave it out (the log keeps it as recorded: threadlog show t)\n")
    with Store(db) as store:
        assert store.last_position() == before
        assert [e.data.get("usage") for e in store.read(t) if e.data.get("role") == "assistant"][0] == spent


@pytest.mark.parametrize("args", [["rows", "t"], ["show", "t", "--json"]], ids=["rows", "show-json"])
def test_stdout_that_is_not_utf8_is_named_not_the_file(tmp_path: Path, args: list[str]) -> None:
    """In a Latin-1 locale a command stopped at the first character it could not print, and
    said the file held an event altered outside threadlog."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "Paris \u2192 Lyon")
    result = CliRunner(charset="latin-1").invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 1, result.output
    assert "cannot write U+2192" in result.stderr and "UTF-8 locale" in result.stderr and "altered" not in result.stderr


@pytest.mark.parametrize("args", [["append", "t", "--role", "user", "--text", "Paris \u2192 Lyon", "--json"],
                                  ["interrupt", "raise", "t", "q1", "--question", "Paris \u2192 Lyon?", "--json"]],
                         ids=["append", "interrupt-raise"])
def test_a_write_its_stdout_cannot_encode_says_it_was_committed(tmp_path: Path, args: list[str]) -> None:
    """In a Latin-1 locale, a write whose result held a character Latin-1 has not exited 1 after
    its write was committed, as a refusal does: a script ran it again, and the message was
    stored twice. Exit 3, naming what was kept, as for a closed stdout."""
    import os
    import subprocess
    import sys

    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "a train")
    run = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONIOENCODING": "latin-1"}, timeout=60)
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("error: committed: ") and run.stderr.count("\n") == 1, run.stderr
    assert "cannot write U+2192" in run.stderr and "UTF-8 locale" in run.stderr and "Traceback" not in run.stderr
    with Store(db) as store:
        assert store.counts().events == 3


def with_stored_surrogate(tmp_path: Path) -> Path:
    """A file whose thread `t` holds, at position 2, "say \\ud800": text UTF-8 cannot hold,
    written by raw SQL."""
    import sqlite3

    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "say XX")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = replace(data, 'XX', '\\ud800')")
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("args", [["show", "t"], ["log", "t"], ["rows", "t"]], ids=["show", "log", "rows"])
def test_a_stored_lone_surrogate_is_shown_as_its_escape_and_verify_names_it(tmp_path: Path, args: list[str]) -> None:
    """Text UTF-8 cannot hold, written into the file by raw SQL, cannot be printed raw: it is
    shown as its escape, as a control character is (it failed the command with a traceback,
    then with an error line), and `verify` names the event."""
    db = with_stored_surrogate(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), *args, "--no-pager"])
    assert result.exit_code == 0 and "say \\ud800" in result.stdout, result.output
    verified = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert verified.exit_code == 1 and "position 2" in verified.stderr, verified.output


@pytest.mark.parametrize("args", [["export", "t"], ["export", "--all"], ["export", "t", "-o", "out.jsonl"]],
                         ids=["thread-stdout", "all-stdout", "file"])
def test_an_export_holding_a_stored_lone_surrogate_is_refused_wherever_it_goes(tmp_path: Path, args: list[str]) -> None:
    """To stdout the surrogate was written as its escape and the export exited 0: a backup that
    looked whole and that `import events` refused. Refused as the export to a file is."""
    db = with_stored_surrogate(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), *[a.replace("out.jsonl", str(tmp_path / "out.jsonl")) for a in args]])
    assert result.exit_code == 1 and "threadlog verify" in result.stderr, result.output
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("args", [["export", "t", "-o", "NAME"], ["import", "events", "NAME", "--json"],
                                  ["transcript", "t", "-o", "NAME", "--json"], ["init", "--json"]],
                         ids=["export", "import-json", "transcript-json", "init-json"])
def test_a_file_name_that_is_not_utf8_is_printed_escaped_by_a_real_process(tmp_path: Path, args: list[str]) -> None:
    """Linux file names may hold any bytes; Python holds one that is not UTF-8 as a lone
    surrogate. Echoed raw, it made `--json` output no UTF-8 reader takes or, with a strict
    stdout, exit 1 after the write committed, blaming "a stored event" of the database."""
    import os
    import subprocess
    import sys

    source = tmp_path / "source.db"
    with Store(source) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "hi")
    name = os.fsdecode(b"n\xff.out")  # 'n\udcff.out'
    if args[0] == "import":
        with open(tmp_path / name, "w") as out:
            out.writelines(line + "\n" for line in dump_lines(export_events(Store(source, read_only=True), "t")))
    db = name if args[0] == "init" else str(source)
    argv = [a.replace("NAME", name) for a in args]
    run = subprocess.run([sys.executable, "-m", "threadlog", "--db", db, *argv], cwd=tmp_path, capture_output=True,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=60)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.decode("utf-8")  # strict: a raw 0xff byte failed here
    assert "n\\udcff.out" in printed  # the byte shown as its escape
    if "--json" in args:  # which JSON reads back as the name
        values = json.loads(printed)
        assert (values[0]["file"] if isinstance(values, list) else values["path"]).endswith(name)


def test_ls_shows_last_activity_in_utc_whatever_zone_an_imported_time_names(tmp_path: Path) -> None:
    """`ls` cut every time to 19 characters: 12:00 at +05:30 read as 12:00 beside a UTC time,
    and `20260131T120000-0800` showed as `20260131 120000-080`."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        for thread, when in (("zulu", "2026-01-31T12:00:00Z"), ("kolkata", "2026-01-31T12:00:00+05:30"),
                             ("basic", "20260131T120000-0800"), ("naive", "2026-01-31T12:00:00.5"),
                             # past year 9999 or before year 1 once in UTC: shown as written, zone and all; year 999 padded
                             ("late", "9999-12-31T23:00:00.5-05:00"), ("early", "0001-01-01T00:30:00+01:00"),
                             ("old", "0999-06-01T00:30:00+01:00")):
            store.append(store.create_thread(thread_id=thread), [{"type": "message.appended", "data": {"role": "user", "content": "hi"},
                                                                  "meta": {"origin": "imported", "occurred_at": when}}])
    code, listed, err = invoke("--db", str(db), "ls")
    assert code == 0, err
    shown = {row.split()[0]: " ".join(row.split()[4:6]) for row in listed.splitlines()[1:]}
    assert shown == {"zulu": "2026-01-31 12:00:00", "kolkata": "2026-01-31 06:30:00", "basic": "2026-01-31 20:00:00",
                     "naive": "2026-01-31 12:00:00", "late": "9999-12-31 23:00:00-05:00", "early": "0001-01-01 00:30:00+01:00",
                     "old": "0999-05-31 23:30:00"}, listed


def test_endless_input_is_refused_after_what_an_event_can_hold(tmp_path: Path) -> None:
    """`yes | threadlog append T --content -` and `threadlog import events /dev/zero` read until
    memory ran out (a MemoryError traceback, or the kernel's OOM killer)."""
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("threadlog"))
    db = tmp_path / "d.db"
    with Store(db) as store:
        t = store.create_thread()
    before = file_dump(db)

    def fed(source: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        """threadlog ARGS reading what `source` writes without end."""
        endless = subprocess.Popen(source, stdout=subprocess.PIPE)
        try:
            return subprocess.run([exe, "--db", str(db), *args], stdin=endless.stdout, capture_output=True, text=True,
                                  timeout=120)
        finally:
            endless.kill()
            endless.wait()
            assert endless.stdout is not None
            endless.stdout.close()

    done = fed(["yes"], "append", t, "--role", "user", "--content", "-")
    assert done.returncode == 1 and done.stderr == "error: --content: standard input holds more than 64 MiB; an event holds " \
                                                   "at most 32 MiB of JSON\n"
    device = subprocess.run([exe, "--db", str(db), "import", "events", "/dev/zero"], capture_output=True, text=True, timeout=120)
    assert device.returncode == 1 and device.stderr.startswith("error: paths[0]: /dev/zero is a device, not a file")
    piped = fed(["sh", "-c", "tr '\\000' x < /dev/zero"], "import", "events", "/dev/stdin")  # a pipe, which `import events` reads
    assert piped.returncode == 1 and "/dev/stdin: line 1: is longer than 65 MiB" in piped.stderr and "Traceback" not in piped.stderr
    zeros = fed(["cat", "/dev/zero"], "import", "events", "/dev/stdin")  # no text at all: refused as it starts
    assert zeros.returncode == 1 and zeros.stderr == ("error: /dev/stdin: line 1: a binary file (it holds NUL bytes), not a "
                                                      "threadlog export (JSON Lines text)\n")
    assert file_dump(db) == before


def test_verify_json_reports_a_file_too_damaged_to_open_as_a_failed_check(tmp_path: Path) -> None:
    """It printed no JSON at all, only the `error:` line, where --json promises the report either way."""
    db = tmp_path / "d.db"
    with Store(db) as store:
        t = store.create_thread()
        for i in range(200):
            store.append_message(t, "user", f"message {i} " * 20)
        store.purge()
    cut = tmp_path / "cut.db"
    cut.write_bytes(db.read_bytes()[:50_000])
    result = CliRunner().invoke(cli, ["--db", str(cut), "verify", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["position"] is None and "damaged" in report["error"]


@pytest.mark.parametrize("option", ["--content", "--data-file"])
def test_an_input_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path, option: str) -> None:
    """A missing --content file exited 1 ("error: No such file or directory"), where every other
    path that names nothing is a usage error (exit 2) naming the option."""
    db = tmp_path / "t.db"
    thread = invoke("--db", str(db), "new")[1].strip()
    before = checkpoint(db)
    args = ["append", thread, "--role", "user"] if option == "--content" else ["emit", thread, "title.set"]
    for path in (tmp_path / "missing.json", tmp_path):
        code, _, err = invoke("--db", str(db), *args, option, str(path))
        assert code == 2 and f"Invalid value for '{option}': cannot read {path} (" in err, err
    assert checkpoint(db) == before


def test_ids_that_differ_by_a_character_that_shows_as_nothing_are_told_apart(tmp_path: Path) -> None:
    """A zero-width space, a word joiner, a byte order mark or a tag character printed raw: `ls` and an ambiguous
    prefix's error showed `abc` twice for two ids. Each is shown as its escape."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        for thread in ("abc", "ab\u200bc", "ab\u2060c", "ab\ufeffc", "ab\U000e0041c"):
            store.create_thread(thread_id=thread)
    code, listed, _ = invoke("--db", str(db), "ls")
    assert code == 0 and all(shown in listed for shown in ("ab\\u200bc", "ab\\u2060c", "ab\\ufeffc", "ab\\U000e0041c")), listed
    code, _, err = invoke("--db", str(db), "show", "ab")
    assert code == 1 and "ab\\u200bc" in err and "\u200b" not in err, err


def test_show_tells_a_metadata_key_that_reads_as_another_from_it(tmp_path: Path) -> None:
    """A fork's metadata key written bare: an empty key showed `metadata    1`, a key `1` with no
    value, and `a b 1` read as key `a` or `a b`. A key that is empty, holds a space or starts
    with a quote is shown as JSON; a plain key stays as it is."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread(title="t")
        store.append_message(thread, "user", "hi")
        fork = store.fork(thread, metadata={"": 1, "a b": 2, " c": 3, '"d"': 4, "user": "ana"})
    code, shown, _ = invoke("--db", str(db), "show", fork)
    assert code == 0, shown
    lines = [line[12:] for line in shown.splitlines() if line.startswith(("metadata", " " * 12))][:5]
    assert lines == ['"" 1', '" c" 3', '"\\"d\\"" 4', '"a b" 2', 'user "ana"'], lines


def _with_closed(stream: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`threadlog --db DB ARGS` started with its standard `stream` (0 stdin, 1 stdout) closed, as
    `threadlog ... >&-` (or `<&-`) starts it from a shell; Python then has no `sys.stdout` (or
    `sys.stdin`) at all."""
    command = ["sh", "-c", f'exec "$@" {stream}>&-', "sh", sys.executable, "-m", "threadlog", "--db", str(db), *args]
    return subprocess.run(command, stdout=subprocess.PIPE if stream != "1" else None, stderr=subprocess.PIPE,
                          text=True, timeout=120)


def test_a_command_started_with_stdout_closed_says_it_cannot_print(tmp_path: Path) -> None:
    """Started with stdout closed (`>&-`), a command said a stored event had been altered outside
    threadlog (Python's missing `sys.stdout` raised AttributeError), and `append` exited 1 once
    its message was committed, telling a script to run it again. Printing now fails as it does
    to a closed descriptor: a read exits 1, a write says it was committed (exit 3)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "hello")
    read = _with_closed("1", db, "ls")
    assert read.returncode == 1, read.stderr
    assert read.stderr == "error: printing the output failed: Bad file descriptor\n"
    before = checkpoint(db)
    written = _with_closed("1", db, "append", "t", "--role", "user", "--text", "once")
    assert written.returncode == 3, written.stderr
    assert written.stderr.startswith("error: committed: message.appended recorded on thread t") \
        and written.stderr.count("\n") == 1, written.stderr
    assert "altered" not in written.stderr and "(Bad file descriptor)" in written.stderr
    with Store(db) as store:
        assert [e.data["content"] for e in store.read("t") if e.type == "message.appended"][-1] == [{"type": "text", "text": "once"}]
        assert store.verify(since=before).events == 1


def test_the_command_a_kept_write_names_reads_back_in_a_shell_for_an_id_with_invisible_characters(tmp_path: Path) -> None:
    """A write whose printing failed names the command that shows what it wrote. For an id
    holding a character the output escapes (`\\u202e`), the id was quoted as printed, in
    `'…'`: pasted, the shell read a backslash and letters, another id. It is quoted as `$'…'`,
    which the shell reads back to the id itself."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to read the command")
    db, thread = tmp_path / "t.db", "a\u202eb;c"
    with Store(db) as store:
        store.create_thread(thread_id=thread)
    written = _with_closed("1", db, "append", thread, "--role", "user", "--text", "once")
    assert written.returncode == 3, written.stderr
    shown = written.stderr.split("`")[1]
    assert shown.startswith("threadlog log ") and shown.isascii(), shown
    read = subprocess.run([bash, "-c", f"set -- {shown}; printf %s \"$3\""], capture_output=True, text=True, timeout=30)
    assert read.stdout == thread, (shown, read.stdout)


@pytest.mark.parametrize("args", [["append", "t", "--role", "user", "--content", "-"], ["emit", "t", "title.set", "--data-file", "-"]],
                         ids=["append-content", "emit-data-file"])
def test_standard_input_closed_is_a_usage_error_naming_it(tmp_path: Path, args: list[str]) -> None:
    """`--content -` with stdin closed (`<&-`) said a stored event had been altered outside
    threadlog; it cannot be read, as a file that cannot be read is a usage error naming the option."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "hello")
    before = file_dump(db)
    done = _with_closed("0", db, *args)
    option = args[-2]
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for '{option}': cannot read standard input (Bad file descriptor)" in done.stderr, done.stderr
    assert file_dump(db) == before


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["ls", "--help"]], ids=["help", "version", "command-help"])
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_help_and_version_that_cannot_be_printed_say_so_in_one_line(tmp_path: Path, args: list[str], stdout: str) -> None:
    """`threadlog --help > /dev/full` printed a traceback (the group's own --help and --version
    print while click reads the options, before any command runs)."""
    if stdout == "closed":
        done = _with_closed("1", tmp_path / "t.db", *args)
        why = "Bad file descriptor"
    else:
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "threadlog", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=120)
        why = "No space left on device"
    assert done.returncode == 1 and done.stderr == f"error: printing the output failed: {why}\n", done.stderr
    assert not (tmp_path / "t.db").exists()


# Ids a user may type that hold the library's words the CLI rewords into its own (`redact()`,
# `thread: thread `), beside quotes of both kinds, backslashes, newlines and terminal escapes.
HOSTILE_IDS = {
    "library-call": "redact()",
    "library-phrase": "fork() or fan_out()",
    "parameter-twice": "thread: thread x",
    "apostrophe": "it's redact()",
    "both-quotes": "a'b\"c redact()",
    "quote-then-words": "x' redact() '",
    "backslash": "a\\redact()\\",
    "newline": "one\nredact()",
    "ansi": "\x1b[31mredact()\x1b[0m",
    "value-in-a-phrase": "pass unanswered='drop' (or 'keep')",
}


def _not_found(db: Path, thread_id: str) -> tuple[int, str, str]:
    return invoke("--db", str(db), "usage", "--", thread_id)


@pytest.mark.parametrize("thread_id", HOSTILE_IDS.values(), ids=list(HOSTILE_IDS))
def test_an_id_holding_library_words_is_named_as_typed(tmp_path: Path, thread_id: str) -> None:
    """The CLI rewords the library's words in an error into its commands (`redact()` into
    `threadlog redact`), and did so inside a quoted id too: `threadlog usage 'redact()'` said
    "thread '`threadlog redact`' not found", naming a thread nobody typed."""
    db = tmp_path / "t.db"
    Store(db).close()
    code, out, err = _not_found(db, thread_id)
    assert (code, out) == (1, "")
    assert err == f"error: thread {thread_id!r} not found (no thread id starts with it); `threadlog ls --all` lists them\n", err
    assert "\x1b" not in err and err.count("\n") == 1


_TYPED = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_WORDS = st.sampled_from(["redact()", "fan_out()", "thread: thread ", "model: thread ", "user_content: ", "max_tokens: ",
                          "(expect='no_stream')", "pass unanswered='drop' (or 'keep')", "'", '"', "\\", "\n", "\x1b[0m"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(thread_id=st.lists(st.one_of(_TYPED, _WORDS), min_size=1, max_size=6).map("".join)
       .filter(lambda typed: typed not in ("", "@last")))
def test_any_id_not_found_is_named_exactly_as_typed(tmp_path: Path, thread_id: str) -> None:
    db = tmp_path / "t.db"
    if not db.exists():
        Store(db).close()
    code, out, err = _not_found(db, thread_id)
    assert (code, out) == (1, "")
    # an id typed with @ first says which @ name there is (`@lst` for `@last`)
    starts = "@; `@last` names the most recently active thread" if thread_id.startswith("@") else "it"
    assert err.startswith(f"error: thread {thread_id!r} not found (no thread id starts with {starts}); "), (thread_id, err)


def test_report_s_line_of_an_interrupt_it_cancelled_escapes_the_thread_it_names(tmp_path: Path) -> None:
    """`threadlog report` said which interrupt of the parent its answer cancelled with the
    parent's id as stored: an id holding U+202E (ids may, being printable) reversed the rest of
    the line on a terminal."""
    db = tmp_path / "t.db"
    parent = "trip\u202eevil"
    with Store(db) as store:
        store.create_thread(title="t", thread_id=parent)
        store.append_message(parent, "user", "Plan Lyon")
        store.append_message(parent, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {"prompt": "go"}}])
        store.append(parent, [{"type": "interrupt.raised", "data": {"interrupt_id": "q1", "tool_use_id": "toolu_1"}}])
        (kid,) = store.fan_out(parent, ["Find a hotel."])
        store.append_message(kid, "assistant", "Hotel Carlton.")
    result = CliRunner().invoke(cli, ["--db", str(db), "report", kid])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("cancelled interrupt 'q1' of thread trip\\u202eevil: "), result.stderr
    assert "\u202e" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
