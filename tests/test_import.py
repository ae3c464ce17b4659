"""Importing Claude Code and pi sessions, following a live one, and exporting.

Counts are made here from the raw JSONL, independently of the importer's own grouping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from threadlog import (
    BadLine,
    anthropic_request,
    display_rows,
    Store,
    StoreError,
    export_all,
    export_events,
    export_markdown,
    import_claude_code,
    import_pi,
    import_swe_agent,
    thread_state,
)
from eventstore import integrity
from projections import validate_request
from projections.usage import total, usage
from threadlog.cli import cli
from threadlog.importers.follow import follow_claude_code
from tests.backends import file_dump
from tests.procs import bound_by_file_modes, ctrl_c, interruptible

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CC = FIXTURES / "claude-code"
SUBAGENT_SESSION = CC / "-src-experiments-claude_p" / "29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl"
COMPACTED = CC / "dag" / "dag_compact_after_rewind.jsonl"
PI = FIXTURES / "pi" / "large-session-head.jsonl"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _raw(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _raw_counts(path: Path) -> tuple[int, int]:
    """(API responses, tool calls) in the file's main-chain lines, from the raw JSONL."""
    return _raw_counts_of(path, sidechain=False)


def _raw_counts_of(path: Path, sidechain: bool = True) -> tuple[int, int]:
    """`_raw_counts`, of the sidechain lines too unless `sidechain=False`."""
    responses, calls = set(), set()
    for record in _raw(path):
        if record.get("type") != "assistant" or (record.get("isSidechain") and not sidechain):
            continue
        message = record["message"]
        if any(b.get("type") != "text" or b.get("text") for b in message["content"]):
            responses.add(message.get("id") or record["uuid"])
        calls.update(b["id"] for b in message["content"] if b.get("type") == "tool_use")
    return len(responses), len(calls)


# The session files whose main chain holds a response (a file of system lines alone, a sub-agent's
# lines alone, or a workflow's journal makes no thread of its own to count).
SESSIONS = sorted(p for p in CC.rglob("*.jsonl") if not p.name.startswith("agent-") and _raw_counts(p)[0])

def _own_events(store: Store, thread: str) -> list[Any]:
    return list(store.read(thread, start=store.thread(thread).base))


def _session_streams(store: Store, root: str, kind: str | None = None) -> list[str]:
    return [info.id for info in store.subtree(root) if kind is None or info.kind == kind]


@pytest.mark.parametrize("session", SESSIONS, ids=[p.stem[:12] for p in SESSIONS])
def test_session_counts_match_the_raw_file(mem: Store, session: Path) -> None:
    summary = import_claude_code(mem, [session])
    assert summary.threads >= 1
    thread = summary.thread_ids[0]
    responses, calls = set(), set()
    for stream in _session_streams(mem, thread):
        if mem.thread(stream).kind == "subagent":
            continue
        for event in _own_events(mem, stream):
            if event.type == "message.appended" and event.data["role"] == "assistant":
                responses.add(event.data.get("message_id") or event.meta["source"]["uuid"])
                calls.update(b["id"] for b in event.data["content"] if b["type"] == "tool_use")
    assert (len(responses), len(calls)) == _raw_counts(session)
    mem.verify()


def test_reimport_adds_nothing(mem: Store) -> None:
    first = import_claude_code(mem, [CC])
    before = tuple(mem.counts())
    again = import_claude_code(mem, [CC])
    assert first.added > 0 and again.added == 0
    assert tuple(mem.counts()) == before


def test_grown_file_adds_only_its_new_lines(mem: Store, tmp_path: Path) -> None:
    lines = SUBAGENT_SESSION.read_bytes().splitlines(keepends=True)
    grown = tmp_path / SUBAGENT_SESSION.name
    grown.write_bytes(b"".join(lines[: len(lines) // 2]))
    import_claude_code(mem, [grown])
    before = mem.counts().events
    grown.write_bytes(b"".join(lines))
    second = import_claude_code(mem, [grown])
    assert second.added == mem.counts().events - before > 0
    whole = Store(":memory:")
    import_claude_code(whole, [grown])
    thread = second.thread_ids[0]
    assert [e.event_id for e in mem.read(thread)] == [e.event_id for e in whole.read(thread)]


def test_subagent_is_a_fork_at_its_task_call(mem: Store) -> None:
    summary = import_claude_code(mem, [SUBAGENT_SESSION])
    assert summary.subagents == 1
    thread = summary.thread_ids[0]
    (agent,) = [info for info in mem.subtree(thread) if info.kind == "subagent"]
    assert agent.parent_id == thread
    raw = _raw(SUBAGENT_SESSION)
    agent_id = _raw(next(CC.rglob("agent-a2271d1.jsonl")))[0]["agentId"]
    (call,) = [b["tool_use_id"] for r in raw if isinstance(r.get("toolUseResult"), dict) and r["toolUseResult"].get("agentId") == agent_id
               for b in r["message"]["content"] if b.get("type") == "tool_result"]
    holder = mem.event_at(thread, agent.parent_offset - 1)
    assert call in [b.get("id") for b in holder.data["content"]]


def _parallel_agents_session(folder: Path) -> dict[str, str]:
    """A session at `folder` as Claude Code 2.1.x writes one: a response starting two sub-agents
    at once (two `Agent` calls, a line each), their results naming their agentIds, and each
    agent's file under `<session>/subagents/`. Returns agentId -> the call that started it."""
    def line(type_: str, uuid: str, parent: str | None, message: dict[str, Any], **more: Any) -> str:
        return json.dumps({"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": "s-2", "isSidechain": False,
                           "timestamp": f"2026-01-01T00:00:{len(uuid):02d}Z", "message": message, **more}) + "\n"

    def response(id_: str, blocks: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {"role": "assistant", "id": id_, "model": "claude-x", "stop_reason": stop, "content": blocks}

    agents = {"a1111": "toolu_first", "a2222": "toolu_second"}
    lines = [line("user", "u", None, {"role": "user", "content": "review both modules"})]
    parent = "u"
    for n, call in enumerate(agents.values()):
        lines.append(line("assistant", f"c{n}", parent, response("msg_A", [{"type": "tool_use", "id": call, "name": "Agent",
                                                                            "input": {"prompt": f"review module {n}"}}], "tool_use")))
        parent = f"c{n}"
    for n, (agent, call) in enumerate(agents.items()):
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": f"module {n} is fine"}]}
        lines.append(line("user", f"r{n}", parent, result, toolUseResult={"agentId": agent, "status": "completed"}))
        parent = f"r{n}"
    lines.append(line("assistant", "b", parent, response("msg_B", [{"type": "text", "text": "Both are fine."}], "end_turn")))
    (folder / "s-2.jsonl").write_text("".join(lines), encoding="utf-8")
    subagents = folder / "s-2" / "subagents"
    subagents.mkdir(parents=True)
    for n, agent in enumerate(agents):
        own = [line("user", f"{agent}-u", None, {"role": "user", "content": f"review module {n}"}, isSidechain=True, agentId=agent),
               line("assistant", f"{agent}-a", f"{agent}-u", response(f"msg_{agent}", [{"type": "text", "text": f"module {n} is fine"}],
                                                                      "end_turn"), isSidechain=True, agentId=agent)]
        (subagents / f"agent-{agent}.jsonl").write_text("".join(own), encoding="utf-8")
    return agents


def test_sub_agents_started_by_one_response_each_name_the_call_that_started_them(tmp_path: Path) -> None:
    """Parallel `Agent` calls of one response put their sub-agent forks at one offset, told apart
    by agentId alone: which call started which was not kept. Each fork's metadata names it now
    (`parentToolUseID`, as Claude Code names it), and `show` prints it."""
    db = tmp_path / "t.db"
    agents = _parallel_agents_session(tmp_path)
    with Store(db) as store:
        summary = import_claude_code(store, [tmp_path])
        assert summary.subagents == 2
        forks = [t for t in store.all_threads() if t.kind == "subagent"]
        assert len({t.parent_offset for t in forks}) == 1
        holder = store.event_at(forks[0].parent_id, forks[0].parent_offset - 1)
        assert [b["id"] for b in holder.data["content"]] == list(agents.values())
        named = {thread_state(store, t.id).metadata["agentId"]: thread_state(store, t.id).metadata.get("parentToolUseID")
                 for t in forks}
        assert named == agents
        assert import_claude_code(store, [tmp_path]).added == 0
    for fork in forks:
        shown = CliRunner().invoke(cli, ["--db", str(db), "show", fork.id])
        assert shown.exit_code == 0, shown.output
        # `show` gives metadata a key a line, under "metadata" in its first column
        [named_call] = [line.removeprefix("metadata").split(None, 1)[1] for line in shown.output.splitlines()
                        if line.removeprefix("metadata").lstrip().startswith("parentToolUseID ")]
        assert json.loads(named_call) in agents.values()


@pytest.mark.parametrize("given", ["file", "directory"])
def test_a_sub_agent_file_without_its_session_is_a_thread_of_its_own(tmp_path: Path, given: str) -> None:
    """A sub-agent's file whose session is not imported with it (deleted, or not among the
    paths): every line of it is a sidechain line, which only a session's own file holds as
    inline sub-agents; it was read as one and nothing was imported, without a word."""
    agent = SUBAGENT_SESSION.with_suffix("") / "subagents" / "agent-a2271d1.jsonl"
    loose = tmp_path / "in" / agent.name
    loose.parent.mkdir()
    shutil.copy(agent, loose)
    responses, calls = _raw_counts_of(agent)
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [loose if given == "file" else loose.parent])
        assert (summary.threads, summary.assistant_messages, summary.tool_calls) == (1, responses, calls)
        [thread] = summary.thread_ids
        assert store.thread(thread).kind == "thread" and store.counts().events == summary.added
        assert import_claude_code(store, [loose]).added == 0


def test_compaction_view_equals_what_was_sent(mem: Store) -> None:
    summary = import_claude_code(mem, [COMPACTED])
    assert summary.compactions == 1
    raw = _raw(COMPACTED)
    (kept_summary,) = [r for r in raw if r.get("isCompactSummary")]
    after = [r for r in raw[raw.index(kept_summary) + 1:] if r["type"] in ("user", "assistant")]
    state = thread_state(mem, summary.thread_ids[0])
    texts = [[b.get("text") for b in m.content] for m in state.messages]
    content = kept_summary["message"]["content"]
    summary_text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    assert texts == [[summary_text], *[[b["text"] for b in r["message"]["content"]] for r in after]]
    assert summary.forks == 1  # the rewound first attempt


def test_malformed_line_names_it_and_writes_nothing(mem: Store, tmp_path: Path) -> None:
    lines = SUBAGENT_SESSION.read_text(encoding="utf-8").splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:5]) + '{"type": "user", "uuid": 5}\n' + "".join(lines[5:]), encoding="utf-8")
    with pytest.raises(BadLine, match=r"bad.jsonl:6: "):
        import_claude_code(mem, [bad])
    assert tuple(mem.counts()) == (0, 0)
    summary = import_claude_code(mem, [bad], skip_bad=True)
    assert summary.skipped["malformed"] == 1 and summary.bad[0][1] == 6


_CORRUPTIONS = ["truncate", "retype", "drop", "utf8"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0), how=st.sampled_from(_CORRUPTIONS), cut=st.floats(0.05, 0.95), field=st.integers(0))
def test_corrupted_lines_never_raise_a_traceback(tmp_path: Path, index: int, how: str, cut: float, field: int) -> None:
    lines = (CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl").read_bytes().splitlines()
    i = index % len(lines)
    line = lines[i]
    record = json.loads(line)
    if how == "truncate":
        lines[i] = line[: int(len(line) * cut)]
    elif how == "utf8":
        lines[i] = line[: int(len(line) * cut)] + b"\xff\xfe" + line[int(len(line) * cut):]
    else:
        keys = sorted(record) + sorted(record.get("message") or {})
        key = keys[field % len(keys)]
        target = record if key in record else record["message"]
        if how == "drop":
            del target[key]
        else:
            target[key] = [1] if isinstance(target[key], str) else "x"
        lines[i] = json.dumps(record).encode()
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    store = Store(tmp_path / "fuzz.db")
    try:
        import_claude_code(store, [path])
    except BadLine as error:
        assert error.file == str(path) and error.line >= 1
        assert store.counts().events == 0
    summary = import_claude_code(Store(":memory:"), [path], skip_bad=True)
    assert summary.files == 1
    store.close()
    path.unlink()
    (tmp_path / "fuzz.db").unlink()


def test_a_pi_answer_with_signed_thinking_and_code_imports_as_pi_keeps_it(tmp_path: Path) -> None:
    """pi's own fixture of an answer (a thinking block with its signature, then text; both hold
    fenced code) in a version 1 session: the thread holds both blocks as they are written, the
    request sends the thinking back with its signature, and the thread verifies and renders."""
    answer = json.loads((FIXTURES / "pi" / "assistant-message-with-thinking-code.json").read_text(encoding="utf-8"))
    session = tmp_path / "code.jsonl"
    header = {"type": "session", "id": "5e0a3c7e-0000-4000-8000-000000000001", "timestamp": "2025-12-21T22:49:00.000Z",
              "cwd": "/work", "provider": "anthropic", "modelId": answer["model"], "thinkingLevel": "high"}
    asked = {"role": "user", "content": [{"type": "text", "text": "How does findModel work?"}], "timestamp": answer["timestamp"] - 1}
    session.write_text("".join(json.dumps(r) + "\n" for r in [
        header, {"type": "message", "timestamp": "2025-12-21T22:49:01.000Z", "message": asked},
        {"type": "message", "timestamp": "2025-12-21T22:49:32.000Z", "message": answer}]), encoding="utf-8")
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        [t] = import_pi(store, [session]).thread_ids
        thinking, said = answer["content"]
        stored = thread_state(store, t).messages[-1].content
        assert stored == [{"type": "thinking", "thinking": thinking["thinking"], "signature": thinking["thinkingSignature"]},
                          {"type": "text", "text": said["text"]}]
        assert "```typescript" in stored[0]["thinking"] and "```" in stored[1]["text"]
        kwargs = anthropic_request(store, t)
        validate_request(kwargs)
        assert kwargs["model"] == "claude-opus-4-5" and kwargs["messages"][-1]["content"][0] == stored[0]
        store.verify()
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", db, "transcript", t])
    assert shown.exit_code == 0, shown.output
    assert said["text"].splitlines()[0] in shown.output
    assert runner.invoke(cli, ["--db", db, "verify"]).exit_code == 0


def test_pi_counts_match_the_raw_file(mem: Store) -> None:
    summary = import_pi(mem, [PI])
    raw = [r for r in _raw(PI) if r.get("type") == "message"]
    assistant = [r for r in raw if r["message"]["role"] == "assistant" and r["message"]["content"]]
    calls = sum(1 for r in assistant for b in r["message"]["content"] if b["type"] == "toolCall")
    events = [e for e in mem.read(summary.thread_ids[0]) if e.type == "message.appended"]
    assert sum(1 for e in events if e.data["role"] == "assistant") == len(assistant)
    assert sum(1 for e in events for b in e.data["content"] if b["type"] == "tool_use") == calls
    assert import_pi(mem, [PI]).added == 0
    mem.verify()


def _as_pi_writes_now(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A version 1 pi session as pi writes it since version 2: each entry an `id` and the one
    before as `parentId` (pi's own migration), and a header that names no model (a session id of
    its own: the version 1 file is imported beside it)."""
    header = {k: records[0][k] for k in ("type", "timestamp", "cwd")} | {"version": 3, "id": f"{records[0]['id']}-now"}
    entries = [dict(r, id=f"{i:08x}", parentId=f"{i - 1:08x}" if i else None) for i, r in enumerate(records[1:])]
    return [header, *entries]


@pytest.mark.parametrize("model_change", [True, False])
def test_a_pi_session_whose_header_names_no_model_takes_the_model_it_began_with(tmp_path: Path, model_change: bool) -> None:
    """pi's headers name no model since version 2 (a `model_change` entry does, as the session
    starts): every such session was a thread without a model, which `threadlog request` refused
    (`names no model; pass --model`). Its model is its first model change's, else its first
    Claude answer's (this session's first answer is `gpt-5.1-codex`'s, which the Messages API
    refuses: a thread that took it sent it in every request); a version 1 header's model stays
    the thread's."""
    records = _as_pi_writes_now(_raw(PI))
    if not model_change:
        records = [r for r in records if r.get("type") != "model_change"]
    answers = [r["message"]["model"] for r in records if r.get("type") == "message" and r["message"]["role"] == "assistant"]
    expected = _raw(PI)[0]["modelId"] if model_change else next(m for m in answers if m.startswith("claude-"))
    assert (expected, answers[0]) == ("claude-sonnet-4-5", "gpt-5.1-codex")
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", db, "import", "pi", str(session), str(PI), "--json"])
    assert imported.exit_code == 0, imported.output
    now, v1 = json.loads(imported.output)["thread_ids"]
    for thread, model in ((now, expected), (v1, "claude-sonnet-4-5")):
        request = runner.invoke(cli, ["--db", db, "request", thread])
        assert request.exit_code == 0, request.output
        kwargs = json.loads(request.output)
        assert kwargs["model"] == model
        validate_request(kwargs)
        assert json.loads(runner.invoke(cli, ["--db", db, "show", thread, "--json"]).output)["model"] == model


def test_a_pi_session_run_on_other_providers_models_alone_has_no_model(tmp_path: Path) -> None:
    """pi runs on many providers: a session that named only OpenAI's models made a thread whose
    model was `gpt-5`, sent in every request of it (and of a fork continued live), which the
    Messages API refuses. It has no model, the one it began with kept as `modelId` metadata:
    `request` asks for --model, and takes it."""
    records = [r for r in _as_pi_writes_now(_raw(PI)) if r.get("type") != "model_change"]
    for record in records:
        if record.get("type") == "message" and record["message"]["role"] == "assistant":
            record["message"] = {**record["message"], "provider": "openai", "api": "openai-responses", "model": "gpt-5"}
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", db, "import", "pi", str(session), "--json"])
    assert imported.exit_code == 0, imported.output
    [thread] = json.loads(imported.output)["thread_ids"]
    shown = json.loads(runner.invoke(cli, ["--db", db, "show", thread, "--json"]).output)
    assert (shown["model"], shown["metadata"]["modelId"]) == (None, "gpt-5")
    refused = runner.invoke(cli, ["--db", db, "request", thread])
    assert refused.exit_code == 1 and "--model" in refused.stderr and "gpt-5" not in refused.stdout, refused.output
    request = runner.invoke(cli, ["--db", db, "request", thread, "--model", "claude-sonnet-4-5"])
    assert request.exit_code == 0, request.output
    validate_request(json.loads(request.output))


