"""Requests of threads whose history holds tool calls but whose tools were never recorded.

The API refuses tool_use and tool_result blocks in a request that defines no tools ("Requests
which include tool_use or tool_result blocks must define tools."). Sessions imported from
Claude Code, pi and SWE-agent carry no tool definitions: their requests (and a live turn on a
fork of one) define a placeholder per tool the history called and `tool_choice: none`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventstore import InvalidEvent, Store
from projections import anthropic_request, check_request, request_body, validate_request
from projections.request import UNRECORDED_TOOL, placeholder_tools
from threadlog import import_claude_code, import_pi, import_swe_agent, thread_state
from threadlog.live import run_turn

from messages_api import MessagesAPI, message

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CLAUDE_CODE = sorted(p for p in (FIXTURES / "claude-code").rglob("*.jsonl") if not p.name.startswith("agent-"))
PI = FIXTURES / "pi" / "large-session-head.jsonl"
SWE_AGENT = sorted((FIXTURES / "swe-agent").glob("*.traj"))
MODEL = "claude-test-1"
NONE = {"type": "none"}


def _imported(store: Store) -> list[str]:
    """Every thread the fixtures' sessions import as (sub-agents' forks included)."""
    import_claude_code(store, CLAUDE_CODE)
    import_pi(store, [PI])
    import_swe_agent(store, SWE_AGENT)
    return [info.id for info in store.threads()]


def _called(request: dict[str, Any]) -> list[str]:
    return [b["name"] for m in request["messages"] for b in m["content"] if b.get("type") == "tool_use"]


def _tool_blocks(request: dict[str, Any]) -> bool:
    return any(b.get("type") in ("tool_use", "tool_result") for m in request["messages"] for b in m["content"])


def test_every_imported_session_s_request_defines_the_tools_its_calls_name_and_calls_none(file_store: Store) -> None:
    """Before, every imported thread with a tool call built a request without `tools`, which the
    API refuses; the SDK's types took it all the same."""
    with_calls = 0
    for thread in _imported(file_store):
        state = thread_state(file_store, thread)
        assert not state.tools  # the session files record none
        try:
            request = anthropic_request(file_store, thread, model=MODEL)
        except InvalidEvent as error:  # a session whose every message is blank has no request
            assert "has no message to send" in str(error)
            continue
        validate_request(request)
        if not _tool_blocks(request):
            assert "tools" not in request and "tool_choice" not in request
            continue
        with_calls += 1
        assert request["tool_choice"] == NONE
        assert [t["name"] for t in request["tools"]] == list(dict.fromkeys(_called(request)))
        assert all(t["description"] == UNRECORDED_TOOL and t["input_schema"] == {"type": "object"} for t in request["tools"])
        assert list(request).index("tool_choice") == list(request).index("tools") - 1  # as the SDK's create writes them
    assert with_calls >= 5


def test_a_thread_that_defines_tools_or_calls_none_sends_what_it_sent_before(mem: Store) -> None:
    tools = [{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}]
    call = [{"type": "tool_use", "id": "tu_1", "name": "weather", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}]
    defined = mem.create_thread(model=MODEL, tools=tools)
    plain = mem.create_thread(model=MODEL)
    for t in (defined, plain):
        mem.append_message(t, "user", "Weather?")
    for role, content in (("assistant", call), ("user", result)):
        mem.append_message(defined, role, content)
    assert anthropic_request(mem, defined, cache=False)["tools"] == tools
    assert "tool_choice" not in anthropic_request(mem, defined)
    assert list(anthropic_request(mem, plain)) == ["max_tokens", "messages", "model"]
    # Tools a caller adds (`extra_tools`, a live turn's) are tools defined: no placeholder either.
    bare = mem.create_thread(model=MODEL)
    mem.append_message(bare, "user", "Weather?")
    for role, content in (("assistant", call), ("user", result)):
        mem.append_message(bare, role, content)
    extra = [{"name": "search", "description": "Search", "input_schema": {"type": "object"}}]
    request = anthropic_request(mem, bare, cache=False, extra_tools=extra)
    assert request["tools"] == extra and "tool_choice" not in request


def test_placeholders_follow_first_use_and_names_the_api_refuses_share_one() -> None:
    def call(name: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": "x", "name": name, "input": {}}

    messages = [{"role": "assistant", "content": [call("Bash"), call("functions.read:0"), call("Bash")]},
                {"role": "assistant", "content": [call("x" * 129), call("Edit")]}]
    assert [t["name"] for t in placeholder_tools(messages)] == ["Bash", "unrecorded_tool", "Edit"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_live_turn_on_a_fork_of_an_imported_session_sends_placeholders_and_rebuilds(
        file_store: Store, api: MessagesAPI, stream: bool) -> None:
    """A user forks an imported Claude Code session and asks on: the request went without
    tools (the API refused it); it defines the session's tools as placeholders, asks for none,
    and the answer's request rebuilds byte for byte from the log."""
    session = FIXTURES / "claude-code" / "-Users-dain-workspace-coderabbit-review-helper"
    [thread, *_] = import_claude_code(file_store, sorted(session.glob("*.jsonl"))).thread_ids
    fork = file_store.fork(thread)
    reply = message([{"type": "text", "text": "It reviewed the pull request."}])
    api.reply_sse(reply) if stream else api.reply_json(reply)
    turn = run_turn(file_store, fork, "What did this session do?", api.client(0, 10.0), model=MODEL, stream=stream)
    assert (turn.status, turn.text) == ("ok", "It reviewed the pull request.")
    [sent] = api.requests
    body = sent.json
    assert body["tool_choice"] == NONE and _called(body)
    assert [t["name"] for t in body["tools"]] == list(dict.fromkeys(_called(body)))
    validate_request({k: v for k, v in body.items() if k != "stream"})
    offset = turn.messages[0].offset
    check = check_request(file_store, fork, offset)
    assert check.ok, check.reason
    assert request_body(anthropic_request(file_store, fork, offset, model=MODEL), stream) == sent.body
    assert json.loads(request_body(anthropic_request(file_store, fork, offset, model=MODEL)))["tools"] == body["tools"]


def test_a_tool_a_tool_result_references_gets_a_deferred_placeholder(mem: Store) -> None:
    """Claude Code answers a tool search with `tool_reference` blocks naming tools it deferred:
    a request without their definitions is refused by the API (`tool_reference_unresolved`)."""
    def call(id_: str, name: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": id_, "name": name, "input": {}}

    t = mem.create_thread(model="claude-sonnet-4-5")
    found = [{"type": "tool_reference", "tool_name": name} for name in ("TaskGet", "TaskOutput", "bad name")]
    for role, content in (("user", "List my tasks"), ("assistant", [call("toolu_a", "ToolSearch")]),
                          ("user", [{"type": "tool_result", "tool_use_id": "toolu_a", "content": found}]),
                          ("assistant", [call("toolu_b", "TaskGet"), call("toolu_c", "Bash")]),
                          ("user", [{"type": "tool_result", "tool_use_id": f"toolu_{x}", "content": "ok"} for x in "bc"])):
        mem.append_message(t, role, content)
    request = anthropic_request(mem, t)
    assert [(tool["name"], tool.get("defer_loading", False)) for tool in request["tools"]] == [
        ("TaskGet", True), ("TaskOutput", True), ("ToolSearch", False), ("Bash", False)]
    assert request["tool_choice"] == {"type": "none"}
    validate_request(request)  # the SDK's own types take every definition
