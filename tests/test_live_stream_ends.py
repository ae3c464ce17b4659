"""Live turns whose answer ends oddly: a stream without its token counts, an answer cut short
that the turn's result must say is cut short, a tool call id used again, and what a server
sends after a whole answer (an `error` event, a dropped connection).

Each runs the real `anthropic` client against the local server (`messages_api`): the store
stays honest (a failed run closed with its reason, `verify` passes) and the next turn works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import Store
from projections import anthropic_request, check_request, thread_state, validate_request
from threadlog.cli import cli
from threadlog.live import run_turn

from messages_api import MessagesAPI, Reply, encode_sse, message, sse_events

MODEL = "claude-test-1"
TOOLS = [{"name": "weather", "description": "Weather in a city", "input_schema": {"type": "object"}}]
Events = list[tuple[str, dict[str, Any]]]


def use(id: str, name: str = "weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def then_goes_on(store: Store, t: str, api: MessagesAPI) -> None:
    """The failed turn left the question, the thread idle and valid: asking again works."""
    store.verify()
    state = thread_state(store, t)
    assert state.status == "idle" and not state.open_runs
    assert [m.role for m in state.messages] == ["user"]
    validate_request(anthropic_request(store, t))
    api.reply_sse(message([{"type": "text", "text": "Fine now."}]))
    assert run_turn(store, t, None, api.client(), stream=True).status == "ok"
    store.verify()


def _without_usage(where: str) -> Events:
    events = sse_events(message([{"type": "text", "text": "Lyon by TGV."}]))
    for name, data in events:
        if name == "message_start" and where in ("start", "both"):
            del data["message"]["usage"]
        if name == "message_delta" and where in ("delta", "both"):
            del data["usage"]
        if name == "message_start" and where == "start-text":
            data["message"]["usage"] = "12 tokens"
        if name == "message_delta" and where == "delta-text":
            data["usage"] = "12 tokens"
    return events


@pytest.mark.parametrize(("where", "named"), [
    ("start", "message_start whose message has no usage"),
    ("delta", "message_delta with no usage"),
    ("both", "message_start whose message has no usage"),
    ("start-text", "message_start whose message has a usage that is no object (a str)"),
    ("delta-text", "message_delta with a usage that is no object (a str)"),
])
def test_a_stream_without_its_usage_is_refused_naming_the_event(api: MessagesAPI, where: str, named: str) -> None:
    """The SDK's own words were all the turn said (`AttributeError: 'NoneType' object has no
    attribute 'output_tokens'`): the error names the event that came without its counts."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.replies.append(Reply(200, encode_sse(_without_usage(where)), "text/event-stream"))
    turn = run_turn(store, t, "Hello", api.client(), stream=True)
    assert turn.status == "error" and turn.error is not None, turn
    assert named in turn.error and "NoneType" not in turn.error, turn.error
    last = thread_state(store, t).last_run
    assert last is not None and last["status"] == "error" and named in last["error"]
    then_goes_on(store, t, api)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("reason", "cut"), [("max_tokens", True), ("model_context_window_exceeded", True),
                                             ("refusal", False), ("end_turn", False), ("stop_sequence", False),
                                             ("a_reason_to_come", True)])
def test_the_turn_says_when_its_answer_was_cut_short(api: MessagesAPI, stream: bool, reason: str, cut: bool) -> None:
    """`run_turn` said `ok` and nothing more of a text answer cut at `max_tokens`, which a
    caller took for the whole answer (`threadlog ask` exits 3 for it). The run ended as asked
    (`run.finished` status `ok`), and the turn says the answer is cut short."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    reply = message([{"type": "text", "text": "The trains to Lyon leave at"}], reason)
    api.reply_sse(reply) if stream else api.reply_json(reply)
    turn = run_turn(store, t, "Hello", api.client(), stream=stream)
    assert (turn.status, turn.stop_reason, turn.cut_short) == ("ok", reason, cut), turn
    assert turn.to_json()["cut_short"] is cut
    assert thread_state(store, t).last_run["status"] == "ok"  # type: ignore[index]


def test_a_failed_turn_is_not_said_to_be_cut_short(api: MessagesAPI) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.reply_error(529, "overloaded_error", "Overloaded")
    turn = run_turn(store, t, "Hello", api.client())
    assert (turn.status, turn.cut_short) == ("error", False)


def _ids_unique_and_paired(kwargs: dict[str, Any]) -> None:
    """The Messages API's rules for tool call ids in one request: each tool_use id once, and
    each tool_result answering a call of the message before it."""
    seen: set[str] = set()
    messages = kwargs["messages"]
    for index, msg in enumerate(messages):
        blocks = [b for b in msg["content"] if isinstance(b, dict)] if isinstance(msg["content"], list) else []
        for block in blocks:
            if block.get("type") == "tool_use":
                assert block["id"] not in seen, f"tool_use id {block['id']} sent twice"
                seen.add(block["id"])
            if block.get("type") == "tool_result":
                before = messages[index - 1]["content"]
                assert any(b.get("type") == "tool_use" and b["id"] == block["tool_use_id"] for b in before), block


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_tool_call_id_used_again_after_its_result_makes_requests_the_api_takes(api: MessagesAPI, stream: bool) -> None:
    """The log takes an id again once its call is answered (another provider's ids repeat each
    turn): the reused call runs, is recorded as the API sent it, and every request built after
    it sends each id once, the later call and its result under one fresh id."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    add = api.reply_sse if stream else api.reply_json
    add(message([use("tu_1", city="Lyon")], "tool_use"))
    add(message([use("tu_1", city="Paris")], "tool_use"))  # the same turn's next round, the same id
    add(message([{"type": "text", "text": "Sunny in both."}]))
    add(message([use("tu_1", city="Nice")], "tool_use"))  # the next turn, the same id again
    add(message([{"type": "text", "text": "Sunny there too."}]))
    ran: list[str] = []
    tools = {"weather": lambda city: ran.append(city) or f"sunny in {city}"}
    assert run_turn(store, t, "Lyon, then Paris?", api.client(), tools=tools, stream=stream).status == "ok"
    assert run_turn(store, t, "And Nice?", api.client(), tools=tools, stream=stream).status == "ok"
    assert ran == ["Lyon", "Paris", "Nice"]
    for captured in api.requests:
        _ids_unique_and_paired(captured.json)
    _ids_unique_and_paired(anthropic_request(store, t))
    validate_request(anthropic_request(store, t))
    stored = [b["id"] for m in thread_state(store, t).messages for b in m.content if b.get("type") == "tool_use"]
    assert stored == ["tu_1", "tu_1", "tu_1"]  # as the API sent them
    for m in thread_state(store, t).messages:
        if m.role == "assistant":
            assert check_request(store, t, m.offset).ok
    store.verify()


AFTER_STOP: dict[str, bytes] = {
    "error-event": encode_sse([("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]),
    # Half an event, then the connection closes before the body's end.
    "dropped": b"event: ping\n",
}
SAID = {"error-event": "Overloaded", "dropped": "incomplete chunked read"}


def _whole_then(after: str, blocks: list[dict[str, Any]] | None = None, reason: str = "end_turn") -> Reply:
    body = message(blocks or [{"type": "text", "text": "Lyon by TGV, at eight."}], reason)
    whole = encode_sse(sse_events(body))
    return Reply(200, whole + AFTER_STOP[after], "text/event-stream", drop_after=len(whole) + 5 if after == "dropped" else None)


@pytest.mark.parametrize("after", list(AFTER_STOP))
def test_a_failure_after_a_whole_answer_keeps_the_answer_and_records_the_failure(api: MessagesAPI, after: str) -> None:
    """The answer came whole (`message_stop`), then the server sent an `error` event (or the
    connection dropped): the run ended `error` and the answer was lost. It is kept, the run ends
    `ok`, and the late failure is recorded with the run's end and given as the turn's `error`."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.replies.append(_whole_then(after))
    turn = run_turn(store, t, "Hello", api.client(), stream=True)
    assert (turn.status, turn.text, turn.cut_short) == ("ok", "Lyon by TGV, at eight.", False), turn
    assert turn.error is not None and "after the whole answer" in turn.error and SAID[after] in turn.error, turn.error
    state = thread_state(store, t)
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.last_run is not None and state.last_run["status"] == "ok" and state.last_run["error"] == turn.error
    assert check_request(store, t, turn.messages[0].offset).ok
    store.verify()
    api.reply_sse(message([{"type": "text", "text": "Yes."}]))
    assert run_turn(store, t, "Sure?", api.client(), stream=True).status == "ok"


def test_an_error_after_a_whole_tool_call_runs_the_tool_and_goes_on(api: MessagesAPI) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.replies.append(_whole_then("error-event", [use("tu_1", city="Lyon")], "tool_use"))
    api.reply_sse(message([{"type": "text", "text": "Sunny."}]))
    turn = run_turn(store, t, "Weather?", api.client(), tools={"weather": lambda city: "sunny"}, stream=True)
    assert (turn.status, turn.text) == ("ok", "Sunny."), turn
    assert turn.error is not None and "Overloaded" in turn.error
    assert [m.role for m in thread_state(store, t).messages] == ["user", "assistant", "user", "assistant"]
    store.verify()


def test_ask_keeps_a_whole_answer_and_says_the_error_sent_after_it(api: MessagesAPI, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", model=MODEL)
    api.replies.append(_whole_then("error-event"))
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    result = CliRunner().invoke(cli, ["--db", str(db), "ask", t, "Hello", "--stream"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "Lyon by TGV, at eight.\n"
    assert "Overloaded" in result.stderr and "the answer is kept" in result.stderr, result.stderr
    with Store(db) as store:
        store.verify()
        assert thread_state(store, t).last_run["error"] in result.stderr  # type: ignore[index]


def test_rerun_says_a_replayed_turn_s_error_sent_after_its_whole_answer(api: MessagesAPI, tmp_path: Path) -> None:
    """A replayed turn whose stream failed after the whole answer came kept the answer, and
    `rerun` printed the fork and exited 0 without a word of the failure (`ask` says it, `note:`)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", model=MODEL)
        for question in ("How to Lyon?", "When?"):
            api.reply_sse(message([{"type": "text", "text": "By train."}]))
            assert run_turn(store, t, question, api.client(), stream=True).status == "ok"
    api.replies.append(_whole_then("error-event"))
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    result = CliRunner().invoke(cli, ["--db", str(db), "rerun", t, "--at", "5", "--model", "claude-other", "--stream"],
                                env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    fork = result.stdout.strip()
    with Store(db) as store:
        store.verify()
        said = thread_state(store, fork).last_run["error"]  # type: ignore[index]
    assert result.stderr == f"note: {said}\n" and "the answer is kept" in said, result.stderr


HOSTILE = ("\x1b[2J\x1b]8;;https://example.invalid\x07here\x1b]8;;\x07\u202eevil\u200b\r\nerror: forged\x00\ud800"
           + "A" * 1_000_000 + " the end")


def _whole_then_hostile() -> Reply:
    whole = encode_sse(sse_events(message([{"type": "text", "text": "Lyon by TGV, at eight."}])))
    error = {"type": "error", "error": {"type": "overloaded_error", "message": HOSTILE}}
    return Reply(200, whole + encode_sse([("error", error)]), "text/event-stream")


def _one_short_line(stderr: str) -> str:
    assert stderr.count("\n") == 1 and stderr.startswith("note: the API's stream failed after the whole answer"), stderr[:300]
    assert len(stderr) < 2000, f"{len(stderr):,} characters: {stderr[:300]}…{stderr[-300:]}"
    assert not any(c in stderr for c in "\x1b\x07\x00\r\u202e\u200b\ud800"), stderr[:300]
    assert "\\x1b[2J" in stderr and "characters left out" in stderr, stderr[:300]
    return stderr


@pytest.mark.parametrize("command", ["ask", "rerun"])
def test_the_note_of_an_error_sent_after_a_whole_answer_is_one_escaped_line_of_a_sane_length(
        api: MessagesAPI, tmp_path: Path, command: str) -> None:
    """The server's text after a whole answer was printed whole on `note:`: its controls
    escaped, but a message of a megabyte made a line of a megabyte (`ask`; `rerun`, reading the
    run's stored end, 20,000 characters). It is cut in its middle, as an `error:` line is."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", model=MODEL)
        for question in ("How to Lyon?", "When?") if command == "rerun" else ():
            api.reply_sse(message([{"type": "text", "text": "By train."}]))
            assert run_turn(store, t, question, api.client(), stream=True).status == "ok"
    api.replies.append(_whole_then_hostile())
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    args = [t, "Hello"] if command == "ask" else [t, "--at", "5", "--model", "claude-other"]
    result = CliRunner().invoke(cli, ["--db", str(db), command, *args, "--stream"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output[:500]
    _one_short_line(result.stderr)
    with Store(db) as store:
        store.verify()


def test_an_answer_without_an_id_is_kept_without_one_and_nothing_says_none(api: MessagesAPI, tmp_path: Path) -> None:
    """A `message_start` whose message has no id (a proxy's stream): the answer is kept without a
    `message_id`, and the note of an error sent after it said "whole answer (message None)"."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="t", model=MODEL)
    body = message([{"type": "text", "text": "Lyon by TGV, at eight."}])
    del body["id"]
    whole = encode_sse(sse_events(body))
    api.replies.append(Reply(200, whole + AFTER_STOP["error-event"], "text/event-stream"))
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    result = CliRunner().invoke(cli, ["--db", str(db), "ask", t, "Hello", "--stream"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "Lyon by TGV, at eight.\n"
    assert "Overloaded" in result.stderr and "None" not in result.stderr, result.stderr
    assert "the whole answer (which came without a message id) had come" in result.stderr, result.stderr
    for command in (["show", t], ["rows", t], ["log", t], ["transcript", t], ["blame", t], ["request", t, "--check"]):
        shown = CliRunner().invoke(cli, ["--db", str(db), *command], catch_exceptions=False)
        assert shown.exit_code == 0 and "None" not in shown.output, (command, shown.output)
    with Store(db) as store:
        [answer] = [m for m in thread_state(store, t).messages if m.role == "assistant"]
        assert "message_id" not in store.event_at(t, answer.offset).data
        assert check_request(store, t, answer.offset).ok
        store.verify()


def test_an_answer_whose_id_is_no_text_is_refused_naming_it(api: MessagesAPI) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.reply_json({**message([{"type": "text", "text": "Hi."}]), "id": 12})
    turn = run_turn(store, t, "Hello", api.client())
    assert turn.status == "error" and turn.error == "BadAnswer: the API's answer has id 12, which is no message id (text)"
    then_goes_on(store, t, api)
