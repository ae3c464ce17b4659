"""The projection commands: show, rows, transcript, blame, diff, snapshot, and the demo."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from eventstore import Store
from threadlog import thread_state, transcript
from threadlog.cli import cli
from tests.backends import file_dump

COMMANDS = ["show", "rows", "transcript", "blame", "diff", "snapshot"]


def _run(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    db = tmp_path / "t.db"
    code, out, _ = _run(db, "demo", "--json")
    assert code == 0
    return db, json.loads(out)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_projection_command_has_help(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0
    assert len(getattr(cli.get_command(click.Context(cli), command), "help", None) or "") > 20


def test_show_says_which_of_a_forks_inherited_todos_are_done(tmp_path: Path) -> None:
    """Sagents: a fork may keep its parent's todos (`inherit`). `show` printed each todo's text
    alone, so a completed one read as one still to do; a todo with a status now shows it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        thread = store.create_thread()
        store.append_message(thread, "user", "plan the trip")
        store.append(thread, [{"type": "todos.set", "data": {"todos": [
            {"content": "book the train", "status": "completed"}, {"content": "find a hotel", "status": "in_progress"},
            {"content": "pack", "status": "pending"}, {"content": "call ana"}]}}])
        fork = store.fork(thread, todos="inherit")
    code, out, _ = _run(db, "show", fork)
    assert code == 0 and ("\ntodos       [completed] book the train\n            [in_progress] find a hotel\n"
                          "            [pending] pack\n            call ana\n") in out, out


def test_show_text_json_and_replay(demo: tuple[Path, dict[str, object]]) -> None:
    db, ids = demo
    fork = str(ids["fork"])
    code, out, _ = _run(db, "show", fork)
    assert code == 0 and "status      idle" in out and '\nmetadata    user "ana"\n' in out
    code, out, _ = _run(db, "show", str(ids["thread"]), "--at", "3", "--json")
    data = json.loads(out)
    with Store(db) as store:
        assert data == thread_state(store, str(ids["thread"]), at=3).to_json()
    assert data["status"] == "running" and data["length"] == 3


def test_show_prints_a_sub_agents_directive_on_one_line(demo: tuple[Path, dict[str, object]]) -> None:
    """`show` of a sub-agent fork printed its origin and its parent's title alone: the directive
    that sets it apart from its siblings was only in `--json`. It has a line of its own now,
    folded and cut as the other one-line fields are; a thread without one has none."""
    db, ids = demo
    hotel, weather = ids["subagents"]  # type: ignore[misc]
    lines = _run(db, "show", str(hotel))[1].splitlines()
    assert lines[1] == "directive   Find a hotel near Lyon Part-Dieu.", lines
    assert "directive   Check Friday's weather in Lyon." in _run(db, "show", str(weather))[1].splitlines()
    assert not any(line.startswith("directive") for line in _run(db, "show", str(ids["fork"]))[1].splitlines())


def test_rows_blame_diff(demo: tuple[Path, dict[str, object]]) -> None:
    db, ids = demo
    t, fork = str(ids["thread"]), str(ids["fork"])
    code, out, _ = _run(db, "rows", t, "--json")
    assert code == 0 and {r["kind"] for r in json.loads(out)} >= {"text", "tool_call", "tool_result", "interrupt"}
    assert {"kind": "interrupt", "status": "resolved", "answer": "08:00"}.items() <= next(
        r for r in json.loads(out) if r["kind"] == "interrupt").items()
    code, out, _ = _run(db, "rows", t)
    assert "? Which train should I book? [resolved] 08:00" in out  # what the human answered
    code, out, _ = _run(db, "rows", fork)
    assert "⑃ Forked from" in out
    code, out, _ = _run(db, "blame", fork, "--json")
    assert [e["stream_id"] for e in json.loads(out)] == [t, fork]
    code, out, _ = _run(db, "diff", t, fork, "--json")
    assert json.loads(out)["fork_offset"] == 2
    code, out, _ = _run(db, "diff", t, fork)
    assert code == 0 and "common history: offsets 0..1" in out