def test_a_claude_code_session_run_on_another_providers_model_has_no_model(tmp_path: Path) -> None:
    """Claude Code run through a proxy to another provider's model writes that model's name in
    each response: the thread took it (`glm-4.6`) and sent it in every request, which the
    Messages API refuses. The thread has no model, the name kept as its `model` metadata, and
    `request` asks for --model; a session on a Claude model keeps its model."""
    source = CC / "-src-deep-manifest" / "a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"
    text = source.read_text(encoding="utf-8")
    named = re.findall(r'"model":\s*"(claude-[^"]+)"', text)
    assert named, "the fixture's responses name their model"
    sessions = tmp_path / "proxied"
    sessions.mkdir()
    (sessions / source.name).write_text(re.sub(r'("model":\s*")claude-[^"]+"', r'\1glm-4.6"', text), encoding="utf-8")
    runner = CliRunner()
    for path, model, metadata in ((sessions, None, "glm-4.6"), (source, named[0], None)):
        db = str(tmp_path / f"{model}.db")
        imported = runner.invoke(cli, ["--db", db, "import", "claude-code", "--json", str(path)])
        assert imported.exit_code == 0, imported.output
        thread = json.loads(imported.output)["thread_ids"][0]
        shown = json.loads(runner.invoke(cli, ["--db", db, "show", thread, "--json"]).output)
        assert (shown["model"], shown["metadata"].get("model")) == (model, metadata)
        request = runner.invoke(cli, ["--db", db, "request", thread])
        assert (request.exit_code == 0) == (model is not None) and "glm" not in request.stdout, request.output
        if model is None:
            assert "--model" in request.stderr, request.output
            given = runner.invoke(cli, ["--db", db, "request", thread, "--model", "claude-sonnet-4-5"])
            validate_request(json.loads(given.output))


def test_a_live_pi_session_whose_model_is_not_written_yet_waits_for_it(tmp_path: Path) -> None:
    """A pi session of version 2 or later names its model in a `model_change` entry after the
    header. An import (a follower's, every half second) that read the file as pi had written
    only the header created the thread without a model, and no later import could give it
    one: every request of it needed --model."""
    records = _as_pi_writes_now(_raw(PI))
    change = next(i for i, r in enumerate(records) if r.get("type") == "model_change")
    header, model = records[0], records[change]["modelId"]
    session = tmp_path / "session.jsonl"
    db = tmp_path / "t.db"
    with Store(db) as store:
        session.write_text(json.dumps(header) + "\n")
        waiting = import_pi(store, [session])
        assert (waiting.added, waiting.threads, waiting.waiting) == (0, 0, 1) and store.threads() == []
        session.write_text("".join(json.dumps(r) + "\n" for r in records[:change + 1]))
        assert thread_state(store, import_pi(store, [session]).thread_ids[0]).model == model
        session.write_text("".join(json.dumps(r) + "\n" for r in records))
        done = import_pi(store, [session])
        assert done.waiting == 0 and thread_state(store, done.thread_ids[0]).model == model
    # Quiet past the time pi could still be writing it, a session with no model is imported as it is.
    quiet = tmp_path / "quiet.jsonl"
    quiet.write_text(json.dumps({**header, "id": "quiet"}) + "\n")
    os.utime(quiet, (time.time() - 3600,) * 2)
    with Store(db) as store:
        alone = import_pi(store, [quiet])
        assert alone.threads == 1 and thread_state(store, alone.thread_ids[0]).model is None


def _unhashed(text: str) -> str:
    """`text` without the event hashes it names (which cover each event's source line and file)."""
    return re.sub(r"tl2:[0-9a-f]+", "tl2:", text)


def test_a_pi_session_pi_rewrote_as_its_current_version_goes_on_along_its_import(tmp_path: Path) -> None:
    """pi rewrites a version 1 file it opens as the current version (`migrateToCurrentVersion`):
    each entry a random id and the one before as its parent, a compaction's first kept entry by
    that id. Imported before and again after, the file was refused as rewritten (`holds events
    the source no longer has ... import it into another database`). It goes on along the
    stored thread, as the version 1 file grown the same way would."""
    records = _raw(PI)
    grown = [{"type": "message", "timestamp": "2025-11-21T01:00:00.000Z",
              "message": {"role": "user", "content": [{"type": "text", "text": "and now?"}], "timestamp": 1}},
             {"type": "compaction", "timestamp": "2025-11-21T01:00:01.000Z", "summary": "what came before", "firstKeptEntryIndex": 40,
              "tokensBefore": 1000},
             {"type": "message", "timestamp": "2025-11-21T01:00:02.000Z",
              "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}], "api": "anthropic-messages",
                          "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "stop", "timestamp": 2}}]
    ids = [os.urandom(4).hex() for _ in records[1:] + grown]
    migrated = [dict(records[0], version=3)]
    for i, record in enumerate(records[1:] + grown):
        entry = dict(record, id=ids[i], parentId=ids[i - 1] if i else None)
        if "firstKeptEntryIndex" in entry:
            entry["firstKeptEntryId"] = ids[entry.pop("firstKeptEntryIndex") - 1]  # pi's index counts the header
        migrated.append(entry)
    v1, rewritten, v1_grown = tmp_path / "v1" / "session.jsonl", tmp_path / "now" / "session.jsonl", tmp_path / "grown.jsonl"
    for path, lines in ((v1, records), (rewritten, migrated), (v1_grown, records + grown)):
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    db, expected = str(tmp_path / "t.db"), str(tmp_path / "expected.db")
    runner = CliRunner()
    first = json.loads(runner.invoke(cli, ["--db", db, "import", "pi", str(v1), "--json"]).output)
    again = runner.invoke(cli, ["--db", db, "import", "pi", str(rewritten), "--json"])
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert (report["thread_ids"], report["added"], report["changed"]) == (first["thread_ids"], 3, 0)
    # the file's events and two for its failed turn
    assert json.loads(runner.invoke(cli, ["--db", expected, "import", "pi", str(v1_grown), "--json"]).output)["added"] == 77
    thread = first["thread_ids"][0]
    for command in (["request", thread], ["transcript", thread]):
        have, want = (runner.invoke(cli, ["--db", path, *command]) for path in (db, expected))
        assert have.exit_code == want.exit_code == 0
        assert _unhashed(have.output.replace(str(rewritten), "F")) == _unhashed(want.output.replace(str(v1_grown), "F"))
    assert len(json.loads(runner.invoke(cli, ["--db", db, "ls", "--all", "--json"]).output)) == 1
    assert json.loads(runner.invoke(cli, ["--db", db, "import", "pi", str(rewritten), "--json"]).output)["added"] == 0


def test_the_tokens_a_pi_session_spent_are_counted_under_its_own_names(mem: Store) -> None:
    """pi records `input`, `output`, `cacheRead`, `cacheWrite`; the import keeps them as they are
    and `usage` adds them up as the API's names."""
    from threadlog import usage

    summary = import_pi(mem, [PI])
    spent = [r["message"]["usage"] for r in _raw(PI) if r.get("type") == "message" and r["message"]["role"] == "assistant"
             and r["message"]["content"] and isinstance(r["message"].get("usage"), dict)]
    [row] = usage(mem, summary.thread_ids[0])
    assert row.messages == len(spent) > 0
    assert (row.input_tokens, row.output_tokens, row.cache_read_input_tokens, row.cache_creation_input_tokens) == tuple(
        sum(u[name] for u in spent) for name in ("input", "output", "cacheRead", "cacheWrite"))
    assert row.output_tokens > 0


@pytest.mark.skipif(not SHARED.is_dir(), reason="the gathered data folder is not beside this checkout")
def test_every_gathered_file_imports(mem: Store) -> None:
    summary = import_claude_code(mem, [SHARED / "claude-code"], skip_bad=True)
    assert {f for f, _, _ in summary.bad} <= {str(p) for p in (SHARED / "claude-code").rglob("edge_cases.jsonl")}
    pi = import_pi(mem, sorted((SHARED / "pi-mono").glob("*.jsonl")))
    assert pi.compactions == 2
    mem.verify()
    again = import_claude_code(mem, [SHARED / "claude-code"], skip_bad=True)
    assert (again.added, again.changed) == (0, 0)
    assert import_pi(mem, sorted((SHARED / "pi-mono").glob("*.jsonl"))).changed == 0


@pytest.mark.skipif(not SHARED.is_dir(), reason="the gathered data folder is not beside this checkout")
def test_a_pi_session_compacted_twice_imports_with_its_compactions_where_pi_put_them(tmp_path: Path) -> None:
    """pi's `before-compaction.jsonl` through `threadlog import pi`: each compaction's first kept
    entry (`firstKeptEntryIndex`, a line of the file) is where the model view starts again, after
    the summary; the signed thinking is kept with its signatures; the thread verifies, renders,
    and its request is one the SDK takes."""
    source = SHARED / "pi-mono" / "before-compaction.jsonl"
    lines = _raw(source)
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", db, "import", "pi", str(source), "--json"])
    assert imported.exit_code == 0, imported.output
    summary = json.loads(imported.output)
    assert summary["compactions"] == 2
    [t] = summary["thread_ids"]
    with Store(db, read_only=True) as store:
        events = list(store.read(t))
        compactions = [e for e in events if e.type == "compaction.recorded"]
        written = [line for line in lines if line.get("type") == "compaction"]
        assert [c.data["summary"] for c in compactions] == [line["summary"] for line in written]
        for compaction, line in zip(compactions, written):
            kept = lines[line["firstKeptEntryIndex"]]["message"]  # the index counts the header
            assert store.event_at(t, compaction.data["through_offset"]).data["content"] == kept["content"]
        signed = [b for line in lines if line.get("type") == "message" for b in line["message"].get("content") or ()
                  if isinstance(b, dict) and b.get("type") == "thinking" and b.get("thinkingSignature")]
        stored = [b for e in events if e.type == "message.appended" for b in e.data["content"] if b["type"] == "thinking"]
        assert [(b["thinking"], b["signature"]) for b in stored if b["signature"]] == [
            (b["thinking"], b["thinkingSignature"]) for b in signed]
        kwargs = anthropic_request(store, t)
        validate_request(kwargs)
        assert kwargs["messages"][0]["content"][0]["text"] == written[-1]["summary"]
        sent = [b for m in kwargs["messages"] for b in m["content"] if b["type"] == "thinking"]
        assert sent and all(b["signature"] for b in sent)  # an aborted answer's unsigned thinking is not sent
    for command in (["verify"], ["show", t], ["transcript", t], ["rows", t]):
        shown = runner.invoke(cli, ["--db", db, *command])
        assert shown.exit_code == 0, (command, shown.output[-500:])
    assert written[-1]["summary"].splitlines()[0] in runner.invoke(cli, ["--db", db, "transcript", t]).output


def test_a_source_edited_after_its_import_is_reported_changed_and_kept_as_stored(tmp_path: Path) -> None:
    """A re-import of an edited session reported 0 added and kept the old text, saying nothing."""
    with Store(tmp_path / "t.db") as store:
        for sessions in (SESSIONS, SESSIONS):  # real sessions twice: nothing changed
            summary = import_claude_code(store, sessions)
            assert summary.changed == 0
        assert import_pi(store, [PI]).changed == import_pi(store, [PI]).changed == 0
        session = tmp_path / SESSIONS[0].name
        records = [json.loads(line) for line in SESSIONS[0].read_text(encoding="utf-8").splitlines()]
        # The first typed prompt (a list holding one text block): its text edited in the copy.
        first = next(r for r in records if r.get("type") == "user" and isinstance(r["message"]["content"], list)
                     and [b.get("type") for b in r["message"]["content"]] == ["text"]
                     and not r["message"]["content"][0]["text"].startswith("<"))
        was = first["message"]["content"][0]["text"]
        first["message"]["content"][0]["text"] = "CHANGED TEXT"
        session.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.utime(session, (0, 0))  # an old file: not one still being written
        result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "claude-code", str(session)])
        assert result.exit_code == 0, result.output
        assert "0 event(s) added" in result.output
        line = records.index(first) + 1  # it said how many, and not where: a user could not find the edited line
        assert (f"changed since imported: 1 event(s) the source now gives otherwise, first at {session}:{line}, kept as "
                "stored") in result.output
        again = import_claude_code(store, [session])
        assert (again.changed, again.changed_lines) == (1, [(str(session), line)])
        texts = [b.get("text") for t in store.all_threads() for e in store.read(t.id, start=t.base) if e.type == "message.appended"
                 for b in e.data["content"]]
        assert "CHANGED TEXT" not in texts and was in texts


def _rewritten_source(kind: str) -> tuple[bytes, bytes, int]:
    """A session as imported, the same session with its second answer's line written again
    under another id (the line after it naming that id), and that line."""
    if kind == "claude-code":
        lines = _chat_lines(3)
        first = "".join(json.dumps(r) + "\n" for r in lines)
        lines[3]["uuid"], lines[4]["parentUuid"] = "a1-again", "a1-again"
        return first.encode(), "".join(json.dumps(r) + "\n" for r in lines).encode(), 4
    header, entries = _pi_chat(3)
    first = "".join(json.dumps(r) + "\n" for r in [header, *entries])
    entries[3]["id"], entries[4]["parentId"] = "e3-again", "e3-again"
    return first.encode(), "".join(json.dumps(r) + "\n" for r in [header, *entries]).encode(), 5


@pytest.mark.parametrize("kind", ["claude-code", "pi"])
def test_a_source_rewritten_after_its_import_is_refused_naming_the_line_it_parts_at(tmp_path: Path, kind: str) -> None:
    """A session rewritten after its import (a line given another id) was refused naming the
    thread and the file, not where in the file: in a session of thousands of lines nothing
    said what had changed. The refusal names the first line where the file parts from what
    is stored, and writes nothing."""
    path, db = tmp_path / "aaaaaaaa-0000-4000-8000-000000000001.jsonl", tmp_path / "t.db"
    first, rewritten, line = _rewritten_source(kind)
    path.write_bytes(first)
    assert _import_aged(kind, path, db).exit_code == 0
    path.write_bytes(rewritten)
    before = file_dump(db)
    result = _import_aged(kind, path, db)
    assert result.exit_code == 1, result.output
    assert "holds events the source no longer has in that order" in result.stderr
    assert f"{path}:{line}:" in result.stderr, result.stderr
    assert file_dump(db) == before


def test_export_events_carry_every_field_and_stream_row(mem: Store) -> None:
    summary = import_claude_code(mem, [SUBAGENT_SESSION])
    agent = next(i for i in mem.subtree(summary.thread_ids[0]) if i.kind == "subagent")
    lines = list(export_events(mem, agent.id))
    assert lines[0] == {"format": "threadlog-events", "version": 2}
    streams = [line["stream"] for line in lines if "stream" in line]
    assert [s["id"] for s in streams] == [agent.parent_id, agent.id]
    events = [line["event"] for line in lines if "event" in line]
    assert [e["event_id"] for e in events] == [e.event_id for e in mem.read(agent.id)]
    assert events[0] == next(mem.read(agent.parent_id)).to_json()
    assert lines[-1] == {"end": {"streams": 2, "events": len(events)}}
    everything = list(export_all(mem))
    assert sum(1 for line in everything if "event" in line) == mem.counts().events
    assert everything[-1] == {"end": {"streams": mem.counts().threads, "events": mem.counts().events}}
    markdown = export_markdown(mem, summary.thread_ids[0])
    assert "elided" not in markdown


def test_cli_import_and_export(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", db, "import", "claude-code", str(SUBAGENT_SESSION), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["subagents"] == 1 and report["added"] > 0
    thread = report["thread_ids"][0]
    out = tmp_path / "t.jsonl"
    result = runner.invoke(cli, ["--db", db, "export", thread, "--format", "events", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text().splitlines()[0])["format"] == "threadlog-events"
    result = runner.invoke(cli, ["--db", db, "import", "pi", str(PI)])
    assert result.exit_code == 0 and "1 thread(s)" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = runner.invoke(cli, ["--db", db, "import", "claude-code", str(bad)])
    assert result.exit_code == 1 and "bad.jsonl:1: not JSON" in result.output
    for command in (["import", "--help"], ["import", "claude-code", "--help"], ["import", "pi", "--help"], ["export", "--help"]):
        assert runner.invoke(cli, command).exit_code == 0


@pytest.mark.parametrize(("tool", "source"), [("claude-code", SUBAGENT_SESSION), ("pi", PI),
                                             ("swe-agent", FIXTURES / "swe-agent" / "function_calling_simple.traj")])
def test_a_file_named_twice_in_one_import_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str,
                                                       source: Path) -> None:
    """A file named twice (as itself and by its directory, or by a relative and an absolute
    path) was read twice: the report counted its threads, messages and events twice and listed
    its thread twice (`2 thread(s)`, `N event(s) added of 2N`), where one thread was there."""
    folder = tmp_path / "sessions"
    shutil.copytree(source.parent, folder)
    monkeypatch.chdir(folder)
    runner = CliRunner()
    alone = json.loads(runner.invoke(cli, ["--db", str(tmp_path / "alone.db"), "import", tool, source.name, "--json"]).output)
    twice = runner.invoke(cli, ["--db", str(tmp_path / "twice.db"), "import", tool, source.name, str(folder / source.name),
                                f"../{folder.name}/{source.name}", "--json"])
    assert twice.exit_code == 0, twice.output
    report = json.loads(twice.output)
    assert len(report["thread_ids"]) == len(set(report["thread_ids"])) > 0
    assert {k: report[k] for k in ("files", "threads", "subagents", "prompts", "events", "added", "thread_ids")} == {
        k: alone[k] for k in ("files", "threads", "subagents", "prompts", "events", "added", "thread_ids")}
    whole = json.loads(runner.invoke(cli, ["--db", str(tmp_path / "whole.db"), "import", tool, ".", "--json"]).output)
    with_it = json.loads(runner.invoke(cli, ["--db", str(tmp_path / "with.db"), "import", tool, ".", source.name, "--json"]).output)
    assert {k: with_it[k] for k in ("files", "threads", "events", "added")} == {k: whole[k] for k in ("files", "threads", "events", "added")}


@pytest.mark.parametrize("tool", ["pi", "claude-code"])
def test_an_import_from_directories_without_a_session_file_is_refused(tmp_path: Path, tool: str) -> None:
    """`import pi DIR` of a directory holding no session file said `0 file(s)` and exited 0: a
    mistyped directory looked like success. It is refused (exit 2, as a path that does not
    exist), naming the directory and what was looked for; one whose sessions were all
    imported before still succeeds, adding nothing."""
    sessions = tmp_path / "sessions"
    (sessions / "project").mkdir(parents=True)
    (sessions / "project" / "notes.txt").write_text("not a session\n")
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(sessions)])
    assert result.exit_code == 2, result.output
    assert f"{sessions} holds no" in result.stderr and "session file (*.jsonl, searched recursively)" in result.stderr
    assert not db.exists()  # nothing left behind
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, str(sessions), str(sessions / "project")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{sessions}, {sessions / 'project'} hold no" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "" and not db.exists()
    if tool == "claude-code":  # its default directory, ~/.claude/projects, empty
        (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
        result = CliRunner().invoke(cli, ["--db", str(db), "import", tool], env={"HOME": str(tmp_path / "home")})
        assert result.exit_code == 2 and f"{tmp_path / 'home' / '.claude' / 'projects'} holds no" in result.stderr, result.output
        assert "as PATHS" in result.stderr and not db.exists()

    source = PI if tool == "pi" else SUBAGENT_SESSION
    shutil.copy2(source, sessions / "project" / source.name)
    typo = tmp_path / "sesions"  # beside a directory that holds sessions, an empty one went unnoticed
    typo.mkdir()
    result = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(sessions), str(typo)])
    assert result.exit_code == 2 and f"{typo} holds no" in result.stderr and f"{sessions}," not in result.stderr, result.output
    assert not db.exists()
    first = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(sessions), "--json"])
    assert first.exit_code == 0 and json.loads(first.stdout)["added"] > 0, first.output
    again = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(sessions), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["added"] == 0 and json.loads(again.stdout)["files"] == 1, again.output


