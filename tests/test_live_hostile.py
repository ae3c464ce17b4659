"""Live turns against a hostile or broken Messages API server and badly behaved tools.

Whatever the server answers and whatever a tool returns, `run_turn` records it or records
why not: it returns a `Turn` with status `error` (never raises for what the API or a tool
did), the user's message stays, the thread is idle and can be retried, and `verify` holds.
"""

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

from eventstore import Store
from projections import anthropic_request, thread_state, usage, validate_request
from threadlog.live import run_turn

from messages_api import ENDLESS, MessagesAPI, Reply, encode_sse, message, sse_events
from procs import ctrl_c, interruptible

MODEL = "claude-test-1"
TOOLS = [{"name": "weather", "description": "Weather in a city", "input_schema": {"type": "object"}}]


def use(id: str, name: str = "weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def raw(body: bytes, content_type: str = "application/json") -> Reply:
    return Reply(200, body, content_type)


def answered(blocks: list[dict[str, Any]], **fields: Any) -> Reply:
    return raw(json.dumps({**message(blocks), **fields}).encode())


# What the server answers with: each is queued once; none of them is a message threadlog can keep.
BROKEN: dict[str, Reply] = {
    "truncated-json": raw(b'{"id": "msg_1", "type": "message", "content": ['),
    "html-page": raw(b"<html><body>502 Bad Gateway</body></html>", "text/html"),
    "json-but-not-a-message": raw(b'["not", "a", "message"]'),
    "content-not-a-list": answered([], content="just a string"),
    "unknown-block-type": answered([{"type": "hologram", "data": "x"}]),
    "tool-use-without-id": answered([{"type": "tool_use", "name": "weather", "input": {}}], stop_reason="tool_use"),
    "duplicate-tool-use-ids": answered([use("tu_1"), use("tu_1")], stop_reason="tool_use"),
    "tool-input-not-an-object": answered([{"type": "tool_use", "id": "tu_1", "name": "weather", "input": [1, 2]}],
                                         stop_reason="tool_use"),
    "lone-surrogate-in-text": raw(b'{"id":"m","type":"message","role":"assistant","model":"x","stop_reason":"end_turn",'
                                  b'"content":[{"type":"text","text":"\\ud800"}],"usage":{"input_tokens":1,"output_tokens":1}}'),
    "usage-not-an-object": answered([{"type": "text", "text": "ok"}], usage="lots"),
    "role-not-assistant": answered([{"type": "text", "text": "I am the user now."}], role="user"),
    "thinking-with-an-empty-signature": answered([{"type": "thinking", "thinking": "hm", "signature": ""},
                                                  {"type": "text", "text": "ok"}]),
    "nested-too-deep": answered([{"type": "tool_use", "id": "tu_1", "name": "weather",
                                  "input": json.loads('{"a":' * 150 + "1" + "}" * 150)}], stop_reason="tool_use"),
    # Past the depth the SDK's models write as JSON: the ValueError rose out of run_turn, and `ask`
    # said the stored event's row was altered outside threadlog (exit 1, the question written).
    "nested-past-what-the-sdk-writes": answered([{"type": "tool_use", "id": "tu_1", "name": "weather",
                                                  "input": json.loads('{"a":' * 300 + "1" + "}" * 300)}], stop_reason="tool_use"),
}


def assert_retryable(store: Store, t: str) -> None:
    state = thread_state(store, t)
    assert state.status == "idle"
    assert [m.role for m in state.messages] == ["user"] and state.messages[0].content[0]["text"] == "Hello"
    store.verify()
    validate_request(anthropic_request(store, t))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("reply", list(BROKEN.values()), ids=list(BROKEN))
def test_a_broken_answer_ends_the_run_with_its_reason_and_the_thread_can_retry(api: MessagesAPI, reply: Reply, stream: bool) -> None:
    if stream:
        reply = streamed(reply)
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.replies.append(reply)
    turn = run_turn(store, t, "Hello", api.client(), tools={"weather": lambda **_: "sunny"}, stream=stream)
    assert turn.status == "error" and turn.error, turn
    assert store.read(t, start=store.head(t) - 1).__next__().data["status"] == "error"
    assert_retryable(store, t)
    api.reply_json(message([{"type": "text", "text": "Fine now."}]))
    assert run_turn(store, t, None, api.client()).status == "ok"
    store.verify()


@pytest.mark.parametrize(("body", "kind"), [(b"<html><body>Sign in</body></html>", "text/html"),
                                            (json.dumps(message([{"type": "text", "text": "Hi"}])).encode(), "application/json")],
                         ids=["html-page", "json-message"])
def test_a_stream_answered_with_no_message_events_says_what_came(api: MessagesAPI, body: bytes, kind: str) -> None:
    # A gateway's page, or a proxy that answers a streamed request whole: the turn said only "AssertionError".
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.replies.append(Reply(200, body, kind))
    turn = run_turn(store, t, "Hello", api.client(), stream=True)
    assert turn.status == "error"
    assert turn.error == f"BadAnswer: the API's answer is no stream of message events (no message_start came; its content-type: {kind!r})"
    assert_retryable(store, t)


def streamed(reply: Reply) -> Reply:
    """The same answer as server-sent events, where it can be streamed at all."""
    try:
        return Reply(200, encode_sse(sse_events(json.loads(reply.body))), "text/event-stream")
    except (ValueError, KeyError, TypeError, AttributeError):
        return reply


# What a tool returns (or does): none of these may escape run_turn or lose the assistant's call.
TOOL_OUTPUTS: dict[str, Callable[..., Any]] = {
    "invalid-content-blocks": lambda **_: [{"type": "evil"}],
    "lone-surrogate": lambda **_: "x\ud800",
}


@pytest.mark.parametrize("tool", list(TOOL_OUTPUTS.values()), ids=list(TOOL_OUTPUTS))
def test_a_tool_output_that_cannot_be_stored_becomes_an_error_result(api: MessagesAPI, tool: Callable[..., Any]) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.reply_json(message([use("tu_1")], "tool_use"))
    turn = run_turn(store, t, "Weather?", api.client(), tools={"weather": tool})
    assert turn.status == "error" and "could not be stored" in (turn.error or ""), turn
    state = thread_state(store, t)
    assert state.status == "idle"
    assert [m.role for m in state.messages] == ["user", "assistant", "user"]
    result = state.messages[-1].content[0]
    assert result["tool_use_id"] == "tu_1" and result["is_error"] is True
    store.verify()
    validate_request(anthropic_request(store, t))  # every tool_use has its result


@pytest.mark.parametrize("kind", ["image", "document"])
def test_a_tool_returning_base64_data_that_does_not_decode_gets_an_error_result(api: MessagesAPI, kind: str) -> None:
    """It was stored, and sent back with every later request of the thread, which the API
    refuses: the thread could not go on. The call's result says what the tool returned, as for
    a tool that raised; a good image is kept as it came."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    media = "image/png" if kind == "image" else "application/pdf"
    bad = [{"type": "text", "text": "the chart:"}, {"type": kind, "source": {"type": "base64", "media_type": media, "data": "!!"}}]
    api.reply_json(message([use("tu_1")], "tool_use"))
    turn = run_turn(store, t, "Chart?", api.client(), tools={"weather": lambda **_: bad})
    assert turn.status == "error" and turn.error == (f"tool 'weather' returned content block 1 (an {kind}) whose base64 "
                                                     "data does not decode, which the API cannot read"), turn.error
    result = thread_state(store, t).messages[-1].content[0]
    assert result["is_error"] is True and "base64" in result["content"] and "!!" not in result["content"]
    good = [{"type": kind, "source": {"type": "base64", "media_type": media, "data": "iVBORw0KGgo="}}]
    api.reply_json(message([use("tu_2")], "tool_use"))
    api.reply_json(message([{"type": "text", "text": "ok"}]))
    assert run_turn(store, t, "Again?", api.client(), tools={"weather": lambda **_: good}).status == "ok"
    assert thread_state(store, t).messages[-2].content[0]["content"] == good
    store.verify()


def test_a_tool_output_that_is_not_json_is_kept_as_its_repr(api: MessagesAPI) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.reply_json(message([use("tu_1")], "tool_use"))
    api.reply_json(message([{"type": "text", "text": "ok"}]))
    turn = run_turn(store, t, "Weather?", api.client(), tools={"weather": lambda **_: {1j: "complex key"}})
    assert turn.status == "ok"
    assert thread_state(store, t).messages[2].content[0]["content"] == "{1j: 'complex key'}"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_answer_with_a_null_stop_reason_is_recorded_alike_streamed_or_not(api: MessagesAPI, stream: bool) -> None:
    """The API gives every whole message a stop reason, and the SDK takes a null one as it comes
    (its stream's `message_delta` sets it so); a gateway may send one. Unstreamed, such an answer
    was recorded; streamed, with its `message_delta` and `message_stop` both sent, the same answer
    was refused as a stream that "ended before the message was complete", and lost."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    reply = {**message([{"type": "text", "text": "Lyon by TGV."}]), "stop_reason": None}
    api.reply_sse(reply) if stream else api.reply_json(reply)
    turn = run_turn(store, t, "Hello", api.client(), stream=stream)
    assert (turn.status, turn.error, turn.text, turn.stop_reason) == ("ok", None, "Lyon by TGV.", None), turn
    answer = turn.messages[0].data
    assert "stop_reason" not in answer and answer["usage"]["output_tokens"] == 5
    store.verify()


def test_a_stream_without_its_message_delta_is_refused_naming_it(api: MessagesAPI) -> None:
    """`message_delta` carries the stop reason and the output token count: a stream that ends
    (`message_stop`) without it holds the count its start guessed, not what the answer spent."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    events = [e for e in sse_events(message([{"type": "text", "text": "Lyon by TGV."}])) if e[0] != "message_delta"]
    api.replies.append(Reply(200, encode_sse(events), "text/event-stream"))
    turn = run_turn(store, t, "Hello", api.client(), stream=True)
    assert turn.status == "error" and turn.error == ("BadAnswer: the API's stream ended (message_stop) with no message_delta, "
                                                     "which sends the answer's stop reason and its output token count")
    assert_retryable(store, t)


def test_usage_fields_of_the_wrong_type_are_kept_without_a_warning(api: MessagesAPI) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.replies.append(answered([{"type": "text", "text": "ok"}], usage={"input_tokens": "many", "output_tokens": None}))
    turn = run_turn(store, t, "Hello", api.client())  # filterwarnings=error: a serializer warning fails here
    assert turn.status == "ok"
    assert turn.messages[0].data["usage"] == {"input_tokens": "many"}


def test_usage_counts_only_integer_token_fields() -> None:
    """Whatever wrote it (an import, a hand-made event), a token field that is not an integer
    counts nothing: `true` is not one token."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    store.append_message(t, "user", "Hello")
    store.append_message(t, "assistant", "a", usage={"input_tokens": True, "output_tokens": 2.5, "cache_read_input_tokens": "7"})
    store.append_message(t, "user", "Again")
    store.append_message(t, "assistant", "b", usage={"input_tokens": 3, "output_tokens": 4})
    row = usage(store, t)[0]
    assert (row.messages, row.input_tokens, row.output_tokens, row.cache_read_input_tokens) == (2, 3, 4, 0)
    assert row.left_out == 1  # the answer whose counts were not counted, said


@pytest.mark.parametrize("cut", range(1, 41))
def test_a_stream_cut_at_any_point_ends_the_run_and_keeps_the_question(api: MessagesAPI, cut: int) -> None:
    body = encode_sse(sse_events(message([{"type": "text", "text": "An answer in pieces."}, use("tu_1")], "tool_use")))
    at = len(body) * cut // 40
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.replies.append(Reply(200, body[:at], "text/event-stream"))
    api.reply_sse(message([{"type": "text", "text": "Done."}]))
    turn = run_turn(store, t, "Hello", api.client(), tools={"weather": lambda **_: "sunny"}, stream=True)
    if at == len(body):  # every event arrived, `message_stop` last: the answer is whole (a stop reason alone is not)
        assert turn.status == "ok" and turn.messages[0].data["content"][1]["id"] == "tu_1"
        store.verify()
        return
    assert turn.status == "error" and turn.error
    assert_retryable(store, t)


@pytest.mark.parametrize("events", [0, 3], ids=["before-message-start", "mid-answer"])
def test_a_stream_of_keep_alive_pings_alone_fails_after_the_read_timeout(api: MessagesAPI, events: int) -> None:
    """A server that sent keep-alive pings and no event held the turn open for ever: the SDK
    drops pings, and each one reset the client's read timeout. The wait for the next event
    now counts against that timeout, pings or not: the run ends with status error, naming it."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.ping_only(message([{"type": "text", "text": "An answer that never comes whole."}]), events)
    began = time.monotonic()
    turn = run_turn(store, t, "Hello", api.client(timeout=1.0), stream=True)
    assert time.monotonic() - began < ENDLESS / 2
    assert turn.status == "error" and turn.error is not None
    assert "the API sent no event for 1 s (the client's read timeout; keep-alive pings do not count)" in turn.error, turn.error
    assert_retryable(store, t)


def test_an_answer_whole_before_the_server_pings_on_is_kept(api: MessagesAPI) -> None:
    """A server that sent the whole answer, `message_stop` included, then kept the stream open
    with pings: the watch closed it after the read timeout, and the whole answer was thrown away
    as a stalled stream. The answer is recorded, the turn ok."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    body = message([{"type": "text", "text": "Whole, then pings until the connection is closed."}])
    api.ping_only(body, len(sse_events(body)))
    began = time.monotonic()
    turn = run_turn(store, t, "Hello", api.client(timeout=1.0), stream=True)
    assert time.monotonic() - began < ENDLESS / 2
    assert turn.status == "ok", turn.error
    assert turn.text == "Whole, then pings until the connection is closed."
    assert [m.role for m in thread_state(store, t).messages] == ["user", "assistant"]


def test_a_slow_stream_whose_events_keep_coming_is_not_cut(api: MessagesAPI) -> None:
    """The watch times each wait for an event, not the whole answer: events 0.3 s apart, pings
    between them, under a 1.5 s read timeout, make a whole answer however long it takes."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.paced(message([{"type": "text", "text": "Slow but steady, word by word, to the end."}]), 0.3)
    began = time.monotonic()
    turn = run_turn(store, t, "Hello", api.client(timeout=1.5), stream=True)
    assert turn.status == "ok", turn.error
    assert time.monotonic() - began > 1.5  # longer than the timeout in all
    assert turn.text == "Slow but steady, word by word, to the end."


def _out_of_order() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    events = sse_events(message([{"type": "text", "text": "Hello there"}, use("tu_1", city="Lyon")], "tool_use"))
    delta = ("content_block_delta", {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}})
    stop = next(i for i, (kind, _) in enumerate(events) if kind == "content_block_stop")  # the text block's
    second = next(i for i, (kind, data) in enumerate(events) if kind == "content_block_start" and data["index"] == 1)

    def deltas(index: int, delta: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """`events` with every delta of block `index` replaced by `delta`."""
        return [(kind, {**data, "delta": delta} if kind == "content_block_delta" and data["index"] == index else data)
                for kind, data in events]

    again = ("message_start", {**events[0][1], "message": {**events[0][1]["message"], "id": "msg_other", "model": "other"}})
    return {
        "no-message-start": events[1:],
        # Passed over by the SDK (it folds nothing before message_start): the stop reason and the
        # token count it sent were lost, and the answer was recorded `ok` without them.
        "message-delta-before-message-start": [events[-2], *events[:-2], events[-1]],
        "a-stop-reason-before-message-start": [("message_delta", {**events[-2][1], "delta": {"stop_reason": "max_tokens"}}),
                                               *events],
        "delta-before-its-block-starts": [events[0], events[2], *events[1:]],
        "delta-of-a-block-never-started": [events[0], delta, *events[1:]],
        "stop-of-a-block-never-started": [*events[:-2], ("content_block_stop", {"type": "content_block_stop", "index": 7}), *events[-2:]],
        "ends-without-any-block-or-message-stop": [e for e in events if e[0] not in ("content_block_stop", "message_stop")],
        "message-delta-without-usage": [*events[:-2], ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
                                        events[-1]],
        # Folded into the message by the SDK all the same: "Hello there AFTER" was recorded, status ok.
        "text-after-message-stop": [*events, ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                                      "delta": {"type": "text_delta", "text": " AFTER"}})],
        "text-after-its-block-stopped": [*events[:stop + 1], ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                                                       "delta": {"type": "text_delta", "text": " AFTER"}}),
                                         *events[stop + 1:]],
        # Each of these the SDK folded as best it could, and the answer was recorded as no message the
        # API sent: a second message ignored, a delta of another block's kind dropped (the call ran with
        # `{}`, its text lost), a block started twice or at another index taking the next one's deltas.
        "a-second-message-start": [events[0], again, *events[1:]],
        # The SDK keeps the blocks a message_start holds, and the stream's block 0 was folded into its first.
        "a-message-start-holding-a-block": [("message_start", {**events[0][1], "message": {
            **events[0][1]["message"], "content": [{"type": "text", "text": "Before."}]}}), *events[1:]],
        "a-block-started-twice": [*events[:2], events[1], *events[2:]],
        "a-block-started-at-another-index": [*events[:second], ("content_block_start", {**events[second][1], "index": 3}),
                                             *events[second + 1:]],
        "text-delta-of-a-tool-call": deltas(1, {"type": "text_delta", "text": "Lyon"}),
        "thinking-delta-of-a-text-block": deltas(0, {"type": "thinking_delta", "thinking": "Hidden."}),
        "input-json-delta-of-a-text-block": deltas(0, {"type": "input_json_delta", "partial_json": "{}"}),
        "thinking-without-its-signature": [e for e in sse_events(message(
            [{"type": "thinking", "thinking": "Need weather.", "signature": "sig"}, use("tu_1", city="Lyon")], "tool_use"))
            if e[1].get("delta", {}).get("type") != "signature_delta"],
    }


OUT_OF_ORDER = _out_of_order()


@pytest.mark.parametrize("events", list(OUT_OF_ORDER.values()), ids=list(OUT_OF_ORDER))
def test_stream_events_out_of_order_end_the_run_with_status_error(api: MessagesAPI, events: list[tuple[str, dict[str, Any]]]) -> None:
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.replies.append(Reply(200, encode_sse(events), "text/event-stream"))
    calls: list[str] = []
    turn = run_turn(store, t, "Hello", api.client(), tools={"weather": lambda **_: calls.append("run") or "sunny"}, stream=True)
    assert turn.status == "error" and ("stream" in (turn.error or "") or "signature" in (turn.error or "")), turn
    assert not calls and len(api.requests) == 1
    assert_retryable(store, t)


def test_a_tool_input_whose_json_never_completes_is_not_run(api: MessagesAPI) -> None:
    events = sse_events(message([use("tu_1", city="Lyon")], "tool_use"))
    for name, data in events:
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            data["delta"]["partial_json"] = '{"city": "Ly'  # the block stops, the JSON does not
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    api.replies.append(Reply(200, encode_sse(events), "text/event-stream"))
    calls: list[Any] = []
    turn = run_turn(store, t, "Hello", api.client(), tools={"weather": lambda **kw: calls.append(kw) or "sunny"}, stream=True)
    assert not calls, "the tool ran with an input the model never finished"
    assert turn.status == "error" and "tu_1" in (turn.error or ""), turn
    assert_retryable(store, t)


def _cut_in_a_tool_call() -> bytes:
    """An answer cut off by max_tokens while the model was writing a tool call's input: the
    input's JSON stops mid-string and the block never stops (as the SDK's own fixture)."""
    events = sse_events(message([{"type": "text", "text": "Writing the file."}, use("tu_1", "write", path="a.txt")], "max_tokens"))
    cut = [e for e in events if not (e[0] == "content_block_stop" and e[1]["index"] == 1)]
    for name, data in cut:
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            data["delta"]["partial_json"] = '{"path": "a.txt", "lines": ["# Title", "Fir'
    return encode_sse(cut)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_tool_call_cut_off_by_max_tokens_is_not_run_and_gets_an_error_result(api: MessagesAPI, stream: bool) -> None:
    store = Store(":memory:")
    tools = [*TOOLS, {"name": "write", "description": "Write a file", "input_schema": {"type": "object"}}]
    t = store.create_thread(title="t", model=MODEL, tools=tools)
    if stream:
        api.replies.append(Reply(200, _cut_in_a_tool_call(), "text/event-stream"))
    else:
        api.reply_json(message([{"type": "text", "text": "Writing the file."}, use("tu_1", "write", path="a.txt", lines=["# Ti"])],
                               "max_tokens"))
    written: list[Any] = []
    turn = run_turn(store, t, "Hello", api.client(), tools={"write": lambda **kw: written.append(kw) or "written"}, stream=stream)
    assert not written, "a call whose input was cut off must not run"
    assert turn.status == "error" and "max_tokens" in (turn.error or "") and "tu_1" in (turn.error or ""), turn
    state = thread_state(store, t)
    assert state.status == "idle"
    assert [m.role for m in state.messages] == ["user", "assistant", "user"]
    assert state.messages[1].content[0]["text"] == "Writing the file."
    result = state.messages[2].content[0]
    assert result["tool_use_id"] == "tu_1" and result["is_error"] is True
    kwargs = anthropic_request(store, t)
    validate_request(kwargs)
    assert [b["type"] for b in kwargs["messages"][1]["content"]] == ["text", "tool_use"]  # answered, so kept
    store.verify()
    # The thread takes a new question; the cut-off call is not run on the way.
    api.reply_json(message([{"type": "text", "text": "Fine now."}]))
    assert run_turn(store, t, "Shorter, please", api.client(), tools={"write": lambda **kw: written.append(kw)}).status == "ok"
    assert not written


THREADLOG = str(Path(sys.executable).parent / "threadlog")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_ask_prints_no_control_character_the_api_sent(api: MessagesAPI, tmp_path: Path, stream: bool) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(model=MODEL, thread_id="T")
    hostile = "hi\x1b]0;owned\x07\x00\rdone"
    (api.reply_sse if stream else api.reply_json)(message([{"type": "text", "text": hostile}]))
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    run = subprocess.run([THREADLOG, "ask", "T", "Hello", "--db", str(db), *(["--stream"] if stream else [])],
                         capture_output=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert b"hi" in run.stdout and b"done" in run.stdout
    assert not any(c in run.stdout for c in (b"\x1b", b"\x07", b"\x00", b"\r")), run.stdout


def test_ctrl_c_mid_stream_cancels_the_run_and_records_no_part_of_the_answer(api: MessagesAPI, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(model=MODEL, thread_id="T")
    api.hold_mid_stream(message([{"type": "text", "text": "An answer that is still being written when Ctrl-C comes."}]))
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    proc = interruptible([THREADLOG, "ask", "T", "Hello", "--db", str(db), "--stream"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.read(2) == b"An"  # the first text delta is out: the stream is being read
    _, err = ctrl_c(proc)
    assert proc.returncode == 130, (proc.returncode, err)  # the shell's status for a command Ctrl-C stopped
    assert err.decode().splitlines() == ["interrupted"], err
    with Store(db) as store:
        events = list(store.read("T"))
        assert [e.type for e in events] == ["thread.created", "run.started", "message.appended", "run.finished"]
        assert events[-1].data["status"] == "cancelled"
        state = thread_state(store, "T")
        assert state.status == "idle" and [m.role for m in state.messages] == ["user"]
        store.verify()
        validate_request(anthropic_request(store, "T"))


def test_ctrl_c_mid_rerun_names_the_fork_it_made(api: MessagesAPI, tmp_path: Path) -> None:
    """`threadlog rerun` prints the fork's id once the replay is done: stopped mid-stream, it said
    only "interrupted", and the fork it had made (and the cancelled turn in it) was named nowhere."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(model=MODEL, thread_id="T")
        store.append_message("T", "user", "Hello")
        store.append_message("T", "assistant", "Hi.")
        store.append_message("T", "user", "And Lyon?")
    api.hold_mid_stream(message([{"type": "text", "text": "An answer that is still being written when Ctrl-C comes."}]))
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    proc = interruptible([THREADLOG, "rerun", "T", "--at", "3", "--model", "claude-test-2", "--stream", "--db", str(db)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    while not api.requests and proc.poll() is None:  # the replayed question is out: the answer is being read
        time.sleep(0.02)
    time.sleep(0.3)
    out, err = ctrl_c(proc)
    assert proc.returncode == 130 and out == b"", (proc.returncode, out, err)
    with Store(db) as store:
        [fork] = [t.id for t in store.threads() if t.id != "T"]
        assert err.decode().splitlines() == [f"interrupted; fork {fork} of thread T keeps what was replayed (threadlog diff T {fork})"]
        assert [e.data.get("status") for e in store.read(fork) if e.type == "run.finished"] == ["cancelled"]
        assert thread_state(store, fork).status == "idle"
        store.verify()
    # The fork goes on where the replay stopped: its question is asked again.
    api.reply_json(message([{"type": "text", "text": "Take the 9:04."}]))
    again = subprocess.run([THREADLOG, "ask", fork, "--db", str(db)], capture_output=True, env=env, timeout=60)
    assert again.returncode == 0 and again.stdout == b"Take the 9:04.\n", again.stderr
    last = api.requests[-1].json["messages"][-1]
    assert last["role"] == "user" and [b["text"] for b in last["content"]] == ["And Lyon?"]


def test_a_paused_turn_is_sent_back_and_the_model_goes_on(api: MessagesAPI) -> None:
    """`pause_turn` (a server tool's long turn) ended the run `ok` after one request, and the
    paused answer could not be continued: the API wants it sent back as it is. The turn's
    text is the whole answer (it was the last message's alone, so `ask` printed "Found it."
    where `ask --stream` showed the search's text too)."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    paused = [{"type": "text", "text": "Searching."},
              {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "trains"}}]
    api.reply_json(message(paused, "pause_turn"))
    api.reply_json(message([{"type": "text", "text": "Found it."}]))
    turn = run_turn(store, t, "Search trains", api.client())
    assert turn.status == "ok" and turn.text == "Searching.Found it." and len(api.requests) == 2
    second = api.requests[1].json["messages"]
    assert second[-1]["role"] == "assistant" and [b["type"] for b in second[-1]["content"]] == ["text", "server_tool_use"]
    store.verify()


def test_a_paused_turn_whose_going_on_failed_goes_on_when_asked_again(api: MessagesAPI, tmp_path: Path) -> None:
    """The request that sends a paused answer back failed: the thread ends on that answer, and
    asking again with no new message (as the failure said to: `threadlog ask T`) was refused
    as having nothing to continue."""
    from projections import check_request

    store = Store(tmp_path / "t.db")
    t = store.create_thread(title="t", model=MODEL, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    paused = [{"type": "text", "text": "Searching."},
              {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "trains"}}]
    api.reply_json(message(paused, "pause_turn"))
    api.reply_error(529, "overloaded_error", "Overloaded")
    failed = run_turn(store, t, "Search trains", api.client())
    assert failed.status == "error" and "Overloaded" in (failed.error or "")
    api.reply_json(message([{"type": "text", "text": "Found it."}]))
    again = run_turn(store, t, None, api.client())
    assert again.status == "ok" and again.text == "Found it." and len(api.requests) == 3
    sent = api.requests[2].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant"] and sent[-1]["content"][-1]["type"] == "server_tool_use"
    assert check_request(store, t, again.messages[0].offset).ok
    store.verify()


def test_a_turn_that_ends_on_a_paused_answer_is_not_whole_anywhere(api: MessagesAPI) -> None:
    """A turn whose rounds ran out on a paused answer ends `error` (the thread goes on when asked
    again); the answer it ends on reads as paused and not resumed in rows and the model view, as
    `Turn.cut_short` reads the turn's last answer by the same rule (False: the turn was not `ok`)."""
    from projections import display_rows

    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    api.reply_json(message([{"type": "text", "text": "Searching."}], "pause_turn"))
    turn = run_turn(store, t, "Search trains", api.client(), max_rounds=1)
    assert turn.status == "error" and not turn.cut_short and turn.stop_reason == "pause_turn"
    said = "paused by the server and not resumed (pause_turn)"
    assert [row.text for row in display_rows(store, t) if row.kind == "cut_short"] == [said]
    assert thread_state(store, t).messages[-1].cut_short == said


def test_a_turn_whose_rounds_ran_out_on_answers_the_server_paused_says_so(api: MessagesAPI) -> None:
    """The server paused the answer round after round (`pause_turn`) and the turn's rounds ran
    out: it ended saying the model was still calling tools, which it never did. It says the
    server kept pausing, how many times in a row, and that the thread goes on from the answer."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=[*TOOLS, {"type": "web_search_20250305", "name": "web_search"}])
    api.reply_json(message([{"type": "text", "text": "Searching."}], "pause_turn"))
    turn = run_turn(store, t, "Search trains", api.client(), max_rounds=1)
    assert turn.error == ("the server paused the answer (stop_reason pause_turn) and the turn's 1 round ran out on it: "
                          "it is kept, paused and not resumed; continuing the thread goes on from it")
    api.reply_json(message([use("w1", city="Lyon")], "tool_use"))
    for _ in range(2):
        api.reply_json(message([{"type": "text", "text": "Still searching."}], "pause_turn"))
    turn = run_turn(store, t, None, api.client(), tools={"weather": lambda city: "rain"}, max_rounds=3)
    assert turn.status == "error" and turn.error == (
        "the server paused the answer (stop_reason pause_turn) 2 times in a row and the turn's 3 rounds ran out on it: "
        "it is kept, paused and not resumed; continuing the thread goes on from it")
    assert len(api.requests) == 4
    api.reply_json(message([use("w2", city="Paris")], "tool_use"))
    turn = run_turn(store, t, None, api.client(), tools={"weather": lambda city: "sun"}, max_rounds=1)
    assert turn.error == "the model was still calling tools after 1 round"  # the calls ran; the model was not asked again


def test_a_request_over_the_apis_size_says_how_the_thread_goes_on(api: MessagesAPI) -> None:
    """A tool result just under an event's 32 MiB is stored whole, and every later request of the
    thread is past the API's size: the API's 413 was recorded alone, and asking again met it again."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.reply_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
    failed = run_turn(store, t, "Summarise the log", api.client())
    assert failed.status == "error" and "Request exceeds the maximum allowed number of bytes." in (failed.error or "")
    assert (failed.error or "").endswith("the thread's request is over the API's size limit: redact its largest events "
                                         "(threadlog redact) or fork it before them (threadlog fork --at), and ask there")


@pytest.mark.parametrize("prompt", ["", "   \n", [{"type": "text", "text": " "}]], ids=["empty", "whitespace", "blank-block"])
def test_a_blank_prompt_is_refused_before_anything_is_written(api: MessagesAPI, prompt: Any) -> None:
    """It was recorded, left out of the request, and the request ended on the last answer (a
    prefill the API refuses with thinking on, and a continuation of that answer without)."""
    from eventstore import InvalidEvent

    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.reply_json(message([{"type": "text", "text": "Hello!"}]))
    run_turn(store, t, "hi", api.client())
    head = store.head(t)
    with pytest.raises(InvalidEvent, match="user_content: is blank"):
        run_turn(store, t, prompt, api.client())
    assert store.head(t) == head and len(api.requests) == 1


def test_an_answer_from_where_the_api_redirected_is_recorded(api: MessagesAPI) -> None:
    """The client follows a redirect, and then keeps no body to read back for the digest:
    reading it raised out of run_turn, and the answer was lost."""
    from projections import check_request

    with MessagesAPI() as other:
        api.replies.append(Reply(307, b"", headers={"location": other.url + "/v1/messages"}))
        other.reply_json(message([{"type": "text", "text": "from the other host"}]))
        store = Store(":memory:")
        t = store.create_thread(title="t", model=MODEL)
        turn = run_turn(store, t, "Hello", api.client())
    assert turn.status == "ok" and turn.text == "from the other host"
    assert check_request(store, t, turn.messages[0].offset).ok
    store.verify()


@pytest.mark.parametrize("failure", ["surrogate", "huge"])
def test_a_failure_whose_text_the_log_cannot_hold_is_still_recorded(api: MessagesAPI, failure: str) -> None:
    """A tool's error with a lone surrogate, or an API error of 40 MiB: the run's end was refused
    with its text, and run_turn raised where a failure is recorded and returned."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    if failure == "surrogate":
        api.reply_json(message([use("tu_1")], "tool_use"))

        def weather(**_: Any) -> str:
            raise ValueError("bad \ud800 city")

        turn = run_turn(store, t, "Hello", api.client(), tools={"weather": weather})
    else:
        api.reply_error(400, "invalid_request_error", "x" * (40 * 1024 * 1024))
        turn = run_turn(store, t, "Hello", api.client())
    assert turn.status == "error"
    finished = list(store.read(t))[-1]
    assert finished.type == "run.finished" and finished.data["status"] == "error"
    assert ("\\ud800" in finished.data["error"]) if failure == "surrogate" else ("(cut: " in finished.data["error"])
    store.verify()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_answer_citing_untitled_sources_is_stored_with_its_nulls(api: MessagesAPI, stream: bool) -> None:
    """The API sends `document_title: null` (and a web result's `title: null`) for an untitled
    source, and the request types require the field: the answer's nulls were left out, the
    store refused it ("document_title: Field required"), and every retry got the same."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    citations = [{"type": "char_location", "cited_text": "c", "document_index": 0, "document_title": None,
                  "start_char_index": 0, "end_char_index": 1},
                 {"type": "web_search_result_location", "cited_text": "c", "encrypted_index": "e", "title": None, "url": "https://x"}]
    reply = Reply(200, json.dumps(message([{"type": "text", "text": "per the sources", "citations": citations}])).encode())
    api.replies.append(streamed(reply) if stream else reply)
    turn = run_turn(store, t, "Hello", api.client(), stream=stream)
    assert turn.status == "ok", turn.error
    [block] = thread_state(store, t).messages[-1].content
    assert block["citations"] == citations
    validate_request(anthropic_request(store, t))


def test_an_async_client_is_refused_before_anything_is_written_and_a_thread_runs_the_turn(api: MessagesAPI,
                                                                                          tmp_path: Path) -> None:
    """`AsyncAnthropic` was taken, the question recorded, and the turn failed on a coroutine
    (`'coroutine' object has no attribute 'parse'`). It is refused first, saying how async code
    runs a turn: on a thread, which a store serves as it serves the one that opened it."""
    import asyncio

    import anthropic

    from eventstore import InvalidEvent
    from threadlog.live import rerun

    store = Store(tmp_path / "t.db")
    t = store.create_thread(title="t", model=MODEL)
    store.append_message(t, "user", "Hello")  # a fork point for the rerun: after the first message
    async_client = anthropic.AsyncAnthropic(api_key="test", base_url=api.url)
    for call in (lambda: run_turn(store, t, "hi", async_client), lambda: rerun(store, t, 2, async_client)):
        with pytest.raises(InvalidEvent, match=r"client: is an async client \(AsyncAnthropic\).*asyncio.to_thread"):
            call()
    with pytest.raises(InvalidEvent, match="client: must be an anthropic.Anthropic client, not str"):
        run_turn(store, t, "hi", "sk-not-a-client")  # type: ignore[arg-type]
    assert store.head(t) == 2 and not api.requests and len(store.threads()) == 1

    api.reply_json(message([{"type": "text", "text": "From a thread."}]))

    async def handler() -> str:
        return (await asyncio.to_thread(run_turn, store, t, "hi", api.client())).text

    assert asyncio.run(handler()) == "From a thread."
    assert thread_state(store, t).status == "idle"
    store.close()


DEEP = json.loads('{"a":' * 150 + "1" + "}" * 150)
# Top-level fields of an answer the log cannot store as they came: nested deeper than it takes,
# a lone surrogate, a value of another type than the field it names holds. Each came beside a
# whole answer, which was refused with them ("could not be stored") or raised out of run_turn.
UNSTORABLE_FIELDS: dict[str, dict[str, Any]] = {
    "nested-too-deep": {"future_field": DEEP, "context_management": DEEP},
    "lone-surrogate": {"future_field": "\ud800", "fut\udc00": 1},
    "stop-sequence-not-text": {"stop_sequence": 5},
    "stop-details-not-an-object": {"stop_details": "refused"},
    "transformations-not-a-list": {"input_transformations": {"type": "thinking_dropped"}},
    "container-not-an-object": {"container": "container_1"},
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("fields", list(UNSTORABLE_FIELDS.values()), ids=list(UNSTORABLE_FIELDS))
def test_an_answer_beside_fields_the_log_cannot_store_is_kept_without_them(api: MessagesAPI, fields: dict[str, Any],
                                                                           stream: bool) -> None:
    if stream and ("fut\udc00" in fields or "container" in fields):  # the SDK's accumulating of the stream
        pytest.skip("the SDK cannot fold a lone surrogate into a streamed message, and warns of a container of another type")
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    kept = {"diagnostics": {"cache_miss_reason": {"type": "tools_changed"}}, "another_field": [1]}
    body = {**message([{"type": "text", "text": "Take the 9:04."}]), **kept, **fields}
    api.replies.append(streamed(raw(json.dumps(body).encode())) if stream else raw(json.dumps(body).encode()))
    turn = run_turn(store, t, "Train to Lyon?", api.client(), stream=stream)
    assert (turn.status, turn.error, turn.text) == ("ok", None, "Take the 9:04.")
    answer = turn.messages[-1].data
    assert answer["diagnostics"] == kept["diagnostics"] and answer["extra_fields"] == {"another_field": [1]}
    assert not set(fields) & set(answer)
    store.verify()
    validate_request(anthropic_request(store, t))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_error_a_proxy_answers_with_status_200_is_named(api: MessagesAPI, stream: bool) -> None:
    """A proxy that answers `{"type": "error", ...}` with status 200: the turn said "the API answered
    with a NoneType where a message ... belongs" (unstreamed) or that no message_start came
    (streamed), never which error it was."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    api.reply_json({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    turn = run_turn(store, t, "Hello", api.client(), stream=stream)
    assert turn.status == "error"
    assert turn.error == "BadAnswer: the API answered (status 200) with an error in place of a message: overloaded_error: Overloaded"
    assert_retryable(store, t)
    (api.reply_sse if stream else api.reply_json)(message([{"type": "text", "text": "Fine now."}]))
    assert run_turn(store, t, None, api.client(), stream=stream).text == "Fine now."
    store.verify()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("number", "read"), [("NaN", "nan"), ("-Infinity", "-inf"), ("1e999", "inf")])
def test_a_tool_input_holding_a_number_json_cannot_hold_is_not_run(api: MessagesAPI, stream: bool, number: str, read: str) -> None:
    """The SDK reads `NaN` (and a number past a float's range) as Python does, and the answer,
    written as JSON, read null there: the tool ran with `days=None`, arguments the model never gave."""
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL, tools=TOOLS)
    if stream:
        events = sse_events(message([use("tu_1")], "tool_use"))
        for name, data in events:
            if name == "content_block_delta":
                data["delta"]["partial_json"] = f'{{"city": "Lyon", "days": {number}}}'
        api.replies.append(Reply(200, encode_sse(events), "text/event-stream"))
    else:
        api.replies.append(raw(json.dumps(message([use("tu_1", city="Lyon", days=0)], "tool_use")).replace(
            '"days": 0', f'"days": {number}').encode()))
    calls: list[Any] = []
    turn = run_turn(store, t, "Hello", api.client(), tools={"weather": lambda **kw: calls.append(kw) or "sunny"}, stream=stream)
    assert not calls, "the tool ran with an argument the model never gave"
    assert turn.status == "error"
    assert turn.error == (f"BadAnswer: the answer's content block 0 ('tu_1') holds {read}, a number JSON cannot hold "
                          "(recorded, it would read null)")
    assert_retryable(store, t)


def test_a_character_whose_utf16_halves_came_in_two_deltas_is_one_character(api: MessagesAPI) -> None:
    """A proxy cutting text where UTF-16 does sends "\\ud83d" in one delta and "\\ude00" in the
    next: joined, they were two lone surrogates, `on_text` (`ask --stream`) printed each as its
    escape, and the store refused the whole answer."""
    events = sse_events(message([{"type": "text", "text": "x"}]))
    deltas = b"".join(b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
                      b'"delta": {"type": "text_delta", "text": "' + piece + b'"}}\n\n'
                      for piece in (b"Smile \\ud83d", b"\\ude00 and \\ud83d", b"\\udc4d."))
    api.replies.append(Reply(200, encode_sse(events[:2]) + deltas + encode_sse(events[-3:]), "text/event-stream"))
    store = Store(":memory:")
    t = store.create_thread(title="t", model=MODEL)
    seen: list[str] = []
    turn = run_turn(store, t, "Hello", api.client(), stream=True, on_text=seen.append)
    assert turn.status == "ok", turn.error
    assert "".join(seen) == turn.text == "Smile \U0001f600 and \U0001f44d."
    assert all(piece.encode("utf-8") for piece in seen)  # no piece holds half a character
    assert thread_state(store, t).messages[-1].content == [{"type": "text", "text": "Smile \U0001f600 and \U0001f44d."}]
    store.verify()
