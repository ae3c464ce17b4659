"""What an import makes of the sessions in claude-code-log's test data (tests/fixtures/claude-code/
claude-code-log, copied byte for byte: its README says whence): each checked against its raw
JSONL, as a user reads it back with `tree`, `transcript` and the library.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store, import_claude_code
from threadlog.cli import cli

DATA = Path(__file__).resolve().parent / "fixtures" / "claude-code" / "claude-code-log"


def _copied(tmp_path: Path, name: str, data: Path = DATA) -> Path:
    """A copy of the fixture `name` (in `data`), last written a month ago: a checkout's files are
    new, and an import takes a session changed in the last minutes as one still being written."""
    source = data / name
    copy = tmp_path / "in" / name
    if source.is_dir():
        shutil.copytree(source, copy)
    else:
        copy.parent.mkdir(parents=True)
        shutil.copy(source, copy)
    month_ago = os.path.getmtime(source) - 30 * 24 * 3600
    for path in [copy, *copy.rglob("*")]:
        os.utime(path, (month_ago, month_ago))
    return copy


def _raw(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _texts(store: Store, thread: str, start: int = 0) -> list[str]:
    """The text of each message of `thread` from `start`, in order; a tool call as `call:ID`, a result as `result:ID`."""
    out = []
    for event in store.read(thread, start=start):
        if event.type != "message.appended":
            continue
        for block in event.data["content"]:
            out.append(block.get("text") or (f"call:{block['id']}" if block["type"] == "tool_use" else f"result:{block['tool_use_id']}"))
    return out


def _cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _tree(db: Path) -> list[dict[str, Any]]:
    return json.loads(_cli(db, "tree", "--all", "--json"))


@pytest.mark.parametrize(("name", "main", "forks"), [
    ("dag_simple", ["Hello", "Hi there", "How are you?", "I'm doing well", "Goodbye"], []),
    # Two branches from "Middle": the one the file ends on is the thread, the other a fork after it.
    ("dag_fork", ["Start", "Reply 1", "Middle", "Fork from c", "Forked reply", "End of s3"],
     [("Middle", ["Reply 2", "Last in s1", "Continue from e", "Continued reply", "End of s2"])]),
    # A session resumed under another sessionId, in one file: one conversation.
    ("dag_resume", ["Start", "Reply 1", "Continue", "Reply 2", "Last in s1", "Resume here", "Resumed reply", "End of s2"], []),
    ("dag_within_fork", ["Hello", "Hi there", "Fork point", "Branch 2 start", "Branch 2 reply"],
     [("Fork point", ["Branch 1 start", "Branch 1 reply", "Branch 1 end"])]),
])
def test_a_branched_session_is_its_thread_and_a_fork_at_each_branch(tmp_path: Path, name: str, main: list[str],
                                                                  forks: list[tuple[str, list[str]]]) -> None:
    db = tmp_path / "t.db"
    session = _copied(tmp_path, f"{name}.jsonl")
    _cli(db, "import", "claude-code", str(session))
    [root, *others] = _tree(db)
    assert [t["kind"] for t in others] == ["fork"] * len(forks)
    with Store(db) as store:
        assert _texts(store, root["id"]) == main
        for fork, (after, texts) in zip(others, forks):
            assert _texts(store, root["id"])[:main.index(after) + 1] == _texts(store, fork["id"])[:main.index(after) + 1]
            assert store.event_at(root["id"], fork["parent_offset"] - 1).data["content"][0]["text"] == after
            assert _texts(store, fork["id"], start=fork["parent_offset"]) == texts
        store.verify()
    assert "Goodbye" in _cli(db, "transcript", root["id"]) or name != "dag_simple"
    again = json.loads(_cli(db, "import", "claude-code", str(session), "--json"))
    assert (again["added"], again["changed"]) == (0, 0)


def test_teammates_named_only_in_their_results_text_are_sub_agent_forks_at_their_calls(tmp_path: Path) -> None:
    """A teammate's Task result may name its agent only in its text (`agentId: …`, as bob's does,
    with no `toolUseResult.agentId`): that teammate's file became a thread of its own."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "teammates")
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (summary["threads"], summary["subagents"]) == (1, 2)
    [root, *agents] = _tree(db)
    calls = {b["id"]: b for r in _raw(next(folder.glob("*.jsonl"))) if r["type"] == "assistant"
             for b in r["message"]["content"] if b.get("name") == "Task"}
    with Store(db) as store:
        for agent in agents:
            info = store.thread(agent["id"])
            [holder_call] = [b["id"] for b in store.event_at(root["id"], agent["parent_offset"] - 1).data["content"]]
            first = _texts(store, agent["id"], start=agent["parent_offset"])[0]
            assert info.kind == "subagent" and calls[holder_call]["input"]["prompt"] in first
        forked = [store.event_at(a["id"], a["parent_offset"]) for a in agents]
        assert {e.data["options"]["metadata"]["agentId"] for e in forked} == {"aaaa111111111111", "bbbb222222222222"}
        store.verify()
    assert json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))["added"] == 0


