"""Importing SWE-agent trajectories (`threadlog import swe-agent`): real files from SWE-agent's
repository (tests/fixtures/swe-agent), checked against their raw JSON; the requests rebuilt
from them validated by the SDK's types; refusals leave the database as it was."""

from __future__ import annotations

import base64
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

from threadlog import InvalidEvent, Store, anthropic_request, import_swe_agent, thread_state
from projections import validate_request
from threadlog.cli import cli
from tests.backends import file_dump
from tests.webstore import png

TRAJECTORIES = Path(__file__).resolve().parent / "fixtures" / "swe-agent"
SIMPLE = TRAJECTORIES / "function_calling_simple.traj"
MARSHMALLOW = TRAJECTORIES / "marshmallow-code__marshmallow-1867.traj"
CTF = TRAJECTORIES / "warmup.traj"  # plain-text actions: no tool calls
MODEL = "claude-sonnet-4-5"


def _history(path: Path) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["history"]
    return history


def _messages(store: Store, thread: str) -> list[dict[str, Any]]:
    return [e.data for e in store.read(thread) if e.type == "message.appended"]


def _import(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", str(db), "import", "swe-agent", *args])


@pytest.mark.parametrize("path", [SIMPLE, MARSHMALLOW, CTF], ids=["function-calling", "replay", "ctf-plain-text"])
def test_a_real_trajectory_becomes_its_history_and_a_request_the_sdk_accepts(file_store: Store, path: Path) -> None:
    history = _history(path)
    summary = import_swe_agent(file_store, [path])
    [thread] = summary.thread_ids
    created = next(file_store.read(thread)).data
    assert history[0]["role"] == "system" and created["system"] == history[0]["content"]
    messages = _messages(file_store, thread)
    # Each history entry after the system prompt is one message (no two tool messages are adjacent here).
    assert [m["role"] for m in messages] == [{"tool": "user"}.get(h["role"], h["role"]) for h in history[1:]]
    calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
             for h in history for c in h.get("tool_calls") or []]
    uses = [(b["id"], b["name"], b["input"]) for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert uses == calls and summary.tool_calls == len(calls)
    for before, message in zip(messages, messages[1:]):  # every result answers a call of the message before it
        answered = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        assert answered == [b["id"] for b in before["content"] if b["type"] == "tool_use"] or not answered
    results = [b for m in messages for b in m["content"] if b["type"] == "tool_result"]
    assert [r["content"][0]["text"] for r in results] == [h["content"] for h in history if h["role"] == "tool"]
    if path == CTF:  # the action stays the assistant's text
        assert not calls and messages[1]["content"][0]["text"] == history[2]["content"]
        assert "```\ndisassemble warmup\n```" in messages[1]["content"][0]["text"]
    assert thread_state(file_store, thread).model is None  # the replay ran on gpt-4o: no model a request may send
    assert created["metadata"].get("model") == ("gpt-4o" if path == MARSHMALLOW else None)  # replay_config names it

    request = anthropic_request(file_store, thread, model=MODEL)
    validate_request(request)
    sent = [b["id"] for m in request["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert len(sent) == len(set(sent)) == len(calls)  # the replay uses ids again: each is sent once per call
    assert import_swe_agent(file_store, [path]).added == 0
    file_store.verify()


def test_the_cli_imports_once_and_says_a_second_import_added_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    first = _import(db, str(TRAJECTORIES), "--json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert (report["files"], report["threads"], report["added"]) == (3, 3, report["events"])
    again = _import(db, str(TRAJECTORIES))
    assert again.exit_code == 0 and f"0 event(s) added of {report['events']}" in again.stdout, again.output
    before = file_dump(db)
    assert _import(db, str(SIMPLE)).exit_code == 0 and file_dump(db) == before  # wrote nothing
    listed = CliRunner().invoke(cli, ["--db", str(db), "ls"]).stdout
    assert "warmup" in listed and "marshmallow-code__marshmallow-1867" in listed  # titled by their instance

    with Store(db) as store:
        ctf = next(t for t in report["thread_ids"] if thread_state(store, t).title == "warmup")
    asked = CliRunner().invoke(cli, ["--db", str(db), "request", ctf])
    assert asked.exit_code == 1 and "names no model; pass --model" in asked.stderr, asked.output
    built = CliRunner().invoke(cli, ["--db", str(db), "request", ctf, "--model", MODEL])
    assert built.exit_code == 0, built.output
    validate_request(json.loads(built.stdout))
    assert not [b for m in json.loads(built.stdout)["messages"] for b in m["content"] if b["type"] != "text"]


def _trajectory(*history: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"history": list(history), "info": {}, **extra}, indent=2)


SYSTEM = {"role": "system", "content": "You fix bugs.", "agent": "main", "message_type": "system_prompt"}
TASK = {"role": "user", "content": "Fix it.", "agent": "main", "message_type": "observation"}


def test_a_trajectory_run_on_another_providers_model_builds_no_request_naming_it(file_store: Store) -> None:
    """The replay ran on gpt-4o: a request naming it is one the Messages API refuses (404, no
    such model), so the thread has no model, and `request` asks for one, as for a trajectory
    that names none; the model it ran with stays in its metadata."""
    [thread] = import_swe_agent(file_store, [MARSHMALLOW]).thread_ids
    assert thread_state(file_store, thread).metadata["model"] == "gpt-4o"
    with pytest.raises(InvalidEvent, match="names no model; pass model="):
        anthropic_request(file_store, thread)
    assert anthropic_request(file_store, thread, model=MODEL)["model"] == MODEL


@pytest.mark.parametrize(("name", "sent"), [("claude-sonnet-4-5", "claude-sonnet-4-5"),
                                            ("anthropic/claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20241022"),
                                            ("gpt-4o", None), ("openai/claude-like", None)],
                         ids=["claude", "litellm-anthropic-prefix", "openai", "other-prefix"])
def test_the_thread_model_is_the_name_the_messages_api_knows(tmp_path: Path, name: str, sent: str | None) -> None:
    path = tmp_path / "run.traj"
    path.write_text(_trajectory(SYSTEM, TASK, {"role": "assistant", "content": "Looking."},
                                replay_config=json.dumps({"agent": {"model": {"name": name}}})), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        [thread] = import_swe_agent(store, [path]).thread_ids
        state = thread_state(store, thread)
        assert state.model == sent and state.metadata.get("model") == (None if sent else name)
        if sent:
            assert anthropic_request(store, thread)["model"] == sent


def _call(call_id: str, arguments: Any, name: str = "bash") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool(text: str, *ids: str) -> dict[str, Any]:
    return {"role": "tool", "content": text, "tool_call_ids": list(ids), "message_type": "observation"}


def test_arguments_that_are_no_json_object_are_kept_and_a_run_of_tool_messages_is_one_message(tmp_path: Path) -> None:
    path = tmp_path / "run.traj"
    path.write_text(_trajectory(
        SYSTEM, TASK,
        {"role": "assistant", "content": "Two at once.", "tool_calls": [_call("a", "ls -la"), _call("b", '["x"]'), _call("c", "")]},
        _tool("listing", "a"), _tool("x", "b"), _tool("c done", "c"), _tool("late", "zzz"),
        {"role": "system", "content": "Budget: 2 steps left."},
        replay_config=json.dumps({"agent": {"model": {"name": "claude-x"}}}),  # as SWE-agent writes it: JSON text
    ), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        summary = import_swe_agent(store, [path])
        [thread] = summary.thread_ids
        events = [e for e in store.read(thread) if e.type == "message.appended"]
        call = events[1]
        assert [b["input"] for b in call.data["content"][1:]] == [{"arguments": "ls -la"}, {"arguments": '["x"]'}, {}]
        assert call.meta["source"]["flags"] == {"arguments_kept_as_text": ["a", "b"]}
        assert [(b["tool_use_id"], b["content"]) for b in events[2].data["content"]] == [
            ("a", [{"type": "text", "text": "listing"}]), ("b", [{"type": "text", "text": "x"}]), ("c", [{"type": "text", "text": "c done"}])]
        assert summary.skipped == {"tool_result without its call": 1}  # reported, not dropped unsaid
        assert events[3].data["role"] == "user" and events[3].meta["source"]["flags"] == {"injected": True, "role": "system"}
        assert thread_state(store, thread).model == "claude-x"
        validate_request(anthropic_request(store, thread))

        # A step later the file holds more: only that is added; an edited entry is reported, kept as stored.
        grown = _history(path)
        grown[1]["content"] = "Fix it now."
        grown.append({"role": "assistant", "content": "Done."})
        path.write_text(_trajectory(*grown), encoding="utf-8")
        again = import_swe_agent(store, [path])
        assert (again.added, again.changed) == (1, 1)
        assert again.changed_lines == [(str(path), 9)]  # the line history[1] starts on
        assert _messages(store, thread)[0]["content"][0]["text"] == "Fix it."


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity"])
def test_arguments_holding_a_number_no_event_stores_are_kept_as_their_text(tmp_path: Path, number: str) -> None:
    """The model wrote the arguments, and may write a number past a float's range (`1e400`,
    read as infinity) or Python's `NaN`: read as numbers they made the call's event one the store
    refuses, and the whole trajectory was refused ("not storable as UTF-8 JSON"). They are
    kept as the text the model wrote, as arguments that are no JSON object are."""
    arguments = '{"command": "python -c \'print(1)\'", "limit": ' + number + "}"
    path = tmp_path / "run.traj"
    path.write_text(_trajectory(SYSTEM, TASK, {"role": "assistant", "content": "", "tool_calls": [_call("a", arguments)]},
                                _tool("1", "a")), encoding="utf-8")
    result = _import(tmp_path / "t.db", str(path))
    assert result.exit_code == 0, result.output
    with Store(tmp_path / "t.db") as store:
        [thread] = store.threads()
        call = [e for e in store.read(thread.id) if e.type == "message.appended"][1]
        assert call.data["content"] == [{"type": "tool_use", "id": "a", "name": "bash", "input": {"arguments": arguments}}]
        assert call.meta["source"]["flags"] == {"arguments_kept_as_text": ["a"]}
        validate_request(anthropic_request(store, thread.id, model=MODEL))


def test_an_observation_s_images_are_image_blocks_and_what_is_left_out_is_counted_as_pi_counts_it(tmp_path: Path) -> None:
    """An `image_url` part (a screenshot a tool returned, OpenAI-style) was left out, counted as
    `content/'image_url'`; pi's importer keeps its images and counts what it leaves out as
    `block/<type>`. Now a data URL of one of the API's image types is the image's data, an
    http(s) one its address; the viewer draws the stored one."""
    shot = png(5, 3)
    data_url = "data:image/PNG;base64," + base64.b64encode(shot).decode()
    path = tmp_path / "shots.traj"
    path.write_text(_trajectory(
        SYSTEM, {**TASK, "content": [{"type": "text", "text": "Fix the layout:", "cache_control": {"type": "ephemeral"}},
                                      {"type": "image_url", "image_url": {"url": "https://example.com/bug.png"}}]},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [_call("shot", "{}", "screenshot")]},
        {"role": "tool", "tool_call_ids": ["shot"], "content": [{"type": "text", "text": "taken"},
                                                                 {"type": "image_url", "image_url": {"url": data_url}},
                                                                 {"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4="}},
                                                                 {"type": "input_audio", "input_audio": {}}]},
    ), encoding="utf-8")
    db = tmp_path / "t.db"
    result = _import(db, "--json", str(path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"] == {"block/image_url": 1, "block/input_audio": 1}
    with Store(db) as store:
        [thread] = [t.id for t in store.all_threads()]
        messages = _messages(store, thread)
        assert messages[0]["content"] == [{"type": "text", "text": "Fix the layout:"},
                                          {"type": "image", "source": {"type": "url", "url": "https://example.com/bug.png"}}]
        [result_block] = messages[2]["content"]
        assert result_block["content"] == [{"type": "text", "text": "taken"}, {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": data_url.partition(",")[2]}}]
        validate_request(anthropic_request(store, thread, model=MODEL))
    testclient = pytest.importorskip("starlette.testclient")  # the viewer is an optional extra
    from threadlog.web import create_app

    with testclient.TestClient(create_app(str(db)), base_url="http://127.0.0.1") as client:
        page = client.get("/thread", params={"id": thread}).text
        [src] = re.findall(r'<img class="stored-image" src="([^"]+)"', page)
        assert client.get(src.replace("&amp;", "&")).content == shot


@pytest.mark.parametrize(("content", "says"), [
    (b'{"history": [', "bad.traj:1: not JSON (Expecting value: line 1 column 14"),
    (b"\xff{}", "bad.traj:1: not UTF-8 text"),
    (b"[1, 2]", "bad.traj: not a SWE-agent trajectory: a .traj file is a JSON object holding a `history` list"),
    (b'{"trajectory": []}', "not a SWE-agent trajectory"),
    (b'{"type": "session", "id": "s"}\n{"type": "message"}\n',  # a pi session: it was "not JSON (Extra data: line 2 ..."
     "bad.traj: a pi session's header, so not a SWE-agent trajectory (JSON text): for a pi session, run `threadlog import pi`; "
     "leave that file out"),
    (b"[" * 100_000 + b"]" * 100_000, "bad.traj:1: JSON nested too deeply to read"),
    (_trajectory(SYSTEM, TASK, {"role": "robot", "content": "hi"}).encode(), "bad.traj:15: history[2]: role must be one of "),
    (_trajectory(SYSTEM, {"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "bash"}}]}).encode(),
     "bad.traj:9: history[1]: tool_calls[0] needs a non-empty string id"),
    (_trajectory(SYSTEM, {"role": "tool", "content": "x"}).encode(), "history[1]: a tool message needs tool_call_ids"),
    (_trajectory(SYSTEM, {"role": "user", "content": {"text": "x"}}).encode(), "history[1]: content must be text"),
    (_trajectory(SYSTEM, {"role": "user", "content": "\\ud800"}).encode().replace(b"\\\\ud800", b"\\ud800"),
     "bad.traj:9: history[1]: event.data: not storable as UTF-8 JSON"),  # a lone surrogate: no database can store it
], ids=["cut-short", "not-utf8", "a-list", "no-history", "jsonl", "deep", "role", "call-id", "tool-ids", "content", "surrogate"])
def test_a_file_that_cannot_be_imported_is_refused_by_name_with_nothing_written(tmp_path: Path, content: bytes, says: str) -> None:
    db = tmp_path / "t.db"
    assert _import(db, str(SIMPLE)).exit_code == 0
    bad = tmp_path / "bad.traj"
    bad.write_bytes(content)
    _age(bad, 3600)  # written an hour ago: not one SWE-agent is still writing
    before = file_dump(db)
    for paths in ([bad], [CTF, bad]):  # the good file before it is not written either
        result = _import(db, *map(str, paths))
        assert result.exit_code == 1 and result.stdout == "", result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and says in line and len(line) < 400, line
        assert file_dump(db) == before


def test_skip_bad_leaves_out_a_file_that_cannot_be_imported_and_imports_the_others(tmp_path: Path) -> None:
    """SWE-agent writes its file again, whole, after each step: a run killed meanwhile leaves it
    cut short, and one bad file in a directory of runs refused them all, with no way on but to
    find and move it (pi and Claude Code imports take --skip-bad). Now --skip-bad leaves out
    that file, named with the line of its entry when one is at fault, and imports the rest."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(SIMPLE, runs / "a.traj")
    whole = CTF.read_text(encoding="utf-8")
    (runs / "cut.traj").write_text(whole[: len(whole) // 2], encoding="utf-8")
    _age(runs / "cut.traj", 3600)  # an hour since: no run is writing it any more
    (runs / "robot.traj").write_text(_trajectory(SYSTEM, TASK, {"role": "robot", "content": "hi"}), encoding="utf-8")
    db = tmp_path / "t.db"
    refused = _import(db, str(runs))
    cut_line = whole[: len(whole) // 2].count("\n") + 1  # the line it was cut on
    assert refused.exit_code == 1 and f"cut.traj:{cut_line}: not JSON" in refused.stderr and "skip bad files (--skip-bad)" in refused.stderr
    assert not db.exists()  # nothing written, not even the file
    result = _import(db, "--skip-bad", "--json", str(runs))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["files"], summary["threads"], summary["skipped"]) == (1, 1, {"malformed": 2})
    assert [(Path(b["file"]).name, b["line"]) for b in summary["bad"]] == [("cut.traj", cut_line), ("robot.traj", 15)]
    assert "not JSON" in summary["bad"][0]["why"] and "history[2]: role must be one of" in summary["bad"][1]["why"]
    with Store(db) as store:
        assert [thread_state(store, t.id).title for t in store.all_threads()] == ["a"]
    (runs / "cut.traj").write_text(whole, encoding="utf-8")  # the run's next step wrote it whole
    again = json.loads(_import(db, "--skip-bad", "--json", str(runs)).stdout)
    assert again["added"] == len(_history(CTF)) + 1 and len(again["bad"]) == 1  # its history, then its exit status


def _age(path: Path, seconds: float) -> None:
    """Set `path`'s modification time `seconds` in the past."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def _cuts(text: bytes) -> list[bytes]:
    """`text` cut where a reader of a file being written may find it: empty, at each of the
    ways the JSON decoder finds it ended (inside a key, a string, a word, a number, a `\\u`
    escape, between values, inside a UTF-8 character), and at bytes spread through it."""
    marks = [b'"history', b'"role": "', b"[\n", b'": t', b'": n', b'": 1', b'": 1.', b"e-", b"\\u", b"\\ud83d", b"},", b"\xe2\x98"]
    at = [text.index(mark) + len(mark) for mark in marks if mark in text]
    return [text[:n] for n in sorted({0, 1, *at, *range(7, len(text), max(1, len(text) // 40))})]


def test_a_trajectory_being_rewritten_waits_for_a_later_import_and_an_old_cut_one_is_refused(tmp_path: Path) -> None:
    """SWE-agent writes the whole file again after each step, in place: an import that read it
    meanwhile found it empty or cut short, and refused the whole directory of runs (the run
    still going named as if it were broken). A file changed in the last 10 minutes and cut
    short now waits for a later import, as a pi or Claude Code file's half-written last line
    does; the other files are imported, and one cut short an hour ago is refused as before."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(SIMPLE, runs / "done.traj")
    live = _trajectory(SYSTEM, {**TASK, "content": "caf\u00e9 \u2615 \ud83d\ude00"}, {"role": "assistant", "content": None,
                       "tool_calls": [_call("a", '{"n": -1.5e3, "ok": true, "x": null}')]}, _tool("out", "a"),
                       info={"exit_status": None, "model_stats": {"instance_cost": 1.25e-05, "api_calls": 1}})
    texts = [*_cuts(MARSHMALLOW.read_bytes()), *_cuts(live.replace("\\u2615", "\u2615").encode())]
    assert b"\xe2\x98" in texts[-1] and any(t.endswith(b"\xe2\x98") for t in texts)  # one is cut inside a character
    for n, text in enumerate(texts):
        (runs / f"cut{n:03}.traj").write_bytes(text)
    cut = sorted(str(path) for path in runs.glob("cut*.traj"))
    db = tmp_path / "t.db"

    result = _import(db, "--json", str(runs))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["files"], summary["threads"], summary["added"]) == (1, 1, len(_history(SIMPLE)))
    assert summary["waiting"] == len(cut) and sorted(summary["waiting_files"]) == cut and summary["bad"] == []
    with Store(db) as store:
        assert [thread_state(store, t.id).title for t in store.all_threads()] == ["done"]  # nothing for the cut files
    shown = _import(db, str(runs))
    assert shown.exit_code == 0 and f"still being written, left for a later import: {len(cut)} " in shown.stdout
    assert f"\n  {cut[0]}\n" in shown.stdout and "0 event(s) added" in shown.stdout

    # Something else that is no trajectory is refused however new: only a file cut short waits.
    (runs / "cut000.traj").write_text('{"type": "session", "id": "s"}\n{"type": "message"}\n', encoding="utf-8")
    before = file_dump(db)
    refused = _import(db, str(runs))
    assert refused.exit_code == 1 and "cut000.traj: a pi session's header, so not" in refused.stderr
    assert file_dump(db) == before
    (runs / "cut000.traj").write_bytes(texts[0])

    # The run's next step wrote one whole: it is imported, the others still wait.
    (runs / "cut005.traj").write_bytes(MARSHMALLOW.read_bytes())
    again = json.loads(_import(db, "--json", str(runs)).stdout)
    assert again["added"] == len(_history(MARSHMALLOW)) + 1 and again["waiting"] == len(cut) - 1  # + its exit status

    # An hour later the others are not being written: cut short, they are refused, or skipped;
    # the empty ones (cut000 among them) hold nothing, and an import of the directory leaves them out.
    for path in cut:
        _age(Path(path), 3600)
    before = file_dump(db)
    refused = _import(db, str(runs))
    assert refused.exit_code == 1 and "cut001.traj:1: not JSON" in refused.stderr and "cut000" not in refused.stderr
    assert "skip bad files (--skip-bad)" in refused.stderr and file_dump(db) == before
    empty = [p for p in cut if not Path(p).stat().st_size]  # a cut of each text at 0 bytes
    skipped = json.loads(_import(db, "--json", "--skip-bad", str(runs)).stdout)
    assert (skipped["waiting"], skipped["skipped"], skipped["added"]) == (0, {"malformed": len(cut) - len(empty) - 1}, 0)
    assert sorted(b["file"] for b in skipped["bad"]) == [p for p in cut if p not in empty and not p.endswith("cut005.traj")]
    named = _import(db, str(runs / "cut000.traj"))  # named alone, it is refused as what it is
    assert named.exit_code == 1 and ("cut000.traj: an empty file, not a SWE-agent trajectory (JSON text); leave that file out, "
                                     "or skip such files (--skip-bad)") in named.stderr, named.stderr  # "fix or delete" it


def test_a_run_imported_while_it_went_on_gets_its_exit_status_when_imported_again(tmp_path: Path) -> None:
    """SWE-agent writes `info.exit_status` when the run ends. It went into the thread's
    metadata when the thread was made, so a run imported while it was going on (whole after
    each step) never got it: the later import added the new steps and left the thread without
    an exit status. It is now a `metadata.set` after the history, once."""
    whole = json.loads(MARSHMALLOW.read_text(encoding="utf-8"))
    path = tmp_path / "run.traj"
    path.write_text(json.dumps({**whole, "history": whole["history"][:5], "info": {}}), encoding="utf-8")
    db = tmp_path / "t.db"
    with Store(db) as store:
        [thread] = import_swe_agent(store, [path]).thread_ids
        assert "exit_status" not in thread_state(store, thread).metadata
        path.write_text(json.dumps(whole), encoding="utf-8")  # the run's last step
        assert import_swe_agent(store, [path]).added == len(whole["history"]) - 5 + 1
        assert thread_state(store, thread).metadata["exit_status"] == "submitted"
        assert [e.type for e in store.read(thread)][-1] == "metadata.set"
        assert import_swe_agent(store, [path]).added == 0
        store.verify()
    fresh = tmp_path / "fresh.db"  # imported once, after the run ended: the same thread
    with Store(fresh) as store, Store(db) as first:
        import_swe_agent(store, [path])
        assert [e.data for e in store.read(thread)] == [e.data for e in first.read(thread)]


def test_a_cut_trajectory_dated_ahead_of_the_clock_is_refused_not_left_waiting_until_then(tmp_path: Path) -> None:
    """A file whose modification time is a year ahead (copied from a machine whose clock ran
    ahead, or `touch -d`) counted as changed in the last 10 minutes: cut short, it was named
    "still being written" on every import for a year instead of refused. A time more than 10
    minutes ahead is no sign of a writer: the file is refused as an old cut one is."""
    cut = tmp_path / "cut.traj"
    whole = CTF.read_text(encoding="utf-8")
    cut.write_text(whole[: len(whole) // 2], encoding="utf-8")
    _age(cut, -365 * 24 * 3600.0)
    db = tmp_path / "t.db"
    result = _import(db, "--json", str(cut))
    line = whole[: len(whole) // 2].count("\n") + 1  # the line it was cut on
    assert result.exit_code == 1 and f"{cut}:{line}: not JSON (" in result.stderr, result.output
    assert "still being written" not in result.output and not db.exists()
    _age(cut, -60)  # a minute ahead (a clock a little off): still taken as one being written
    waiting = _import(db, "--json", str(cut))
    assert waiting.exit_code == 0 and json.loads(waiting.stdout)["waiting_files"] == [str(cut)], waiting.output


def test_finished_refuses_a_cut_trajectory_just_copied_and_imports_a_whole_one(tmp_path: Path) -> None:
    """Trajectories copied from another machine are all changed "now": one cut short (SWE-agent
    killed mid-write there) waited for a later import that could never complete it. With
    `--finished` it is refused as an old cut one is, naming it; a whole one is imported."""
    cut = tmp_path / "cut.traj"
    whole = CTF.read_text(encoding="utf-8")
    cut.write_text(whole[: len(whole) // 2], encoding="utf-8")
    db = tmp_path / "t.db"
    waiting = _import(db, "--json", str(cut))
    assert waiting.exit_code == 0 and json.loads(waiting.stdout)["waiting_files"] == [str(cut)], waiting.output
    db.unlink()
    refused = _import(db, "--json", "--finished", str(cut))
    line = whole[: len(whole) // 2].count("\n") + 1  # the line it was cut on
    assert refused.exit_code == 1 and f"{cut}:{line}: not JSON (" in refused.stderr, refused.output
    assert "still being written" not in refused.output and not db.exists()
    copied = tmp_path / "copied.traj"
    shutil.copy(CTF, copied)
    done = _import(db, "--json", "--finished", str(copied))
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["threads"], report["waiting"], report["bad"]) == (1, 0, []) and report["added"] > len(_history(CTF))


def test_a_replay_demo_and_a_directory_without_trajectories_are_refused(tmp_path: Path) -> None:
    demo = tmp_path / "str_replace_anthropic_demo.yaml"
    demo.write_text("history:\n  - role: user\n    content: hi\n", encoding="utf-8")
    db = tmp_path / "t.db"
    result = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), "import", "swe-agent", str(demo)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "a replay demo is YAML, and holds no trajectory" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not db.exists()
    result = _import(db, str(tmp_path))
    assert result.exit_code == 2 and "holds no SWE-agent trajectory file (*.traj, searched recursively)" in result.stderr
    assert not db.exists()


HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202egnp.exe\x9b31m"


def test_hostile_text_reaches_no_terminal_raw(tmp_path: Path) -> None:
    folder = tmp_path / f"runs{HOSTILE}"
    folder.mkdir()
    path = folder / f"evil{HOSTILE}.traj"  # its name is the thread's title
    path.write_text(_trajectory(
        {**SYSTEM, "content": "sys" + HOSTILE}, {**TASK, "content": "task" + HOSTILE},
        {"role": "assistant", "content": "ok" + HOSTILE, "tool_calls": [_call("t" + HOSTILE, json.dumps({"cmd": HOSTILE}), "x" + HOSTILE)]},
        _tool("out" + HOSTILE, "t" + HOSTILE), {"role": "user", "content": [{"type": "image" + HOSTILE}]},
    ), encoding="utf-8")
    db = tmp_path / "t.db"
    outputs = [_import(db, str(path))]
    with Store(db) as store:
        [thread] = [t.id for t in store.all_threads()]
    outputs += [CliRunner().invoke(cli, ["--db", str(db), *command])
                for command in (["ls"], ["show", thread], ["log", thread], ["transcript", thread], ["request", thread, "--model", MODEL])]
    bad = folder / "bad.traj"
    bad.write_text(_trajectory(SYSTEM, {"role": "x" + HOSTILE}), encoding="utf-8")
    outputs.append(_import(db, str(bad)))
    assert outputs[-1].exit_code == 1 and "role must be one of" in outputs[-1].stderr
    for result in outputs:
        shown = result.stdout + result.stderr
        assert not set("\x1b\x07\u202e\x9b") & set(shown), shown[:2000]
    assert outputs[0].exit_code == 0 and "block/image\\x1b" in outputs[0].stdout  # the part left out is named
    with Store(db) as store:  # stored as it came: only its printing is escaped
        texts = [b.get("text") for m in _messages(store, thread) for b in m["content"]]
        assert "task" + HOSTILE in texts and "ok" + HOSTILE in texts
        validate_request(anthropic_request(store, thread, model=MODEL))


def test_import_swe_agent_takes_a_list_of_paths(tmp_path: Path) -> None:
    shutil.copy(SIMPLE, tmp_path / "a.traj")
    with Store(tmp_path / "t.db") as store, pytest.raises(InvalidEvent, match="must be a list of paths"):
        import_swe_agent(store, str(tmp_path / "a.traj"))  # type: ignore[arg-type]


def _marred(how: str) -> tuple[bytes, int]:
    """The real marshmallow trajectory with a fault in its last entry, and the line it is on:
    a byte that is not UTF-8, a value nested 10,000 deep, or the file cut off there."""
    text = MARSHMALLOW.read_text(encoding="utf-8")
    at = text.rindex('"role": "assistant"')  # the last entry's
    line = text.count("\n", 0, at) + 1
    raw = text.encode("utf-8")
    at = len(text[:at].encode("utf-8"))
    if how == "not-utf8":
        return raw[:at] + b'"\xff": 1, ' + raw[at:], line
    if how == "deep":
        return raw[:at] + b'"deep": ' + b"[" * 10_000 + b"]" * 10_000 + b", " + raw[at:], line
    return raw[: at + len('"role": "assi')], line


@pytest.mark.parametrize(("how", "says"), [
    ("not-utf8", "not UTF-8 text (invalid start byte at byte "),
    ("deep", "JSON nested too deeply to read (an event holds at most 100 levels)"),
    ("cut", "not JSON (Unterminated string"),
], ids=["not-utf8", "deep", "cut"])
def test_a_fault_late_in_a_real_trajectory_is_refused_naming_its_file_and_line(tmp_path: Path, how: str, says: str) -> None:
    """A trajectory is one JSON document over hundreds of lines: a byte that is not UTF-8 or a
    value nested too deeply to read, near its end, was refused naming the file alone (the
    first with a byte offset, the second with nothing), and --skip-bad named it at line 1, so
    finding the fault meant searching the whole file. Each is named FILE:LINE, the line it is
    on, with nothing written, and --skip-bad skips it at that line."""
    db = tmp_path / "t.db"
    assert _import(db, str(SIMPLE)).exit_code == 0
    content, line = _marred(how)
    bad = tmp_path / "bad.traj"
    bad.write_bytes(content)
    _age(bad, 3600)
    before = file_dump(db)
    result = _import(db, str(bad))
    assert result.exit_code == 1 and result.stdout == "", result.output
    [refusal] = result.stderr.splitlines()
    assert refusal.startswith(f"error: {bad}:{line}: {says}") and "Traceback" not in result.output, refusal
    assert file_dump(db) == before
    skipped = _import(db, "--skip-bad", "--json", str(SIMPLE), str(bad))
    assert skipped.exit_code == 0, skipped.output
    [(file, at)] = [(b["file"], b["line"]) for b in json.loads(skipped.stdout)["bad"]]
    assert (file, at) == (str(bad), line)


@pytest.mark.parametrize("kind", ["claude-code", "pi", "swe-agent"])
def test_a_number_too_long_to_read_is_named_at_its_line_without_pythons_advice(tmp_path: Path, kind: str) -> None:
    """A number of 5,000 digits late in a file was refused as "not JSON (Exceeds the limit
    (4300 digits) for integer string conversion: ...; use sys.set_int_max_str_digits() to
    increase the limit)": advice for a Python program, which no one importing can take, and
    for a trajectory with no line. It is named at its line, saying what was too long."""
    number = "1" + "0" * 5000
    if kind == "swe-agent":
        text = MARSHMALLOW.read_text(encoding="utf-8")
        at = text.rindex('"role": "assistant"')
        line = text.count("\n", 0, at) + 1
        content = text[:at] + f'"n": {number}, ' + text[at:]
        bad = tmp_path / "bad.traj"
    else:
        head = ('{"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/x"}\n' if kind == "pi"
                else "")
        line = 2 + bool(head)
        content = head + '{"type": "summary", "summary": "a"}\n' + f'{{"type": "summary", "n": {number}}}\n'
        bad = tmp_path / "5e55e55e-0000-4000-8000-000000000001.jsonl"
    bad.write_text(content, encoding="utf-8")
    _age(bad, 3600)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(bad)])
    assert result.exit_code == 1 and result.stdout == "" and "Traceback" not in result.output, result.output
    [refusal] = result.stderr.splitlines()
    assert refusal.startswith(f"error: {bad}:{line}: not JSON (a number of 5001 digits"), refusal
    assert "sys." not in refusal and not db.exists()
