"""A cycle of parents in a session file (a line whose chain of parents comes back to it: only
an edited or corrupted file holds one) is cut at the line first in the file, which starts a
thread; the import names that line (the library's summary, the command's report and its
`--json`), each time the file is imported, and imports nothing else for it. Real sessions
(tests/fixtures, copies of the gathered files) edited so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import ImportSummary, Store, StoreError, import_claude_code, import_pi
from threadlog.cli import cli
from tests.backends import file_dump
from tests.procs import ctrl_c, interruptible

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CC = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
PI = FIXTURES / "pi" / "large-session-head.jsonl"

Records = list[dict[str, Any]]


def _cc_records() -> Records:
    return [json.loads(line) for line in CC.read_text(encoding="utf-8").splitlines()]


def _pi_records() -> Records:
    """The pi session as pi itself rewrites a version 1 file it opens: the current version, each
    entry given an id and the entry before as its parent."""
    header, *entries = [json.loads(line) for line in PI.read_text(encoding="utf-8").splitlines()]
    out = [{**header, "version": 3}]
    previous = None
    for number, entry in enumerate(entries, 1):
        out.append({"type": entry["type"], "id": f"e{number:03}", "parentId": previous, **entry})
        previous = out[-1]["id"]
    return out


def _cc_loop(records: Records, line: int) -> None:
    """Line `line` (1-based) names itself as its parent."""
    records[line - 1]["parentUuid"] = records[line - 1]["uuid"]


def _cc_pair(records: Records, first: int, second: int) -> None:
    """Lines `first` and `second` name each other as parents."""
    a, b = records[first - 1], records[second - 1]
    a["parentUuid"], b["parentUuid"] = b["uuid"], a["uuid"]


def _pi_pair(records: Records, first: int, second: int) -> None:
    a, b = records[first - 1], records[second - 1]
    a["parentId"], b["parentId"] = b["id"], a["id"]


def _written(tmp_path: Path, name: str, records: Records) -> Path:
    """`records` written as a session file an hour old (no tool is writing it)."""
    folder = tmp_path / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def _both_cc(records: Records) -> None:
    _cc_loop(records, 5)
    _cc_pair(records, 9, 14)


# (importer, its command, the session's records, the edit, the lines named, what the import holds:
# threads, forks, prompts, assistant messages, events, as the import took them before it named any)
CASES: dict[str, tuple[Callable[..., ImportSummary], str, Callable[[], Records], Callable[[Records], None], list[int],
                       tuple[int, int, int, int, int]]] = {
    # An assistant line of a response mid-way names itself: the response's later lines start a thread.
    "claude-code self-loop": (import_claude_code, "claude-code", _cc_records, lambda r: _cc_loop(r, 5), [5], (2, 1, 7, 10, 41)),
    # A response's line and a tool result's line name each other: cut at the first, which starts a thread.
    "claude-code 2-cycle": (import_claude_code, "claude-code", _cc_records, lambda r: _cc_pair(r, 5, 9), [5], (2, 1, 7, 10, 41)),
    "claude-code two cycles": (import_claude_code, "claude-code", _cc_records, _both_cc, [5, 9], (4, 1, 7, 10, 44)),
    "pi 2-cycle": (import_pi, "pi", _pi_records, lambda r: _pi_pair(r, 6, 10), [6], (2, 1, 6, 34, 76)),
}


def _holds(summary: ImportSummary) -> tuple[int, int, int, int, int]:
    return summary.threads, summary.forks, summary.prompts, summary.assistant_messages, summary.events


def _session(tmp_path: Path, case: str) -> Path:
    _, _, records, edit, _, _ = CASES[case]
    edited = records()
    edit(edited)
    return _written(tmp_path, CC.name if CASES[case][1] == "claude-code" else "session.jsonl", edited)


@pytest.mark.parametrize("case", list(CASES))
def test_the_library_summary_names_each_line_where_a_cycle_was_cut(tmp_path: Path, case: str) -> None:
    """`3 file(s): 4 thread(s)` from a file with a cycle, and nothing said why: the summary now
    names each line cut, the file as the import was given it; the rest of the import is as it was."""
    importer, _, _, _, lines, holds = CASES[case]
    path = _session(tmp_path, case)
    with Store(tmp_path / "t.db") as store:
        summary = importer(store, [path])
        assert summary.cycles_cut == [(str(path), line) for line in lines]
        assert summary.to_json()["cycles_cut"] == [{"file": str(path), "line": line} for line in lines]
        assert _holds(summary) == holds and summary.bad == [] and summary.changed == 0
        again = importer(store, [path])  # the cut is the file's: said again, and nothing added
        assert again.cycles_cut == summary.cycles_cut and again.added == 0 and _holds(again) == holds
        store.verify()


@pytest.mark.parametrize("case", list(CASES))
def test_the_command_says_where_a_cycle_was_cut_each_time_and_adds_nothing_again(tmp_path: Path, case: str) -> None:
    _, tool, _, _, lines, holds = CASES[case]
    path = _session(tmp_path, case)
    db = tmp_path / "t.db"
    runner = CliRunner()
    first = runner.invoke(cli, ["--db", str(db), "import", tool, str(path)])
    assert first.exit_code == 0, first.output
    if len(lines) == 1:
        said = (f"parents in a cycle: 1 line's parent chain comes back to it, cut there and taken as the start of a "
                f"thread, at {path}:{lines[0]}")
    else:
        said = (f"parents in a cycle: {len(lines)} lines' parent chains come back to them, each cut there and taken as "
                f"the start of a thread, first at {path}:{lines[0]}")
    assert said in first.stdout.splitlines(), first.stdout
    assert f"1 file(s): {holds[0]} thread(s), {holds[1]} fork(s)" in first.stdout
    before = file_dump(db)
    again = runner.invoke(cli, ["--db", str(db), "import", tool, str(path), "--json"])
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["cycles_cut"] == [{"file": str(path), "line": line} for line in lines]
    assert (report["added"], report["threads"], report["events"]) == (0, holds[0], holds[4])
    assert file_dump(db) == before
    verified = runner.invoke(cli, ["--db", str(db), "verify"])
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize("tool", ["claude-code", "pi"])
def test_a_session_without_a_cycle_names_none(tmp_path: Path, tool: str) -> None:
    path = _written(tmp_path, CC.name if tool == "claude-code" else "session.jsonl",
                    _cc_records() if tool == "claude-code" else _pi_records())
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", tool, str(path)])
    assert result.exit_code == 0 and "parents in a cycle" not in result.stdout, result.output
    json_result = CliRunner().invoke(cli, ["--db", str(tmp_path / "u.db"), "import", tool, str(path), "--json"])
    assert json.loads(json_result.stdout)["cycles_cut"] == []


def _pi_self(records: Records, line: int) -> None:
    """Line `line` (1-based) names itself as its parent."""
    records[line - 1]["parentId"] = records[line - 1]["id"]


def test_a_pi_entry_naming_itself_follows_the_entry_before_and_is_named(tmp_path: Path) -> None:
    """pi takes an entry naming itself as its parent (as one naming an entry not in the file) to
    follow the entry before it, as a version 1 file's: no thread starts there, and the import is
    the unedited file's. Nothing said so, and the file's cycle went unseen: the summary names
    the line (`self_parents`), at each import of the file, and no cut (`cycles_cut`)."""
    plain = import_pi(Store(":memory:"), [_written(tmp_path / "a", "session.jsonl", _pi_records())])
    records = _pi_records()
    _pi_self(records, 6)
    path = _written(tmp_path / "b", "session.jsonl", records)
    store = Store(":memory:")
    looped = import_pi(store, [path])
    assert looped.cycles_cut == [] and looped.self_parents == [(str(path), 6)]
    assert looped.to_json()["self_parents"] == [{"file": str(path), "line": 6}]
    assert {**looped.to_json(), "thread_ids": None, "self_parents": []} == {**plain.to_json(), "thread_ids": None}
    again = import_pi(store, [path])
    assert again.self_parents == looped.self_parents and again.added == 0


def test_the_command_names_a_pi_entry_naming_itself_as_its_parent(tmp_path: Path) -> None:
    records = _pi_records()
    _pi_self(records, 6)
    _pi_self(records, 12)
    path = _written(tmp_path, "session.jsonl", records)
    db = tmp_path / "t.db"
    first = CliRunner().invoke(cli, ["--db", str(db), "import", "pi", str(path)])
    assert first.exit_code == 0, first.output
    assert (f"parents in a cycle: 2 entries name themselves as their parents, each taken as following the entry before it, "
            f"first at {path}:6") in first.stdout.splitlines(), first.stdout
    again = CliRunner().invoke(cli, ["--db", str(db), "import", "pi", str(path), "--json"])
    report = json.loads(again.stdout)
    assert report["self_parents"] == [{"file": str(path), "line": 6}, {"file": str(path), "line": 12}]
    assert report["cycles_cut"] == [] and report["added"] == 0


def test_a_cut_is_named_once_where_an_import_checks_every_file_before_it_writes(tmp_path: Path) -> None:
    """An import of several files plans each twice (checked, then written): its cut is named once."""
    cc = _session(tmp_path / "cc", "claude-code self-loop")
    other = FIXTURES / "claude-code" / "-src-deep-manifest" / "a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"
    (cc.parent / other.name).write_bytes(other.read_bytes())
    pi = _session(tmp_path / "pi", "pi 2-cycle")
    second = _pi_records()
    second[0]["id"] = "another-session"
    _pi_self(second, 7)
    another = _written(tmp_path / "pi", "another.jsonl", second)
    with Store(tmp_path / "t.db") as store:
        assert import_claude_code(store, [cc.parent], live_within=None).cycles_cut == [(str(cc), 5)]
        both = import_pi(store, [pi.parent], finished=True)
        assert (both.cycles_cut, both.self_parents) == ([(str(pi), 6)], [(str(another), 7)])


def _cut_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("parents in a cycle: ")]


# A pi entry naming itself, followed: named as an import names it, once, in `self_parents`.
CASES_FOLLOWED = [*CASES, "pi self-parent"]


def _said(case: str, path: Path) -> tuple[str, str, list[int]]:
    """What a report says of `case` in `path`: its text line, its `--json` list and its lines."""
    if case == "pi self-parent":
        return (f"parents in a cycle: 1 entry names itself as its parent, taken as following the entry before it, at {path}:6",
                "self_parents", [6])
    lines = CASES[case][4]
    if len(lines) == 1:
        return (f"parents in a cycle: 1 line's parent chain comes back to it, cut there and taken as the start of a thread, "
                f"at {path}:{lines[0]}", "cycles_cut", lines)
    return (f"parents in a cycle: {len(lines)} lines' parent chains come back to them, each cut there and taken as the start "
            f"of a thread, first at {path}:{lines[0]}", "cycles_cut", lines)


@pytest.mark.parametrize("case", CASES_FOLLOWED)
def test_a_follower_says_where_a_cycle_was_cut_once_as_text_and_as_json(tmp_path: Path, case: str) -> None:
    """`import --follow` printed `+N event(s)` and nothing of a cycle it cut, where its --json
    named it (at each poll that re-read the growing file) and `import` prints a line: both say it,
    once, at the poll that first cut it, as a follower names a line it skipped."""
    tool = "pi" if case == "pi self-parent" else CASES[case][1]
    said: dict[bool, str] = {}
    for as_json in (False, True):
        if case == "pi self-parent":
            records = _pi_records()
            _pi_self(records, 6)
            path = _written(tmp_path / str(as_json), "session.jsonl", records)
        else:
            path = _session(tmp_path / str(as_json), case)
        text = path.read_bytes()
        kept = text.splitlines(keepends=True)
        path.write_bytes(b"".join(kept[:-3]))  # the session grows by its last lines while followed
        db = tmp_path / f"{as_json}.db"
        proc = interruptible([sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, "--follow", "--interval",
                              "0.05", str(path.parent), *(["--json"] if as_json else [])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _waited(lambda: _added(db) > 0)
            time.sleep(0.3)
            path.write_bytes(text)
            expected = import_claude_code if tool == "claude-code" else import_pi
            whole = expected(Store(":memory:"), [path], **({"live_within": None} if tool == "claude-code" else {}))
            _waited(lambda: _added(db) == whole.events)
            time.sleep(0.3)
        finally:
            out, err = ctrl_c(proc)
        assert proc.returncode == 0 and "Traceback" not in err and "refused" not in err, err
        said[as_json] = out
        polls = [line for line in out.splitlines() if line.startswith("+")] if not as_json else out.splitlines()
        assert len(polls) >= 2, out  # the session's first lines, then the rest
    line, _, _ = _said(case, tmp_path / "False" / "sessions" / _name(case))
    assert _cut_lines(said[False]) == [line]
    _, key, lines = _said(case, tmp_path / "True" / "sessions" / _name(case))
    named = [cut for poll in said[True].splitlines() for cut in json.loads(poll)[key]]
    assert named == [{"file": str(tmp_path / "True" / "sessions" / _name(case)), "line": n} for n in lines]


def _name(case: str) -> str:
    return CC.name if case.startswith("claude-code") else "session.jsonl"


def _added(db: Path) -> int:
    """How many events the follower's database holds (0 while it has yet to make it)."""
    try:
        with Store(db, read_only=True) as store:
            return sum(1 for _ in store.read_all())
    except StoreError:
        return 0