def test_a_teammates_answer_quoting_another_agents_id_leaves_it_at_its_own_call(tmp_path: Path) -> None:
    """The agent's own answer comes before the `agentId: …` line Claude Code adds, and may quote
    one (a teammate reporting on another): the line Claude Code added, the last, names the agent."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "teammates")
    main = next(folder.glob("*.jsonl"))
    stamp = os.path.getmtime(main)
    quoted = main.read_text(encoding="utf-8").replace("Server tests added.", "Server tests added.\\nagentId: aaaa111111111111 helped")
    assert quoted.count("agentId: aaaa111111111111 helped") == 1
    main.write_text(quoted, encoding="utf-8")
    os.utime(main, (stamp, stamp))
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (summary["threads"], summary["subagents"]) == (1, 2)
    [_, *agents] = _tree(db)
    with Store(db) as store:
        forked = [store.event_at(a["id"], a["parent_offset"]) for a in agents]
        assert {e.data["options"]["metadata"]["agentId"] for e in forked} == {"aaaa111111111111", "bbbb222222222222"}


def test_a_result_naming_its_agent_in_tool_use_result_names_no_other_by_its_text(tmp_path: Path) -> None:
    """alice's result names her agent in `toolUseResult.agentId`, and her answer quotes bob's id
    (`agentId: bbbb…`, with no line of Claude Code's after it): the quote was read as the agent
    her call started, and bob, whose own result names him in its text, was forked at alice's
    call. A result that names its agent in `toolUseResult` names no other by its text."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "teammates")
    main = next(folder.glob("*.jsonl"))
    stamp = os.path.getmtime(main)
    records = _raw(main)
    [alice] = [r for r in records if (r.get("toolUseResult") or {}).get("agentId") == "aaaa111111111111"]
    alice["message"]["content"][0]["content"] = [{"type": "text", "text": "Relay tests added.\nagentId: bbbb222222222222 ran alongside."}]
    main.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.utime(main, (stamp, stamp))
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (summary["threads"], summary["subagents"]) == (1, 2)
    [root, *agents] = _tree(db)
    with Store(db) as store:
        at = {store.event_at(a["id"], a["parent_offset"]).data["options"]["metadata"]["agentId"]:
              [b["id"] for b in store.event_at(root["id"], a["parent_offset"] - 1).data["content"]] for a in agents}
        assert at == {"aaaa111111111111": ["tu_Task_alice"], "bbbb222222222222": ["tu_Task_bob"]}
        store.verify()


def test_workflow_agents_are_sub_agent_forks_at_the_workflow_call(tmp_path: Path) -> None:
    """A `Workflow` call's agents (`<session>/subagents/workflows/<runId>/agent-*.jsonl`, named by
    the run its result names, not by agentId) became threads of their own, and the run's journal
    beside them was read as a session of nothing."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "workflow_basic")
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (summary["files"], summary["threads"], summary["subagents"]) == (4, 1, 3)
    assert summary["skipped"].keys() <= {"summary"}, summary["skipped"]
    [root, *agents] = _tree(db)
    with Store(db) as store:
        for agent in agents:
            holder = store.event_at(root["id"], agent["parent_offset"] - 1)
            assert store.thread(agent["id"]).kind == "subagent"
            assert [b["name"] for b in holder.data["content"] if b["type"] == "tool_use"] == ["Workflow"]
        assert sorted(_texts(store, a["id"], start=a["parent_offset"])[0] for a in agents)[1:] == ["review:hierarchy", "synthesize"]
        store.verify()
    assert json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))["added"] == 0


def _agent_lines(db: Path) -> dict[str, str]:
    """`tree`'s line of each sub-agent fork, by the fork's id."""
    return {line.split("⑃ ", 1)[1].split()[0]: line for line in _cli(db, "tree", "--all").splitlines() if "subagent," in line}


def test_tree_names_the_agent_and_the_call_of_each_parallel_sub_agent(tmp_path: Path) -> None:
    """A `Workflow` call's three agents are sub-agent forks at one offset, after one call, with no
    title of their own: `tree` told them apart by their fork ids alone. Each line names its agent
    and the call that started it, as the fork's metadata holds them (`agentId` and
    `parentToolUseID`, which `show` prints), and `--json` gives them too."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "workflow_basic")
    _cli(db, "import", "claude-code", str(folder))
    [call] = [b["id"] for r in _raw(next(folder.glob("*.jsonl"))) if r["type"] == "assistant"
              for b in r["message"]["content"] if b.get("name") == "Workflow"]
    agent_ids = sorted(_raw(path)[0]["agentId"] for path in folder.rglob("agent-*.jsonl"))
    [root, *agents] = _tree(db)
    assert len({a["parent_offset"] for a in agents}) == 1
    assert (root["agent_id"], root["tool_use_id"]) == (None, None)
    assert sorted(a["agent_id"] for a in agents) == agent_ids and {a["tool_use_id"] for a in agents} == {call}
    lines = _agent_lines(db)
    for agent in agents:
        assert lines[agent["id"]].endswith(f"forked at {agent['parent_offset']}, agent {agent['agent_id']}, call {call}")