def test_following_a_directory_that_holds_no_session_yet_imports_what_comes(tmp_path: Path) -> None:
    """`import claude-code --follow` watches a directory that may be empty when it starts."""
    projects = tmp_path / "projects"
    projects.mkdir()
    db = tmp_path / "f.db"
    follower = interruptible(
        [sys.executable, "-m", "threadlog", "--db", str(db), "import", "claude-code", "--follow", "--interval", "0.1", str(projects)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    try:
        time.sleep(1)  # its first polls find nothing
        (projects / "p").mkdir()
        shutil.copy2(SUBAGENT_SESSION, projects / "p" / SUBAGENT_SESSION.name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and follower.poll() is None:
            if db.exists():
                with Store(db) as store:
                    if store.counts().events:
                        break
            time.sleep(0.2)
    finally:
        out, err = ctrl_c(follower)
    assert follower.returncode == 0 and b"Traceback" not in err, err
    assert b"event(s)" in out
    with Store(db) as store:
        assert store.counts().events > 0


_TURN_OVER = {"type": "system", "subtype": "turn_duration", "durationMs": 1000, "uuid": "turn-over", "parentUuid": None}


def test_follow_mirrors_lines_another_process_appends(tmp_path: Path) -> None:
    lines = SUBAGENT_SESSION.read_bytes().splitlines(keepends=True)
    live = tmp_path / "projects" / SUBAGENT_SESSION.name
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:10]))
    db = tmp_path / "f.db"
    follower = interruptible(
        [sys.executable, "-m", "threadlog.cli", "--db", str(db), "import", "claude-code", "--follow", "--interval", "0.1", str(live.parent)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    try:
        writer = subprocess.run([sys.executable, "-c", (
            "import sys, time\n"
            "lines = open(sys.argv[1], 'rb').read().splitlines(keepends=True)[10:]\n"
            "with open(sys.argv[2], 'ab') as out:\n"
            "    for i, line in enumerate(lines):\n"
            "        if i == 3:\n"
            "            out.write(line[:40]); out.flush(); time.sleep(0.5); out.write(line[40:])\n"
            "        else:\n"
            "            out.write(line)\n"
            "        out.flush(); time.sleep(0.02)\n"
            "    out.write(sys.argv[3].encode() + b'\\n')\n"  # the turn is over: its last response is complete
        ), str(SUBAGENT_SESSION), str(live), json.dumps(_TURN_OVER)], check=True)
        assert writer.returncode == 0
        expected = Store(":memory:")
        whole = import_claude_code(expected, [live])
        target = whole.events
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if db.exists():
                with Store(db) as store:
                    if store.counts().events >= target:
                        break
            time.sleep(0.2)
    finally:
        _, err = ctrl_c(follower)
    assert b"Traceback" not in err
    with Store(db) as store:
        thread = whole.thread_ids[0]
        assert [e.event_id for e in store.read(thread)] == [e.event_id for e in expected.read(thread)]


def test_import_serializes_each_event_once(mem: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's pre-write check prepares every event; the store must not do it again."""
    calls = 0
    canonical = integrity.canonical

    def counted(value: Any) -> str:
        nonlocal calls
        calls += 1
        return canonical(value)

    monkeypatch.setattr(integrity, "canonical", counted)
    summary = import_claude_code(mem, [SUBAGENT_SESSION])
    assert summary.added == mem.counts().events
    assert calls <= 2 * summary.added  # data and meta, once per event


def test_injected_text_is_not_presented_as_typed(mem: Store) -> None:
    """isMeta lines and command output: the model view keeps them, rows and transcript say who wrote them."""
    session = CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    thread = import_claude_code(mem, [session]).thread_ids[0]
    injected = [e for e in mem.read(thread) if e.type == "message.appended" and e.meta["source"].get("flags", {}).get("injected")]
    assert injected
    texts = {b["text"] for e in injected for b in e.data["content"] if b["type"] == "text"}
    model_view = {b["text"] for m in thread_state(mem, thread).messages for b in m.content if b["type"] == "text"}
    assert texts <= model_view  # the model saw them
    rows = [r for r in display_rows(mem, thread) if r.kind == "text" and r.text in texts]
    assert rows and all(r.injected_by == "claude-code" for r in rows)
    typed = [r for r in display_rows(mem, thread) if r.kind == "text" and r.role == "user" and r.text not in texts]
    assert typed and all(r.injected_by is None for r in typed)
    markdown = export_markdown(mem, thread)
    assert markdown.count("## user (injected by claude-code)") == sum(1 for e in injected if any(b["type"] == "text" for b in e.data["content"]))
    for text in texts:
        first = text.splitlines()[0]
        section = markdown[: markdown.index("    " + first)].rsplit("## ", 1)[1]
        assert section.startswith("user (injected by claude-code)")


def _raw_output_tokens(paths: list[Path]) -> int:
    """Output tokens of every distinct API response in the files (the last line of a response holds its final usage)."""
    final: dict[str, int] = {}
    for path in paths:
        for record in _raw(path):
            message = record.get("message") if record.get("type") == "assistant" else None
            if isinstance(message, dict) and isinstance(message.get("usage"), dict) and message.get("id"):
                final[message["id"]] = message["usage"].get("output_tokens", 0)
    return sum(final.values())


@pytest.mark.parametrize("session", SESSIONS, ids=[p.stem[:12] for p in SESSIONS])
def test_usage_counts_each_response_once(mem: Store, session: Path) -> None:
    summary = import_claude_code(mem, [session])
    thread = summary.thread_ids[0]
    rows = usage(mem, thread)
    files = [session, *sorted(session.with_suffix("").rglob("agent-*.jsonl"))]
    assert total(rows, thread).output_tokens == _raw_output_tokens(files)


def test_inline_sidechain_is_a_subagent_fork_at_its_task_call(mem: Store) -> None:
    """Claude Code 1.0.x wrote a sub-agent's lines into the main file (isSidechain): they become a sub-agent fork."""
    session = CC / "inline" / "sidechain.jsonl"
    summary = import_claude_code(mem, [session])
    thread = summary.thread_ids[0]
    (agent,) = [info for info in mem.subtree(thread) if info.kind == "subagent"]
    assert summary.subagents == 1 and "sidechain (inline)" not in summary.skipped
    raw = _raw(session)
    (task,) = [b for r in raw if not r.get("isSidechain") for b in r["message"]["content"] if b.get("name") == "Task"]
    holder = mem.event_at(thread, agent.parent_offset - 1)
    assert task["id"] in [b.get("id") for b in holder.data["content"]]
    own = [e for e in _own_events(mem, agent.id) if e.type == "message.appended"]
    side = [r for r in raw if r.get("isSidechain")]
    assert own[0].data["content"][0]["text"] == task["input"]["prompt"] == side[0]["message"]["content"]
    assert {e.meta["source"]["uuid"] for e in own} | {u for e in own for u in e.meta["source"].get("uuids", [])} == {r["uuid"] for r in side}
    assert import_claude_code(mem, [session]).added == 0
    mem.verify()


def test_rewind_after_import_becomes_a_fork(mem: Store, tmp_path: Path) -> None:
    """A session rewound after it was imported: the stored branch stays, the new one forks at the branch point."""
    lines = COMPACTED.read_bytes().splitlines(keepends=True)
    live = tmp_path / COMPACTED.name
    live.write_bytes(b"".join(lines[:4]))  # Start, Ready, First attempt, First answer
    thread = import_claude_code(mem, [live]).thread_ids[0]
    before = [e.event_id for e in mem.read(thread)]
    live.write_bytes(b"".join(lines))  # the user rewound to "Ready" and went on from there
    summary = import_claude_code(mem, [live])
    assert [e.event_id for e in mem.read(thread)] == before
    (fork,) = [info for info in mem.subtree(thread) if info.kind == "fork"]
    inherited = [e for e in mem.read(thread, 0, fork.parent_offset) if e.type == "message.appended"]
    assert inherited[-1].data["content"][0]["text"] == "Ready"  # the branch point
    texts = [b.get("text") for m in thread_state(mem, fork.id).messages for b in m.content]
    assert texts[-2:] == ["After compaction", "Final answer"] and summary.compactions == 1
    assert import_claude_code(mem, [live]).added == 0
    mem.verify()


def _pi_tree(*entries: tuple[str, str | None, str, str]) -> str:
    """A pi session file (version 3, a tree) of (id, parentId, role, text) messages."""
    records: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "s-tree", "timestamp": "2025-07-01T10:00:00.000Z"}]
    for id_, parent, role, text in entries:
        body: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}]}
        if role == "assistant":
            body.update(model="claude-opus-4-5", stopReason="stop")
        records.append({"type": "message", "id": id_, "parentId": parent, "timestamp": "2025-07-01T10:00:00.000Z",
                        "message": body})
    return "".join(json.dumps(record) + "\n" for record in records)


def test_pi_rewind_after_import_becomes_a_fork(mem: Store, tmp_path: Path) -> None:
    """A pi session rewound after it was imported (a tree whose latest branch leaves the stored
    one): the stored branch stays, the new one forks at the branch point; it used to be refused
    as a rewritten file."""
    first = [("e1", None, "user", "Start"), ("e2", "e1", "assistant", "Ready"), ("e3", "e2", "user", "First attempt"),
             ("e4", "e3", "assistant", "First answer")]
    live = tmp_path / "session.jsonl"
    live.write_text(_pi_tree(*first))
    thread = import_pi(mem, [live]).thread_ids[0]
    before = [e.event_id for e in mem.read(thread)]
    rewound = [*first, ("e5", "e2", "user", "Second attempt"), ("e6", "e5", "assistant", "Second answer")]
    live.write_text(_pi_tree(*rewound))
    summary = import_pi(mem, [live])
    assert (summary.added, summary.forks) == (3, 1)  # the fork's event and its two messages
    assert [e.event_id for e in mem.read(thread)] == before
    (fork,) = [info for info in mem.subtree(thread) if info.kind == "fork"]
    texts = [b["text"] for m in thread_state(mem, fork.id).messages for b in m.content]
    assert texts == ["Start", "Ready", "Second attempt", "Second answer"]
    # It goes on from there: the new branch grows in its fork, a later rewind of it forks again.
    live.write_text(_pi_tree(*rewound, ("e7", "e6", "user", "More"), ("e8", "e2", "user", "Third attempt")))
    grown = import_pi(mem, [live])
    assert (grown.added, grown.forks) == (3, 2)
    assert [b["text"] for b in thread_state(mem, fork.id).messages[-1].content] == ["More"]
    assert import_pi(mem, [live]).added == 0
    mem.verify()


def test_pi_rewinds_to_the_start_become_threads_of_their_own(mem: Store, tmp_path: Path) -> None:
    """A branch that leaves before the first message shares nothing a fork could inherit: a
    later root (pi's `resetLeaf`, to edit the first prompt) and a rewind to a leading model
    change each become a thread of their own. The first was read as a continuation of the
    conversation; the second refused the whole import (a fork with no message)."""
    path = tmp_path / "session.jsonl"
    first = [("e1", None, "user", "Start"), ("e2", "e1", "assistant", "Ready")]
    path.write_text(_pi_tree(*first))
    main = import_pi(mem, [path]).thread_ids[0]
    path.write_text(_pi_tree(*first, ("e3", None, "user", "Start, edited"), ("e4", "e3", "assistant", "Ready again")))
    again = import_pi(mem, [path])
    assert (again.added, again.threads, again.forks) == (3, 2, 0) and again.thread_ids[0] == main
    texts = {t: [m.content[0]["text"] for m in thread_state(mem, t).messages] for t in again.thread_ids}
    assert texts == {main: ["Start", "Ready"], again.thread_ids[1]: ["Start, edited", "Ready again"]}
    assert import_pi(mem, [path]).added == 0

    changed = tmp_path / "changed.jsonl"
    model = {"type": "model_change", "id": "m0", "parentId": None, "timestamp": "2025-07-01T10:00:00.000Z",
             "provider": "anthropic", "modelId": "claude-opus-4-5"}
    header, *rest = _pi_tree(("u1", "m0", "user", "one"), ("a1", "u1", "assistant", "1"),
                             ("u2", "m0", "user", "one, edited"), ("a2", "u2", "assistant", "2")).splitlines(keepends=True)
    changed.write_text(header.replace('"s-tree"', '"s-model"') + json.dumps(model) + "\n" + "".join(rest))
    summary = import_pi(mem, [changed])
    assert (summary.threads, summary.forks) == (2, 0)
    assert sorted(thread_state(mem, t).messages[0].content[0]["text"] for t in summary.thread_ids) == ["one", "one, edited"]
    mem.verify()


def test_pi_a_session_imported_between_two_tool_results_keeps_both(mem: Store, tmp_path: Path) -> None:
    """A live session imported after the first of two results: the second came later and is
    stored too (it was lost: the grown file's merged message matched the stored one by id)."""
    call = {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-07-01T10:00:00.000Z",
            "message": {"role": "assistant", "model": "claude-opus-4-5", "stopReason": "toolUse",
                        "content": [{"type": "toolCall", "id": c, "name": "bash", "arguments": {}} for c in ("c1", "c2")]}}
    results = [{"type": "message", "id": f"r{i}", "parentId": parent, "timestamp": "2025-07-01T10:00:00.000Z",
                "message": {"role": "toolResult", "toolCallId": f"c{i}", "content": [{"type": "text", "text": "ok"}]}}
               for i, parent in ((1, "a1"), (2, "r1"))]
    header, first = _pi_tree(("u1", None, "user", "go")).splitlines(keepends=True)
    done = _pi_tree(("a2", "r2", "assistant", "done")).splitlines(keepends=True)[1]
    path = tmp_path / "session.jsonl"
    path.write_text(header + first + json.dumps(call) + "\n" + json.dumps(results[0]) + "\n")
    thread = import_pi(mem, [path]).thread_ids[0]
    assert mem.pending_tool_uses(thread) == ("c1", "c2")  # the first result waits for the second: one message of both
    path.write_text(path.read_text() + json.dumps(results[1]) + "\n" + done)
    assert import_pi(mem, [path]).added == 2
    assert mem.pending_tool_uses(thread) == ()
    answered = [b["tool_use_id"] for e in mem.read(thread) for b in e.data.get("content", []) if b.get("type") == "tool_result"]
    assert answered == ["c1", "c2"] and import_pi(mem, [path]).added == 0
    mem.verify()


def test_pi_threads_of_their_own_grow_and_older_copies_add_nothing(mem: Store, tmp_path: Path) -> None:
    """The session's thread follows its first root whatever the file's later roots do; a later
    root's thread grows and branches like any thread; an older copy adds nothing."""
    path = tmp_path / "session.jsonl"
    first = [("u0", None, "user", "Start"), ("a0", "u0", "assistant", "Ready")]
    path.write_text(_pi_tree(*first))
    main = import_pi(mem, [path]).thread_ids[0]
    later = [*first, ("u2", None, "user", "Start over"), ("a3", "u2", "assistant", "Again")]
    path.write_text(_pi_tree(*later))
    own = import_pi(mem, [path]).thread_ids[1]
    path.write_text(_pi_tree(*later, ("a4", "u2", "assistant", "Again, differently")))
    grown = import_pi(mem, [path])
    assert (grown.added, grown.thread_ids[:2]) == (2, [main, own])  # a fork of the later root's thread
    (fork,) = [info for info in mem.subtree(own) if info.kind == "fork"]
    assert thread_state(mem, fork.id).messages[-1].content[0]["text"] == "Again, differently"
    path.write_text(_pi_tree(*first))
    assert import_pi(mem, [path]).added == 0
    mem.verify()


def test_a_grown_session_whose_thread_took_a_message_of_its_own_is_refused_naming_that_message(tmp_path: Path) -> None:
    """A turn taken on an imported thread (`threadlog append`, `threadlog ask`) sits where the
    session's later lines would go, so they cannot follow it. The refusal said the file was
    rewritten or taken while it was being written, which sent the user looking at a sound file;
    it names the message the thread took instead, and the fork that goes on without it."""
    db, path = tmp_path / "t.db", tmp_path / "session.jsonl"
    first = [("u0", None, "user", "Start"), ("a0", "u0", "assistant", "Ready")]
    path.write_text(_pi_tree(*first))
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(db), "import", "pi", str(path)]).exit_code == 0
    thread = json.loads(runner.invoke(cli, ["--db", str(db), "ls", "--json"]).stdout)[0]["id"]
    assert runner.invoke(cli, ["--db", str(db), "append", thread, "--role", "user", "--text", "Mine"]).exit_code == 0
    path.write_text(_pi_tree(*first, ("u1", "a0", "user", "Go on"), ("a1", "u1", "assistant", "Going")))
    before = file_dump(db)
    result = runner.invoke(cli, ["--db", str(db), "import", "pi", str(path)])
    assert result.exit_code == 1, result.output
    assert (f"error: thread {thread!r} holds an event no import wrote at offset 3 (message.appended: appended by hand or "
            "by a live turn), where the source's later lines would go") in result.stderr, result.stderr
    assert f"threadlog fork {thread}" in result.stderr and "rewritten" not in result.stderr
    assert file_dump(db) == before