def _waited(done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.05)


def _cc_parent(records: Records, line: int, parent: int) -> None:
    """Line `line` (1-based) names line `parent` as its parent."""
    records[line - 1]["parentUuid"] = records[parent - 1]["uuid"]


# (the edit, the lines named). Lines 15 and 16 (a hook's progress line and its `system` summary)
# link the answer on line 14 to the prompts on lines 18 and 38; lines 11 and 12 (two progress
# lines) lead to no message.
LINK_CYCLES: dict[str, tuple[Callable[[Records], None], list[int]]] = {
    # Two link lines naming each other: both prompts below them start a thread.
    "two link lines": (lambda r: _cc_pair(r, 15, 16), [18, 38]),
    # A link line naming the prompt below it: the prompt's chain comes back to it, and it starts a thread.
    "a prompt and its links": (lambda r: _cc_parent(r, 15, 18), [18]),
}


@pytest.mark.parametrize("case", list(LINK_CYCLES))
def test_a_cycle_through_lines_without_conversation_is_named_at_the_messages_that_start_a_thread(
        tmp_path: Path, case: str) -> None:
    """A cycle of parents through `progress` and `system` lines was named at the link line first
    in the file (`…:15`, a hook's progress line), which holds no message and starts nothing: the
    user looking there found no thread. It is named at each message it made the start of a
    thread, the lines to look at for the threads the import made."""
    edit, lines = LINK_CYCLES[case]
    records = _cc_records()
    edit(records)
    path = _written(tmp_path, CC.name, records)
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [path])
        assert summary.cycles_cut == [(str(path), line) for line in lines]
        first: dict[str, int] = {}
        for event in store.read_all():
            line = (event.meta.get("source") or {}).get("line")
            if isinstance(line, int):
                first.setdefault(event.stream_id, line)
        assert set(lines) <= set(first.values())  # each a thread's (or a fork's) first line
        store.verify()