def test_tree_names_the_agent_and_the_call_of_a_real_sessions_sub_agent(tmp_path: Path) -> None:
    """A real Claude Code session's `Task` sub-agent: its `tree` line names the agent its file
    is of and the call whose result names that agent."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "-src-experiments-claude_p", DATA.parent)
    _cli(db, "import", "claude-code", str(folder))
    [(agent, call)] = [(r["toolUseResult"]["agentId"], r["message"]["content"][0]["tool_use_id"])
                       for r in _raw(next(folder.glob("*.jsonl"))) if isinstance(r.get("toolUseResult"), dict)
                       and "agentId" in r["toolUseResult"]]
    [line] = _agent_lines(db).values()
    assert line.endswith(f", agent {agent}, call {call}") and agent == "a2271d1"


def test_a_workflow_result_with_an_empty_run_id_leaves_a_sub_agent_outside_a_workflow_alone(tmp_path: Path) -> None:
    """A sub-agent file outside any workflow's folder has no run, which was looked up as the run
    named "": a Workflow result whose `runId` is empty took it, and a sub-agent no result names
    (a thread of its own) became a fork at that Workflow call."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "workflow_basic")
    main = next(folder.glob("*.jsonl"))
    stamp = os.path.getmtime(main)
    emptied = main.read_text(encoding="utf-8").replace('"runId": "wf_demo01"', '"runId": ""')
    assert emptied != main.read_text(encoding="utf-8")
    main.write_text(emptied, encoding="utf-8")
    [agent] = folder.rglob("agent-ag000001.jsonl")
    loose = main.with_suffix("") / "subagents" / "agent-loose01.jsonl"
    loose.write_text(agent.read_text(encoding="utf-8").replace("ag000001", "loose01"), encoding="utf-8")
    for path in (main, loose):
        os.utime(path, (stamp, stamp))
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (summary["threads"], summary["subagents"]) == (5, 0), summary
    assert all(t["kind"] == "thread" for t in _tree(db))


def test_a_workflow_journal_named_itself_is_read_as_the_file_it_was_asked_for(tmp_path: Path) -> None:
    """A directory's import passes over a workflow's journal (no session), but one named on the
    command line was passed over without a word: `0 file(s)`. It is read, as any file named is,
    and says it holds no conversation."""
    folder = _copied(tmp_path, "workflow_basic")
    [journal] = folder.rglob("journal.jsonl")
    summary = json.loads(_cli(tmp_path / "t.db", "import", "claude-code", str(journal), "--json"))
    assert (summary["files"], summary["threads"], summary["added"]) == (1, 0, 0), summary
    assert summary["skipped"], summary