def test_pi_older_copy_of_a_rewound_session_adds_nothing(mem: Store, tmp_path: Path) -> None:
    """The file as it was before a rewind, imported after the rewound one: every entry of it is
    stored (its later ones in a fork), so it adds nothing; it was refused as rewritten."""
    before = [("e1", None, "user", "Start"), ("e2", "e1", "assistant", "Ready"), ("e3", "e2", "user", "A"),
              ("e4", "e3", "assistant", "A!")]
    path = tmp_path / "session.jsonl"
    path.write_text(_pi_tree(*before, ("e5", "e2", "user", "B"), ("e6", "e5", "assistant", "B!")))
    summary = import_pi(mem, [path])
    shape = [(info.kind, info.head) for info in mem.subtree(summary.thread_ids[0])]
    path.write_text(_pi_tree(*before))
    assert import_pi(mem, [path]).added == 0
    assert [(info.kind, info.head) for info in mem.subtree(summary.thread_ids[0])] == shape
    mem.verify()


def test_pi_branch_after_any_of_a_run_of_tool_results(mem: Store, tmp_path: Path) -> None:
    """A run of tool results is one message, as pi's converter sends it, and a branch may leave
    after any of them: after the last (the import failed with a KeyError, reported as an
    altered row), or after the first, also once the run was imported whole (the branch forks
    before the stored message, keeping its calls, and writes the results up to its point again)."""
    def result(id_: str, parent: str, call: str) -> dict[str, Any]:
        return {"type": "message", "id": id_, "parentId": parent, "timestamp": "2025-07-01T10:00:00.000Z",
                "message": {"role": "toolResult", "toolCallId": call, "content": [{"type": "text", "text": "ok"}]}}
    calls = {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-07-01T10:00:00.000Z",
             "message": {"role": "assistant", "model": "claude-opus-4-5", "stopReason": "toolUse",
                         "content": [{"type": "toolCall", "id": c, "name": "bash", "arguments": {}} for c in ("t1", "t2")]}}
    head = _pi_tree(("u1", None, "user", "go")).splitlines(keepends=True)
    tail = _pi_tree(("a2", "r2", "assistant", "done"), ("u9", "r2", "user", "again")).splitlines(keepends=True)[1:]
    path = tmp_path / "session.jsonl"
    path.write_text("".join([*head, *(json.dumps(r) + "\n" for r in (calls, result("r1", "a1", "t1"), result("r2", "r1", "t2"))),
                             *tail]))
    summary = import_pi(mem, [path])
    thread = summary.thread_ids[0]
    (fork,) = [info for info in mem.subtree(thread) if info.kind == "fork"]
    results = [b["tool_use_id"] for b in mem.event_at(thread, 3).data["content"]]
    assert results == ["t1", "t2"] and fork.parent_offset == 4
    assert [m.content[0]["text"] for m in thread_state(mem, fork.id).messages[-1:]] == ["done"]
    request = anthropic_request(mem, thread, model="m", max_tokens=10)["messages"]
    assert [b.get("tool_use_id") for b in request[2]["content"]] == ["t1", "t2", None]  # one user message for the API, "again" last
    mem.verify()
    # A session that ended on the results, imported, then rewound to the first of them: the
    # thread keeps both; the new branch forks before them and answers the first again.
    other = Store(":memory:")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]))  # the header, u1, a1, r1, r2
    thread = import_pi(other, [path]).thread_ids[0]
    stored = [e.event_id for e in other.read(thread)]
    path.write_text("".join(lines[:5]) + _pi_tree(("u7", "r1", "user", "from r1")).splitlines(keepends=True)[1])
    assert import_pi(other, [path]).added == 3
    assert [e.event_id for e in other.read(thread)] == stored
    (rewound,) = [i for i in other.subtree(thread) if i.kind == "fork"]
    assert rewound.parent_offset == 3 and other.event_at(rewound.id, 3).data["options"]["unanswered"] == "keep"
    again = other.event_at(rewound.id, 4)
    assert [b["tool_use_id"] for b in again.data["content"]] == ["t1"] and again.meta["source"]["uuid"] == "r1"
    assert [m.content[0].get("text") for m in thread_state(other, rewound.id).messages[-2:]] == [None, "from r1"]
    request = anthropic_request(other, rewound.id, model="m", max_tokens=10)["messages"]
    assert [b["type"] for b in request[-2]["content"]] == ["tool_use"]  # t2, never answered on this branch, is left out
    assert import_pi(other, [path]).added == 0
    other.verify()


