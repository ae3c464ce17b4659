"""Live turns against a local Messages API server, driven by the real `anthropic` client.

The server (tests/messages_api.py) answers with canned JSON or SSE replies and keeps the
exact bytes of every request, so these tests see what went over the wire.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anthropic
import pytest

from eventstore import ForkRefused, InvalidEvent, Store, StoreError
from projections import anthropic_request, body_digest, check_request, diff, request_body, thread_state, usage, validate_request
from threadlog.live import Interrupt, rerun, resolve_interrupt, run_turn

from messages_api import MessagesAPI, Reply, encode_sse, message, sse_events

MODEL = "claude-test-1"
TOOLS = [
    {"name": "weather", "description": "Weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "ask_human", "description": "Ask the user", "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}}},
]


def client(api: MessagesAPI, retries: int = 0, timeout: float = 10.0) -> anthropic.Anthropic:
    made: anthropic.Anthropic = api.client(retries, timeout)
    return made


def thread(store: Store) -> str:
    return store.create_thread(title="trip", system="You plan trips.", model=MODEL, tools=TOOLS)


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def use(id: str, name: str = "weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def types(store: Store, t: str) -> list[str]:
    return [e.type for e in store.read(t)]


def assert_provenance(store: Store, t: str, api: MessagesAPI) -> None:
    """Every recorded assistant message's request is rebuilt byte for byte from the log."""
    offsets = [e.offset for e in store.read(t) if e.type == "message.appended" and "request" in e.meta]
    assert len(offsets) == len(api.requests)
    for offset, sent in zip(offsets, api.requests):
        check = check_request(store, t, offset)
        assert check.ok, check.reason
        assert check.recorded == body_digest(sent.body)
        meta = store.event_at(t, offset).meta["request"]
        assert request_body(anthropic_request(store, t, offset), meta["stream"]) == sent.body


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_plain_turn_records_the_message_as_returned(file_store: Store, api: MessagesAPI, stream: bool) -> None:
    t = thread(file_store)
    usage_in = {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 1500, "cache_creation_input_tokens": 30}
    reply = message(text("Take the 9:04 TGV."), usage=usage_in, id="msg_1")
    api.reply_sse(reply) if stream else api.reply_json(reply)
    seen: list[str] = []
    turn = run_turn(file_store, t, "Train to Lyon?", client(api), stream=stream, on_text=seen.append)
    assert (turn.status, turn.text) == ("ok", "Take the 9:04 TGV.")
    assert "".join(seen) == "Take the 9:04 TGV."
    assert types(file_store, t) == ["thread.created", "run.started", "message.appended", "message.appended", "run.finished"]
    answer = file_store.event_at(t, 3)
    assert answer.data["content"] == text("Take the 9:04 TGV.")
    assert (answer.data["message_id"], answer.data["model"], answer.data["stop_reason"]) == ("msg_1", MODEL, "end_turn")
    assert answer.data["usage"]["cache_read_input_tokens"] == 1500
    assert answer.data["usage"]["cache_creation_input_tokens"] == 30
    assert answer.meta["request"]["id"] == "req_test_001"
    assert answer.meta["request"]["stream"] is stream
    body = api.requests[0].json
    assert body["messages"] == [{"role": "user", "content": [{"text": "Train to Lyon?", "type": "text", "cache_control": {"type": "ephemeral"}}]}]
    assert body.get("stream") is (True if stream else None)
    assert thread_state(file_store, t).status == "idle"
    assert_provenance(file_store, t, api)


# The answer's top-level fields besides content, id, model, stop_reason and usage, as the API
# returns them: a beta's context management (pydantic-ai's compaction cassette), a prompt cache
# diagnosis, an input transformation, and one no release names yet.
RETURNED = {
    "diagnostics": {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 1200}},
    "context_management": {"applied_edits": []},
    "input_transformations": [{"type": "thinking_dropped", "path": "messages.1.content.0", "reason": "model_binding_mismatch"}],
    "future_field": {"kept": [1, None]},
}
# A refusal, as the SDK's refusal fixture streams it.
REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was refused due to policy."}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_every_top_level_field_of_an_answer_is_recorded_and_none_is_sent_back(file_store: Store, api: MessagesAPI,
                                                                            stream: bool) -> None:
    t = thread(file_store)
    usage_in = {"input_tokens": 136, "output_tokens": 16, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                "service_tier": "standard", "inference_geo": "global",
                "iterations": [{"type": "message", "input_tokens": 136, "output_tokens": 16}]}
    refused = {**message([{"type": "text", "text": ""}], "refusal", id="msg_1"), "stop_details": REFUSAL}
    stopped = {**message(text("Take the 9:04"), "stop_sequence", usage=usage_in, id="msg_2"), "stop_sequence": " TGV", **RETURNED}
    for reply in (refused, stopped, message(text("Hotel Carlton."), id="msg_3")):
        api.reply_sse(reply) if stream else api.reply_json(reply)
    run_turn(file_store, t, "How do I break into a server?", client(api), stream=stream)
    turn = run_turn(file_store, t, "Train to Lyon?", client(api), stream=stream)
    run_turn(file_store, t, "And a hotel?", client(api), stream=stream)
    first, second, third = (m.data for m in file_store.read(t) if m.type == "message.appended" and m.data["role"] == "assistant")
    assert (first["stop_reason"], first["stop_details"]) == ("refusal", REFUSAL)
    assert "stop_sequence" not in first  # null: left out
    assert (second["stop_reason"], second["stop_sequence"], turn.text) == ("stop_sequence", " TGV", "Take the 9:04")
    assert second["diagnostics"] == RETURNED["diagnostics"]
    assert second["context_management"] == {"applied_edits": []}
    assert second["input_transformations"] == RETURNED["input_transformations"]
    assert second["extra_fields"] == {"future_field": {"kept": [1, None]}}
    assert second["usage"]["service_tier"] == "standard" and second["usage"]["iterations"] == usage_in["iterations"]
    assert not {"stop_sequence", "stop_details", "diagnostics", "context_management", "input_transformations", "extra_fields"} & set(third)
    # The next request sends back the answers' role and content, nothing else they returned.
    body = api.requests[2].json
    assert body["messages"][-2] == {"role": "assistant", "content": text("Take the 9:04")}
    assert [set(m) for m in body["messages"]] == [{"role", "content"}] * len(body["messages"])
    validate_request({k: v for k, v in body.items() if k != "stream"})
    assert_provenance(file_store, t, api)


def test_usage_the_stream_sends_only_at_its_end_is_recorded_as_the_unstreamed_answer_holds_it(mem: Store, api: MessagesAPI) -> None:
    """The API sends some usage only in the stream's `message_delta` (a beta's `fallback_credit`,
    as the SDK's own fallback-credit fixture streams it), which the SDK's stream does not fold
    into its message: recorded streamed, the answer keeps the usage it keeps unstreamed."""
    late = {"fallback_credit": {"status": {"type": "redeemed"}}, "iterations": [{"type": "message", "output_tokens": 8}]}
    whole = message(text("Hello there!"), usage={"input_tokens": 25, "output_tokens": 8, **late}, id="msg_1")
    events = sse_events({**whole, "usage": {"input_tokens": 25, "output_tokens": 8}})
    name, delta = events[-2]
    assert name == "message_delta"
    events[-2] = (name, {**delta, "usage": {"output_tokens": 8, **late}})
    api.replies.append(Reply(200, encode_sse(events), "text/event-stream"))
    api.reply_json(whole)
    for stream in (True, False):
        t = thread(mem)
        run_turn(mem, t, "Hi", client(api), stream=stream)
        assert mem.event_at(t, 3).data["usage"] == whole["usage"], stream


# A beta's compaction block, as the SDK's compaction fixture streams it: the block starts empty
# and one `compaction_delta` sends its content.
COMPACTION = {"type": "compaction", "content": "Earlier conversation summarized.", "encrypted_content": "EpwBCioIDxgCEAE"}