def test_workflow_agents_read_while_the_workflow_call_waits_wait_for_it(tmp_path: Path) -> None:
    """A workflow's agents write their files as soon as the `Workflow` call starts them, before
    the session writes the call's result naming the run. A follower that read them then made
    each a thread of its own, and once the result came they stayed threads for good (a thread
    is never rewritten into a fork). They wait, as a `Task` call's agent does, and become
    sub-agent forks at the call once its result is there."""
    folder = _copied(tmp_path, "workflow_basic")
    main = next(folder.glob("*.jsonl"))
    ask, call, result = _raw(main)
    same = {k: v for k, v in ask.items() if k not in ("uuid", "parentUuid", "message")}
    earlier = [{**same, "uuid": "p0", "parentUuid": None, "message": {"role": "user", "content": "Hello"}},
               {**call, "uuid": "p1", "parentUuid": "p0",
                "message": {**call["message"], "id": "msg_p1", "content": [{"type": "text", "text": "Hi."}]}}]
    call = {**call, "message": {**call["message"], "stop_reason": "tool_use"}}
    done = {**call, "uuid": "a2", "parentUuid": result["uuid"],
            "message": {**call["message"], "id": "msg_a2", "content": [{"type": "text", "text": "Reviewed."}], "stop_reason": "end_turn"}}

    def write(records: list[dict[str, Any]]) -> None:
        main.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    write([*earlier, {**ask, "parentUuid": "p1"}, call])  # the call made, its result not written yet
    with Store(tmp_path / "t.db") as store:
        early = import_claude_code(store, [folder], partial_tail=True)
        assert (early.threads, early.subagents) == (1, 0)
        assert sorted(Path(f).name for f in early.waiting_files) == [
            "11110000-0000-4000-8000-000000000001.jsonl", "agent-ag000001.jsonl", "agent-ag000002.jsonl", "agent-ag000003.jsonl"]
        write([*earlier, {**ask, "parentUuid": "p1"}, call, result, done])
        later = import_claude_code(store, [folder], partial_tail=True)
        assert (later.subagents, later.waiting) == (3, 0)
        agents = [t for t in store.all_threads() if t.parent_id is not None]
        assert sorted(t.kind for t in store.all_threads()) == ["subagent"] * 3 + ["thread"]
        for agent in agents:
            holder = store.event_at(agent.parent_id, agent.parent_offset - 1)  # type: ignore[arg-type]
            assert [b["name"] for b in holder.data["content"] if b["type"] == "tool_use"] == ["Workflow"]
        store.verify()


def test_a_background_agent_is_a_sub_agent_fork_at_its_call(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [DATA / "async_agents"])
        assert (summary.threads, summary.subagents) == (1, 1)
        [agent] = [t for t in store.all_threads() if t.kind == "subagent"]
        holder = store.event_at(agent.parent_id, agent.parent_offset - 1)
        assert [b["id"] for b in holder.data["content"]] == ["tu_Task_async_001"]
        assert _texts(store, agent.id, start=agent.parent_offset)[-1].startswith("Coverage analysis complete.")


def test_an_inline_sidechain_answering_a_task_call_is_its_sub_agent_fork(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [DATA / "memory_sidechain.jsonl"])
        assert (summary.threads, summary.subagents) == (1, 1)
        [agent] = [t for t in store.all_threads() if t.kind == "subagent"]
        assert _texts(store, agent.parent_id) == ["Delegate a task.", "call:toolu_task", "Subagent done."]
        assert _texts(store, agent.id, start=agent.parent_offset) == ["call:toolu_sc_read", "result:toolu_sc_read", "Read the memory."]
        assert agent.parent_offset == 4  # after the Task call


@pytest.mark.parametrize("name", ["away_summary", "system_model_change"])
def test_a_file_of_system_lines_alone_imports_nothing_and_says_so(tmp_path: Path, name: str) -> None:
    db = tmp_path / "t.db"
    shown = _cli(db, "import", "claude-code", str(_copied(tmp_path, f"{name}.jsonl")))
    assert "0 thread(s)" in shown and "lines without conversation: system" in shown