def test_pi_many_tool_results_cost_what_they_hold_not_its_square(tmp_path: Path) -> None:
    """One message of N tool calls answered by N toolResult entries: each result was an event of
    its own carrying every call still waiting (the pending facts each stored row keeps), so
    the rows held N²/2 ids (16,000 calls: 1.1 GB, 29 s). A run of results is one message, and
    a file imported quiet in the middle of the run, then grown, adds its new results as one more."""
    calls = 400
    def result(i: int) -> str:
        return json.dumps({"type": "message", "id": f"r{i}", "parentId": f"r{i - 1}" if i else "a1", "message": {
            "role": "toolResult", "toolCallId": f"t{i}", "content": [{"type": "text", "text": "ok"}]}}) + "\n"
    call = {"type": "message", "id": "a1", "parentId": "u1", "message": {"role": "assistant", "stopReason": "toolUse", "content": [
        {"type": "toolCall", "id": f"t{i}", "name": "bash", "arguments": {}} for i in range(calls)]}}
    head = _pi_tree(("u1", None, "user", "go")) + json.dumps(call) + "\n"
    path, db = tmp_path / "session.jsonl", tmp_path / "t.db"
    path.write_text(head + "".join(result(i) for i in range(calls // 4)))
    os.utime(path, (time.time() - 3600,) * 2)  # quiet: taken as it is (a live file's results wait for the rest)
    with Store(db) as store:
        thread = import_pi(store, [path]).thread_ids[0]
        path.write_text(head + "".join(result(i) for i in range(calls)))
        assert import_pi(store, [path]).added == 1
        answered = [[b["tool_use_id"] for b in e.data["content"]] for e in store.read(thread, start=3)]
        assert answered == [[f"t{i}" for i in range(calls // 4)], [f"t{i}" for i in range(calls // 4, calls)]]
        assert store.pending_tool_uses(thread) == () and import_pi(store, [path]).added == 0
        store.verify()
    with sqlite3.connect(db) as raw:
        (held,) = raw.execute("SELECT sum(length(pending)) FROM events").fetchone()
    assert held < 10 * calls * 2  # the calls' message and the first results' message: each id at most twice


def test_pi_branch_that_runs_the_tools_again_keeps_the_calls_for_its_results(mem: Store, tmp_path: Path) -> None:
    """pi rewound to a tool call (or to the first of its results) and ran the tools again: the
    branch's results answer the calls in its fork (`unanswered="keep"`); they were left out as
    results without their call. A branch that answers nothing still drops them."""
    def result(id_: str, parent: str, call: str, text: str) -> dict[str, Any]:
        return {"type": "message", "id": id_, "parentId": parent, "timestamp": "2025-07-01T10:00:00.000Z",
                "message": {"role": "toolResult", "toolCallId": call, "content": [{"type": "text", "text": text}]}}
    calls = {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-07-01T10:00:00.000Z",
             "message": {"role": "assistant", "model": "claude-opus-4-5", "stopReason": "toolUse",
                         "content": [{"type": "toolCall", "id": c, "name": "bash", "arguments": {}} for c in ("t1", "t2")]}}
    entries = [calls, result("r1", "a1", "t1", "first"), result("r2", "r1", "t2", "first"),
               result("s1", "a1", "t1", "again"), result("s2", "s1", "t2", "again"),  # rewound to the call
               result("q2", "r1", "t2", "once more")]  # rewound to the first result
    path = tmp_path / "session.jsonl"
    head = _pi_tree(("u1", None, "user", "go")).splitlines(keepends=True)
    path.write_text("".join([*head, *(json.dumps(r) + "\n" for r in entries[:3])]))
    thread = import_pi(mem, [path]).thread_ids[0]
    path.write_text("".join([*head, *(json.dumps(r) + "\n" for r in entries)]))
    summary = import_pi(mem, [path])
    assert summary.added == 5 and summary.skipped.get("tool_result without its call", 0) == 0
    forks = {mem.event_at(info.id, info.base).meta["source"]["uuid"]: info for info in mem.subtree(thread) if info.kind == "fork"}
    for entry, texts in (("s1", ["again", "again"]), ("q2", ["first", "once more"])):
        info = forks[entry]
        assert mem.event_at(info.id, info.base).data["options"]["unanswered"] == "keep"
        request = anthropic_request(mem, info.id, model="m", max_tokens=10)["messages"]
        assert [b["content"][0]["text"] for b in request[-1]["content"]] == texts
    assert import_pi(mem, [path]).added == 0
    mem.verify()


def test_pi_entries_pi_sends_to_the_model_are_in_its_view_and_those_it_keeps_out_are_not(mem: Store, tmp_path: Path) -> None:
    """As pi's buildSessionContext and convertToLlm: a `branch_summary` (a branch left with
    /tree), a `custom_message` and a `custom`-role message are user messages the model sees
    (they were skipped as lines without conversation); a `!!` command (`excludeFromContext`)
    is not (it was put in); `session_info.name` is the thread's title (it was dropped)."""
    def entry(id_: str, parent: str, **fields: Any) -> dict[str, Any]:
        return {"id": id_, "parentId": parent, "timestamp": "2025-07-01T10:00:01.000Z", **fields}
    lines = [
        entry("bs1", "u1", type="branch_summary", fromId="a0", summary="BRANCH-SUMMARY"),
        entry("cm1", "bs1", type="custom_message", customType="ext", content="CUSTOM-MESSAGE", display=True),
        entry("cu1", "cm1", type="message", message={"role": "custom", "customType": "ext", "display": False,
                                                     "content": [{"type": "text", "text": "CUSTOM-ROLE"}]}),
        entry("b1", "cu1", type="message", message={"role": "bashExecution", "command": "cat secret", "output": "EXCLUDED-OUTPUT",
                                                    "exitCode": 0, "excludeFromContext": True}),
        entry("si1", "b1", type="session_info", name="SESSION-NAME"),
    ]
    head = _pi_tree(("u1", None, "user", "try B"))
    tail = _pi_tree(("a2", "si1", "assistant", "B works")).splitlines(keepends=True)[1]
    path = tmp_path / "session.jsonl"
    path.write_text(head + "".join(json.dumps(line) + "\n" for line in lines) + tail)
    summary = import_pi(mem, [path])
    (thread,) = summary.thread_ids
    request = json.dumps(anthropic_request(mem, thread, model="m", max_tokens=10))
    branch = "The following is a summary of a branch that this conversation came back from:\\n\\n<summary>\\nBRANCH-SUMMARY</summary>"
    assert all(text in request for text in (branch, "CUSTOM-MESSAGE", "CUSTOM-ROLE")) and "EXCLUDED-OUTPUT" not in request
    assert mem.title(thread) == "SESSION-NAME"
    assert import_pi(mem, [path]).added == 0
    mem.verify()


def test_pi_import_into_a_store_of_the_release_that_merged_results(tmp_path: Path) -> None:
    """A store written when tool results were merged and a fork dropped the calls waiting at
    its point: the same session adds nothing, and a grown one goes on as stored (the merged
    message stays, the old fork still leaves out its branch's results) while a new branch that
    runs the tools again keeps them."""
    db = tmp_path / "pi.db"
    shutil.copy(FIXTURES / "pi-merged.db", db)
    lines = (FIXTURES / "pi-merged.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_text("".join(lines))
    with Store(db) as store:
        thread = import_pi(store, [path]).thread_ids[0]
        before = {info.id: [e.hash for e in store.read(info.id)] for info in store.subtree(thread)}
        assert import_pi(store, [path]).added == 0
        grown = [
            {"type": "message", "id": "s2", "parentId": "s1", "timestamp": "2025-07-01T10:00:00.000Z",
             "message": {"role": "toolResult", "toolCallId": "t2", "content": [{"type": "text", "text": "two again"}]}},
            {"type": "message", "id": "a3", "parentId": "u3", "timestamp": "2025-07-01T10:00:00.000Z",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "then this"}], "stopReason": "stop"}},
            {"type": "message", "id": "w1", "parentId": "a1", "timestamp": "2025-07-01T10:00:00.000Z",
             "message": {"role": "toolResult", "toolCallId": "t1", "content": [{"type": "text", "text": "third try"}]}},
        ]
        path.write_text("".join(lines) + "".join(json.dumps(entry) + "\n" for entry in grown))
        summary = import_pi(store, [path])
        assert (summary.added, summary.skipped["tool_result without its call"]) == (3, 2)  # s1, s2: dropped calls
        after = {info.id: [e.hash for e in store.read(info.id)] for info in store.subtree(thread)}
        assert all(after[stream][:len(hashes)] == hashes for stream, hashes in before.items())
        assert [b["tool_use_id"] for b in store.event_at(thread, 3).data["content"]] == ["t1", "t2", "t3"]
        (new,) = set(after) - set(before)
        assert store.event_at(new, 3).data["options"]["unanswered"] == "keep"
        assert store.event_at(new, 4).data["content"][0]["tool_use_id"] == "t1"
        store.verify()


def test_compaction_keeps_its_preserved_segment(mem: Store) -> None:
    """compactMetadata.preservedSegment: the messages from headUuid on stay in the model view after the summary."""
    session = CC / "dag" / "dag_compact_after_rewind_preserved.jsonl"
    summary = import_claude_code(mem, [session])
    assert (summary.threads, summary.forks, summary.compactions) == (1, 1, 1)
    messages = thread_state(mem, summary.thread_ids[0]).messages
    texts = [b["text"] for m in messages for b in m.content]
    assert texts[0].startswith("This session is being continued")
    assert texts[1:] == ["Second answer", "Keep going", "Kept going", "After compaction", "Final answer"]
    mem.verify()


def _follow_in_background(store_path: Path, directory: Path, **options: Any) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            with Store(store_path) as store:
                follow_claude_code(store, [directory], interval=0.05, stop=stop.is_set, **options)
        except BaseException as error:  # reported by the test
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, stop, errors


def _wait_for(db: Path, events: int) -> None:
    """Until the follower has written `events` events; a wait that runs out fails the test (it
    passed in silence, and a test that waited for what never came took its 20 seconds)."""
    deadline, held = time.monotonic() + 20, 0
    while time.monotonic() < deadline:
        if db.exists():
            with Store(db) as store:
                held = store.counts().events
                if held >= events:
                    return
        time.sleep(0.1)
    raise AssertionError(f"the follower wrote {held} of the {events} events within 20 s")


def test_follow_never_imports_a_slow_response_in_part(tmp_path: Path) -> None:
    """The lines of one response arriving further apart than the quiet period: imported once, whole."""
    source = CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    ids = [(json.loads(line).get("message") or {}).get("id") for line in lines]
    split = next(i for i in range(1, len(lines)) if ids[i] and ids[i] in ids[:i])  # a response's second line
    live = tmp_path / "projects" / source.name
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:split]))
    db = tmp_path / "f.db"
    thread, stop, errors = _follow_in_background(db, live.parent, settle=0.2)
    try:
        time.sleep(1.0)  # quiet for five times the settle period, the response half written
        with live.open("ab") as out:
            out.write(b"".join(lines[split:]) + json.dumps(_TURN_OVER).encode() + b"\n")
        expected = Store(":memory:")
        whole = import_claude_code(expected, [live])
        _wait_for(db, whole.events)
    finally:
        stop.set()
        thread.join(20)
    assert not errors
    with Store(db) as store:
        main = whole.thread_ids[0]
        # (thread.created is written by the first poll, from the lines there were then)
        assert [(e.event_id, e.data) for e in store.read(main, 1)] == [(e.event_id, e.data) for e in expected.read(main, 1)]


def test_follow_finds_agents_beside_the_session(tmp_path: Path) -> None:
    """The ≤ 2.0.x layout: agent-*.jsonl beside the session file, linked by its lines' sessionId."""
    project = tmp_path / "projects"
    project.mkdir()
    session = project / SUBAGENT_SESSION.name
    shutil.copyfile(SUBAGENT_SESSION, session)
    agent = next(SUBAGENT_SESSION.with_suffix("").rglob("agent-*.jsonl"))
    beside = project / agent.name
    agent_lines = agent.read_bytes().splitlines(keepends=True)
    beside.write_bytes(b"".join(agent_lines[:5]))
    db = tmp_path / "f.db"
    # The session's last response is complete only once the file is quiet `live_within` seconds.
    thread, stop, errors = _follow_in_background(db, project, live_within=1.0)
    try:
        time.sleep(0.5)
        with beside.open("ab") as out:
            out.write(b"".join(agent_lines[5:]))
        expected = Store(":memory:")
        whole = import_claude_code(expected, [session])  # an explicit session file brings its agents too
        assert whole.subagents == 1
        _wait_for(db, whole.events)
    finally:
        stop.set()
        thread.join(20)
    assert not errors
    with Store(db) as store:
        (info,) = [i for i in store.subtree(whole.thread_ids[0]) if i.kind == "subagent"]
        assert [e.event_id for e in store.read(info.id)] == [e.event_id for e in expected.read(info.id)]
        assert [e.event_id for e in store.read(whole.thread_ids[0])] == [e.event_id for e in expected.read(whole.thread_ids[0])]


@pytest.mark.parametrize("skip_bad", [False, True])
def test_import_progress_counts_every_byte_it_reads_up_to_its_total(tmp_path: Path, skip_bad: bool) -> None:
    """Strict (a bad line refuses the import), every session is read twice, to check it and
    then to write it, and the total says so; with skip_bad, once. Each call moves forward."""
    chosen = SESSIONS[:3]
    for i, path in enumerate(chosen):
        (tmp_path / "in" / str(i)).mkdir(parents=True)
        shutil.copy(path, tmp_path / "in" / str(i) / path.name)
    calls: list[tuple[int, int]] = []
    with Store(tmp_path / "t.db") as store:
        import_claude_code(store, [tmp_path / "in"], skip_bad=skip_bad, progress=lambda done, total: calls.append((done, total)))
    size = sum(path.stat().st_size for path in chosen)
    assert {total for _, total in calls} == {size if skip_bad else 2 * size}
    assert [done for done, _ in calls] == sorted({done for done, _ in calls}) and calls[-1][0] == calls[-1][1]
    assert len(calls) == (3 if skip_bad else 6)


def test_an_older_copy_and_the_session_in_one_import_write_what_two_imports_write(tmp_path: Path) -> None:
    """An older copy of a session (a backup, before the user went back and branched) and the
    session itself, in one import: the check before the first write sees each as the other
    leaves the store, so it writes what importing them one after the other writes. Another
    session holding the same lines (a resumed one copies them) changes nothing of that."""
    session = CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    lines = session.read_bytes().splitlines(keepends=True)
    folders = (("another", "2c7ab4e4-0000-4000-8000-000000000000.jsonl", session.read_bytes()),
               ("old", session.name, b"".join(lines[:30])), ("now", session.name, session.read_bytes()))
    for folder, name, data in folders:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(data)
    with Store(tmp_path / "one.db") as one, Store(tmp_path / "two.db") as two:
        import_claude_code(one, [tmp_path / folder for folder, _, _ in folders])
        for folder, _, _ in folders:
            import_claude_code(two, [tmp_path / folder])
        assert {t.id: [(e.event_id, e.type, e.data) for e in one.read(t.id)] for t in one.all_threads()} == \
            {t.id: [(e.event_id, e.type, e.data) for e in two.read(t.id)] for t in two.all_threads()}
        assert len(one.all_threads()) > 1


@pytest.mark.parametrize("grown", [b'{"type":"message","id":"half-wri', b'{"type":"message"}\n'])
def test_a_file_that_grows_between_the_check_and_the_write_is_written_as_it_was_checked(tmp_path: Path, grown: bytes) -> None:
    """pi writes its session file as the conversation goes on. A file that grows after the
    import checked it (a half-written line, or a line it would refuse) is written as it was
    checked: the files before it are not left written by a refusal, and the next import reads
    the rest (and refuses a bad line, with nothing written; a half-written last line of a file
    pi may still be writing waits for a later import)."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(PI.read_bytes())
    second.write_bytes(PI.read_bytes().replace(b"d703a1a9-1b7b-4fb1-b512-c9738b1fe617", b"d703a1a9-0000-4000-8000-000000000002", 1))
    size = first.stat().st_size + second.stat().st_size
    calls: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        if done == size:  # both checked: the session goes on meanwhile
            with second.open("ab") as handle:
                handle.write(grown)

    with Store(tmp_path / "t.db") as store:
        summary = import_pi(store, [first, second], progress=progress)
        assert summary.added == 2 * 74 and store.counts().events == 2 * 74  # a failed turn is two events
        assert [done for done, _ in calls] == [first.stat().st_size, size, size + first.stat().st_size, 2 * size]
        assert {total for _, total in calls} == {2 * size}
        if not grown.endswith(b"\n"):
            later = import_pi(store, [first, second])
            assert later.added == 0 and later.waiting_files == [str(second)] and store.counts().events == 2 * 74
            return
        with pytest.raises(BadLine) as caught:
            import_pi(store, [first, second])
        assert caught.value.file == str(second) and store.counts().events == 2 * 74


def _events_of(store: Store) -> list[tuple[str, str, str]]:
    """Every event of the sources' lines, whatever thread holds it: which branch of a rewound
    session is the thread and which its fork follows what the first import saw. A thread.created
    holds what that import knew (the model comes from the first response)."""
    return sorted((e.event_id, e.type, json.dumps({k: v for k, v in e.data.items() if k != "through_offset"}, sort_keys=True))
                  for e in store.read_all() if e.type not in ("thread.created", "thread.forked"))


def _inside_responses(lines: list[bytes]) -> list[int]:
    """The cuts (a count of lines) that fall between two lines of one response."""
    ids = []
    for line in lines:
        message = json.loads(line).get("message")
        ids.append(message.get("id") if isinstance(message, dict) and message.get("role") == "assistant" else None)
    return [cut for cut in range(1, len(lines)) if {i for i in ids[:cut] if i} & set(ids[cut:])]


@pytest.mark.parametrize("session", [p for p in SESSIONS if p.parent.name != "-src-experiments-claude_p"],
                         ids=lambda p: p.stem[:12])
def test_following_a_session_cut_at_any_line_ends_as_one_import(session: Path, tmp_path: Path) -> None:
    """A session followed while it grows, polled after any of its lines, then imported once it
    is over, holds what one import of the whole file holds: Claude Code writes one response as
    several lines, each with the response's final stop_reason (or none at all), so a poll
    between two of them must leave the response for later."""
    lines = session.read_bytes().splitlines(keepends=True)
    live = tmp_path / session.name  # the file's path is in its events: one path for both imports
    live.write_bytes(b"".join(lines))
    whole = Store(":memory:")
    import_claude_code(whole, [live])
    expected = _events_of(whole)
    for cut in _inside_responses(lines)[::4]:  # every fourth: each cut imports the session three times
        with Store(":memory:") as store:
            live.write_bytes(b"".join(lines[:cut]))
            import_claude_code(store, [live], partial_tail=True)
            live.write_bytes(b"".join(lines))
            import_claude_code(store, [live], partial_tail=True)  # may still hold a last response it cannot see ended
            import_claude_code(store, [live])  # the session over: the file as it is
            assert _events_of(store) == expected, f"cut after line {cut}"


def test_a_live_session_taken_before_its_first_response_gets_the_model_of_that_response(tmp_path: Path) -> None:
    """The thread's model comes from the session's first response and `thread.created` is never
    rewritten: a session read while it held only its first prompt (`--follow`'s first poll, an
    import run as Claude Code starts) became a thread with no model for good, which `request`
    then refused ("names no model"), where one import of the whole file named it."""
    session = SUBAGENT_SESSION
    lines = session.read_bytes().splitlines(keepends=True)
    first_response = next(i for i, line in enumerate(lines) if json.loads(line).get("type") == "assistant")
    live = tmp_path / session.name
    live.write_bytes(b"".join(lines))
    whole = Store(":memory:")
    [thread] = import_claude_code(whole, [live]).thread_ids
    model = json.loads(lines[first_response])["message"]["model"]
    assert thread_state(whole, thread).model == model
    store = Store(":memory:")
    live.write_bytes(b"".join(lines[:first_response]))
    early = import_claude_code(store, [live], partial_tail=True)
    written_early = store.counts().events
    live.write_bytes(b"".join(lines))
    import_claude_code(store, [live])
    assert thread_state(store, thread).model == model
    assert _events_of(store) == _events_of(whole)
    assert early.waiting == 1 and written_early == 0  # the prompt waited for its answer
    old = Store(":memory:")  # the session taken as it is (quiet, or not live): its prompt alone is a thread
    live.write_bytes(b"".join(lines[:first_response]))
    assert import_claude_code(old, [live]).waiting == 0 and thread_state(old, thread).length > 1


def test_a_live_session_whose_first_answer_is_claude_codes_own_error_waits_for_a_model(tmp_path: Path) -> None:
    """Claude Code writes an API error as an answer of the model `<synthetic>`, which names no
    model: a live session read after one waits, as before any answer, for a response that does."""
    chat = _chat_lines(2)
    chat[1] = dict(chat[1], isApiErrorMessage=True,
                   message=dict(chat[1]["message"], model="<synthetic>", content=[{"type": "text", "text": "API Error: 529"}]))
    live = tmp_path / "s-1.jsonl"
    store = Store(":memory:")
    live.write_text("".join(json.dumps(r) + "\n" for r in chat[:2]), encoding="utf-8")
    assert import_claude_code(store, [live], partial_tail=True).waiting == 1 and store.counts().events == 0
    live.write_text("".join(json.dumps(r) + "\n" for r in chat), encoding="utf-8")
    [thread] = import_claude_code(store, [live]).thread_ids
    assert thread_state(store, thread).model == "claude-x"


def test_a_live_sub_agent_file_that_is_a_thread_of_its_own_waits_for_its_first_response(tmp_path: Path) -> None:
    """A sub-agent's file no call of its session names (Claude Code 2.0's "Warmup" agents) is a
    thread of its own, and took no model when read before the agent answered, as a session did."""
    session = tmp_path / "s-1.jsonl"
    session.write_text("".join(json.dumps(r) + "\n" for r in _chat_lines(1)), encoding="utf-8")
    agent = tmp_path / "agent-abcd1234.jsonl"
    warmup = [{"type": "user", "uuid": "w1", "parentUuid": None, "sessionId": "s-1", "isSidechain": True, "agentId": "abcd1234",
               "timestamp": "2026-01-01T00:00:00Z", "message": {"role": "user", "content": "Warmup"}},
              {"type": "assistant", "uuid": "w2", "parentUuid": "w1", "sessionId": "s-1", "isSidechain": True, "agentId": "abcd1234",
               "timestamp": "2026-01-01T00:00:01Z", "message": {"role": "assistant", "id": "msg_w", "model": "claude-haiku",
                                                                 "stop_reason": "end_turn", "content": [{"type": "text", "text": "Ready."}]}}]
    store = Store(":memory:")
    agent.write_text(json.dumps(warmup[0]) + "\n", encoding="utf-8")
    import_claude_code(store, [tmp_path], partial_tail=True)
    agent.write_text("".join(json.dumps(r) + "\n" for r in warmup), encoding="utf-8")
    threads = import_claude_code(store, [tmp_path]).thread_ids
    assert sorted(thread_state(store, t).model or "" for t in threads) == ["claude-haiku", "claude-x"]


def _parallel_calls_session() -> list[bytes]:
    """A turn as Claude Code 2.1.x writes it: one response (`msg_A`) whose parallel tool calls
    are each written after the result of the one before, then the next response."""
    def line(type_: str, uuid: str, parent: str | None, message: dict[str, Any], **more: Any) -> bytes:
        record = {"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": "s-1", "isSidechain": False,
                  "timestamp": f"2026-01-01T00:00:{len(uuid):02d}Z", "message": message, **more}
        return (json.dumps(record) + "\n").encode()

    def call(i: int) -> dict[str, Any]:
        return {"role": "assistant", "id": "msg_A", "model": "claude-x", "stop_reason": "tool_use",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": f"ls {i}"}}]}

    def result(i: int) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out {i}"}]}

    lines = [line("user", "u", None, {"role": "user", "content": "list three folders"}),
             line("assistant", "a0", "u", {"role": "assistant", "id": "msg_A", "model": "claude-x", "stop_reason": "tool_use",
                                           "content": [{"type": "text", "text": "Listing them."}]})]
    parent = "a0"
    for i in range(1, 4):
        lines += [line("assistant", f"c{i}", parent, call(i)), line("user", f"r{i}", f"c{i}", result(i))]
        parent = f"r{i}"
    lines.append(line("assistant", "b", parent, {"role": "assistant", "id": "msg_B", "model": "claude-x", "stop_reason": "end_turn",
                                                 "content": [{"type": "text", "text": "Three folders."}]}))
    lines.append((json.dumps({"type": "system", "subtype": "turn_duration", "uuid": "d", "parentUuid": "b", "sessionId": "s-1",
                              "timestamp": "2026-01-01T00:01:00Z"}) + "\n").encode())
    return lines


def _parallel_calls_imported(live: Path) -> tuple[list[bytes], list[tuple[str, str, str]]]:
    """`_parallel_calls_session` written whole at `live`: its lines, and the events one import
    of it holds (its response holds all three calls)."""
    lines = _parallel_calls_session()
    live.write_bytes(b"".join(lines))
    whole = Store(":memory:")
    import_claude_code(whole, [live])
    [response] = [e for e in whole.read_all() if e.type == "message.appended" and e.data["role"] == "assistant"
                  and any(b["type"] == "tool_use" for b in e.data["content"])]
    assert [b.get("id") for b in response.data["content"]] == [None, "t1", "t2", "t3"]
    return lines, _events_of(whole)


def test_following_a_response_whose_parallel_calls_come_between_their_results(tmp_path: Path) -> None:
    """A poll that reads a 2.1.x response's first tool call and its result must not take the
    response as complete: its next call comes after that result, under the same message id,
    and an event once written is never rewritten (the calls after it were lost)."""
    live = tmp_path / "s-1.jsonl"
    lines, expected = _parallel_calls_imported(live)
    for cut in range(1, len(lines)):
        with Store(":memory:") as store:
            live.write_bytes(b"".join(lines[:cut]))
            import_claude_code(store, [live], partial_tail=True)
            live.write_bytes(b"".join(lines))
            import_claude_code(store, [live], partial_tail=True)
            assert _events_of(store) == expected, f"cut after line {cut}"


def test_following_a_session_while_its_sub_agent_runs_ends_as_one_import(tmp_path: Path) -> None:
    """A 2.1.x session and its sub-agent's file, grown line by line in the order they were
    written (each file in its own order, the two interleaved by time) and polled after every
    line: the sub-agent's file appears as its `Agent` call is made, but the result naming its
    agentId comes when it is done. Taken as a thread of its own before then, it could never
    become the fork it is (the next poll was refused); it waits for that result instead."""
    main = CC / "-src-experiments-claude_p" / "29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl"
    agent = main.with_suffix("") / "subagents" / "agent-a2271d1.jsonl"
    live = {main: tmp_path / main.name, agent: tmp_path / main.stem / "subagents" / agent.name}
    live[agent].parent.mkdir(parents=True)
    queues = {path: [(str(json.loads(raw).get("timestamp") or ""), raw) for raw in path.read_bytes().splitlines(keepends=True)]
              for path in live}
    for path in live:
        live[path].write_bytes(b"".join(raw for _, raw in queues[path]))
    whole = Store(":memory:")
    import_claude_code(whole, [tmp_path])
    expected = _events_of(whole)
    assert sorted(t.kind for t in whole.all_threads()) == ["subagent", "thread"]
    for path in live:
        live[path].write_bytes(b"")
    with Store(":memory:") as store:
        while any(queues.values()):
            path = min((p for p in queues if queues[p]), key=lambda p: queues[p][0][0])
            with live[path].open("ab") as handle:
                handle.write(queues[path].pop(0)[1])
            import_claude_code(store, [tmp_path], partial_tail=True)
        import_claude_code(store, [tmp_path])
        assert _events_of(store) == expected
        assert sorted(t.kind for t in store.all_threads()) == ["subagent", "thread"]


def _async_agent_session(folder: Path) -> tuple[Path, list[bytes]]:
    """A 2.1.x session that launched a background sub-agent (`run_in_background`: the Task's
    result names its agentId at launch, `status: async_launched`), and that sub-agent's lines."""
    session = "eb000000-0000-4000-8000-0000000000a5"

    def line(uuid: str, parent: str | None, type_: str, message: dict[str, Any], **more: Any) -> bytes:
        record = {"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": session, "isSidechain": False,
                  "timestamp": "2026-04-19T10:03:30.000Z", "message": message, **more}
        return (json.dumps(record) + "\n").encode()

    def response(id_: str, block: dict[str, Any], stop: str | None) -> dict[str, Any]:
        return {"id": id_, "role": "assistant", "model": "claude-x", "content": [block], "stop_reason": stop}

    main = folder / f"{session}.jsonl"
    (folder / session / "subagents").mkdir(parents=True)
    launch = {"type": "tool_use", "id": "toolu_task", "name": "Task",
              "input": {"description": "coverage", "prompt": "Analyze coverage", "run_in_background": True}}
    main.write_bytes(b"".join([
        line("u1", None, "user", {"role": "user", "content": "Run a coverage agent in the background"}),
        line("a1", "u1", "assistant", response("msg_1", launch, "tool_use")),
        line("r1", "a1", "user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_task",
                                                               "content": "Async agent launched successfully.\nagentId: cccc333"}]},
             toolUseResult={"isAsync": True, "status": "async_launched", "agentId": "cccc333"}),
        line("a2", "r1", "assistant", response("msg_2", {"type": "text", "text": "Launched; waiting."}, "end_turn"))]))
    agent = [line("g1", None, "user", {"role": "user", "content": "Analyze coverage"}, isSidechain=True, agentId="cccc333"),
             line("g2", "g1", "assistant", response("msg_g", {"type": "thinking", "thinking": "Let me think", "signature": "s"}, None),
                  isSidechain=True, agentId="cccc333"),
             line("g3", "g2", "assistant", response("msg_g", {"type": "text", "text": "COVERAGE IS 96%"}, "end_turn"),
                  isSidechain=True, agentId="cccc333")]
    return folder / session / "subagents" / "agent-cccc333.jsonl", agent


def test_following_a_background_sub_agent_waits_for_it_as_for_one_still_running(tmp_path: Path) -> None:
    """A background sub-agent's result names its agentId when it is launched, not when it is
    done: its file is still being written. Taken as finished, a half-written last line of it
    refused the import, and a response whose lines were still arriving was stored from its first
    lines only (the rest then counted as changed, never stored)."""
    agent, lines = _async_agent_session(tmp_path)
    agent.write_bytes(b"".join(lines))
    expected = Store(":memory:")
    import_claude_code(expected, [tmp_path])
    with Store(":memory:") as store:
        agent.write_bytes(b"".join(lines[:2]) + lines[2][:60])  # the response's text block half-written
        first = import_claude_code(store, [tmp_path], partial_tail=True)
        assert first.subagents == 1 and first.waiting == 1
        agent.write_bytes(b"".join(lines))
        then = import_claude_code(store, [tmp_path], partial_tail=True)
        assert (then.changed, then.waiting) == (0, 0)
        assert _events_of(store) == _events_of(expected)
        [fork] = [t for t in store.all_threads() if t.kind == "subagent"]
        assert "COVERAGE IS 96%" in json.dumps([e.data for e in store.read(fork.id, start=fork.base)])
    # Its `<task-notification>` tells it is done: its file is taken as it is then, however it ends.
    main = next(tmp_path.glob("*.jsonl"))
    notified = {"type": "user", "uuid": "n1", "parentUuid": "a2", "sessionId": main.stem, "isSidechain": False,
                "timestamp": "2026-04-19T10:05:00.000Z", "message": {"role": "user", "content": (
                    "<task-notification>\n<task-id>cccc333</task-id>\n<status>completed</status>\n</task-notification>")}}
    main.write_bytes(main.read_bytes() + json.dumps(notified).encode() + b"\n")
    agent.write_bytes(b"".join(lines[:2]))
    with Store(":memory:") as store:
        assert import_claude_code(store, [tmp_path], partial_tail=True).waiting == 0  # its response ends in thinking: taken
        [fork] = [t for t in store.all_threads() if t.kind == "subagent"]
        assert "Let me think" in json.dumps([e.data for e in store.read(fork.id, start=fork.base)])