def test_transcript_prints_or_writes_with_bounds(demo: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    db, ids = demo
    t = str(ids["thread"])
    code, out, _ = _run(db, "transcript", t)
    with Store(db) as store:
        assert code == 0 and out == transcript(store, t)
    target = tmp_path / "out.md"
    code, out, _ = _run(db, "transcript", t, "-o", str(target), "--max-bytes", "2048", "--max-message-bytes", "256", "--last", "2", "--stop", "8")
    assert code == 0 and len(target.read_bytes()) <= 2048 and "- messages: 4 (offsets 0..7)" in target.read_text()
    code, _, err = _run(db, "transcript", t, "--max-bytes", "10")
    assert code == 2


def test_snapshot_command_and_errors(demo: tuple[Path, dict[str, object]]) -> None:
    db, ids = demo
    code, out, _ = _run(db, "snapshot", str(ids["thread"]))
    assert code == 0 and "after its first 13 events (offsets 0..12" in out  # the demo thread's 13 events, its head
    code, out, _ = _run(db, "snapshot", "--drop")
    assert code == 0 and "dropped 1" in out
    code, _, err = _run(db, "show", "nope")
    assert code == 1 and err.startswith("error: thread 'nope' not found") and "Traceback" not in err
    code, _, err = _run(db, "show", str(ids["thread"]), "--at", "999")
    assert code == 1 and err.startswith("error: --at 999 is outside thread")


def test_demo_prints_the_forks_state_and_writes_the_parents_transcript(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    code, out, _ = _run(db, "demo")
    assert code == 0 and "Built a sample conversation" in out
    # it explains what it shows, and shows the tool call, the interrupt and the fork card
    assert "→ search_trains(" in out and "? Which train should I book?" in out and "⑃ Forked from demo-trip-to-lyon at 2" in out
    assert "interrupt" in out and "subagent" in out and "directive" in out
    # a sub-agent's answer, delivered to the parent
    assert "<summary>Find a hotel near Lyon Part-Dieu.</summary>" in out and "<result>Hotel Part-Dieu" in out
    path = Path(out.split("can be pointed at): ")[1].split("\n")[0])
    assert path.parent == tmp_path and path.read_text().startswith("# Transcript of thread ")
    events = _run(db, "verify", "--json")[1]
    code, again, _ = _run(db, "demo")
    assert code == 0 and "already holds the sample conversation; nothing was added" in again
    assert _run(db, "verify", "--json")[1] == events  # running it twice adds nothing


def test_request_and_show_at_events_that_hold_no_message_say_what_at_counts(tmp_path: Path) -> None:
    """`threadlog request T --at 0` said the thread names no model, and `show T --at 0` showed
    it with none: at 0 no event is read, not even thread.created. `request --at` of events that
    hold no message names the smallest that does; `show --at 0` is a usage error (the state
    after the first N events needs N >= 1). The file is left as it was."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(model="claude-test")
        store.append_message(t, "user", "hello")
    before = file_dump(db)
    for at in ("0", "1"):
        code, out, err = _run(db, "request", t, "--at", at)
        assert (code, out) == (1, ""), err
        assert err == (f"error: --at: thread '{t}' has no message to send as of its first {at} event(s): --at counts the "
                       "events the request is built from, its thread.created first; its first message is at offset 1, so "
                       "--at must be 2..2\n")
    code, out, err = _run(db, "show", t, "--at", "0")
    assert (code, out) == (2, "") and "Invalid value for '--at': 0 is not in the range x>=1." in err, err
    assert file_dump(db) == before
    assert json.loads(_run(db, "request", t, "--at", "2")[1])["model"] == "claude-test"
    assert json.loads(_run(db, "show", t, "--at", "1", "--json")[1])["model"] == "claude-test"


def test_a_thread_with_no_message_to_send_is_refused_without_naming_an_at_never_given(tmp_path: Path) -> None:
    """`threadlog request T` (and `export T --format anthropic`) of a thread holding no message
    a request can send (an imported session whose only message is a call never answered) said
    `error: at: thread 'T' has no message to send as of offset 3`: an option the user never
    typed, and an offset that read as a position in the thread."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(model="claude-test")
    for args in (["request", t], ["export", t, "--format", "anthropic"]):
        result = CliRunner().invoke(cli, ["--db", str(db), *args])
        assert result.exit_code == 1, result.output
        assert result.stderr == f"error: messages: thread '{t}' has no message to send\n"


def test_show_last_reads_only_the_messages_it_shows(tmp_path: Path) -> None:
    """`show --last N` decoded every message of the model view to print N of them: on a long
    thread that is the whole thread's time, and one message that cannot be read (altered
    outside threadlog) refused the N after it, which the viewer's pages show. Without
    `--last` the whole view is read, and the altered message refuses it, naming its position."""
    import sqlite3

    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(thread_id="t", title="t")
        store.append("t", [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(6)])
        position = store.event_at("t", 2).position
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = '{\"role\":' WHERE stream_id = 't' AND \"offset\" = 2")
    conn.commit()
    conn.close()
    before = file_dump(db)
    code, out, err = _run(db, "show", "t", "--last", "2")
    assert code == 0, err
    assert "messages    6 in the model view, the last 2 shown" in out
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("       ")] == ["m4", "m5"], out
    code, out, err = _run(db, "show", "t")
    assert code == 1 and f"position {position}" in err, err
    assert file_dump(db) == before