def test_a_teammate_an_earlier_import_made_a_thread_of_its_own_stays_one(tmp_path: Path) -> None:
    """Imported before its session's result named it (or by a release that did not read the
    result's text), bob's file is a thread: importing the session again keeps it so, where it
    was refused as planned otherwise."""
    folder = _copied(tmp_path, "teammates")
    main = next(folder.glob("*.jsonl"))
    whole = main.read_bytes()
    stamp = os.path.getmtime(main)
    main.write_bytes(b"".join(whole.splitlines(keepends=True)[:12]))  # up to bob's Task call
    os.utime(main, (stamp, stamp))
    with Store(tmp_path / "t.db") as store:
        assert (import_claude_code(store, [folder]).threads, store.counts().threads) == (2, 3)
        main.write_bytes(whole)
        os.utime(main, (stamp, stamp))
        again = import_claude_code(store, [folder])
        assert (again.changed, again.added > 0) == (0, True)
        assert sorted(t.kind for t in store.all_threads()) == ["subagent", "thread", "thread"]
        store.verify()


def _sections(markdown: str) -> list[str]:
    """A transcript's `## …` sections, each its heading line and what follows it."""
    return markdown.split("\n## ")[1:]


@pytest.mark.parametrize(("name", "tag", "prompts"), [("async_agents", "<task-notification>", 2),
                                                      ("teammates", "<teammate-message ", 3)])
def test_a_notice_claude_code_writes_into_the_users_turn_is_no_typed_prompt(tmp_path: Path, name: str, tag: str,
                                                                            prompts: int) -> None:
    """A background agent's `<task-notification>` and a teammate's `<teammate-message …>` are
    user lines no person typed: they ended the run before them `cancelled`, counted as prompts
    and read as typed. Now they are Claude Code's, as its command output is: the prompts are
    the session's first line and its sub-agents' tasks (bob's, a teammate's message opening his
    file, is his task, as alice's plain one is hers), the run goes on through them, and the
    transcript says who wrote them."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, name)
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert summary["prompts"] == prompts
    shown = 0
    for thread in _tree(db):
        markdown = _cli(db, "transcript", thread["id"])
        assert "## run cancelled" not in markdown
        for section in _sections(markdown):
            heading, _, body = section.partition("\n")
            if body.lstrip().startswith(tag) and heading == "user (injected by claude-code)":
                shown += 1
    opening = [path for path in folder.rglob("agent-*.jsonl") if str(_raw(path)[0]["message"]["content"]).startswith(tag)]
    assert shown == sum(1 for path in folder.rglob("*.jsonl") for r in _raw(path) if r["type"] == "user"
                        and isinstance(r["message"]["content"], str) and r["message"]["content"].startswith(tag)) - len(opening)
    with Store(db) as store:
        notices = [e for e in store.read_all() if e.type == "message.appended" and e.data["role"] == "user"
                   and str(e.data["content"][0].get("text", "")).startswith(tag)]
        tasks = [e for e in notices if "injected" not in e.meta["source"].get("flags", {})]
        assert notices and len(tasks) == len(opening) and all(e.meta["source"]["flags"]["injected"] for e in notices if e not in tasks)
        for task in tasks:  # a sub-agent's task: its run starts at it, as at any sub-agent's first message
            assert store.event_at(task.stream_id, task.offset - 1).type == "run.started"
        assert not any(e.type == "run.finished" and e.data["status"] == "cancelled" for e in store.read_all())
        store.verify()
    again = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert (again["added"], again["changed"]) == (0, 0)


def test_notices_an_earlier_release_took_as_prompts_stay_so_and_the_grown_session_takes_new_ones_as_claude_codes(
        tmp_path: Path) -> None:
    """tests/fixtures/cc-notices.db: the `async_agents` and `teammates` sessions imported at
    commit 04e3aac, which took their notices as typed prompts (a run cancelled and a run started
    at each). Importing them again adds and changes nothing (the runs stored go on, an event
    once written is never rewritten); a notice the session grows by is Claude Code's."""
    db = tmp_path / "t.db"
    shutil.copy(DATA.parent.parent / "cc-notices.db", db)
    folders = [_copied(tmp_path, "async_agents"), _copied(tmp_path, "teammates")]
    with Store(db) as store:
        stored = [(e.event_id, e.hash) for e in store.read_all()]
        again = import_claude_code(store, folders)
        assert (again.added, again.changed, again.gone) == (0, 0, 0)
        assert [(e.event_id, e.hash) for e in store.read_all()] == stored
        main = next(folders[0].glob("*.jsonl"))
        records = _raw(main)
        [notice] = [r for r in records if str(r["message"]["content"]).startswith("<task-notification>")]
        later = {**notice, "uuid": "later-notice", "parentUuid": records[-1]["uuid"], "timestamp": "2026-04-19T10:08:00.000Z"}
        answer = {**records[-1], "uuid": "later-answer", "parentUuid": "later-notice", "timestamp": "2026-04-19T10:09:00.000Z",
                  "message": {**records[-1]["message"], "id": "msg_later"}}
        stamp = os.path.getmtime(main)
        main.write_text(main.read_text(encoding="utf-8") + json.dumps(later) + "\n" + json.dumps(answer) + "\n", encoding="utf-8")
        os.utime(main, (stamp, stamp))
        grown = import_claude_code(store, folders)
        assert grown.changed == 0
        assert [(e.event_id, e.hash) for e in store.read_all()][:len(stored)] == stored
        added = [e for e in store.read_all()][len(stored):]
        assert [(e.type, e.meta["source"]["uuid"]) for e in added] == [
            ("message.appended", "later-notice"), ("run.started", "later-answer"), ("message.appended", "later-answer"),
            ("run.finished", "later-answer")]
        assert added[0].meta["source"]["flags"]["injected"] is True
        assert import_claude_code(store, folders).added == 0
        store.verify()