def test_a_file_left_for_a_later_import_is_named_once(tmp_path: Path) -> None:
    """A sub-agent's file whose last response is not shown complete, and which its session does
    not place yet, waits for both reasons: it was counted and named twice (`left for a later
    import: 3`, the same file on two lines, for two files), as Claude Code's teammates sessions
    left it."""
    session = "ef000000-0000-4000-8000-0000000000b7"

    def line(uuid: str, parent: str | None, message: dict[str, Any], **more: Any) -> bytes:
        record = {"type": message["role"], "uuid": uuid, "parentUuid": parent, "sessionId": session, "isSidechain": False,
                  "timestamp": "2026-04-19T10:03:30.000Z", "message": message, **more}
        return (json.dumps(record) + "\n").encode()

    def response(id_: str, block: dict[str, Any]) -> dict[str, Any]:  # Claude Code 2.1: no stop_reason on any line
        return {"id": id_, "role": "assistant", "model": "claude-x", "content": [block], "stop_reason": None}

    call = {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {"description": "coverage", "prompt": "Add server tests"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_task", "content": [{"type": "text", "text": "agentId: bbbb222222222222"}]}
    main = tmp_path / "sessions" / f"{session}.jsonl"
    agent = main.with_suffix("") / "subagents" / "agent-bbbb222222222222.jsonl"
    agent.parent.mkdir(parents=True)
    main.write_bytes(b"".join([line("u1", None, {"role": "user", "content": "Start a coverage agent"}),
                               line("a1", "u1", response("msg_1", call)),
                               line("r1", "a1", {"role": "user", "content": [result]}),
                               line("a2", "r1", response("msg_2", {"type": "text", "text": "Done."}))]))
    agent.write_bytes(b"".join([line("g1", None, {"role": "user", "content": "Add server tests"}, isSidechain=True, agentId="bbbb222222222222"),
                                line("g2", "g1", response("msg_g", {"type": "text", "text": "Coverage is 88%."}),
                                     isSidechain=True, agentId="bbbb222222222222")]))
    db = str(tmp_path / "t.db")
    report = CliRunner().invoke(cli, ["--db", db, "import", "claude-code", str(main.parent), "--json"])
    assert report.exit_code == 0, report.output
    assert (json.loads(report.stdout)["waiting"], json.loads(report.stdout)["waiting_files"]) == (2, [str(main), str(agent)])
    shown = CliRunner().invoke(cli, ["--db", db, "import", "claude-code", str(main.parent)]).stdout
    assert "left for a later import: 2 " in shown and shown.count(str(agent)) == 1, shown


def test_a_plain_import_that_took_a_running_sub_agent_as_a_thread_says_so_when_it_cannot_become_a_fork(tmp_path: Path) -> None:
    main = CC / "-src-experiments-claude_p" / "29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl"
    agent = main.with_suffix("") / "subagents" / "agent-a2271d1.jsonl"
    lines = main.read_bytes().splitlines(keepends=True)
    named = next(i for i, raw in enumerate(lines) if b'"agentId":"a2271d1' in raw and b"toolUseResult" in raw)
    (tmp_path / main.stem / "subagents").mkdir(parents=True)
    (tmp_path / main.stem / "subagents" / agent.name).write_bytes(agent.read_bytes())
    (tmp_path / main.name).write_bytes(b"".join(lines[:named]))  # the sub-agent still running
    with Store(tmp_path / "t.db") as store:
        assert sorted(t.kind for t in store.all_threads()) == [] and import_claude_code(store, [tmp_path]).threads == 2
        (tmp_path / main.name).write_bytes(b"".join(lines))
        before = store.counts()
        with pytest.raises(StoreError, match="a sub-agent taken as a thread of its own while it ran, before its session "
                                             "named it.*follow a live session with --follow"):
            import_claude_code(store, [tmp_path])
        assert store.counts() == before


def test_a_redacted_imported_tool_result_leaves_no_copy_in_the_file(tmp_path: Path) -> None:
    """Claude Code writes a tool's output twice on a line: in the tool_result the model saw and
    in `toolUseResult`. Only the first is imported (into data, which `redact` erases): a copy
    in meta, chained as it is, would outlive the redaction."""
    session = CC / "-Users-dain-workspace-coderabbit-review-helper" / "cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"
    token = b"Uninstalled 1 package in 0.89ms"
    assert session.read_bytes().count(token) == 2  # the tool_result's content, and toolUseResult.stdout
    db = tmp_path / "t.db"
    with Store(db) as store:
        summary = import_claude_code(store, [session])
        [result] = [e for e in store.read(summary.thread_ids[0]) if e.type == "message.appended" and any(
            b.get("tool_use_id") == "toolu_01S8c9L4VKpgusGShBxkU3es" for b in e.data["content"])]
        assert "tool_use_results" not in result.meta.get("source", {})
        store.redact(result.position, reason="secret", actor="ops")
        assert store.verify().redacted == 1
    assert [p.name for p in tmp_path.iterdir() if token in p.read_bytes()] == []


def test_a_source_time_that_is_not_a_time_is_kept_in_the_source_only(tmp_path: Path) -> None:
    """`meta.occurred_at` is shown as when an event happened: a Claude Code line whose timestamp
    is not a time imports without it (its `source.timestamp` keeps the text as written)."""
    source = CC / "-Users-dain-workspace-claude-code-log-sample" / "0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl"
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    first = next(r for r in records if r.get("type") == "user" and isinstance(r["message"]["content"], str))
    first["timestamp"] = "\x1b[2J<script>"
    session = tmp_path / source.name
    session.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [session])
        [message] = [e for e in store.read(summary.thread_ids[0])
                     if e.type == "message.appended" and e.meta["source"].get("timestamp") == "\x1b[2J<script>"]
        assert "occurred_at" not in message.meta


def test_a_title_from_a_summary_line_takes_the_time_of_the_message_it_names(tmp_path: Path) -> None:
    """A summary line has no timestamp of its own: its title takes its leaf message's, so `ls`
    shows when the session was active, not when it was imported."""
    source = CC / "-Users-dain-workspace-claude-code-log-sample" / "0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl"
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()][:12]
    leaf = [r for r in records if r.get("type") in ("user", "assistant")][-1]
    session = tmp_path / source.name
    session.write_text("".join(json.dumps(r) + "\n" for r in [{"type": "summary", "summary": "Timeline fixes",
                                                                "leafUuid": leaf["uuid"]}, *records]), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [session])
        info = store.thread(summary.thread_ids[0])
        [title] = [e for e in store.read(info.id) if e.type == "title.set"]
        assert title.data == {"title": "Timeline fixes"} and title.meta["occurred_at"] == leaf["timestamp"]
        from threadlog.listing import listing

        [row] = listing(store, [info])
        assert row["last_activity"] == title.time == leaf["timestamp"]


def test_a_plain_cli_import_of_a_session_still_being_written_leaves_its_last_response_for_later(tmp_path: Path) -> None:
    """`threadlog import claude-code` run while Claude Code writes the session (a file changed
    in the last 10 minutes): a response it cannot see complete waits, so the next import adds
    it whole. Taken as it was, the session could never be imported again (refused)."""
    live = tmp_path / "s-1.jsonl"
    lines, expected = _parallel_calls_imported(live)
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    for cut in range(1, len(lines)):
        Path(db).unlink(missing_ok=True)
        live.write_bytes(b"".join(lines[:cut]))
        first = runner.invoke(cli, ["--db", db, "import", "claude-code", str(live), "--json"])
        assert first.exit_code == 0, first.output
        live.write_bytes(b"".join(lines))
        second = runner.invoke(cli, ["--db", db, "import", "claude-code", str(live), "--json"])
        assert second.exit_code == 0 and json.loads(second.stdout)["waiting"] == 0, (cut, second.output)
        with Store(db) as store:
            assert _events_of(store) == expected, f"cut after line {cut}"
    live.write_bytes(b"".join(lines[:4]))  # the first call's result: the response may go on
    shown = runner.invoke(cli, ["--db", str(tmp_path / "u.db"), "import", "claude-code", str(live)])
    assert "still being written, left for a later import: 1" in shown.stdout, shown.output
    old = time.time() - 3600  # an hour untouched: the session is over, taken as it is
    os.utime(live, (old, old))
    assert import_claude_code(Store(":memory:"), [live], live_within=600).waiting == 0


def test_an_import_names_the_files_it_left_for_a_later_import(tmp_path: Path) -> None:
    """`still being written, left for a later import: 1` said how many, not which: among the
    sessions of a directory nothing told the one still being written."""
    live = tmp_path / "s-1.jsonl"
    lines, _ = _parallel_calls_imported(live)
    live.write_bytes(b"".join(lines[:4]))  # the first call's result: the response may go on
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "claude-code", str(tmp_path)])
    assert shown.exit_code == 0 and "still being written, left for a later import: 1 " in shown.stdout, shown.output
    assert f"\n  {live}\n" in shown.stdout, shown.output
    done = runner.invoke(cli, ["--db", str(tmp_path / "u.db"), "import", "claude-code", str(live), "--json"])
    report = json.loads(done.stdout)
    assert report["waiting"] == 1 and report["waiting_files"] == [str(live)], done.output


def test_a_session_dated_ahead_of_the_clock_is_taken_as_it_is_not_left_waiting_until_then(tmp_path: Path) -> None:
    """A session whose files' time is a year ahead (copied from a machine whose clock ran
    ahead, `touch -d`) counted as written just now: its last response was left "still being
    written" on every import for a year. Far ahead, it is taken as it is, as an old one is."""
    live = tmp_path / "s-1.jsonl"
    lines, _ = _parallel_calls_imported(live)
    live.write_bytes(b"".join(lines[:4]))  # the first call's result: the response may go on
    ahead = time.time() + 365 * 24 * 3600
    os.utime(live, (ahead, ahead))
    assert import_claude_code(Store(":memory:"), [live], live_within=600).waiting == 0
    soon = time.time() + 60  # a minute ahead (a clock a little off): still taken as being written
    os.utime(live, (soon, soon))
    assert import_claude_code(Store(":memory:"), [live], live_within=600).waiting == 1


def test_a_bad_line_of_a_single_file_names_the_file_once(tmp_path: Path) -> None:
    """A refused line names its file and line; the note naming the source repeated it
    (`F:1: …; the file is F`). A session of several files still lists them all."""
    session = tmp_path / "s-1.jsonl"
    session.write_text('"not an object"\n', encoding="utf-8")
    for importer in ("claude-code", "pi"):
        done = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", importer, str(session)])
        assert done.exit_code == 1 and done.stderr.startswith(f"error: {session}:1: "), done.output
        assert done.stderr.count(str(session)) == 1, done.stderr


def _chat_lines(turns: int) -> list[dict[str, Any]]:
    """A Claude Code chat of `turns` questions and answers, each line naming the one before."""
    lines: list[dict[str, Any]] = []
    parent = None
    for i in range(turns):
        for role, uuid in (("user", f"u{i}"), ("assistant", f"a{i}")):
            message: dict[str, Any] = {"role": role, "content": f"{role} {i}"}
            if role == "assistant":
                message.update(id=f"msg_{i}", model="claude-x", stop_reason="end_turn", content=[{"type": "text", "text": f"answer {i}"}])
            lines.append({"type": role, "uuid": uuid, "parentUuid": parent, "sessionId": "s-1", "isSidechain": False,
                          "timestamp": f"2026-01-01T00:00:{len(lines):02d}Z", "message": message})
            parent = uuid
    return lines


def _one_thread_texts(importer: Any, path: Path) -> list[str]:
    """The first block's text of each message of the one thread `importer` makes of `path`."""
    store = Store(":memory:")
    importer(store, [path])
    [thread] = store.all_threads()
    return [e.data["content"][0]["text"] for e in store.read(thread.id) if e.type == "message.appended"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.permutations(range(6)))
def test_lines_written_before_their_parent_still_make_one_thread(tmp_path: Path, order: list[int]) -> None:
    """A line whose parent comes later in the file (lines swapped by an edit or a merge) began
    a root of its own: one chat came in as two threads, the second starting with an answer.
    Whatever the order of its lines, a chat is one thread, its messages in the order the
    parents give."""
    chat = _chat_lines(3)
    path = tmp_path / f"s-{'-'.join(map(str, order))}.jsonl"
    path.write_text("".join(json.dumps(chat[i]) + "\n" for i in order), encoding="utf-8")
    assert _one_thread_texts(import_claude_code, path) == ["user 0", "answer 0", "user 1", "answer 1", "user 2", "answer 2"]


def test_a_uuid_used_again_for_other_content_is_a_bad_line(tmp_path: Path) -> None:
    """A second line with a uuid already used was dropped as a repeat, whatever it said, and
    the import counted it as a line without conversation. A repeat saying the same is still
    skipped; one saying something else is refused, naming both lines."""
    chat = _chat_lines(2)
    same, other = tmp_path / "same.jsonl", tmp_path / "other.jsonl"
    same.write_text("".join(json.dumps(r) + "\n" for r in [*chat, chat[1]]), encoding="utf-8")
    changed = dict(chat[2], message={"role": "user", "content": "A DIFFERENT question"})
    other.write_text("".join(json.dumps(r) + "\n" for r in [*chat, changed]), encoding="utf-8")
    store = Store(":memory:")
    assert import_claude_code(store, [same]).skipped["duplicate uuid"] == 1
    with pytest.raises(BadLine, match=r"other.jsonl:5: uuid 'u1' is line 3's, which says something else"):
        import_claude_code(store, [other])
    skipped = import_claude_code(Store(":memory:"), [other], skip_bad=True)
    assert [(b[1], b[2]) for b in skipped.bad] == [(5, "uuid 'u1' is line 3's, which says something else")]


@pytest.mark.parametrize("mode", [0, 0o644], ids=["unlisted", "not-entered"])
@pytest.mark.parametrize("tool", ["pi", "claude-code"])
def test_a_directory_that_cannot_be_read_is_refused_not_skipped(tmp_path: Path, tool: str, mode: int) -> None:
    """`Path.rglob` searched past a directory it could not read: the sessions in it were left
    out, and the import said `1 file(s)` and exited 0. It is refused, naming the directory,
    with no database left behind. (Root reads any directory: as root the import runs
    without the capabilities that let it.)"""
    prefix = bound_by_file_modes("dac_override", "dac_read_search")
    source = PI if tool == "pi" else SUBAGENT_SESSION
    for folder in ("open", "locked"):
        (tmp_path / "sessions" / folder).mkdir(parents=True)
        shutil.copy2(source, tmp_path / "sessions" / folder / source.name)
    locked = tmp_path / "sessions" / "locked"
    locked.chmod(mode)
    db = tmp_path / "t.db"
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, str(tmp_path / "sessions")],
                              capture_output=True, text=True, timeout=120)
    finally:
        locked.chmod(0o755)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: cannot read the directory {locked} (Permission denied)"), done.stderr
    assert not db.exists() and "Traceback" not in done.stderr


@pytest.mark.parametrize(("tool", "sources"), [
    ("claude-code", [CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl", SUBAGENT_SESSION]),
    ("pi", [PI, FIXTURES / "pi-merged.jsonl"]),
    ("swe-agent", [FIXTURES / "swe-agent" / "function_calling_simple.traj", FIXTURES / "swe-agent" / "warmup.traj"]),
])
def test_a_file_that_cannot_be_read_is_named_and_skip_bad_says_what_it_left(tmp_path: Path, tool: str, sources: list[Path]) -> None:
    """A session file the import may not read said `error: Permission denied: FILE`: with
    --skip-bad, after the files before it were written, without a word of them, and for
    swe-agent, whose --skip-bad skips a file that cannot be imported, instead of skipping it.
    Without --skip-bad it is refused by name with nothing written. (As root the import runs
    without the capabilities that read past file modes.)"""
    prefix = bound_by_file_modes("dac_override", "dac_read_search")
    folder = tmp_path / "sessions"
    folder.mkdir()
    readable, locked = (folder / f"{name}{source.suffix}" for name, source in zip("ab", sources))
    for path, source in zip((readable, locked), sources):
        shutil.copy(source, path)
        os.utime(path, (time.time() - 3600,) * 2)  # not a session still being written
    locked.chmod(0)
    db = tmp_path / "t.db"

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, *flags, str(folder)],
                              capture_output=True, text=True, timeout=120)

    try:
        refused = run()
        assert not db.exists(), "a refused import wrote"
        skipping = run("--skip-bad")
    finally:
        locked.chmod(0o644)
    why = "cannot read it (Permission denied): make it readable"
    says = f"{locked}: {why}"
    assert refused.returncode == 1 and refused.stderr.startswith(f"error: {says}"), refused.stderr
    with Store(":memory:") as alone:
        added = {"claude-code": import_claude_code, "pi": import_pi, "swe-agent": import_swe_agent}[tool](alone, [readable]).added
    if tool == "swe-agent":  # a file that cannot be imported is skipped, named, and the others imported
        assert skipping.returncode == 0, skipping.stderr
        assert f"skipped {locked}:1: {why}" in skipping.stdout and f"{added} event(s) added" in skipping.stdout, skipping.stdout
    else:  # --skip-bad skips lines; the refusal says what the files before it wrote
        assert skipping.returncode == 1, skipping.stdout
        noun = "session" if tool == "claude-code" else "file"
        assert skipping.stderr == (f"error: {says}; the 1 {noun}(s) before it were imported ({added} event(s) added); "
                                   "importing again adds only what is missing\n")
    assert "Traceback" not in refused.stderr + skipping.stderr