def compaction_stream(delta: dict[str, Any]) -> bytes:
    events = sse_events(message([COMPACTION, *text("Hello there!")], id="msg_1"))
    assert events[1][1]["content_block"] == COMPACTION
    events[1] = ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "compaction", "content": None, "encrypted_content": None}})
    events.insert(2, ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    return encode_sse(events)


def test_a_streamed_compaction_block_is_recorded_with_its_content(mem: Store, api: MessagesAPI) -> None:
    """The SDK's stream (not its beta one) passes over a `compaction_delta`, which left the
    block recorded with no content and no encrypted content, which the API needs back."""
    api.replies.append(Reply(200, compaction_stream({"type": "compaction_delta", "content": COMPACTION["content"],
                                                     "encrypted_content": COMPACTION["encrypted_content"]}), "text/event-stream"))
    api.reply_json(message([COMPACTION, *text("Hello there!")], id="msg_1"))
    for stream in (True, False):
        t = thread(mem)
        assert run_turn(mem, t, "Hi", client(api), stream=stream).status == "ok"
        assert mem.event_at(t, 3).data["content"] == [COMPACTION, *text("Hello there!")], stream


def test_a_streamed_delta_of_a_kind_the_sdk_does_not_fold_ends_the_turn_naming_it(mem: Store, api: MessagesAPI) -> None:
    """The SDK's stream passes over a delta it does not know: the block would be recorded
    without what the delta sent, so the turn ends in error, recording no answer."""
    api.replies.append(Reply(200, compaction_stream({"type": "summary_delta", "summary": "Earlier."}), "text/event-stream"))
    t = thread(mem)
    turn = run_turn(mem, t, "Hi", client(api), stream=True)
    assert turn.status == "error" and "'summary_delta' delta of content block 0" in (turn.error or "")
    assert [e.data["role"] for e in mem.read(t) if e.type == "message.appended"] == ["user"]


def test_two_parallel_tool_calls_answered_in_one_message(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.reply_json(message([*text("Checking both."), use("tu_1", city="Lyon"), use("tu_2", city="Paris")], "tool_use"))
    api.reply_json(message(text("Lyon 20°C, Paris 18°C.")))
    calls: list[str] = []

    def weather(city: str) -> str:
        calls.append(city)
        return f"{city}: {20 if city == 'Lyon' else 18}°C"

    turn = run_turn(mem, t, "Weather?", client(api), tools={"weather": weather})
    assert turn.status == "ok" and calls == ["Lyon", "Paris"]
    assert [m.offset for m in turn.messages] == [3, 5]
    results = mem.event_at(t, 4).data
    assert results["role"] == "user"
    assert [b["tool_use_id"] for b in results["content"]] == ["tu_1", "tu_2"]
    second = api.requests[1].json["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert [b["content"] for b in second[2]["content"]] == ["Lyon: 20°C", "Paris: 18°C"]
    assert_provenance(mem, t, api)


def test_thinking_blocks_go_back_with_their_signatures(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    thinking = {"type": "thinking", "thinking": "Need the weather first.", "signature": "EqQBCkYIBRgCKkD+sig=="}
    api.reply_sse(message([thinking, use("tu_1", city="Lyon")], "tool_use"))
    api.reply_sse(message(text("Sunny.")))
    run_turn(mem, t, "Weather in Lyon?", client(api), tools={"weather": lambda city: "sunny"}, stream=True)
    assert mem.event_at(t, 3).data["content"][0] == thinking
    sent_back = api.requests[1].json["messages"][1]["content"]
    assert sent_back[0] == thinking
    assert_provenance(mem, t, api)


def test_a_500_then_success_is_retried_by_the_sdk(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.reply_error(500, "api_error", "overloaded", **{"retry-after-ms": "10"})
    api.reply_json(message(text("Here.")))
    turn = run_turn(mem, t, "Hello", client(api, retries=2))
    assert turn.status == "ok"
    assert len(api.requests) == 2 and api.requests[0].body == api.requests[1].body
    answer = mem.event_at(t, 3)
    assert answer.meta["request"]["id"] == "req_test_002"
    assert check_request(mem, t, 3).ok


def test_a_client_made_as_the_readme_says_fails_a_try_asked_to_wait_a_day_at_once(file_store: Store, api: MessagesAPI,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK waits as long as a 529's retry-after says (up to 49 days), silent: only the client
    `threadlog ask` makes refused to, and a turn on a caller's own client sat for the day the
    server asked. The README's live-turn example makes its client with `refuse_long_waits`, in one
    line: the try fails at once, the turn's error naming the wait, and the thread takes the retry."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    example = readme.split("against a local server):\n\n```py\n", 1)[1].split("\nt2 = ", 1)[0]  # its imports and its client
    namespace: dict[str, Any] = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102
    made: anthropic.Anthropic = namespace["client"]
    assert made.max_retries == 2  # the SDK's retries, as the example leaves them
    t = thread(file_store)
    api.reply_error(529, "overloaded_error", "Overloaded", **{"retry-after": "86400"})
    turns: list[Any] = []
    asking = threading.Thread(target=lambda: turns.append(run_turn(file_store, t, "Hello", made)), daemon=True)
    asking.start()
    asking.join(30)
    assert turns, "the turn still waits for the day the server asked"
    assert turns[0].status == "error" and len(api.requests) == 1
    assert "529" in turns[0].error and "the API asked to wait 86,400 s before trying again" in turns[0].error
    api.reply_json(message(text("Here.")))
    assert run_turn(file_store, t, None, made).text == "Here."
    made.close()


def test_a_400_ends_the_run_with_its_text_and_keeps_the_question(file_store: Store, api: MessagesAPI) -> None:
    t = thread(file_store)
    api.reply_error(400, "invalid_request_error", "messages.0: bad thing")
    turn = run_turn(file_store, t, "Hello", client(api))
    assert turn.status == "error" and "bad thing" in (turn.error or "")
    events = list(file_store.read(t))
    assert [e.type for e in events] == ["thread.created", "run.started", "message.appended", "run.finished"]
    assert events[-1].data["status"] == "error" and "bad thing" in events[-1].data["error"]
    assert thread_state(file_store, t).status == "idle"
    # The thread can be retried: continuing sends the same question again.
    api.reply_json(message(text("Hi.")))
    again = run_turn(file_store, t, None, client(api))
    assert again.status == "ok"
    assert api.requests[0].json["messages"] == api.requests[1].json["messages"]


@pytest.mark.parametrize("cut", ["dropped", "ended_early"])
def test_a_connection_dropped_mid_stream_ends_the_run(mem: Store, api: MessagesAPI, cut: str) -> None:
    t = thread(mem)
    reply = message(text("A long answer that never arrives whole."))
    api.drop_mid_stream(reply) if cut == "dropped" else api.end_early(reply)
    turn = run_turn(mem, t, "Hello", client(api), stream=True)
    assert turn.status == "error" and turn.error
    assert types(mem, t)[-1] == "run.finished"
    assert [m.role for m in thread_state(mem, t).messages] == ["user"]
    assert thread_state(mem, t).status == "idle"


def test_a_timeout_ends_the_run(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.stall(2.0, message(text("late")))
    turn = run_turn(mem, t, "Hello", client(api, timeout=0.3))
    assert turn.status == "error" and "Timeout" in (turn.error or "")
    assert thread_state(mem, t).status == "idle"


def test_a_tool_that_raises_becomes_an_error_result_and_ends_the_run(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", city="Nowhere")], "tool_use"))

    def weather(city: str) -> str:
        if city == "Nowhere":
            raise LookupError("no such city")
        return "sunny"

    turn = run_turn(mem, t, "Weather?", client(api), tools={"weather": weather})
    assert turn.status == "error" and "no such city" in (turn.error or "")
    results = mem.event_at(t, 4).data["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}
    assert results[1]["is_error"] is True and "no such city" in results[1]["content"]
    assert mem.event_at(t, 5).data["status"] == "error"
    assert len(api.requests) == 1
    validate_request(anthropic_request(mem, t))  # every tool_use has its result


def test_a_waiting_call_no_tool_answers_is_refused_before_the_run_starts(mem: Store, api: MessagesAPI) -> None:
    """Continuing a thread whose tool call waits, with no callable of its name, closed the call as
    failed (a sub-agent's, which its report answers later, included); now nothing is written."""
    t = thread(mem)
    mem.append_message(t, "user", "Weather in Lyon?")
    mem.append_message(t, "assistant", [use("tu_1", city="Lyon")])
    before = mem.head(t)
    with pytest.raises(InvalidEvent, match="waits on the result of tool call 'tu_1' \\('weather'\\)"):
        run_turn(mem, t, None, client(api), tools={"other": lambda: "x"})
    assert mem.head(t) == before and not api.requests
    api.reply_json(message(text("Sunny.")))
    assert run_turn(mem, t, None, client(api), tools={"weather": lambda city: "sunny"}).status == "ok"


@pytest.mark.parametrize("tools, said", [({"weather": None}, "'weather' must name a function that runs the tool, not NoneType"),
                                         ([lambda city: "sunny"], "must map tool names to the functions that run them"),
                                         ({1: lambda: "x"}, "a key must be a tool's name, not int")])
def test_tools_that_are_no_map_of_names_to_functions_are_refused_before_anything_is_written(
        mem: Store, api: MessagesAPI, tools: Any, said: str) -> None:
    """`tools={"weather": None}` failed only when the model called it (the run closed as an
    error); a list of functions failed after the question was recorded."""
    t = thread(mem)
    with pytest.raises(InvalidEvent, match=said):
        run_turn(mem, t, "Weather?", client(api), tools=tools)
    assert mem.head(t) == 1 and not api.requests
    mem.append_message(t, "user", "Weather?")
    mem.append_message(t, "assistant", "Sunny.")
    with pytest.raises(InvalidEvent, match=said):  # before the fork is made
        rerun(mem, t, at=2, client=client(api), model=MODEL, tools=tools)
    assert [info.id for info in mem.threads()] == [t] and not api.requests


def test_a_call_of_a_tool_the_turn_lacks_tells_the_model_it_is_not_available(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.reply_json(message([use("tu_1", city="Lyon")], "tool_use"))
    turn = run_turn(mem, t, "Weather?", client(api))
    assert turn.status == "error" and turn.error == "the model called tool 'weather', which no tool given to this turn runs"
    (result,) = mem.event_at(t, 4).data["content"]
    assert result == {"type": "tool_result", "tool_use_id": "tu_1", "content": "tool 'weather' is not available", "is_error": True}


def test_ctrl_c_in_a_tool_cancels_the_run_and_propagates(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    api.reply_json(message([use("tu_1", city="Lyon")], "tool_use"))

    def weather(city: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_turn(mem, t, "Weather?", client(api), tools={"weather": weather})
    finished = list(mem.read(t))[-1]
    assert finished.type == "run.finished" and finished.data["status"] == "cancelled"
    assert thread_state(mem, t).status == "idle"


def test_ctrl_c_in_a_tool_keeps_the_results_of_the_calls_that_ran_and_resuming_does_not_run_them_again(
        file_store: Store, api: MessagesAPI) -> None:
    """Ctrl-C in the second of three calls recorded none of the batch's results: continuing the
    thread ran the first call again (a file written twice, a message sent twice)."""
    t = thread(file_store)
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", city="Paris"), use("tu_3", city="Nice")], "tool_use"))
    ran: list[str] = []

    def weather(city: str) -> str:
        if city == "Paris" and "Paris" not in ran:
            ran.append(city)
            raise KeyboardInterrupt
        ran.append(city)
        return f"sunny in {city}"

    with pytest.raises(KeyboardInterrupt):
        run_turn(file_store, t, "Weather?", client(api), tools={"weather": weather})
    assert ran == ["Lyon", "Paris"]
    results = file_store.event_at(t, 4).data
    assert results == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny in Lyon"}]}
    assert file_store.event_at(t, 5).data["status"] == "cancelled" and thread_state(file_store, t).status == "idle"
    assert list(file_store.pending_tool_uses(t)) == ["tu_2", "tu_3"]

    api.reply_json(message(text("Sunny everywhere.")))
    resumed = run_turn(file_store, t, None, client(api), tools={"weather": weather})
    assert resumed.status == "ok" and resumed.text == "Sunny everywhere."
    assert ran == ["Lyon", "Paris", "Paris", "Nice"]  # Lyon's call ran once
    sent = api.requests[-1].json["messages"]
    assert [b["tool_use_id"] for b in sent[-1]["content"]] == ["tu_1", "tu_2", "tu_3"]
    assert check_request(file_store, t, resumed.messages[0].offset).ok
    file_store.verify()


def test_an_interrupt_answered_later_resumes_the_turn(file_store: Store, api: MessagesAPI) -> None:
    """Until the interrupt is settled, a turn is refused naming both ways to settle it: the
    refusal named only `resolve_interrupt`, as if every question raised needed an answer."""
    t = thread(file_store)
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", "ask_human", question="Which day?"), use("tu_3", city="Nice")], "tool_use"))

    def ask_human(question: str) -> str:
        raise Interrupt(question, payload={"choices": ["Mon", "Tue"]})

    tools = {"weather": lambda city: f"{city}: sunny", "ask_human": ask_human}
    turn = run_turn(file_store, t, "Plan it", client(api), tools=tools)
    assert turn.status == "interrupted" and turn.interrupt_id
    state = thread_state(file_store, t)
    assert state.status == "interrupted"
    assert state.pending_interrupts[0]["question"] == "Which day?"
    assert state.pending_interrupts[0]["tool_use_id"] == "tu_2"
    waiting = (f"thread: thread {t!r} waits on interrupt {turn.interrupt_id!r}; first answer it (resolve_interrupt) "
               "or cancel it (cancel_interrupt)")
    for asked in (None, "And Paris?"):  # going on, or asking anew: refused alike, naming both ways out
        with pytest.raises(InvalidEvent) as refused:
            run_turn(file_store, t, asked, client(api), tools=tools)
        assert str(refused.value) == waiting

    resolve_interrupt(file_store, t, turn.interrupt_id, "Tuesday")
    api.reply_json(message(text("Tuesday in Lyon and Nice: sunny.")))
    resumed = run_turn(file_store, t, None, client(api), tools=tools)
    assert resumed.status == "ok" and resumed.text.startswith("Tuesday")
    sent = api.requests[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    answers = {b["tool_use_id"]: b["content"] for b in sent[2]["content"]}
    assert answers == {"tu_1": "Lyon: sunny", "tu_2": "Tuesday", "tu_3": "Nice: sunny"}
    assert thread_state(file_store, t).status == "idle"
    assert_provenance(file_store, t, api)


def test_an_interrupt_raised_while_another_writer_closes_the_run_is_still_recorded(file_store: Store, api: MessagesAPI,
                                                                                 tmp_path: Path) -> None:
    """The run was closed from elsewhere (the command for a run whose process is gone) while a
    tool was asking its question: the turn's close, the interrupt with it, was refused, and the
    interrupt dropped; the call waited for a result with no question recorded that an answer
    could settle, and the error said nothing of it. The interrupt needs no run: it is kept."""
    t = thread(file_store)
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", "ask_human", question="Which day?")], "tool_use"))

    def ask_human(question: str) -> str:
        run_id = next(e.data["run_id"] for e in file_store.read(t) if e.type == "run.started")
        with Store(tmp_path / "t.db") as other:  # the file `file_store` holds
            other.append(t, [{"type": "run.finished", "data": {"run_id": run_id, "status": "cancelled"}}])
        raise Interrupt(question)

    tools = {"weather": lambda city: f"{city}: sunny", "ask_human": ask_human}
    with pytest.raises(StoreError) as refused:
        run_turn(file_store, t, "Plan it", client(api), tools=tools)
    state = thread_state(file_store, t)
    assert state.status == "interrupted" and [i["tool_use_id"] for i in state.pending_interrupts] == ["tu_2"]
    interrupt_id = state.pending_interrupts[0]["interrupt_id"]
    assert "was closed by another writer while this turn ran" in str(refused.value)
    assert f"thread {t!r} waits on interrupt {interrupt_id!r}" in str(refused.value), refused.value
    assert "nothing is left to close" not in str(refused.value)
    resolve_interrupt(file_store, t, interrupt_id, "Tuesday")
    api.reply_json(message(text("Tuesday in Lyon: sunny.")))
    assert run_turn(file_store, t, None, client(api), tools=tools).status == "ok"
    answers = {b["tool_use_id"]: b["content"] for b in api.requests[-1].json["messages"][-1]["content"]}
    assert answers == {"tu_1": "Lyon: sunny", "tu_2": "Tuesday"}
    file_store.verify()


def test_an_interrupt_whose_call_another_writer_answered_and_closed_says_it_is_not_recorded(file_store: Store,
                                                                                           api: MessagesAPI,
                                                                                           tmp_path: Path) -> None:
    """The other writer closed the run and answered the call itself: the question has nothing
    left to ask of, and the error says it was not recorded, and why, beside the run's close."""
    t = thread(file_store)
    api.reply_json(message([use("tu_2", "ask_human", question="Which day?")], "tool_use"))

    def ask_human(question: str) -> str:
        run_id = next(e.data["run_id"] for e in file_store.read(t) if e.type == "run.started")
        with Store(tmp_path / "t.db") as other:  # the file `file_store` holds
            other.append(t, [{"type": "run.finished", "data": {"run_id": run_id, "status": "cancelled"}},
                             {"type": "message.appended", "data": {"role": "user", "content": [
                                 {"type": "tool_result", "tool_use_id": "tu_2", "content": "Monday"}]}}])
        raise Interrupt(question)

    with pytest.raises(StoreError) as refused:
        run_turn(file_store, t, "Plan it", client(api), tools={"ask_human": ask_human})
    assert "was closed by another writer while this turn ran" in str(refused.value)
    assert "the tool's question is not recorded (" in str(refused.value) and "'tu_2'" in str(refused.value), refused.value
    assert thread_state(file_store, t).status == "idle" and "interrupt.raised" not in types(file_store, t)
    file_store.verify()


@pytest.mark.parametrize("raised", [Interrupt("Which day?", payload=object()), Interrupt("Which day?", payload=float("nan")),
                                    Interrupt(7), Interrupt("Which day\ud800?")], ids=["object", "nan", "int", "surrogate"])
def test_an_interrupt_the_log_cannot_hold_answers_its_call_as_a_tool_error(file_store: Store, api: MessagesAPI,
                                                                         raised: Interrupt) -> None:
    """A tool raising an `Interrupt` whose question or payload the log cannot hold made the turn
    close its run, then raise; the call was left with no result, and the thread refused both
    a new message and going on until one was appended by hand. The call now gets an error
    result, as any tool's exception does, the calls after it run, and the thread goes on."""
    t = thread(file_store)
    api.reply_json(message([use("tu_1", "ask_human"), use("tu_2", city="Nice")], "tool_use"))

    def ask_human() -> str:
        raise raised

    tools = {"weather": lambda city: f"{city}: sunny", "ask_human": ask_human}
    turn = run_turn(file_store, t, "Plan it", client(api), tools=tools)
    assert turn.status == "error" and "raised an Interrupt that cannot be recorded" in (turn.error or "")
    results = {b["tool_use_id"]: b for b in list(file_store.read(t))[-2].data["content"]}
    assert results["tu_1"]["is_error"] and "cannot be recorded" in results["tu_1"]["content"]
    assert results["tu_2"]["content"] == "Nice: sunny"
    assert thread_state(file_store, t).status == "idle" and "interrupt.raised" not in types(file_store, t)
    api.reply_json(message(text("Nice is sunny.")))
    assert run_turn(file_store, t, "And Lyon?", client(api), tools=tools).status == "ok"
    assert file_store.verify().events == file_store.counts()[1]


def test_a_rerun_where_tool_calls_wait_names_them_and_no_parameter_it_does_not_take(file_store: Store, api: MessagesAPI) -> None:
    """A rerun at a point where a tool call waits (an interrupt's) was refused with the fork's
    advice, "pass unanswered='drop'" (`--unanswered drop` in the CLI), which `rerun` does not
    take: it names the calls and the points a rerun can start from, and forks nothing."""
    t = thread(file_store)
    api.reply_json(message([use("tu_2", "ask_human", question="Which day?")], "tool_use"))

    def ask_human(question: str) -> str:
        raise Interrupt(question)

    assert run_turn(file_store, t, "Plan it", client(api), tools={"ask_human": ask_human}).status == "interrupted"
    before = file_store.counts()
    with pytest.raises(ForkRefused) as refused:
        rerun(file_store, t, file_store.head(t), client(api), model="claude-haiku-4-5")
    assert refused.value.tool_use_ids == ["tu_2"] and "unanswered" not in str(refused.value)
    assert "tool calls without results there: 'tu_2'" in str(refused.value) and "one after their results" in str(refused.value)
    assert file_store.counts() == before


def test_a_fork_of_a_parent_paused_on_a_question_starts_idle_and_the_parent_still_waits(file_store: Store,
                                                                                         api: MessagesAPI) -> None:
    """Sagents: a parent paused on a question does not hand it to its forks. The question's
    tool call has no result, so a plain fork is refused naming it; with unanswered='drop' the
    fork starts idle without the call or the question, and its first live turn is valid."""
    t = thread(file_store)
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", "ask_human", question="Which day?")], "tool_use"))

    def ask_human(question: str) -> str:
        raise Interrupt(question)

    tools = {"weather": lambda city: f"{city}: sunny", "ask_human": ask_human}
    asked = run_turn(file_store, t, "Plan it", client(api), tools=tools)
    assert asked.status == "interrupted"
    before = (file_store.counts(), [e.to_json() for e in file_store.read_all()])
    with pytest.raises(ForkRefused) as refused:
        file_store.fork(t)
    assert (refused.value.reason, refused.value.tool_use_ids) == ("unanswered_tool_calls", ["tu_2"])
    assert (file_store.counts(), [e.to_json() for e in file_store.read_all()]) == before
    fork = file_store.fork(t, unanswered="drop")
    state = thread_state(file_store, fork)
    assert (state.status, state.pending_interrupts, state.demoted_interrupts) == ("idle", [], [asked.interrupt_id])
    api.reply_json(message(text("Lyon: sunny all week.")))
    assert run_turn(file_store, fork, "Just Lyon, any day.", client(api), tools=tools).status == "ok"
    sent = api.requests[-1].json["messages"]
    assert [b["type"] for m in sent for b in m["content"]] == ["text", "tool_use", "tool_result", "text"]
    assert sent[1]["content"][0]["id"] == "tu_1" and "Which day?" not in api.requests[-1].body.decode()
    assert thread_state(file_store, t).status == "interrupted"  # the parent still waits on its question
    resolve_interrupt(file_store, t, asked.interrupt_id, "Tuesday")
    api.reply_json(message(text("Tuesday it is.")))
    assert run_turn(file_store, t, None, client(api), tools=tools).status == "ok"
    answers = {b["tool_use_id"]: b["content"] for b in api.requests[-1].json["messages"][2]["content"]}
    assert answers == {"tu_1": "Lyon: sunny", "tu_2": "Tuesday"}
    own = [e.offset for e in file_store.read(fork) if e.stream_id == fork and "request" in e.meta]
    assert len(own) == 1 and check_request(file_store, fork, own[0]).ok


def test_a_fork_of_a_thread_whose_turn_failed_starts_with_no_run_of_its_own(file_store: Store, api: MessagesAPI) -> None:
    """Sagents: a fork leaves every runtime field at its default. The parent's failed run is
    history the fork shows (a run row, a transcript section), but `last_run` (the `last run`
    line of `threadlog show`) is how the thread's own last run ended: a fresh fork showed the
    parent's error as if it had failed, until a run of its own ended."""
    from click.testing import CliRunner

    from projections import display_rows
    from threadlog.cli import cli

    t = thread(file_store)
    api.reply_error(500, "api_error", "boom")
    assert run_turn(file_store, t, "Train to Lyon?", client(api)).status == "error"
    failed = thread_state(file_store, t).last_run
    assert failed is not None and failed["status"] == "error" and "boom" in failed["error"]
    fork = file_store.fork(t)
    state = thread_state(file_store, fork)
    assert (state.status, state.last_run, state.open_runs) == ("idle", None, [])
    assert [r.kind for r in display_rows(file_store, fork)][-2:] == ["run", "fork"]  # the history still shows it
    assert thread_state(file_store, t).last_run == failed  # the parent still says how its turn ended
    shown = CliRunner().invoke(cli, ["--db", str(file_store.path), "show", fork])
    assert shown.exit_code == 0 and "last run" not in shown.output, shown.output
    assert "last run    error" in CliRunner().invoke(cli, ["--db", str(file_store.path), "show", t]).output
    api.reply_json(message(text("Lyon by TGV.")))
    assert run_turn(file_store, fork, None, client(api)).status == "ok"  # the fork's own turn
    ended = thread_state(file_store, fork).last_run
    assert ended is not None and ended["status"] == "ok" and ended["offset"] > file_store.thread(fork).parent_offset


def test_a_tool_cannot_fork_the_thread_it_runs_in_but_the_caller_can_when_the_turn_ends(file_store: Store,
                                                                                        api: MessagesAPI) -> None:
    """Sagents: do not fork from inside a tool. The run is open while its tools run and the
    history lacks the call's own result, so a fork from there is refused (`busy`, nothing
    written); once the turn returns, the caller forks the finished turn."""
    t = thread(file_store)
    refusals: list[ForkRefused] = []

    def weather(city: str) -> str:
        before = file_store.counts()
        try:
            file_store.fork(t)
        except ForkRefused as refused:
            refusals.append(refused)
        assert file_store.counts() == before
        return f"{city}: sunny"

    api.reply_json(message([use("tu_1", city="Lyon")], "tool_use"))
    api.reply_json(message(text("Sunny in Lyon.")))
    assert run_turn(file_store, t, "Weather in Lyon?", client(api), tools={"weather": weather}).status == "ok"
    [refused] = refusals
    assert refused.reason == "busy" and "is in progress there" in str(refused)
    assert [i.id for i in file_store.all_threads()] == [t]
    fork = file_store.fork(t)  # after the turn: every call answered, no run open
    assert [m.to_param() for m in thread_state(file_store, fork).messages] == [
        m.to_param() for m in thread_state(file_store, t).messages]
    assert thread_state(file_store, fork).messages[-1].content == text("Sunny in Lyon.")


def test_a_write_during_the_call_keeps_the_answer_and_the_check_says_so(file_store: Store, api: MessagesAPI) -> None:
    t = thread(file_store)

    def meanwhile() -> None:
        with Store(file_store.path) as other:
            other.append_message(t, "user", "Also: I have a dog.")

    api.on_request = meanwhile
    api.reply_json(message(text("Here.")))
    turn = run_turn(file_store, t, "Hello", client(api))
    assert turn.status == "ok" and turn.messages[0].offset == 4
    assert types(file_store, t)[3:] == ["message.appended", "message.appended", "run.finished"]
    assert file_store.event_at(t, 4).data["content"] == text("Here.")
    assert not check_request(file_store, t, 4).ok  # the model never saw the message at 3
    assert thread_state(file_store, t).status == "idle"


def test_refusals_write_nothing(mem: Store, api: MessagesAPI) -> None:
    bare = mem.create_thread()
    mem.append_message(bare, "user", "hi")
    before = mem.head(bare)
    with pytest.raises(InvalidEvent, match="model"):
        run_turn(mem, bare, "Hello", client(api))
    t = thread(mem)
    with pytest.raises(InvalidEvent, match="nothing to continue"):
        run_turn(mem, t, None, client(api))
    assert mem.head(bare) == before and mem.head(t) == 1 and not api.requests


def test_provenance_holds_over_a_ten_turn_tool_loop_and_names_a_redaction(file_store: Store, api: MessagesAPI) -> None:
    t = thread(file_store)
    for i in range(10):
        api.reply_json(message([use(f"tu_{i}", city=f"City{i}")], "tool_use", id=f"msg_{i}"))
    api.reply_json(message(text("Done."), id="msg_end"))
    turn = run_turn(file_store, t, "Tour ten cities", client(api), tools={"weather": lambda city: f"{city} ok"})
    assert turn.status == "ok" and len(turn.messages) == 11
    assert_provenance(file_store, t, api)
    # Redact an early tool result: every request sent after it no longer rebuilds.
    result = next(e for e in file_store.read(t) if e.type == "message.appended" and e.data["role"] == "user" and e.offset > 3)
    file_store.redact(result.position, reason="leak", actor="ops")
    checks = [check_request(file_store, t, m.offset) for m in turn.messages]
    assert [c.ok for c in checks] == [m.offset < result.offset for m in turn.messages]
    failed = [c for c in checks if not c.ok]
    assert all(c.redacted == [result.offset] and str(result.offset) in c.reason for c in failed)


def test_fan_out_siblings_share_their_bytes_up_to_the_directive(mem: Store, api: MessagesAPI) -> None:
    t = thread(mem)
    mem.append_message(t, "user", "Research three destinations.")
    mem.append_message(t, "assistant", [{"type": "text", "text": "Splitting up."},
                                        {"type": "tool_use", "id": "tu_agent", "name": "Agent", "input": {"prompt": "..."}}])
    directives = ["Research Lyon in depth.", "Research Nice.", "Research Bordeaux, then rank it."]
    kids = mem.fan_out(t, directives)
    for kid in kids:
        api.reply_json(message(text("Report.")))
        assert run_turn(mem, kid, None, client(api)).status == "ok"
    bodies = [r.body for r in api.requests]
    starts = [body.index(json.dumps(d).encode()) for body, d in zip(bodies, directives)]
    assert len(set(starts)) == 1, "the directive starts at the same byte in every sibling"
    assert len({body[:starts[0]] for body in bodies}) == 1
    outside = {body.replace(json.dumps(d).encode(), b"") for body, d in zip(bodies, directives)}
    assert len(outside) == 1, "model, system, tools and history are the same"
    breakpoints = []
    for body, directive in zip(bodies, directives):
        sent = json.loads(body)
        marked = [(i, j, b["type"]) for i, m in enumerate(sent["messages"]) for j, b in enumerate(m["content"]) if "cache_control" in b]
        assert 1 + len(marked) <= 4  # the system prompt's breakpoint and these
        assert "cache_control" in sent["system"][-1]
        shared = [(i, j, kind) for i, j, kind in marked if sent["messages"][i]["content"][j].get("text") != directive]
        breakpoints.append(shared)
    assert breakpoints[0] == breakpoints[1] == breakpoints[2] == [(2, 0, "tool_result")]
    usage_rows = usage(mem, t)
    assert [row.thread for row in usage_rows] == [t, *kids] and all(row.messages == 1 for row in usage_rows[1:])


def test_a_sub_agent_inherits_its_parents_history_without_its_incomplete_tool_calls(file_store: Store,
                                                                                      api: MessagesAPI) -> None:
    """The fork sub-agent design: a child sees the parent's whole history with incomplete tool
    calls filtered out, then the launch call answered by the placeholder and its directive;
    the request it sends is one the API takes, with the parent's model, system and tools."""
    from eventstore import DEFAULT_PLACEHOLDER

    t = thread(file_store)
    file_store.append_message(t, "user", "Weather in Lyon?")
    file_store.append_message(t, "assistant", [use("tu_lost", city="Lyon")])  # never answered
    file_store.append_message(t, "user", "Never mind that; research Nice.")
    file_store.append_message(t, "assistant", [{"type": "text", "text": "Delegating."}, use("tu_agent", "Agent")])
    [kid] = file_store.fan_out(t, ["Research Nice."])
    api.reply_json(message(text("Nice: fine.")))
    assert run_turn(file_store, kid, None, client(api)).status == "ok"
    sent = api.requests[0].json
    validate_request(sent)
    assert (sent["model"], sent["system"][0]["text"], sent["tools"]) == (MODEL, "You plan trips.", TOOLS)
    assert "tu_lost" not in api.requests[0].body.decode()
    blocks = [[b.get("text") or b.get("id") or b.get("content") for b in m["content"]] for m in sent["messages"]]
    assert blocks == [["Weather in Lyon?", "Never mind that; research Nice."], ["Delegating.", "tu_agent"],
                      [DEFAULT_PLACEHOLDER, "Research Nice."]]
    assert DEFAULT_PLACEHOLDER == "Fork started — processing in background"
    assert file_store.event_at(t, 2).data["content"][0]["id"] == "tu_lost"  # the log keeps what the model produced


def test_the_fork_boilerplate_comes_before_each_directive_and_siblings_share_it(mem: Store, api: MessagesAPI) -> None:
    """The fork sub-agent design wraps each child's directive in the same `<fork-boilerplate>`
    (a worker's rules and report form); the report still repeats the directive alone."""
    from threadlog import FORK_BOILERPLATE, report

    t = thread(mem)
    mem.append_message(t, "user", "Research two destinations.")
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "tu_agent", "name": "Agent", "input": {}}])
    directives = ["Research Lyon.", "Research Nice, then rank it."]
    kids = mem.fan_out(t, directives, boilerplate=FORK_BOILERPLATE)
    for kid in kids:
        api.reply_json(message(text("Scope: one city.\nResult: fine.")))
        assert run_turn(mem, kid, None, client(api)).status == "ok"
    bodies = [r.body for r in api.requests]
    for body, directive in zip(bodies, directives):
        primed = json.loads(body)["messages"][-1]["content"]
        assert [b["type"] for b in primed] == ["tool_result", "text", "text"]
        assert primed[1]["text"] == FORK_BOILERPLATE and primed[2]["text"] == directive
    starts = [body.index(json.dumps(d).encode()) for body, d in zip(bodies, directives)]
    assert starts[0] == starts[1] and bodies[0][:starts[0]] == bodies[1][:starts[1]]
    assert json.dumps(FORK_BOILERPLATE).encode() in bodies[0][:starts[0]]
    delivered = report(mem, kids[1])
    notification = delivered.data["content"][-1]["text"]
    assert "<summary>Research Nice, then rank it.</summary>" in notification and "fork-boilerplate" not in notification


def test_each_launching_call_of_a_live_turn_fans_out_and_a_launch_after_the_turn_is_refused(
        file_store: Store, api: MessagesAPI) -> None:
    """The fork sub-agent design: a message with two Agent calls launches a fork from each, and
    each fork answers both calls with the placeholder. The turn's function for the second call
    fans out for calls the first one's sub-agent already answers: that is its own launch. After
    the turn, fanning out for those calls again is a second launch, refused naming both."""
    from threadlog import report

    t = thread(file_store)
    kids: list[str] = []

    def agent(prompt: str) -> str:
        kids.extend(file_store.fan_out(t, [prompt]))
        return "Fork started — processing in background"

    api.reply_json(message([use("tu_1", "Agent", prompt="Research Lyon."), use("tu_2", "Agent", prompt="Research Nice.")],
                           stop_reason="tool_use"))
    api.reply_json(message(text("Two sub-agents are on it.")))
    assert run_turn(file_store, t, "Research two destinations.", client(api), tools={"Agent": agent}).status == "ok"
    assert [thread_state(file_store, kid).directive for kid in kids] == ["Research Lyon.", "Research Nice."]
    file_store.append_message(t, "user", "And Bordeaux?")
    file_store.append_message(t, "assistant", [use("tu_3", "Agent", prompt="Research Bordeaux.")])
    (third,) = file_store.fan_out(t, ["Research Bordeaux."])
    with pytest.raises(ForkRefused) as refused:
        file_store.fan_out(t, ["Research Bordeaux."])
    assert (refused.value.reason, refused.value.subagent_ids) == ("already_launched", [third])
    file_store.append_message(third, "assistant", "Bordeaux: fine.")
    assert report(file_store, third).data["content"][0]["tool_use_id"] == "tu_3"


def test_a_thinking_thread_and_its_sub_agents_send_its_thinking_on_the_wire(file_store: Store, api: MessagesAPI) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    t = file_store.create_thread(title="trip", system="You plan trips.", model=MODEL, tools=TOOLS, thinking=thinking)
    api.reply_json(message([{"type": "thinking", "thinking": "Split it.", "signature": "sig"},
                            {"type": "text", "text": "Splitting up."},
                            {"type": "tool_use", "id": "tu_agent", "name": "Agent", "input": {"prompt": "..."}}],
                           stop_reason="tool_use"))

    def agent(prompt: str) -> str:
        raise Interrupt("the sub-agents answer later")

    assert run_turn(file_store, t, "Research two destinations.", client(api), tools={"Agent": agent}).status == "interrupted"
    kids = file_store.fan_out(t, ["Research Lyon.", "Research Nice."])
    for kid in kids:
        api.reply_json(message(text("Report.")))
        assert run_turn(file_store, kid, None, client(api)).status == "ok"
    sent = [json.loads(r.body) for r in api.requests]
    assert [body["thinking"] for body in sent] == [thinking] * 3
    assert [body["max_tokens"] for body in sent] == [4096 + 2048] * 3
    assert sent[1]["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Split it.", "signature": "sig"}
    for kid, request in zip(kids, api.requests[1:]):
        offset = next(e.offset for e in file_store.read(kid) if e.stream_id == kid and "request" in e.meta)
        assert check_request(file_store, kid, offset).ok
        assert request_body(anthropic_request(file_store, kid, offset), False) == request.body


def test_reports_answering_a_call_its_tool_interrupted_settle_the_interrupt_and_the_parent_goes_on(
        file_store: Store, api: MessagesAPI) -> None:
    """A launching tool that raises `Interrupt` leaves its call waiting on that interrupt; the
    sub-agents' first report answers the call. The interrupt stayed pending: the parent's next
    turn was refused until `resolve_interrupt`, whose answer was then dropped (the call had its
    result). The report now cancels it in the same write, saying why, and the parent goes on."""
    from threadlog import questions, report

    t = thread(file_store)
    api.reply_json(message([{"type": "text", "text": "Splitting up."}, use("tu_agent", "Agent")], stop_reason="tool_use"))

    def agent() -> str:
        raise Interrupt("the sub-agents answer later")

    launched = run_turn(file_store, t, "Research two destinations.", client(api), tools={"Agent": agent})
    assert launched.status == "interrupted" and launched.interrupt_id is not None
    kids = file_store.fan_out(t, ["Research Lyon.", "Research Nice."])
    for kid, answer in zip(kids, ("Lyon: fine.", "Nice: sunny.")):
        api.reply_json(message(text(answer)))
        assert run_turn(file_store, kid, None, client(api)).status == "ok"
    first = report(file_store, kids[0])
    cancelled = file_store.event_at(t, first.offset - 1)
    assert (cancelled.type, cancelled.data["interrupt_id"]) == ("interrupt.cancelled", launched.interrupt_id)
    assert cancelled.data["reason"] == f"call 'tu_agent' answered by the report of sub-agent {kids[0]!r}"
    assert (cancelled.meta["actor"], cancelled.meta["causation_id"]) == (first.meta["actor"], first.meta["causation_id"])
    assert thread_state(file_store, t).status == "idle" and questions(file_store, t) == []
    with pytest.raises(InvalidEvent, match=f"interrupt {launched.interrupt_id!r} is not pending"):
        resolve_interrupt(file_store, t, launched.interrupt_id, "an answer nothing would read")
    assert report(file_store, kids[0]).position == first.position  # a retry writes nothing, the cancellation included
    second = report(file_store, kids[1])
    assert second.offset == first.offset + 1  # the interrupt is settled once
    api.reply_json(message(text("Lyon, then Nice.")))
    assert run_turn(file_store, t, None, client(api)).text == "Lyon, then Nice."
    sent = api.requests[-1].json
    validate_request(sent)
    results = [b for b in sent["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [("tu_agent", "Fork started — processing in background")]
    assert file_store.verify().events == file_store.last_position()


def test_a_max_tokens_at_or_below_the_thinking_budget_is_refused_before_the_turn_starts(file_store: Store,
                                                                                        api: MessagesAPI) -> None:
    """The run started and the question was recorded; the API then refused every request
    ("max_tokens must be greater than thinking.budget_tokens"). Now nothing is written or sent,
    and the refusal names both figures; rerun forks nothing."""
    t = file_store.create_thread(title="trip", model=MODEL, thinking={"type": "enabled", "budget_tokens": 2048})
    api.reply_json(message([{"type": "thinking", "thinking": "Easy.", "signature": "sig"}, *text("Hi.")]))
    run_turn(file_store, t, "Hello", client(api))
    before, threads = file_store.last_position(), len(file_store.all_threads())
    refusal = r"^max_tokens: 2048 is not more than the thinking budget of thread '\w+' \(budget_tokens 2048\)"
    with pytest.raises(InvalidEvent, match=refusal):
        run_turn(file_store, t, "And tomorrow?", client(api), max_tokens=2048)
    with pytest.raises(InvalidEvent, match=refusal):
        rerun(file_store, t, 3, client(api), model="claude-other", max_tokens=2048)  # after the first message
    assert file_store.last_position() == before and len(file_store.all_threads()) == threads and len(api.requests) == 1
    api.reply_json(message(text("Rain.")))
    assert run_turn(file_store, t, "And tomorrow?", client(api), max_tokens=2049).status == "ok"
    assert api.requests[1].json["max_tokens"] == 2049
    # Under the interleaved-thinking beta the budget spans the turn's blocks: the API takes it.
    api.reply_json(message(text("Snow.")))
    beta = client(api).with_options(default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert run_turn(file_store, t, "And Sunday?", beta, max_tokens=1024).status == "ok"
    assert api.requests[2].json["max_tokens"] == 1024


def test_the_interleaved_thinking_beta_is_found_however_the_header_is_spelled(file_store: Store, api: MessagesAPI) -> None:
    """HTTP header names ignore case and `anthropic-beta` lists betas comma-separated: a client
    built with `Anthropic-Beta` sent the beta, and run_turn and rerun refused its turn anyway."""
    t = file_store.create_thread(title="trip", model=MODEL, thinking={"type": "enabled", "budget_tokens": 2048})
    api.reply_json(message(text("Hi.")))
    run_turn(file_store, t, "Hello", client(api))
    beta = client(api).with_options(default_headers={"Anthropic-Beta": "files-api-2025-04-14, interleaved-thinking-2025-05-14"})
    api.reply_json(message(text("Rain.")))
    assert run_turn(file_store, t, "And tomorrow?", beta, max_tokens=1024).status == "ok"
    assert "interleaved-thinking-2025-05-14" in api.requests[1].headers["anthropic-beta"]
    assert api.requests[1].json["max_tokens"] == 1024
    api.reply_json(message(text("Hi again.")))
    asked = next(e.offset for e in file_store.read(t) if e.data.get("content") == [{"type": "text", "text": "And tomorrow?"}])
    assert rerun(file_store, t, asked - 1, beta, max_tokens=1024) != t  # before its run: replays "And tomorrow?"
    assert api.requests[2].json["max_tokens"] == 1024
    other = client(api).with_options(default_headers={"Anthropic-Beta": "files-api-2025-04-14"})
    with pytest.raises(InvalidEvent, match=r"^max_tokens: 1024 is not more than the thinking budget"):
        run_turn(file_store, t, "And Sunday?", other, max_tokens=1024)


def test_a_turn_recorded_with_max_tokens_at_or_below_the_budget_is_checked_as_sent(file_store: Store, api: MessagesAPI) -> None:
    """With interleaved thinking (its beta header) the API takes a max_tokens at or below the
    thinking budget, and an earlier release's turn sent and recorded one so. Checking that
    request said it was refused ("the API refuses it"): the figure sent is not judged again."""
    t = file_store.create_thread(title="trip", model=MODEL, thinking={"type": "enabled", "budget_tokens": 2048})
    file_store.append_message(t, "user", "Hello")
    kwargs = anthropic_request(file_store, t) | {"max_tokens": 1024}
    answer = [{"type": "thinking", "thinking": "Easy.", "signature": "sig"}, *text("Hi.")]
    api.reply_json(message(answer))
    beta = client(api).with_options(default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    raw = beta.messages.with_raw_response.create(**kwargs)
    sent = api.requests[0]
    assert sent.json["max_tokens"] == 1024 and sent.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    recorded = {"id": raw.request_id, "digest": body_digest(sent.body), "model": MODEL, "max_tokens": 1024, "stream": False}
    (event,) = file_store.append(t, [{"type": "message.appended", "data": {"role": "assistant", "content": answer},
                                      "meta": {"request": recorded}}])
    check = check_request(file_store, t, event.offset)
    assert check.ok, check.reason


def test_a_fork_that_turns_thinking_on_inside_a_tool_loop_thinks_from_its_next_turn(file_store: Store, api: MessagesAPI) -> None:
    """The fork's request at the tool result went with thinking enabled, and the loop's answer
    opened with no thinking block: the API refuses that. It goes with thinking disabled, the
    next turn with the fork's thinking, and both rebuild byte for byte."""
    t = thread(file_store)
    file_store.append_message(t, "user", "Weather in Lyon?")
    file_store.append_message(t, "assistant", [*text("Checking."), use("tu_1", city="Lyon")])
    file_store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}])
    thinking = {"type": "enabled", "budget_tokens": 2048}
    fork = file_store.fork(t, config={"thinking": thinking})  # at the tool's result, before the loop's answer
    api.reply_json(message(text("Sunny, 21 degrees.")))
    assert run_turn(file_store, fork, None, client(api)).status == "ok"
    api.reply_json(message([{"type": "thinking", "thinking": "Nice next.", "signature": "sig"}, *text("Cloudy.")]))
    assert run_turn(file_store, fork, "And Nice?", client(api)).status == "ok"
    sent = [r.json for r in api.requests]
    assert [body["thinking"] for body in sent] == [{"type": "disabled"}, thinking]
    assert [body["max_tokens"] for body in sent] == [4096 + 2048] * 2
    for offset in [e.offset for e in file_store.read(fork) if e.stream_id == fork and "request" in e.meta]:
        assert check_request(file_store, fork, offset).ok


def test_rerun_replays_the_user_messages_with_another_model(file_store: Store, api: MessagesAPI) -> None:
    t = thread(file_store)
    for prompt, answer in (("Train to Lyon?", "Lyon by TGV."), ("And a hotel?", "Hotel Carlton."), ("Dinner?", "Bouchon.")):
        api.reply_json(message(text(answer)))
        run_turn(file_store, t, prompt, client(api))
    api.reply_json(message(text("Hotel Lumière."), model="claude-other"))
    api.reply_json(message(text("Brasserie."), model="claude-other"))
    fork = rerun(file_store, t, 5, client(api), model="claude-other")
    assert [r.json["model"] for r in api.requests[3:]] == ["claude-other", "claude-other"]
    assert [m["content"][0]["text"] for m in api.requests[4].json["messages"][::2]] == ["Train to Lyon?", "And a hotel?", "Dinner?"]
    result = diff(file_store, t, fork)
    assert result.fork_offset == 5

    def said(side: Any) -> list[str]:
        return [m["content"][0]["text"] for m in side.messages if m["role"] == "assistant"]

    assert said(result.a) == ["Hotel Carlton.", "Bouchon."]
    assert said(result.b) == ["Hotel Lumière.", "Brasserie."]
    own = [e.offset for e in file_store.read(fork, 5) if "request" in e.meta]
    assert len(own) == 2 and all(check_request(file_store, fork, o).ok for o in own)


def test_rerun_asks_first_a_question_its_fork_ends_on(file_store: Store, api: MessagesAPI) -> None:
    """A turn that failed and was answered by a retry with no new text leaves its question at
    the fork's end: rerun skipped it, and the next question was sent merged with it."""
    t = thread(file_store)
    api.reply_error(529, "overloaded_error", "Overloaded")
    assert run_turn(file_store, t, "Train to Lyon?", client(api)).status == "error"
    api.reply_json(message(text("Lyon by TGV.")))
    assert run_turn(file_store, t, None, client(api)).status == "ok"
    api.reply_json(message(text("Hotel Carlton.")))
    run_turn(file_store, t, "And a hotel?", client(api))
    api.reply_json(message(text("TGV at 8."), model="claude-other"))
    api.reply_json(message(text("Hotel Lumière."), model="claude-other"))
    fork = rerun(file_store, t, 4, client(api), model="claude-other")  # after the failed turn's end
    sent = [[m["content"][0]["text"] for m in r.json["messages"]] for r in api.requests[3:]]
    assert sent == [["Train to Lyon?"], ["Train to Lyon?", "TGV at 8.", "And a hotel?"]]
    assert [m.content[0]["text"] for m in thread_state(file_store, fork).messages][-2:] == ["And a hotel?", "Hotel Lumière."]


def test_a_sub_agent_turn_may_call_tools_for_200_rounds_and_a_threads_for_50(file_store: Store, api: MessagesAPI) -> None:
    """The fork sub-agent design gives its fork agent `maxTurns: 200`: a sub-agent working
    alone was stopped at a thread's 50."""
    from threadlog.live import ROUNDS, SUBAGENT_ROUNDS

    assert (ROUNDS, SUBAGENT_ROUNDS) == (50, 200)
    weather = {"weather": lambda city: f"Sunny in {city}."}
    t = thread(file_store)
    for i in range(ROUNDS):
        api.reply_json(message([use(f"toolu_{i}", city="Lyon")], "tool_use"))
    stopped = run_turn(file_store, t, "Weather, again and again?", client(api), tools=weather)
    assert stopped.status == "error" and f"after {ROUNDS} rounds" in (stopped.error or "") and len(api.requests) == ROUNDS
    file_store.append_message(t, "user", "Now split it.")
    file_store.append_message(t, "assistant", [use("toolu_agent", "Agent")])
    [kid] = file_store.fan_out(t, ["Check the weather until it rains."])
    for i in range(ROUNDS + 10):
        api.reply_json(message([use(f"toolu_k{i}", city="Lyon")], "tool_use"))
    api.reply_json(message(text("It never rains.")))
    done = run_turn(file_store, kid, None, client(api), tools=weather)
    assert done.status == "ok" and done.text == "It never rains." and len(api.requests) == 2 * ROUNDS + 11


def test_rerun_does_not_replay_a_sub_agents_report_as_the_users_prompt(file_store: Store, api: MessagesAPI) -> None:
    """A report is a user message from a sub-agent: the second sibling's (the first closed the
    launch calls, so it holds no tool_result) was sent to the model as if the user typed it."""
    from threadlog import report

    t = thread(file_store)
    file_store.append_message(t, "user", "Plan Lyon and Nice.")
    file_store.append_message(t, "assistant", [use("toolu_1", "Agent"), use("toolu_2", "Agent")])
    a, b = file_store.fan_out(t, ["Plan Lyon.", "Plan Nice."])
    for kid, answer in ((a, "Lyon planned."), (b, "Nice planned.")):
        file_store.append_message(kid, "assistant", answer)
        report(file_store, kid)
    file_store.append_message(t, "assistant", "Both planned.")
    later = file_store.head(t)
    file_store.append_message(t, "user", "Book them.")
    file_store.append_message(t, "assistant", "Booked.")
    api.reply_json(message(text("Booked again."), model="claude-other"))
    fork = rerun(file_store, t, later, client(api), model="claude-other")
    assert len(api.requests) == 1
    assert [block["text"] for block in api.requests[0].json["messages"][-1]["content"]] == ["Book them."]
    api.reply_json(message(text("Planning."), model="claude-other"))
    api.reply_json(message(text("Booking."), model="claude-other"))
    early = rerun(file_store, t, 2, client(api), model="claude-other")  # before the launch: the reports are not asked
    assert [[block["text"] for block in m.content] for m in thread_state(file_store, early).messages] == [
        ["Plan Lyon and Nice."], ["Planning."], ["Book them."], ["Booking."]]
    assert "task-notification" not in json.dumps([r.json for r in api.requests[1:]])
    assert thread_state(file_store, fork).messages[-1].content == text("Booked again.")


def test_rerun_of_a_prompt_an_earlier_release_stored_laxly_is_refused_before_forking(file_store: Store, api: MessagesAPI) -> None:
    """Blocks are checked strictly since this release (`"enabled": "true"` is refused); a prompt
    an earlier release took so cannot be sent again as it is: refused by offset, nothing forked."""
    from eventstore import InvalidEvent
    from eventstore.prepare import prepare

    t = thread(file_store)
    api.reply_json(message(text("Hi.")))
    run_turn(file_store, t, "Hello", client(api))
    lax = [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "The sky is blue."},
            "citations": {"enabled": "true"}}, {"type": "text", "text": "What colour?"}]
    stored = file_store.append_prepared(t, [prepare({"type": "message.appended", "data": {"role": "user", "content": lax}}, 0,
                                                    restoring=True)])[0]
    threads = len(file_store.all_threads())
    with pytest.raises(InvalidEvent, match=rf"offset {stored.offset}: the user message there cannot be sent again as stored: "
                                           r".*citations.enabled.*nothing was forked"):
        rerun(file_store, t, 3, client(api), model="claude-other")  # after the first message, before the lax one
    assert len(file_store.all_threads()) == threads and len(api.requests) == 1


def test_a_max_tokens_the_sdk_will_not_wait_for_unstreamed_is_streamed(file_store: Store, api: MessagesAPI) -> None:
    """The SDK refuses, before sending, a call it expects to take over 10 minutes unstreamed (a
    max_tokens of 32,000, or a thinking budget's): the ValueError ended the turn, and the CLI
    called it a stored row altered outside threadlog. Such a call is now streamed."""
    t = thread(file_store)
    api.reply_sse(message(text("A long plan."), id="msg_long"))
    default = anthropic.Anthropic(base_url=api.url, api_key="test", max_retries=0)  # its own timeout: as the CLI's
    api.clients.append(default)
    turn = run_turn(file_store, t, "Plan my year", default, max_tokens=32_000)
    assert (turn.status, turn.text) == ("ok", "A long plan.")
    assert api.requests[0].json["stream"] is True and api.requests[0].json["max_tokens"] == 32_000
    assert file_store.event_at(t, 3).meta["request"]["stream"] is True
    check = check_request(file_store, t, 3)  # the request recorded as streamed rebuilds byte for byte
    assert check.ok and check.recorded == body_digest(api.requests[0].body), check.reason


def test_an_answer_nested_past_what_python_reads_ends_the_run_as_an_error(mem: Store, api: MessagesAPI) -> None:
    """It raised RecursionError out of run_turn, whose API failures are recorded, not raised."""
    t = thread(mem)
    api.replies.append(Reply(200, b'{"id": "msg_1", "content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    turn = run_turn(mem, t, "Hello", client(api))
    assert turn.status == "error" and "the API's answer is not JSON" in (turn.error or "")
    assert types(mem, t)[-1] == "run.finished" and thread_state(mem, t).status == "idle"


def test_rerun_asks_user_messages_the_original_answered_together_in_one_turn(file_store: Store, api: MessagesAPI) -> None:
    """Messages the user sent one after the other (a pasted file, then the question) were one
    turn for the model: rerun asked the model after the first alone, a request the original
    never made, and its fork held an answer the original has no counterpart of."""
    t = thread(file_store)
    api.reply_json(message(text("Hello.")))
    run_turn(file_store, t, "Hi", client(api))
    at = file_store.head(t)
    file_store.append_message(t, "user", "Here is my itinerary: Lyon, then Nice.")
    api.reply_json(message(text("Lyon by TGV, then the coast.")))
    run_turn(file_store, t, "How do I get there?", client(api))
    api.reply_json(message(text("Take the TGV."), model="claude-other"))
    fork = rerun(file_store, t, at, client(api), model="claude-other")
    assert len(api.requests) == 3
    sent = [[b["text"] for b in m["content"]] for m in api.requests[2].json["messages"]]
    assert sent == [["Hi"], ["Hello."], ["Here is my itinerary: Lyon, then Nice.", "How do I get there?"]]
    texts = [[b["text"] for b in m.content] for m in thread_state(file_store, fork).messages]
    assert texts[2:] == [["Here is my itinerary: Lyon, then Nice."], ["How do I get there?"], ["Take the TGV."]]
    assert all(check_request(file_store, fork, e.offset).ok for e in file_store.read(fork, at) if "request" in e.meta)


def test_rerun_asks_a_question_its_fork_ends_on_with_the_next_when_the_original_did(file_store: Store, api: MessagesAPI) -> None:
    """A failed turn's question the user followed with another (no retry between): the original
    answered both in one turn, and so does the replay."""
    t = thread(file_store)
    api.reply_error(529, "overloaded_error", "Overloaded")
    assert run_turn(file_store, t, "Train to Lyon?", client(api)).status == "error"
    at = file_store.head(t)
    api.reply_json(message(text("The 9:04 TGV, first class.")))
    run_turn(file_store, t, "First class, please.", client(api))
    api.reply_json(message(text("TGV at 8, first class."), model="claude-other"))
    fork = rerun(file_store, t, at, client(api), model="claude-other")
    assert len(api.requests) == 3
    assert [[b["text"] for b in m["content"]] for m in api.requests[2].json["messages"]] == [
        ["Train to Lyon?", "First class, please."]]
    assert thread_state(file_store, fork).messages[-1].content == text("TGV at 8, first class.")


def test_a_streamed_turn_of_a_thinking_thread_with_tools_rebuilds_byte_for_byte(file_store: Store, api: MessagesAPI) -> None:
    """The SDK's stream helper writes `tools` before `thinking` (its `create`, after): the
    request rebuilt for a streamed answer had them the other way round, and `check_request`
    said the history differed when nothing had changed."""
    thinking = {"type": "enabled", "budget_tokens": 2048}
    t = file_store.create_thread(title="trip", system="You plan trips.", model=MODEL, tools=TOOLS, thinking=thinking)
    api.reply_sse(message([{"type": "thinking", "thinking": "Easy.", "signature": "sig"}, *text("Take the train.")]))
    assert run_turn(file_store, t, "Train to Lyon?", client(api), stream=True).status == "ok"
    assert list(api.requests[0].json) == ["max_tokens", "messages", "model", "system", "tools", "thinking", "stream"]
    assert_provenance(file_store, t, api)


# A value for every key the SDK's `create` and its `stream` helper write in a request's body,
# those `anthropic_request` gives and those a caller could add alike; in an order of neither.
_EVERY_KEY: dict[str, Any] = dict(sorted({
    "max_tokens": 2048, "messages": [{"role": "user", "content": "Train to Lyon?"}], "model": MODEL,
    "cache_control": {"type": "ephemeral"}, "container": "container_1", "diagnostics": {}, "inference_geo": "eu",
    "metadata": {"user_id": "u1"}, "output_config": {"effort": "low"}, "service_tier": "auto", "speed": "standard",
    "stop_sequences": ["END"], "system": "You plan trips.", "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tool_choice": {"type": "auto"}, "tools": TOOLS}.items()))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_request_body_writes_every_key_in_the_order_the_installed_sdk_sends_it(api: MessagesAPI, stream: bool) -> None:
    """`request_body` holds the SDK's key order in lists of its own (the SDK's signatures do
    not give it: the stream helper takes `thinking` before `tools` and writes it after). An SDK
    release that writes its body in another order fails here, not in users' `check_request` of
    the turns it sent."""
    reply = message(text("Take the train."))
    if stream:
        api.reply_sse(reply)
        with client(api).messages.stream(**_EVERY_KEY) as events:
            events.get_final_message()
    else:
        api.reply_json(reply)
        client(api).messages.create(**_EVERY_KEY)
    [sent] = api.requests
    assert request_body(_EVERY_KEY, stream) == sent.body