def test_a_huge_notice_naming_no_status_is_read_in_time_linear_in_its_length(tmp_path: Path) -> None:
    """Whether a `<task-notification>` says its agent is done was read by one pattern that, for
    each `<task-id>` of the notice, scanned the rest of it for a `<status>`: a notice of 600 kB
    of `<task-id>`s and no status took a minute and a half to import, and one of some megabytes
    hours. Each notice is read once now."""
    db = tmp_path / "t.db"
    folder = _copied(tmp_path, "async_agents")
    main = next(folder.glob("*.jsonl"))
    stamp = os.path.getmtime(main)
    records = _raw(main)
    [notice] = [r for r in records if str(r["message"]["content"]).startswith("<task-notification>")]
    notice["message"]["content"] = "<task-notification>" + "<task-id>x</task-id>" * 30_000 + "</task-notification>"
    main.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.utime(main, (stamp, stamp))
    started = time.monotonic()
    summary = json.loads(_cli(db, "import", "claude-code", str(folder), "--json"))
    assert time.monotonic() - started < 10
    assert summary["threads"] == 1
    with Store(db) as store:
        [stored] = [e for e in store.read_all() if e.type == "message.appended" and e.data["role"] == "user"
                    and str(e.data["content"][0].get("text", "")).startswith("<task-notification><task-id>x")]
        assert stored.meta["source"]["flags"]["injected"] is True
        store.verify()


def test_a_second_workflow_result_naming_the_same_run_leaves_its_agents_at_the_first_call(tmp_path: Path) -> None:
    """Two Workflow results may name one run (a broken or edited session): an import that read
    the file before the second had the run's agents at the first call, and keeps them there (a
    fork is never moved), but one that read the whole file put them at the second, the last
    naming winning: the same file made two trees. The first call naming a run is where its
    agents fork, whichever way the file was read."""
    folder = _copied(tmp_path, "workflow_basic")
    main = next(folder.glob("*.jsonl"))
    stamp = os.path.getmtime(main)
    ask, call, result = _raw(main)
    again = {**call, "uuid": "a0000002", "parentUuid": result["uuid"],
             "message": {**call["message"], "id": "msg_a0000002", "content": [
                 {"type": "tool_use", "id": "toolu_wf02", "name": "Workflow", "input": {}}]}}
    named = {**result, "uuid": "u0000003", "parentUuid": "a0000002",
             "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_wf02", "content": "Again."}]}}

    def calls_forked_at(db: Path) -> list[list[str]]:
        with Store(db) as store:
            return [[b["id"] for b in store.event_at(t.parent_id, t.parent_offset - 1).data["content"] if b["type"] == "tool_use"]
                    for t in store.all_threads() if t.parent_id is not None]

    _cli(tmp_path / "grown.db", "import", "claude-code", str(folder))
    main.write_text("".join(json.dumps(r) + "\n" for r in (ask, call, result, again, named)), encoding="utf-8")
    os.utime(main, (stamp, stamp))
    _cli(tmp_path / "grown.db", "import", "claude-code", str(folder))
    _cli(tmp_path / "whole.db", "import", "claude-code", str(folder))
    assert calls_forked_at(tmp_path / "grown.db") == calls_forked_at(tmp_path / "whole.db") == [["toolu_wf01"]] * 3