def _pi_chat(turns: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pi (version 3) session of `turns` questions and answers: its header and entries."""
    header = {"type": "session", "version": 3, "id": "s-pi", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
    entries: list[dict[str, Any]] = []
    for i in range(turns):
        for role in ("user", "assistant"):
            text = f"{'question' if role == 'user' else 'answer'} {i}"
            message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1767225600000}
            if role == "assistant":
                message.update(provider="anthropic", model="claude-x", stopReason="stop")
            entries.append({"type": "message", "id": f"e{len(entries)}", "parentId": entries[-1]["id"] if entries else None,
                            "timestamp": "2026-01-01T00:00:01.000Z", "message": message})
    return header, entries


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.permutations(range(6)))
def test_pi_entries_written_before_their_parent_keep_their_branch(tmp_path: Path, order: list[int]) -> None:
    """An entry whose parent comes later in the file was hung on the entry before it: its
    branch left out what led to it. Whatever the order of its entries, a linear session is
    one thread, its messages in the order the parents give."""
    header, entries = _pi_chat(3)
    path = tmp_path / f"p-{'-'.join(map(str, order))}.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in [header, *(entries[i] for i in order)]), encoding="utf-8")
    assert _one_thread_texts(import_pi, path) == ["question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"]


def test_a_pi_session_being_written_leaves_its_half_written_last_line_for_a_later_import(tmp_path: Path) -> None:
    """pi appends an entry at a time: an import that read a file as pi wrote its last line was
    refused whole ("not JSON ... fix or delete that line"), with every other file of the
    directory. A file changed in the last 10 minutes leaves that line for a later import,
    which adds it; an older file's broken last line is refused as before."""
    header, entries = _pi_chat(2)
    path = tmp_path / "live.jsonl"
    whole = "".join(json.dumps(record) + "\n" for record in [header, *entries])
    path.write_text(whole[:-20], encoding="utf-8")
    store = Store(":memory:")
    summary = import_pi(store, [path])
    assert summary.waiting == 1 and summary.waiting_files == [str(path)]
    [thread] = store.all_threads()
    assert [e.data["content"][0]["text"] for e in store.read(thread.id) if e.type == "message.appended"] == \
        ["question 0", "answer 0", "question 1"]
    path.write_text(whole, encoding="utf-8")
    again = import_pi(store, [path])
    assert again.waiting == 0 and again.added == 1 and again.changed == 0
    assert _one_thread_texts(import_pi, path) == ["question 0", "answer 0", "question 1", "answer 1"]
    path.write_text(whole[:-20], encoding="utf-8")
    old = time.time() - 3600
    os.utime(path, (old, old))
    with pytest.raises(BadLine, match=r"live.jsonl:5: not JSON"):
        import_pi(Store(":memory:"), [path])


def test_an_import_judges_a_files_age_once_for_its_check_and_its_write(tmp_path: Path) -> None:
    """An import reads each file twice (the check, then the write). A pi file ten minutes old
    between the two was read as one still being written, then as a finished one: its torn last
    line, waiting in the check, was refused in the write, after other files were written."""
    from threadlog.importers.lines import Seen

    path = tmp_path / "live.jsonl"
    path.write_text('{"type": "session"', encoding="utf-8")
    seen = Seen()
    assert seen.changed_within(path, 600)
    old = time.time() - 3600
    os.utime(path, (old, old))  # the file turned old between the passes
    assert seen.changed_within(path, 600), "the same import decides as it first did"
    assert not Seen().changed_within(path, 600)  # the next import finds it old


def test_a_pi_session_whose_header_is_being_written_waits_with_the_other_files_imported(tmp_path: Path) -> None:
    """A file pi had just begun, read as it wrote its header line, refused the whole import
    (`a pi session file starts with a session header line`), every other file given with it,
    though the half-written last line of a file being written waits for a later import."""
    header, entries = _pi_chat(1)
    done, begun = tmp_path / "done.jsonl", tmp_path / "begun.jsonl"
    done.write_text("".join(json.dumps(record) + "\n" for record in [header, *entries]), encoding="utf-8")
    begun.write_text(json.dumps({**header, "id": "s-new"})[:-10], encoding="utf-8")
    store = Store(":memory:")
    summary = import_pi(store, [done, begun])
    assert summary.waiting_files == [str(begun)] and summary.added > 0 and len(store.all_threads()) == 1
    begun.write_text(json.dumps({**header, "id": "s-new"}) + "\n" + json.dumps(entries[0]) + "\n", encoding="utf-8")
    assert import_pi(store, [done, begun]).waiting == 0 and len(store.all_threads()) == 2


def test_a_second_pi_session_header_is_a_bad_line(tmp_path: Path) -> None:
    """A `session` line after the first (two files joined) was taken as an entry: an empty
    thread of its own, which `request` could not send."""
    header, entries = _pi_chat(2)
    path = tmp_path / "joined.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *entries[:2], dict(header, id="s-other"), *entries[2:]]),
                    encoding="utf-8")
    with pytest.raises(BadLine, match=r"joined.jsonl:4: a session header belongs on the file's first line only"):
        import_pi(Store(":memory:"), [path])
    store = Store(":memory:")
    summary = import_pi(store, [path], skip_bad=True)
    assert [(b[1], b[2].split(" (")[0]) for b in summary.bad] == [(4, "a session header belongs on the file's first line only")]
    [thread] = store.all_threads()
    assert sum(e.type == "message.appended" for e in store.read(thread.id)) == 4


def test_following_a_finished_session_imports_its_last_answer(tmp_path: Path) -> None:
    """Claude Code 2.1.x writes `stop_reason: null` on every line, so a finished session's
    last answer looked unfinished: a follower held it back forever (5 events where a plain
    import gives 7), however long the file had been quiet. A session quiet for `live_within`
    seconds is taken as it is, when found so and when it has been quiet that long."""
    project = tmp_path / "p"
    project.mkdir()
    main = project / SUBAGENT_SESSION.name
    main.write_bytes(SUBAGENT_SESSION.read_bytes())
    expected = Store(":memory:")
    import_claude_code(expected, [main])

    def followed(live_within: float, polls: int) -> Store:
        store = Store(":memory:")
        left = iter(range(polls))
        follow_claude_code(store, [project], interval=0.3, settle=3600, live_within=live_within,
                           stop=lambda: next(left, None) is None)
        return store

    os.utime(main, (time.time() - 7200, time.time() - 7200))  # finished two hours ago
    assert _events_of(followed(600, 2)) == _events_of(expected)
    os.utime(main, None)  # written just now: its last answer waits while it may still be written...
    fresh = followed(1.0, 1)
    assert len(_events_of(fresh)) < len(_events_of(expected))
    assert _events_of(followed(1.0, 6)) == _events_of(expected)  # ...and is taken once quiet for live_within


def test_a_refused_session_does_not_stop_the_mirror_of_the_others(tmp_path: Path) -> None:
    """A followed session file rewritten under the same name (a rotation) refused the import,
    and `--follow` exited: every other session stopped being mirrored. It is reported, and the
    others go on."""
    project = tmp_path / "p"
    project.mkdir()
    rotated, growing = project / "aaaaaaaa-0000-4000-8000-000000000001.jsonl", project / "bbbbbbbb-0000-4000-8000-000000000002.jsonl"
    chat = _chat_lines(3)
    for path in (rotated, growing):
        path.write_text("".join(json.dumps(r) + "\n" for r in chat[:4]), encoding="utf-8")
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    store = Store(":memory:")
    refused: list[tuple[list[Path], str]] = []
    polls = iter(range(12))

    def stop() -> bool:
        n = next(polls, None)
        if n == 2:  # after the first import of both: one rewritten, the other grown
            rotated.write_text("".join(json.dumps(dict(r, uuid=r["uuid"] + "x", parentUuid=r["parentUuid"] and r["parentUuid"] + "x"))
                                       + "\n" for r in chat[:2]), encoding="utf-8")
            growing.write_text("".join(json.dumps(r) + "\n" for r in chat), encoding="utf-8")
            for path in (rotated, growing):
                os.utime(path, (time.time() - 7200, time.time() - 7200 + n))
        return n is None

    follow_claude_code(store, [project], interval=0.05, settle=3600, stop=stop,
                       on_refused=lambda session, error: refused.append((session.files, str(error))))
    assert [(files, "no longer has" in why) for files, why in refused] == [([rotated], True)]
    texts = [e.data["content"][0]["text"] for t in store.all_threads() for e in store.read(t.id, start=t.base)
             if e.type == "message.appended" and e.stream_id == t.id]
    assert texts.count("answer 2") == 1 and texts.count("user 2") == 1  # the grown session's new turn came in


def _write_chat(path: Path, lines: list[dict[str, Any]], age: float = 7200) -> None:
    """`lines` as a Claude Code session file last written `age` seconds ago."""
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    os.utime(path, (time.time() - age, time.time() - age))


def test_a_refused_session_is_reported_once_while_it_stays_as_it_is(tmp_path: Path) -> None:
    """A followed session refused for a bad line was reported when found, again once it had
    been quiet for `settle` seconds, and again after `live_within`: the same words up to three
    times. It is reported once, and again only when it changes and is refused anew."""
    project = tmp_path / "p"
    project.mkdir()
    bad = project / "aaaaaaaa-0000-4000-8000-000000000001.jsonl"
    chat = [json.dumps(r) for r in _chat_lines(2)]
    bad.write_text("\n".join([chat[0], "{not json", *chat[1:]]) + "\n", encoding="utf-8")
    refused: list[str] = []
    polls = iter(range(40))

    def stop() -> bool:
        n = next(polls, None)
        if n == 20:  # changed, and still bad: a new refusal
            bad.write_text("\n".join([chat[0], "{not json", *chat[1:], "{still not json"]) + "\n", encoding="utf-8")
        return n is None

    follow_claude_code(Store(":memory:"), [project], interval=0.02, settle=0.1, live_within=0.3, stop=stop,
                       on_refused=lambda session, error: refused.append(str(error)))
    assert [why.split(": ", 1)[0] for why in refused] == [f"{bad}:2", f"{bad}:2"], refused


def test_follow_goes_on_past_files_it_cannot_read_or_name_and_files_removed_meanwhile(tmp_path: Path) -> None:
    """A session file `--follow` may not read, a directory it may not search, a file whose name
    makes no id: each stopped the mirror of every session (`error: Permission denied`, exit 1).
    Each is reported once on stderr, and the sessions beside them are mirrored. (As root the
    follower runs without the capabilities that read past file modes.)"""
    prefix = bound_by_file_modes("dac_override", "dac_read_search")
    project = tmp_path / "p"
    (project / "locked").mkdir(parents=True)
    chat = _chat_lines(2)
    readable, unreadable = project / "aaaaaaaa-0000-4000-8000-000000000001.jsonl", project / "bbbbbbbb-0000-4000-8000-000000000002.jsonl"
    for path in (readable, unreadable, project / "locked" / "cccccccc-0000-4000-8000-000000000003.jsonl", project / "bad\nname.jsonl"):
        _write_chat(path, chat)
    unreadable.chmod(0)
    (project / "locked").chmod(0o644)  # listed, not entered: its files' stat failed (PermissionError, exit 1)
    db = tmp_path / "t.db"
    try:
        proc = interruptible([*prefix, sys.executable, "-m", "threadlog", "--db", str(db), "import", "claude-code", "--follow",
                              "--interval", "0.1", str(project)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (db.exists() and _threads_in(db)):
            time.sleep(0.2)
        time.sleep(1.0)  # ten polls more: nothing is reported twice
        out, err = ctrl_c(proc)
    finally:
        unreadable.chmod(0o644)
        (project / "locked").chmod(0o755)
    assert proc.returncode == 0, err
    refusals = [line for line in err.splitlines() if line.startswith("refused: ")]
    assert len(refusals) == 3, err
    assert refusals[0].startswith(f"refused: cannot read the directory {project / 'locked'} (Permission denied)")
    assert refusals[1].startswith(f"refused: {project}/bad\\nname.jsonl: its name holds the control character")
    assert refusals[2].startswith(f"refused: {unreadable}: cannot read it (Permission denied): make it readable")
    expected = import_claude_code(Store(":memory:"), [readable]).added
    assert "Traceback" not in err and out.startswith(f"+{expected} event(s) (1 file(s))")
    assert _threads_in(db) == 1


def _threads_in(db: Path) -> int:
    """How many threads `db` holds (0 while the follower has yet to make it a database)."""
    try:
        with Store(db, read_only=True) as store:
            return len(store.all_threads())
    except StoreError:
        return 0


def test_a_session_removed_while_the_follower_reads_it_does_not_stop_the_mirror(tmp_path: Path) -> None:
    """A session file deleted between the follower finding it and reading it (Claude Code
    removes old sessions) raised FileNotFoundError, and the mirror of every session stopped.
    It is passed over, and imported if it comes back."""
    project = tmp_path / "p"
    project.mkdir()
    bad, removed = project / "aaaaaaaa-0000-4000-8000-000000000001.jsonl", project / "bbbbbbbb-0000-4000-8000-000000000002.jsonl"
    chat = _chat_lines(2)
    bad.write_text("{not json\n", encoding="utf-8")
    _write_chat(removed, chat)
    store = Store(":memory:")
    polls = iter(range(10))

    def refused(session: Any, error: Any) -> None:  # read first (its name sorts first): the other goes meanwhile
        removed.unlink()

    def stop() -> bool:
        n = next(polls, None)
        if n == 5:
            _write_chat(removed, chat)  # back
        return n is None

    follow_claude_code(store, [project], interval=0.02, settle=3600, stop=stop, on_refused=refused)
    expected = Store(":memory:")
    import_claude_code(expected, [removed])
    assert _events_of(store) == _events_of(expected)


def _paused_response_lines() -> list[dict[str, Any]]:
    """A Claude Code 2.1.x turn: one response (null `stop_reason` on every line) whose thinking
    and two parallel calls are each a line, each call followed by its result, then the answer."""
    def line(uuid: str, parent: str | None, role: str, content: Any, message_id: str | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": role, "content": content}
        if message_id is not None:
            message.update(id=message_id, model="claude-x", stop_reason=None)
        return {"type": role, "uuid": uuid, "parentUuid": parent, "sessionId": "s-1", "isSidechain": False,
                "timestamp": f"2026-01-01T00:00:{int(uuid[1:]):02d}Z", "message": message}

    call = {"type": "tool_use", "name": "Read", "input": {"file_path": "/a"}}
    return [line("l1", None, "user", "Read both files"),
            line("l2", "l1", "assistant", [{"type": "thinking", "thinking": "Both.", "signature": "sig"}], "msg_1"),
            line("l3", "l2", "assistant", [{**call, "id": "toolu_1"}], "msg_1"),
            line("l4", "l3", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"}]),
            line("l5", "l4", "assistant", [{**call, "id": "toolu_2"}], "msg_1"),
            line("l6", "l5", "user", [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "two"}]),
            line("l7", "l6", "assistant", [{"type": "text", "text": "Both read."}], "msg_2")]


@pytest.mark.parametrize("cut", [2, 3], ids=["thinking-last", "call-waiting"])
def test_a_session_paused_mid_response_for_long_is_imported_whole_once_it_goes_on(tmp_path: Path, cut: int) -> None:
    """Claude Code waiting at a permission prompt leaves its file quiet mid-response (a call with
    no result yet). An import then took the response as it was: when the session went on, the
    response's later calls could never be added (`changed since imported`, exit 0), and their
    results were refused ("not pending"), stopping the import of every session after it. Such a
    response waits for a later import, however long the file has been quiet."""
    lines = _paused_response_lines()
    path = tmp_path / "aaaaaaaa-0000-4000-8000-000000000001.jsonl"
    whole = Store(":memory:")
    _write_chat(path, lines)
    import_claude_code(whole, [path], live_within=600)
    store = Store(":memory:")
    _write_chat(path, lines[:cut])
    first = import_claude_code(store, [path], live_within=600)
    assert first.waiting == 1
    _write_chat(path, lines)
    again = import_claude_code(store, [path], live_within=600)
    assert again.changed == 0 and _events_of(store) == _events_of(whole)
    store.verify()


def test_a_session_paused_for_over_a_week_is_taken_as_it_is(tmp_path: Path) -> None:
    """A response waiting on a call in a session quiet for a week was left so (Claude Code closed
    at the prompt): waited for however long, it was never imported."""
    lines = _paused_response_lines()
    path = tmp_path / "aaaaaaaa-0000-4000-8000-000000000001.jsonl"
    _write_chat(path, lines[:3], age=8 * 24 * 3600)
    store, expected = Store(":memory:"), Store(":memory:")
    summary = import_claude_code(store, [path], live_within=600)
    import_claude_code(expected, [path])
    assert summary.waiting == 0 and _events_of(store) == _events_of(expected)


def test_a_sub_agent_whose_task_was_interrupted_is_imported_whole(tmp_path: Path) -> None:
    """The user interrupted the Task: its sub-agent's file ends on calls that never get a
    result, and the session shows the interruption. The sub-agent's last response waited for
    them, in every import, however long; it is taken as it is once the session's own calls
    are all answered."""
    project = tmp_path / "p"
    shutil.copytree(SUBAGENT_SESSION.parent, project)
    main = project / SUBAGENT_SESSION.name
    agent = next((project / SUBAGENT_SESSION.stem / "subagents").glob("agent-*.jsonl"))
    lines = [json.loads(line) for line in main.read_text(encoding="utf-8").splitlines()]
    result = lines[4]
    call = result["message"]["content"][0]["tool_use_id"]
    result["message"]["content"] = [{"type": "tool_result", "tool_use_id": call, "is_error": True,
                                     "content": "[Request interrupted by user for tool use]"}]
    result["toolUseResult"] = "Error: [Request interrupted by user for tool use]"
    interrupted = {**json.loads(json.dumps(result)), "uuid": "int-1", "parentUuid": result["uuid"],
                   "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user for tool use]"}]}}
    interrupted.pop("toolUseResult")
    _write_chat(main, [*lines[:5], interrupted], age=24 * 3600)
    agent_lines = [json.loads(line) for line in agent.read_text(encoding="utf-8").splitlines()[:55]]
    assert any(b.get("type") == "tool_use" for b in agent_lines[-1]["message"]["content"]), "the agent must end on a call"
    _write_chat(agent, agent_lines, age=24 * 3600)
    store, expected = Store(":memory:"), Store(":memory:")
    summary = import_claude_code(store, [main], live_within=600)
    import_claude_code(expected, [main])
    assert summary.waiting == 0 and _events_of(store) == _events_of(expected)


def test_an_event_the_store_refuses_on_import_names_the_session(tmp_path: Path) -> None:
    """A response taken before its calls ran (a session imported as it was), then grown: the
    store refuses a later call's result as not pending. The error named the tool call alone,
    not the file, which a directory of sessions left to be searched."""
    lines = _paused_response_lines()
    path = tmp_path / "aaaaaaaa-0000-4000-8000-000000000001.jsonl"
    store = Store(":memory:")
    _write_chat(path, lines[:3])
    import_claude_code(store, [path])  # taken as it is
    _write_chat(path, lines)
    with pytest.raises(StoreError) as refused:
        import_claude_code(store, [path])
    assert f"the session is {path}" in getattr(refused.value, "__notes__", []), refused.value