def test_a_cycle_of_link_lines_no_message_runs_into_is_named_nowhere(tmp_path: Path) -> None:
    """Two progress lines naming each other, with no message after them: nothing is cut from the
    conversation, and the import is the unedited file's."""
    plain = import_claude_code(Store(":memory:"), [_written(tmp_path / "a", CC.name, _cc_records())])
    records = _cc_records()
    _cc_pair(records, 11, 12)
    looped = import_claude_code(Store(":memory:"), [_written(tmp_path / "b", CC.name, records)])
    assert looped.cycles_cut == []
    assert {**looped.to_json(), "thread_ids": None} == {**plain.to_json(), "thread_ids": None}


def test_a_follower_stopped_by_the_server_names_a_cut_it_said_before_no_second_time(tmp_path: Path) -> None:
    """A follower's poll that a database error stops (the server cancels a write) says what the
    poll's earlier sessions committed: it said again the cycle of parents an earlier poll had
    named in one of them, re-read as its file grew, so the cut was printed twice."""
    import psycopg

    from tests.backends import postgres_url

    db = postgres_url()
    cycled = _session(tmp_path, "pi 2-cycle")
    other = _pi_records()
    other[0]["id"] = "another-session"
    grows = _written(tmp_path, "zz-session.jsonl", other)
    text = grows.read_bytes()
    grows.write_bytes(b"".join(text.splitlines(keepends=True)[:-3]))  # it grows by its last lines while followed
    first = import_pi(Store(":memory:"), [cycled, grows])
    with Store(db):
        pass
    proc = interruptible([sys.executable, "-m", "threadlog", "--db", db, "import", "pi", "--follow", "--interval", "0.05",
                          "--timeout", "60", str(cycled.parent)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(db, autocommit=True) as admin:
            _waited(lambda: admin.execute("SELECT count(*) FROM events").fetchone() == (first.events,))
            time.sleep(0.3)
            with psycopg.connect(db) as holder:  # the next poll's write waits for this lock
                holder.execute("LOCK TABLE events IN EXCLUSIVE MODE")
                with cycled.open("ab") as half:
                    half.write(b'{"type": ')  # a line pi is writing: re-read, nothing new to write
                grows.write_bytes(text)
                waiting: list[int] = []
                _waited(lambda: bool(waiting.extend(pid for pid, in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")) or waiting))
                admin.execute("SELECT pg_cancel_backend(%s)", (waiting[0],))
                proc.wait(timeout=30)
    finally:
        out, err = ctrl_c(proc)
    assert proc.returncode == 1 and "cancelled" in err and "Traceback" not in err, err
    assert len(_cut_lines(out)) == 1 and "+0 event(s)" not in out, out


def test_a_follower_s_lines_escape_the_file_name_they_quote(tmp_path: Path) -> None:
    """A follower printed the file of a cycle it cut and of a line it skipped as the name is: a
    name holding ESC, BEL or a line break (any byte but `/` and NUL may be in one) drove the
    terminal (a title set, the screen cleared) and made two lines of one. Each is one line,
    escaped, as `import` prints them."""
    records = _pi_records()
    _pi_self(records, 6)
    name = "s\x1b]0;owned\x07\x1b[2J\u202e\nfake: line.jsonl"
    path = _written(tmp_path, name, records)
    with path.open("a", encoding="utf-8") as bad:
        bad.write("{not json\n")
    db = tmp_path / "t.db"
    proc = interruptible([sys.executable, "-m", "threadlog", "--db", str(db), "import", "pi", "--follow", "--skip-bad",
                          "--interval", "0.05", str(path.parent)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _waited(lambda: _added(db) > 0)
        time.sleep(0.3)
    finally:
        out, err = ctrl_c(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err
    shown = str(path.parent) + "/s\\x1b]0;owned\\x07\\x1b[2J\\u202e\\nfake: line.jsonl"
    assert f"skipped {shown}:81: not JSON" in out, out
    assert _cut_lines(out) == [f"parents in a cycle: 1 entry names itself as its parent, taken as following the entry "
                               f"before it, at {shown}:6"], out
    assert not any(c in out for c in "\x1b\x07\u202e") and "\nfake: line" not in out, out