def test_a_cycle_of_parents_starts_at_the_line_first_in_the_file(tmp_path: Path) -> None:
    """Lines naming each other as parents: the cycle is cut at the line the file writes first,
    which starts the thread (cut elsewhere, the thread began with the answer)."""
    chat = _chat_lines(2)
    cc = tmp_path / "cc.jsonl"
    cc.write_text("".join(json.dumps(r) + "\n" for r in [dict(chat[0], parentUuid="a1"), *chat[1:]]), encoding="utf-8")
    header, entries = _pi_chat(2)
    pi = tmp_path / "pi.jsonl"
    pi.write_text("".join(json.dumps(r) + "\n" for r in [header, dict(entries[0], parentId="e3"), *entries[1:]]), encoding="utf-8")
    for path, importer in ((cc, import_claude_code), (pi, import_pi)):
        texts = _one_thread_texts(importer, path)
        assert texts[:2] in (["user 0", "answer 0"], ["question 0", "answer 0"]) and len(texts) == 4, (path.name, texts)


def test_repeated_link_lines_with_other_content_are_skipped(tmp_path: Path) -> None:
    """Claude Code 2.1.27 writes a hook's attachment lines under one uuid, each with its own
    time: they carry nothing imported, so a repeat is skipped, not refused as a conversation
    line's would be."""
    chat = _chat_lines(2)
    hooks = [{"type": "attachment", "uuid": "hook-1", "parentUuid": "a0", "sessionId": "s-1", "timestamp": f"2026-01-01T00:01:0{i}Z",
              "attachment": {"type": "hook_additional_context", "content": ["x"]}} for i in range(3)]
    path = tmp_path / "hooks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*chat[:2], *hooks, dict(chat[2], parentUuid="hook-1"), chat[3]]),
                    encoding="utf-8")
    summary = import_claude_code(Store(":memory:"), [path])
    assert summary.skipped["duplicate uuid"] == 2 and summary.prompts == 2 and summary.bad == []


def test_pi_redacted_thinking_is_sent_back_as_redacted_thinking(mem: Store, tmp_path: Path) -> None:
    """pi keeps the API's `redacted_thinking` as a thinking block marked `redacted`, its opaque
    data in `thinkingSignature`: it goes back as the `redacted_thinking` it was, not as a
    thinking block whose "signature" the API would refuse (and whose text pi made up)."""
    head = _pi_tree(("u1", None, "user", "go")).splitlines(keepends=True)
    answer = {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-07-01T10:00:00.000Z",
              "message": {"role": "assistant", "model": "claude-opus-4-5", "stopReason": "toolUse", "content": [
                  {"type": "thinking", "thinking": "Let me look.", "thinkingSignature": "c2lnbmVk"},
                  {"type": "thinking", "thinking": "[Reasoning redacted]", "thinkingSignature": "EmwKAhgBEgy3va", "redacted": True},
                  {"type": "toolCall", "id": "toolu_1", "name": "bash", "arguments": {"command": "ls"}}]}}
    result = {"type": "message", "id": "r1", "parentId": "a1", "timestamp": "2025-07-01T10:00:00.000Z",
              "message": {"role": "toolResult", "toolCallId": "toolu_1", "content": [{"type": "text", "text": "a.txt"}]}}
    path = tmp_path / "session.jsonl"
    path.write_text("".join([*head, json.dumps(answer) + "\n", json.dumps(result) + "\n"]))
    thread = import_pi(mem, [path]).thread_ids[0]
    kwargs = anthropic_request(mem, thread, model="m", max_tokens=10)
    validate_request(kwargs)
    assert [{k: v for k, v in b.items() if k != "cache_control"} for b in kwargs["messages"][1]["content"]] == [
        {"type": "thinking", "thinking": "Let me look.", "signature": "c2lnbmVk"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]
    assert import_pi(mem, [path]).added == 0
    mem.verify()


def test_a_pi_sessions_thinking_level_is_its_metadata_from_where_it_was_set_and_no_request_thinking(
        mem: Store, tmp_path: Path) -> None:
    """pi records the thinking level asked for (`off`, `minimal` ... `xhigh`) as a
    name, in the header and in a `thinking_level_change` wherever the user changed it, never the
    budget its request sent: the level is the thread's `thinkingLevel` metadata from the entry
    that set it on (`show --at` reads it as of any point), and the thread's `thinking` stays
    unset, so its requests send none rather than a budget pi's file does not name."""
    records = [{"type": "session", "version": 3, "id": "s-level", "timestamp": "2025-07-01T10:00:00.000Z"},
               {"type": "model_change", "id": "m0", "parentId": None, "provider": "anthropic", "modelId": "claude-opus-4-5"},
               {"type": "thinking_level_change", "id": "l0", "parentId": "m0", "thinkingLevel": "off"},
               {"type": "message", "id": "u1", "parentId": "l0", "message": {"role": "user", "content": "hi"}},
               {"type": "message", "id": "a1", "parentId": "u1", "message": {
                   "role": "assistant", "model": "claude-opus-4-5", "stopReason": "stop", "content": [{"type": "text", "text": "Hello."}]}},
               {"type": "thinking_level_change", "id": "l1", "parentId": "a1", "thinkingLevel": "high"},
               {"type": "message", "id": "u2", "parentId": "l1", "message": {"role": "user", "content": "think it over"}},
               {"type": "message", "id": "a2", "parentId": "u2", "message": {
                   "role": "assistant", "model": "claude-opus-4-5", "stopReason": "stop", "content": [
                       {"type": "thinking", "thinking": "Let me weigh it.", "thinkingSignature": "c2lnbmVk"},
                       {"type": "text", "text": "Done."}]}}]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    [thread] = import_pi(mem, [path]).thread_ids
    changes = [e.offset for e in mem.read(thread) if e.type == "metadata.set" and "thinkingLevel" in e.data["patch"]]
    assert [thread_state(mem, thread, at + 1).metadata["thinkingLevel"] for at in changes] == ["off", "high"]
    assert thread_state(mem, thread, changes[1]).metadata["thinkingLevel"] == "off"
    state = thread_state(mem, thread)
    assert state.thinking is None and state.metadata["thinkingLevel"] == "high"
    kwargs = anthropic_request(mem, thread)
    validate_request(kwargs)
    assert "thinking" not in kwargs and kwargs["messages"][-1]["content"][0]["type"] == "thinking"
    assert import_pi(mem, [path]).added == 0


def test_pi_thinking_another_provider_signed_is_not_sent_as_anthropics(mem: Store, tmp_path: Path) -> None:
    """pi keeps an OpenAI reasoning item (a redacted one too) in a thinking block's
    `thinkingSignature`, as JSON: sent to the Messages API as a thinking block's signature, or
    as redacted_thinking's data, it made every request of the thread fail the signature check.
    Another provider's thinking is thinking without a signature, which the request leaves out."""
    item = json.dumps({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"})
    head = _pi_tree(("u1", None, "user", "go")).splitlines(keepends=True)
    answer = {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-07-01T10:00:00.000Z",
              "message": {"role": "assistant", "api": "openai-responses", "provider": "openai", "model": "gpt-5",
                          "stopReason": "stop", "content": [
                              {"type": "thinking", "thinking": "Plan it.", "thinkingSignature": item},
                              {"type": "thinking", "thinking": "", "thinkingSignature": item, "redacted": True},
                              {"type": "text", "text": "Planned."}]}}
    tail = _pi_tree(("u2", "a1", "user", "thanks")).splitlines(keepends=True)[1:]
    path = tmp_path / "session.jsonl"
    path.write_text("".join([*head, json.dumps(answer) + "\n", *tail]))
    thread = import_pi(mem, [path]).thread_ids[0]
    kwargs = anthropic_request(mem, thread, model="m", max_tokens=10)
    validate_request(kwargs)
    assert [[b["type"] for b in m["content"]] for m in kwargs["messages"]] == [["text"], ["text"], ["text"]]
    assert "rs_1" not in json.dumps(kwargs)


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize(("kind", "source"), [
    ("claude-code", FIXTURES / "claude-code" / "inline"), ("claude-code", FIXTURES / "claude-code" / "-src-deep-manifest"),
    ("pi", FIXTURES / "pi" / "large-session-head.jsonl"), ("swe-agent", FIXTURES / "swe-agent"),
])
def test_json_skipped_names_only_what_was_left_out(tmp_path: Path, kind: str, source: Path) -> None:
    """Every Claude Code import's --json said `"tool_result without its call": 0` (and a session
    whose summary line became its title `"summary": 0`), which the pi and SWE-agent imports and
    the printed summary never list: a count of nothing read as something left out."""
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", kind, "--json", str(source)])
    assert result.exit_code == 0, result.output
    skipped = json.loads(result.stdout)["skipped"]
    assert all(count > 0 for count in skipped.values()), skipped


def test_a_source_cut_shorter_after_its_import_is_reported_and_kept_as_stored(tmp_path: Path) -> None:
    """A session file replaced by a shorter one (truncated, rotated, restored from an older
    backup) imported again said `0 event(s) added` and nothing else: the events it no longer
    holds stay stored, and the user was not told the source and the log now differ."""
    session = tmp_path / "0a1b2c3d-0000-4000-8000-000000000001.jsonl"
    lines = []
    for turn in range(2):  # two prompts, each answered
        prompt, answer = f"u{turn}", f"a{turn}"
        common = {"sessionId": session.stem, "isSidechain": False, "userType": "external", "cwd": "/src", "version": "2.1.39",
                  "timestamp": f"2026-01-01T00:00:0{turn}.000Z"}
        lines.append(json.dumps({**common, "type": "user", "uuid": prompt, "parentUuid": f"a{turn - 1}" if turn else None,
                                 "message": {"role": "user", "content": f"question {turn}"}}) + "\n")
        lines.append(json.dumps({**common, "type": "assistant", "uuid": answer, "parentUuid": prompt, "requestId": f"req_{turn}",
                                 "message": {"id": f"msg_{turn}", "type": "message", "role": "assistant",
                                             "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": f"answer {turn}"}],
                                             "stop_reason": "end_turn", "stop_sequence": None,
                                             "usage": {"input_tokens": 1, "output_tokens": 1}}}) + "\n")
    session.write_text("".join(lines), encoding="utf-8")
    os.utime(session, (0, 0))  # an old file: not one still being written
    db = tmp_path / "t.db"
    whole = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(session)])
    assert whole.exit_code == 0, whole.output
    stored = file_dump(db)
    session.write_text("".join(lines[:2]), encoding="utf-8")  # the first prompt and its answer alone
    os.utime(session, (0, 0))
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(session)])
    assert result.exit_code == 0, result.output
    assert "0 event(s) added" in result.output
    with Store(db) as store:
        held = sum(1 for t in store.all_threads() for _ in store.read(t.id, start=t.base))
        cut = import_claude_code(store, [session])
    assert 0 < cut.gone < held
    assert (f"shorter than imported: {cut.gone} stored event(s) the source no longer holds, kept as stored "
            "(the log is never rewritten)") in result.output
    assert file_dump(db) == stored
    session.write_text("".join(lines), encoding="utf-8")
    os.utime(session, (0, 0))
    again = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(session)])
    assert again.exit_code == 0 and "shorter than imported" not in again.output, again.output
    with Store(db) as store:  # the thread taken on here: its own appends are no source's
        thread = next(t.id for t in store.all_threads() if t.parent_id is None)
        store.append_message(thread, "user", "and one more question, asked here")
    mine = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(session)])
    assert mine.exit_code == 0 and "shorter than imported" not in mine.output, mine.output


def _import_aged(kind: str, path: Path, db: Path, *args: str) -> Any:
    """`threadlog import KIND PATH` into `db` with the file last changed an hour ago."""
    old = time.time() - 3600
    os.utime(path, (old, old))
    return CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--json", *args, str(path)])


@pytest.mark.parametrize("kind", ["claude-code", "pi-half-line", "pi-header-alone"])
def test_finished_reads_files_just_copied_as_it_reads_old_ones(tmp_path: Path, kind: str) -> None:
    """Sessions copied from another machine are all changed "now": an import left what each did
    not show complete (a last response, a half-written line, a header naming no model) for an
    import ten minutes later, with no way to say the files were done. `--finished` says so: a
    file just written is read exactly as the same file an hour old, refusals included."""
    path = tmp_path / "s-1.jsonl"
    header, entries = _pi_chat(2)
    if kind == "claude-code":
        lines, _ = _parallel_calls_imported(path)
        path.write_bytes(b"".join(lines[:4]))  # the first call's result: the response may go on
    elif kind == "pi-half-line":
        path.write_text("".join(json.dumps(record) + "\n" for record in [header, *entries])[:-20], encoding="utf-8")
    else:
        path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    command = "claude-code" if kind == "claude-code" else "pi"
    runner = CliRunner()
    waits = runner.invoke(cli, ["--db", str(tmp_path / "w.db"), "import", command, "--json", str(path)])
    assert waits.exit_code == 0 and json.loads(waits.stdout)["waiting_files"] == [str(path)], waits.output
    finished = runner.invoke(cli, ["--db", str(tmp_path / "f.db"), "import", command, "--json", "--finished", str(path)])
    aged = _import_aged(command, path, tmp_path / "a.db")
    assert (finished.exit_code, finished.stdout, finished.stderr) == (aged.exit_code, aged.stdout, aged.stderr)
    if finished.exit_code:  # refused as the old file is, naming its line, nothing written
        assert f"{path}:" in finished.stderr and not (tmp_path / "f.db").exists(), finished.output
        return
    assert json.loads(finished.stdout)["waiting"] == 0
    with Store(tmp_path / "f.db") as got, Store(tmp_path / "a.db") as want, Store(tmp_path / "w.db") as waited:
        assert _events_of(got) == _events_of(want) and got.counts().events == want.counts().events > waited.counts().events


@pytest.mark.parametrize("kind", ["claude-code", "pi", "swe-agent"])
def test_finished_with_follow_is_refused_before_the_database_is_opened(tmp_path: Path, kind: str) -> None:
    """`--finished` (the files are no longer written) and `--follow` (follow them as they are
    written) say opposite things: refused, naming both, with no database made."""
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--finished", "--follow", str(tmp_path)])
    assert result.exit_code == 2 and "--finished" in result.output and "--follow" in result.output, result.output
    assert not db.exists()


@pytest.mark.parametrize("kind", ["claude-code", "pi"])
def test_finished_leaves_out_an_empty_file_of_a_directory_just_copied_as_an_old_one(tmp_path: Path, kind: str) -> None:
    """A tool creates a session file before its first line and may leave it empty. In a
    directory just copied, such a file waited (without --finished) or refused the whole import
    as not a session (with it, had it been read as a file to import); an old one is left out of
    the directory's import. `--finished` leaves it out too, and imports the rest."""
    copied = tmp_path / "copied"
    copied.mkdir()
    header, entries = _pi_chat(1)
    if kind == "claude-code":
        _parallel_calls_imported(copied / "s-1.jsonl")
    else:
        (copied / "s-1.jsonl").write_text("".join(json.dumps(record) + "\n" for record in [header, *entries]), encoding="utf-8")
    (copied / "s-0.jsonl").touch()
    finished = CliRunner().invoke(cli, ["--db", str(tmp_path / "f.db"), "import", kind, "--json", "--finished", str(copied)])
    assert finished.exit_code == 0, finished.output
    report = json.loads(finished.stdout)
    assert (report["files"], report["threads"], report["waiting"], report["bad"]) == (1, 1, 0, []), report
    old = time.time() - 3600
    os.utime(copied / "s-0.jsonl", (old, old))
    aged = _import_aged(kind, copied / "s-1.jsonl", tmp_path / "a.db")
    assert aged.exit_code == 0 and json.loads(aged.stdout)["added"] == report["added"], aged.output


def test_a_branch_leaving_before_the_first_message_is_a_thread_of_its_own_with_nothing_refused(tmp_path: Path) -> None:
    """Two prompts answering a first line that makes no message (a tool result whose call the
    file does not hold, as a cycle of parents cut there leaves it): the second branch was
    planned as a fork before any message, which the store refused after the session's thread
    was written, naming no line. Each branch is a thread of its own, as a second root is."""
    chat = _chat_lines(2)
    orphan = {**chat[0], "uuid": "r0", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "out"}]}}
    lines = [orphan, dict(chat[0], parentUuid="r0"), chat[1], dict(chat[2], parentUuid="r0"), chat[3]]
    path = tmp_path / "aaaaaaaa-0000-4000-8000-000000000001.jsonl"
    _write_chat(path, lines)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    with Store(db) as store:
        texts = sorted([m.content[0]["text"] for m in thread_state(store, t).messages] for t in summary["thread_ids"])
        assert texts == [["user 0", "answer 0"], ["user 1", "answer 1"]]
        store.verify()
    before = file_dump(db)
    again = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", str(path), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["added"] == 0 and file_dump(db) == before


_IDEAS = CC / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(min_value=0), second=st.integers(min_value=0))
@example(first=4, second=8)  # an answer's later line and its next call: its results, which end a branch, were taken to go on
def test_a_session_whose_lines_name_each_other_as_parents_imports_once(tmp_path: Path, first: int, second: int) -> None:
    """Two lines of a real session edited to name each other as parents (a cycle): the import
    cuts the cycle and succeeds, and importing the unchanged file again was refused (its thread
    "holds events the source no longer has in that order"): a tool result's branch the first
    import forked was taken, the second time, as the line the thread goes on with. Now it adds
    nothing, and `verify` passes."""
    raw = _IDEAS.read_bytes().splitlines()
    linked = [i for i, line in enumerate(raw) if "parentUuid" in json.loads(line)]
    assert (linked[4], linked[8]) == (5, 9)
    a, b = linked[first % len(linked)], linked[second % len(linked)]
    records = {i: json.loads(raw[i]) for i in (a, b)}
    records[a]["parentUuid"], records[b]["parentUuid"] = records[b]["uuid"], records[a]["uuid"]
    for i, record in records.items():
        raw[i] = json.dumps(record).encode()
    work = Path(tempfile.mkdtemp(dir=tmp_path))  # one folder per example: hypothesis reuses tmp_path
    path = work / _IDEAS.name
    path.write_bytes(b"\n".join(raw) + b"\n")
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    db = work / "t.db"
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", str(db), "import", "claude-code", str(path), "--json"])
    assert imported.exit_code == 0, imported.output
    before = file_dump(db)
    again = runner.invoke(cli, ["--db", str(db), "import", "claude-code", str(path), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["added"] == 0 and file_dump(db) == before
    assert runner.invoke(cli, ["--db", str(db), "verify"]).exit_code == 0
