"""`anthropic_request`: the API-valid view of a thread, deterministic, with cache breakpoints."""

from __future__ import annotations

import json
import shutil
import time
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import FORK_BOILERPLATE, InvalidEvent, Store
from projections import anthropic_request, body_digest, check_request, request_body, thread_state, validate_request
from eventstore.settings import setting_keys
from projections.request import NO_OUTPUT, api_tool_id, checkable_offsets
from tests.backends import mem_on_every_backend  # noqa: F401 (`mem`: these projections on every backend)

EXCHANGES = sorted((Path(__file__).parent / "fixtures" / "anthropic-exchanges").glob("*.json"))
MODEL = "claude-test-1"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "weather", "input": {"city": id}}


def result(id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id, "content": f"result {id}"}


def plain(kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages without the breakpoints."""
    return [{"role": m["role"], "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
            for m in kwargs["messages"]]


def breakpoints(kwargs: dict[str, Any]) -> int:
    blocks = [*kwargs.get("system", []), *kwargs.get("tools", []), *(b for m in kwargs["messages"] for b in m["content"])]
    return sum("cache_control" in b for b in blocks)


def test_a_thread_becomes_create_kwargs_that_the_sdk_accepts(mem: Store) -> None:
    t = mem.create_thread(system="You plan trips.", model=MODEL, tools=[{"name": "weather", "input_schema": {"type": "object"}}])
    mem.append_message(t, "user", "Weather in Lyon?")
    kwargs = anthropic_request(mem, t)
    assert list(kwargs) == ["max_tokens", "messages", "model", "system", "tools"]
    assert kwargs["model"] == MODEL and kwargs["max_tokens"] == 4096
    assert kwargs["system"] == [{"type": "text", "text": "You plan trips.", "cache_control": {"type": "ephemeral"}}]
    validate_request(kwargs)
    assert anthropic_request(mem, t, model="other", max_tokens=10)["model"] == "other"
    assert "cache_control" not in json.dumps(anthropic_request(mem, t, cache=False))


def test_validation_is_the_sdks_and_checks_nested_blocks() -> None:
    good = {"max_tokens": 5, "model": MODEL, "messages": [{"role": "user", "content": [text("hi")]}]}
    validate_request(good)
    with pytest.raises(InvalidEvent, match="max_tokens"):
        validate_request({**good, "max_tokens": "many"})
    nested = {**good, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text"}]}]}]}
    with pytest.raises(InvalidEvent, match="text"):
        validate_request(nested)


def asking(*messages: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"max_tokens": 5, "model": MODEL, "messages": [{"role": role, "content": content} for role, content in messages]}


SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
REFUSED_PAIRS: list[tuple[str, dict[str, Any], str]] = [
    ("tool-id-twice", asking(("user", [text("go")]), ("assistant", [use("a")]), ("user", [result("a")]), ("assistant", [use("a")]),
                             ("user", [result("a")])),
     "request.messages[3].content[0].id: tool call id 'a' is used again (messages[1].content[0] has it)"),
    ("server-tool-id-twice", asking(("user", [text("go")]), ("assistant", [text("x"), SEARCH, SEARCH])),
     "request.messages[1].content[2].id: tool call id 'srvtoolu_1' is used again (messages[1].content[1] has it)"),
    ("server-and-client-id-alike", asking(("user", [text("go")]), ("assistant", [SEARCH, use("srvtoolu_1")]),
                                          ("user", [result("srvtoolu_1")])),
     "request.messages[1].content[1].id: tool call id 'srvtoolu_1' is used again (messages[1].content[0] has it)"),
    ("result-of-no-call", asking(("user", [text("go")]), ("assistant", [use("a")]), ("user", [result("a"), result("b")])),
     "request.messages[2].content[1].tool_use_id: 'b' answers no tool_use of the message before it (messages[1])"),
    ("result-of-an-older-call", asking(("user", [text("go")]), ("assistant", [use("a")]), ("user", [result("a")]),
                                       ("assistant", [text("ok")]), ("user", [result("a")])),
     "request.messages[4].content[0].tool_use_id: 'a' answers no tool_use of the message before it (messages[3])"),
    ("result-first", asking(("user", [result("a")])),
     "request.messages[0].content[0].tool_use_id: 'a' answers no tool_use of the message before it (it is the first message)"),
    ("call-unanswered", asking(("user", [text("go")]), ("assistant", [use("a"), use("b")]), ("user", [result("b")])),
     "request.messages[1].content[0].id: tool call 'a' has no tool_result in the message after it (messages[2])"),
]


@pytest.mark.parametrize(("kwargs", "says"), [c[1:] for c in REFUSED_PAIRS], ids=[c[0] for c in REFUSED_PAIRS])
def test_validation_refuses_repeated_tool_ids_and_results_of_no_call(kwargs: dict[str, Any], says: str) -> None:
    """The SDK's schema takes a request whose tool call ids repeat, or whose tool_result answers
    no call of the message before; the API refuses both: so does `validate_request`, naming where."""
    with pytest.raises(InvalidEvent) as caught:
        validate_request(kwargs)
    assert str(caught.value) == says


def test_the_pairing_check_names_a_result_whose_call_has_no_id() -> None:
    """`check_tool_pairs` is called on messages the schema has not checked: a call without an
    id answered by a result is named, not a KeyError."""
    from projections.request import check_tool_pairs

    with pytest.raises(InvalidEvent, match=r"messages\[2\]\.content\[1\]\.tool_use_id: 'a' answers no tool_use"):
        check_tool_pairs([{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]},
                          {"role": "user", "content": [{"type": "tool_result"}, {"type": "tool_result", "tool_use_id": "a"}]}])



@pytest.mark.parametrize(("call_id", "answered"), [(["a"], ["a"]), ({"a": 1}, "a"), ("a", {"a": 1}), (None, ["a"])])
def test_the_pairing_check_names_an_id_that_is_no_text(call_id: Any, answered: Any) -> None:
    """An id given as a list or an object (which the schema refuses, but `check_tool_pairs` is
    called on messages it has not checked) is named as unpaired, not a TypeError."""
    from projections.request import check_tool_pairs

    unpaired = r"^request\.messages\[[12]\]\.content\[0\]\.(id: tool call .* has no tool_result|tool_use_id: .* answers no tool_use)"
    with pytest.raises(InvalidEvent, match=unpaired):
        check_tool_pairs([{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "tool_use", "id": call_id}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": answered}]}])


def test_the_pairing_check_of_many_calls_takes_time_linear_in_them() -> None:
    """An answer making 10,000 calls, and the message answering them all: each result was
    looked for among every call of the message before it, once per result (4,000 pairs took
    1.4 s, 8,000 5.7 s)."""
    from projections.request import check_tool_pairs

    def pairs(n: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use(f"t{i}") for i in range(n)]},
                {"role": "user", "content": [result(f"t{i}") for i in range(n)]}]

    small, large = pairs(1_000), pairs(10_000)
    took = []
    for messages in (small, large):
        start = time.perf_counter()
        check_tool_pairs(messages)
        took.append(time.perf_counter() - start)
    assert took[1] < max(took[0], 0.002) * 40, took


def test_validation_takes_paired_calls_and_ids_used_once() -> None:
    validate_request(asking(("user", [text("go")]), ("assistant", [SEARCH, use("a"), use("b")]), ("user", [result("b"), result("a")]),
                            ("assistant", [use("c")])))  # the last call is answered by the next request
    validate_request(asking(("user", "go"), ("assistant", "plain text")))  # content as text holds no block


GOOD = {"max_tokens": 5, "model": MODEL, "messages": [{"role": "user", "content": [text("hi")]}]}
DEEP: dict[str, Any] = {}
for _ in range(1200):
    DEEP = {"a": DEEP}
WRONG_KINDS: list[tuple[str, Any, str]] = [
    # taken: request_body(5) gave b"5", and stream="no" streamed
    ("body-of-an-int", lambda: request_body(5), "kwargs: must be a request's arguments (a dict, as anthropic_request gives them), not int"),
    ("body-of-a-list", lambda: request_body([GOOD]), "kwargs: must be a request's arguments"),
    ("body-stream-as-text", lambda: request_body(GOOD, "no"), "stream: must be True or False, not 'no'"),
    # TypeError, ValueError, RecursionError from json
    ("body-holding-a-set", lambda: request_body({**GOOD, "metadata": {"tags": {"a"}}}),
     "kwargs: not a body JSON can hold (Object of type set is not JSON serializable)"),
    ("body-holding-nan", lambda: request_body({**GOOD, "temperature": float("nan")}), "kwargs: not a body JSON can hold (Out of range float"),
    ("body-holding-a-lone-surrogate", lambda: request_body({**GOOD, "model": "m\ud800"}), "kwargs: not a body JSON can hold"),
    ("body-nested-too-deeply", lambda: request_body({**GOOD, "metadata": DEEP}), "kwargs: nested too deeply to be JSON"),
    # TypeError from hashlib
    ("digest-of-text", lambda: body_digest('{"a":1}'), "body: must be a request body as bytes (request_body gives it), not str"),
    ("digest-of-none", lambda: body_digest(None), "body: must be a request body as bytes"),
    # TypeError from the adapter's cache (unhashable), or taken as true
    ("validate-beta-a-list", lambda: validate_request(GOOD, [[1]]), "beta: must be True or False, not [[1]]"),
    ("validate-beta-a-dict", lambda: validate_request(GOOD, {}), "beta: must be True or False, not {}"),
    ("validate-beta-as-text", lambda: validate_request(GOOD, "no"), "beta: must be True or False, not 'no'"),
]


@pytest.mark.parametrize(("call", "says"), [c[1:] for c in WRONG_KINDS], ids=[c[0] for c in WRONG_KINDS])
def test_the_pure_functions_refuse_arguments_of_the_wrong_kind_by_name(call: Any, says: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        call()
    assert str(caught.value).startswith(says), str(caught.value)
    assert len(str(caught.value)) < 300


def test_the_pure_functions_take_what_they_document() -> None:
    body = request_body(GOOD)
    assert json.loads(request_body(GOOD, True)) == {**GOOD, "stream": True}
    assert body_digest(body) == body_digest(bytearray(body)) and body_digest(body).startswith("sha256:")
    validate_request(GOOD, True)


def test_the_view_is_made_api_valid(mem: Store) -> None:
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "one")
    mem.append_message(t, "user", [text("  "), text("two")])          # merged; the blank block dropped
    mem.append_message(t, "assistant", [text("calling"), use("a"), use("b")])
    mem.append_message(t, "user", [result("a")])                        # b never answered
    mem.append_message(t, "assistant", [text("")])                      # an empty answer
    mem.append_message(t, "user", "three")
    kwargs = anthropic_request(mem, t)
    assert plain(kwargs) == [
        {"role": "user", "content": [text("one"), text("two")]},
        {"role": "assistant", "content": [text("calling"), use("a")]},
        {"role": "user", "content": [result("a"), text("three")]},
    ]
    validate_request(kwargs)


def test_a_trailing_tool_call_without_result_is_left_out(mem: Store) -> None:
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [use("a")])
    assert plain(anthropic_request(mem, t)) == [{"role": "user", "content": [text("go")]}]


@pytest.mark.parametrize("which", ["assistant", "user"])
def test_a_redacted_tool_exchange_stays_valid(mem: Store, which: str) -> None:
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "go")
    asked = mem.append_message(t, "assistant", [text("secret plan"), use("a")])
    answered = mem.append_message(t, "user", [result("a")])
    mem.append_message(t, "assistant", "done")
    mem.redact((asked if which == "assistant" else answered).position, reason="leak", actor="ops")
    kwargs = anthropic_request(mem, t)
    validate_request(kwargs)
    sent = plain(kwargs)
    uses = [b["id"] for m in sent for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in sent for b in m["content"] if b["type"] == "tool_result"]
    assert uses == results  # never an orphan result, never a call without its result
    assert ("secret plan" if which == "assistant" else "result a") not in json.dumps(kwargs)


def test_same_thread_and_offset_give_the_same_bytes(file_store: Store) -> None:
    t = file_store.create_thread(system="s", model=MODEL)
    for i in range(5):
        file_store.append_message(t, "user", f"q{i}")
        file_store.append_message(t, "assistant", [text(f"a{i}"), use(f"t{i}")])
        file_store.append_message(t, "user", [result(f"t{i}")])
    at = file_store.head(t) - 3
    first = request_body(anthropic_request(file_store, t, at))
    file_store.append_message(t, "user", "later")
    with Store(file_store.path) as again:
        assert request_body(anthropic_request(again, t, at)) == first


def test_compaction_and_a_note_fork_shape_the_request(mem: Store) -> None:
    t = mem.create_thread(system="s", model=MODEL)
    for i in range(4):
        mem.append_message(t, "user", f"q{i}")
        mem.append_message(t, "assistant", f"a{i}")
    mem.append(t, [{"type": "compaction.recorded", "data": {"summary": "Earlier: four questions.", "through_offset": 7}}])
    kwargs = anthropic_request(mem, t)
    assert plain(kwargs)[0] == {"role": "user", "content": [text("Earlier: four questions."), text("q3")]}
    note = mem.fork(t, context="note", transcript="/tmp/t.md")
    mem.append_message(note, "user", "go on")
    sent = plain(anthropic_request(mem, note))
    assert len(sent) == 1 and "/tmp/t.md" in sent[0]["content"][0]["text"] and sent[0]["content"][1] == text("go on")


def test_a_fork_marks_where_its_inherited_history_ends(mem: Store) -> None:
    t = mem.create_thread(system="s", model=MODEL)
    for i in range(3):
        mem.append_message(t, "user", f"q{i}")
        mem.append_message(t, "assistant", f"a{i}")
    forks = [mem.fork(t) for _ in range(2)]
    for i, f in enumerate(forks):
        mem.append_message(f, "user", f"branch {i}")
    sent = [anthropic_request(mem, f) for f in forks]
    for kwargs in sent:
        marked = [(i, j) for i, m in enumerate(kwargs["messages"]) for j, b in enumerate(m["content"]) if "cache_control" in b]
        assert marked == [(5, 0), (6, 0)]  # the parent's last block, and the tail
        assert breakpoints(kwargs) == 3
    first, second = (request_body(k) for k in sent)
    cut = first.index(b"branch 0")
    assert second[:cut] == first[:cut]


def test_stored_breakpoints_never_push_past_the_limit(mem: Store) -> None:
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    t = mem.create_thread(system=[marked, marked], model=MODEL, tools=[{"name": "w", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}])
    for _ in range(6):
        mem.append_message(t, "user", [marked])
        mem.append_message(t, "assistant", [marked])
    assert breakpoints(anthropic_request(mem, t)) == 2
    assert breakpoints(anthropic_request(mem, t, cache=False)) == 0


def test_a_thread_without_a_model_or_messages_is_refused(mem: Store) -> None:
    t = mem.create_thread()
    with pytest.raises(InvalidEvent, match="model"):
        anthropic_request(mem, t)
    with pytest.raises(InvalidEvent, match="no message"):
        anthropic_request(mem, t, model=MODEL)


@pytest.mark.parametrize("extra_tools", [5, "search", {"name": "search"}, ["search"], [{"name": "a"}, 3]],
                         ids=["int", "text", "one-dict", "list-of-text", "list-with-an-int"])
def test_extra_tools_that_are_no_list_of_definitions_are_refused_by_name(mem: Store, extra_tools: Any) -> None:
    """They were spread into the tools unchecked: TypeError ('Value after * must be an iterable',
    "'str' object is not a mapping")."""
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "hi")
    with pytest.raises(InvalidEvent, match="^extra_tools: must be a list of tool definitions"):
        anthropic_request(mem, t, extra_tools=extra_tools)


# Random histories: whatever the log holds, the request is valid and within the limit.
_blocks = st.lists(st.sampled_from(["text", "blank", "use", "result", "thinking"]), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), _blocks), min_size=1, max_size=12), st.booleans())
def test_any_history_gives_a_valid_request(history: list[tuple[str, list[str]]], thinking: bool) -> None:
    with Store(":memory:") as store:
        t = store.create_thread(system="s", model=MODEL, thinking=THINKING if thinking else None)
        waiting: list[str] = []
        count = 0
        for role, kinds in history:
            content: list[dict[str, Any]] = []
            for kind in kinds:
                if kind == "text" or (kind == "use" and role == "user") or (kind == "result" and (role == "assistant" or not waiting)):
                    content.append(text("t"))
                elif kind == "blank":
                    content.append(text(" "))
                elif kind == "thinking":
                    content.append({"type": "thinking", "thinking": "hm", "signature": "sig"} if role == "assistant" else text("t"))
                elif kind == "use":
                    count += 1
                    waiting.append(f"u{count}")
                    content.append(use(f"u{count}"))
                else:
                    content.append(result(waiting.pop(0)))
            store.append_message(t, role, content)
        try:
            kwargs = anthropic_request(store, t)
        except InvalidEvent:
            return  # nothing but blanks: no message to send
        validate_request(kwargs)
        assert api_takes_its_thinking(kwargs)
        sent = kwargs["messages"]
        assert all(a["role"] != b["role"] for a, b in zip(sent, sent[1:]))
        for i, message in enumerate(sent):
            uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
            answered = {b["tool_use_id"] for b in sent[i + 1]["content"] if b["type"] == "tool_result"} if i + 1 < len(sent) else set()
            assert uses <= answered
            asked = {b["id"] for b in sent[i - 1]["content"] if b["type"] == "tool_use"} if i else set()
            assert {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"} <= asked
        assert breakpoints(kwargs) <= 4


API_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # what the Messages API takes for a tool_use id


def test_tool_ids_the_api_refuses_are_sent_as_ids_it_takes(mem: Store) -> None:
    # Another provider's ids (Kimi's `functions.bash:0`), an empty one, and two that differ only
    # where the API's characters end: each is sent as its own valid id, call and result alike.
    ids = ["functions.bash:0", "", "a.b", "a:b", "toolu_01", "x" * 300]
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [use(i) for i in ids])
    mem.append_message(t, "user", [result(i) for i in ids])
    sent = anthropic_request(mem, t)["messages"]
    calls = [b["id"] for b in sent[1]["content"]]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == calls
    assert all(API_TOOL_ID.match(i) for i in calls) and len(set(calls)) == len(ids)
    assert calls[4] == "toolu_01"  # a valid id is sent as it is stored
    assert all(len(i) <= 57 for i in calls[:4]) and calls[5] == "x" * 300  # mapped ids stay short
    assert [b["input"] for b in sent[1]["content"]] == [{"city": i} for i in ids]  # only the id changes
    stored = [b["id"] for b in thread_state(mem, t).messages[1].content]
    assert stored == ids  # the log keeps what was written
    validate_request(anthropic_request(mem, t))


@pytest.mark.parametrize("tool_id", ["toolu_01", "functions.bash:0"])
def test_a_tool_id_used_again_after_its_result_is_sent_once_per_call(mem: Store, tool_id: str) -> None:
    """The log takes an id again once its result is in (another provider's `functions.bash:0`
    repeats every turn); sent twice in one request, the API refuses it: tool_use ids are unique."""
    t = mem.create_thread(model=MODEL)
    for question in ("ls", "pwd", "date"):
        mem.append_message(t, "user", question)
        mem.append_message(t, "assistant", [{"type": "tool_use", "id": tool_id, "name": "bash", "input": {"cmd": question}}])
        mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": tool_id, "content": f"out of {question}"}])
    sent = anthropic_request(mem, t)["messages"]
    calls = [(b["id"], b["input"]["cmd"]) for m in sent for b in m["content"] if b["type"] == "tool_use"]
    results = [(b["tool_use_id"], b["content"]) for m in sent for b in m["content"] if b["type"] == "tool_result"]
    assert len({i for i, _ in calls}) == 3 and all(API_TOOL_ID.match(i) for i, _ in calls)
    assert [(i, f"out of {cmd}") for i, cmd in calls] == results  # each result still answers its call
    assert anthropic_request(mem, t) == anthropic_request(mem, t)


def test_a_tool_results_own_blocks_lose_blank_texts_and_breakpoints(mem: Store) -> None:
    """Only top-level blocks were cleaned: a tool's blocks with `cache_control` pushed the request
    past the API's 4 breakpoints, and an empty text in a result was sent (the API refuses both)."""
    t = mem.create_thread(system="sys", model=MODEL, tools=[{"name": "w", "input_schema": {"type": "object"}}])
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [use("tu_1"), use("tu_2")])
    marked = {"type": "text", "text": "part", "cache_control": {"type": "ephemeral"}}
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu_1", "content": [marked, marked, text(""), marked]},
                                   {"type": "tool_result", "tool_use_id": "tu_2", "content": [text(""), text(" ")]}])
    kwargs = anthropic_request(mem, t)
    assert breakpoints(kwargs) == 2  # the system prompt's and the tail's
    first, second = kwargs["messages"][2]["content"]
    assert first["content"] == [text("part")] * 3
    assert "content" not in second and second["tool_use_id"] == "tu_2"
    validate_request(kwargs)


def test_a_tool_results_own_breakpoint_is_kept_while_the_request_stays_within_four(mem: Store) -> None:
    """As earlier releases sent it: a request they sent, and the API took, still rebuilds to the
    same bytes (`check_request` of a turn recorded then)."""
    t = mem.create_thread(system="sys", model=MODEL, tools=[{"name": "w", "input_schema": {"type": "object"}}])
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [use("tu_1")])
    marked = {"type": "text", "text": "part", "cache_control": {"type": "ephemeral"}}
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu_1", "content": [marked]}])
    kwargs = anthropic_request(mem, t)
    assert breakpoints(kwargs) == 2 and kwargs["messages"][2]["content"][0]["content"] == [marked]  # 3 with the nested one
    assert "cache_control" not in json.dumps(anthropic_request(mem, t, cache=False))


def test_a_sub_agents_shared_breakpoint_is_found_when_its_call_id_is_sent_mapped(mem: Store) -> None:
    """The siblings' shared breakpoint is on the placeholder result that opens each sub-agent's
    messages, found by the stored block's identity; a result sent with its id mapped is a copy,
    and the breakpoint moved to the block before it (the siblings' prefixes then differed)."""
    t = mem.create_thread(system="s", model=MODEL)
    mem.append_message(t, "user", "Plan it.")
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "functions.Agent:0", "name": "Agent", "input": {}}])
    kids = mem.fan_out(t, ["Look at trains.", "Look at ferries."])
    for kid in kids:
        sent = anthropic_request(mem, kid)["messages"]
        marked = [(i, j, b["type"]) for i, m in enumerate(sent) for j, b in enumerate(m["content"]) if "cache_control" in b]
        assert marked[0] == (2, 0, "tool_result") and sent[2]["content"][0]["tool_use_id"] == api_tool_id("functions.Agent:0")


def searched(tool_id: str, query: str) -> list[dict[str, Any]]:
    """A web search the API ran, as its answer holds it: the call, then its result."""
    return [{"type": "server_tool_use", "id": tool_id, "name": "web_search", "input": {"query": query}},
            {"type": "web_search_tool_result", "tool_use_id": tool_id,
             "content": [{"type": "web_search_result", "url": f"https://example.com/{query}", "title": query,
                          "encrypted_content": "e", "page_age": None}]}]


def test_a_server_tool_id_used_again_is_sent_once_per_call_with_its_result(mem: Store) -> None:
    """A server tool call's id that an earlier one used (a server repeating itself, in another
    answer or in the same one) was sent twice in one request, which the API refuses; it is sent
    renamed as a repeated tool_use id is, each result, and a call made from its code, following."""
    t = mem.create_thread(model=MODEL, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    mem.append_message(t, "user", "Lyon?")
    mem.append_message(t, "assistant", [*searched("srvtoolu_1", "lyon"), text("Sunny.")])
    mem.append_message(t, "user", "Paris and Nice?")
    running = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {"code": "x"}}
    from_code = {**use("toolu_9"), "caller": {"type": "code_execution_20260120", "tool_id": "srvtoolu_1"}}
    mem.append_message(t, "assistant", [*searched("srvtoolu_1", "paris"), *searched("srvtoolu_1", "nice"), running, from_code])
    mem.append_message(t, "user", [result("toolu_9")])
    kwargs = anthropic_request(mem, t)
    first, second = (m["content"] for m in kwargs["messages"] if m["role"] == "assistant")
    calls = [b["id"] for b in [*first, *second] if b["type"] == "server_tool_use"]
    assert calls[0] == "srvtoolu_1" and len(set(calls)) == 4
    assert all(re.fullmatch("srvtoolu_[a-zA-Z0-9_]+", i) for i in calls)  # what the API takes for a server tool's id
    answered = [b["tool_use_id"] for b in [*first, *second] if b["type"] == "web_search_tool_result"]
    assert answered == calls[:3]  # each result follows its own call
    assert [b["content"][0]["title"] for b in [*first, *second] if b["type"] == "web_search_tool_result"] == ["lyon", "paris", "nice"]
    assert second[-1]["caller"]["tool_id"] == calls[3] and second[-1]["id"] == "toolu_9"
    assert [b["id"] for b in thread_state(mem, t).messages[3].content if "id" in b][:3] == ["srvtoolu_1"] * 3  # the log keeps what came
    validate_request(kwargs)
    assert anthropic_request(mem, t) == kwargs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=50), min_size=1, max_size=5, unique=True))
def test_any_tool_ids_pair_up_in_the_request(ids: list[str]) -> None:
    with Store(":memory:") as store:
        t = store.create_thread(model=MODEL)
        store.append_message(t, "user", "go")
        store.append_message(t, "assistant", [use(i) for i in ids])
        store.append_message(t, "user", [result(i) for i in reversed(ids)])
        sent = anthropic_request(store, t)["messages"]
    calls = [b["id"] for b in sent[1]["content"]]
    assert len(set(calls)) == len(ids) and all(API_TOOL_ID.match(i) for i in calls)
    assert [b["tool_use_id"] for b in sent[2]["content"]] == calls[::-1]


# -- recorded exchanges with the real API ------------------------------------------------------


def _body(exchange: dict[str, Any]) -> dict[str, Any] | None:
    body = exchange["request"].get("body")
    body = json.loads(body) if isinstance(body, str) else body
    return body if isinstance(body, dict) and "messages" in body else None


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    return [text(content)] if isinstance(content, str) else [{k: v for k, v in b.items() if k != "cache_control"} for b in content]


def _recorded_settings(body: dict[str, Any]) -> dict[str, Any]:
    """The recorded request's parameters a thread holds as its settings: those the SDK's
    `client.messages.create` declares and threadlog does not send from elsewhere (not the beta
    client's `context_management`, nor a top-level `cache_control`: the request places its own)."""
    return {key: value for key, value in body.items() if key in setting_keys()}


def _recorded_thread(store: Store, body: dict[str, Any]) -> str:
    return store.create_thread(system=body.get("system"), model=body["model"], tools=body.get("tools"),
                               thinking=body.get("thinking"), settings=_recorded_settings(body) or None)


def _unmarked(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A request without its breakpoints (threadlog places its own: see the module doc)."""
    out = {k: v for k, v in kwargs.items() if k != "cache_control"}
    out["messages"] = [{"role": m["role"], "content": _as_blocks(m["content"])} for m in kwargs["messages"]]
    for key in ("system", "tools"):
        if isinstance(kwargs.get(key), list):
            out[key] = _as_blocks(kwargs[key])
    return out


def _as_rebuilt(body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The recorded request as `anthropic_request` gives it, without breakpoints: the system
    prompt as a text block, consecutive messages of one role as one (the API's own reading of
    them), no `stream` (a turn's), and the `max_tokens` a count_tokens request has none of."""
    recorded = _unmarked({k: v for k, v in body.items() if k in (*kwargs, "system", "tools", "thinking", *setting_keys())})
    if isinstance(body.get("system"), str):
        recorded["system"] = [text(body["system"])]
    merged: list[dict[str, Any]] = []
    for message in recorded["messages"]:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {"role": message["role"], "content": merged[-1]["content"] + message["content"]}
        else:
            merged.append(message)
    recorded["messages"] = merged
    recorded.setdefault("max_tokens", kwargs["max_tokens"])
    return recorded


@pytest.mark.parametrize("path", EXCHANGES, ids=[p.stem for p in EXCHANGES])
def test_recorded_requests_rebuild_and_validate(mem: Store, path: Path) -> None:
    """Each recorded request, loaded into a thread (its system, tools, thinking and settings
    as the thread's), comes back as the request the API got, and with the response appended
    as the next request, validates against the SDK's types."""
    for exchange in json.loads(path.read_text(encoding="utf-8")):
        body = _body(exchange)
        if body is None:
            continue
        t = _recorded_thread(mem, body)
        try:
            for message in body["messages"]:
                mem.append_message(t, message["role"], message["content"])
        except InvalidEvent as error:
            # The one the API refused (an orphan tool_result) is refused at append time too.
            assert exchange["response"].get("status_code", exchange["response"].get("status")) == 400
            assert "not pending" in str(error)
            continue
        beta = "context_management" in body  # a beta feature: its blocks are in the beta types only
        kwargs = anthropic_request(mem, t, max_tokens=body.get("max_tokens"))
        validate_request(kwargs, beta)
        assert _unmarked(kwargs) == _as_rebuilt(body, kwargs)
        reply = exchange["response"].get("body")
        if isinstance(reply, dict) and reply.get("type") == "message":
            mem.append_message(t, "assistant", reply["content"] or "")
            validate_request(anthropic_request(mem, t), beta)


def _exchanges(path: Path) -> list[tuple[dict[str, Any], Any]]:
    """The recorded Messages API requests of `path` with their responses' bodies."""
    out = []
    for exchange in json.loads(path.read_text(encoding="utf-8")):
        body = _body(exchange)
        if body is not None:
            out.append((body, exchange["response"].get("body")))
    return out


def _chained(path: Path) -> bool:
    """Whether each recorded request goes on from the one before: its messages, the answer to
    it, then what the user or the tools said (one conversation, recorded call by call); or a
    streamed answer alone, to store as a streamed turn does."""
    exchanges = _exchanges(path)
    for (before, answer), (after, _) in zip(exchanges, exchanges[1:]):
        if not isinstance(answer, dict) or answer.get("type") != "message":
            return False
        held = [*before["messages"], {"role": "assistant", "content": answer["content"]}]
        if [_plainly(m) for m in after["messages"][:len(held)]] != [_plainly(m) for m in held]:
            return False
    return len(exchanges) > 1 or (len(exchanges) == 1 and isinstance(exchanges[0][1], dict) and "string" in exchanges[0][1])


def _plainly(message: dict[str, Any]) -> dict[str, Any]:
    """A recorded message as it means: no breakpoints, and no `is_error: false` (the default a
    tool result that did not fail leaves out)."""
    content = [{k: v for k, v in b.items() if k != "cache_control" and not (k == "is_error" and v is False)}
               for b in _as_blocks(message["content"])]
    return {"role": message["role"], "content": content}


CHAINS = [path for path in EXCHANGES if _chained(path)]


@pytest.mark.parametrize("path", CHAINS, ids=[p.stem for p in CHAINS])
def test_recorded_answers_stored_by_live_turns_send_the_recorded_next_requests(file_store: Store, path: Path) -> None:
    """The recorded conversation run again by live turns against the recorded answers: each
    answer stored as a live turn stores it (thinking with its signature, tool calls), the tools
    answering as recorded, every request sent is the one the API got next (the blocks it
    requires carried back, each tool result after its call), breakpoints aside."""
    from messages_api import MessagesAPI, Reply

    from threadlog import run_turn

    exchanges = _exchanges(path)
    first = exchanges[0][0]
    t = _recorded_thread(file_store, first)
    for message in first["messages"][:-1]:
        file_store.append_message(t, message["role"], message["content"])
    said = {b["tool_use_id"]: b.get("content") for body, _ in exchanges for m in body["messages"]
            for b in _as_blocks(m["content"]) if b["type"] == "tool_result"}
    calls = {(b["name"], json.dumps(b["input"], sort_keys=True)): said.get(b["id"]) for _, answer in exchanges
             if isinstance(answer, dict) and answer.get("type") == "message" for b in answer["content"] if b["type"] == "tool_use"}
    tools = {name: (lambda name: lambda **given: calls[name, json.dumps(given, sort_keys=True)])(name) for name, _ in calls}
    with MessagesAPI() as api:
        for body, answer in exchanges:
            if isinstance(answer, dict) and "string" in answer:  # a streamed answer, as its events came
                api.replies.append(Reply(200, answer["string"].encode(), "text/event-stream"))
            else:
                api.reply_json(answer)
        for body, _ in exchanges:
            last = body["messages"][-1]
            if last["role"] == "user" and all(b["type"] == "tool_result" for b in _as_blocks(last["content"])):
                continue  # the tools' results: the turn before goes on with them
            turn = run_turn(file_store, t, last["content"], api.client(0, 10.0), tools=tools,
                            stream=body.get("stream", False), max_tokens=body["max_tokens"])
            assert turn.status == "ok", turn.error
        sent = [request.json for request in api.requests]
    assert len(sent) == len(exchanges)
    for got, (body, _) in zip(sent, exchanges):
        recorded = _as_rebuilt(body, got)
        recorded["messages"] = [_plainly(m) for m in recorded["messages"]]
        assert _unmarked(got) == recorded
    state = thread_state(file_store, t)
    kwargs = anthropic_request(file_store, t)
    validate_request(kwargs)
    answer = exchanges[-1][1]
    if isinstance(answer, dict) and answer.get("type") == "message":  # the last answer, stored, comes back as it came
        assert _plainly({"role": "assistant", "content": state.messages[-1].content}) == _plainly(answer)
    elif isinstance(answer, dict):  # a streamed one: its blocks as its deltas said them, the signature with its thinking
        deltas = [json.loads(line[6:])["delta"] for line in answer["string"].splitlines()
                  if line.startswith("data: ") and '"content_block_delta"' in line]
        stored = {b["type"]: b for b in state.messages[-1].content}
        assert stored["thinking"]["thinking"] == "".join(d.get("thinking", "") for d in deltas)
        assert stored["thinking"]["signature"] == "".join(d.get("signature", "") for d in deltas) != ""
        assert stored["text"]["text"] == "".join(d.get("text", "") for d in deltas)
        assert kwargs["messages"][-1]["content"][0] == {k: v for k, v in stored["thinking"].items() if k != "cache_control"}


THINKING = {"type": "enabled", "budget_tokens": 2048}
SIGNED = {"type": "thinking", "thinking": "Let me check.", "signature": "c2ln"}


def api_takes_its_thinking(kwargs: dict[str, Any]) -> bool:
    """The Messages API's rule for thinking in a tool loop: with thinking enabled, a request
    whose last message returns tool results is refused unless the assistant turn those results
    belong to (after the last user message holding no tool result) opens with a thinking block
    ("a final `assistant` message must start with a thinking block")."""
    messages = kwargs["messages"]
    if (kwargs.get("thinking") or {}).get("type") != "enabled" or not any(
            b["type"] == "tool_result" for b in messages[-1]["content"]) or messages[-1]["role"] != "user":
        return True
    opening = None
    for message in reversed(messages):
        if message["role"] == "assistant":
            opening = message
        elif not any(b["type"] == "tool_result" for b in message["content"]):
            break
    return opening is None or opening["content"][0]["type"] in ("thinking", "redacted_thinking")


def test_a_threads_thinking_goes_in_every_request_of_it_and_its_forks(mem: Store) -> None:
    """The sub-agent design: a fork child inherits the parent's thinking configuration, so
    siblings' requests keep one prefix (a thread had no way to hold one)."""
    t = mem.create_thread(system="You plan trips.", model=MODEL, tools=[{"name": "weather", "input_schema": {"type": "object"}}],
                          thinking=THINKING)
    mem.append_message(t, "user", "Weather in Lyon?")
    kwargs = anthropic_request(mem, t)
    assert list(kwargs) == ["max_tokens", "messages", "model", "system", "thinking", "tools"]  # the SDK's body order
    assert kwargs["thinking"] == THINKING and kwargs["max_tokens"] == 4096 + 2048  # the API wants max_tokens above the budget
    assert anthropic_request(mem, t, max_tokens=3000)["max_tokens"] == 3000
    validate_request(kwargs)
    mem.append_message(t, "assistant", [SIGNED, {"type": "text", "text": "Asking."},  # as a thinking turn answers
                                        {"type": "tool_use", "id": "tu_1", "name": "Agent", "input": {}}])
    fork, note = mem.fork(t, at=2), mem.fork(t, at=2, context="note")
    kids = mem.fan_out(t, ["Look at trains.", "Look at ferries."])
    for child in (fork, note, *kids):
        assert anthropic_request(mem, child)["thinking"] == THINKING
        assert thread_state(mem, child).thinking == THINKING
    plain = mem.create_thread(model=MODEL)
    mem.append_message(plain, "user", "hi")
    assert "thinking" not in anthropic_request(mem, plain) and thread_state(mem, plain).thinking is None


@pytest.mark.parametrize(("thinking", "where", "why"), [
    ({"type": "enabled"}, "thinking.budget_tokens", "Field required"),
    ({"type": "enabled", "budget_tokens": "lots"}, "thinking.budget_tokens", "valid integer"),
    ({"type": "sometimes"}, "thinking.type", "unknown thinking type 'sometimes'; expected one of"),
    ({"budget_tokens": 10}, "thinking.type", "unknown thinking type None"),
    ([THINKING], "thinking", "valid dictionary"),
    # Stored and sent as given, so nothing is coerced: these were taken, and sent as they were.
    ({"type": "enabled", "budget_tokens": "2048"}, "thinking.budget_tokens", "valid integer"),
    ({"type": "enabled", "budget_tokens": 2048.0}, "thinking.budget_tokens", "valid integer"),
    ({"type": "enabled", "budget_tokens": True}, "thinking.budget_tokens", "valid integer"),
    ({"type": "disabled", "budget_tokens": 50_000}, "thinking.budget_tokens", "takes only type"),
    ({**THINKING, "bogus": 1}, "thinking.bogus", "takes only budget_tokens, display, type"),
    ({"type": "enabled", "budget_tokens": 5}, "thinking.budget_tokens", "at least 1,024"),
])
def test_a_thinking_configuration_the_sdk_does_not_know_is_refused(mem: Store, thinking: Any, where: str, why: str) -> None:
    before = mem.last_position()
    with pytest.raises(InvalidEvent) as refused:
        mem.create_thread(model=MODEL, thinking=thinking)
    assert refused.value.field.endswith(where) and why in str(refused.value)
    assert mem.last_position() == before


@pytest.mark.parametrize("max_tokens", [2048, 1024, 1])
def test_a_max_tokens_at_or_below_the_thinking_budget_is_built_as_given(mem: Store, max_tokens: int) -> None:
    """The request goes to whichever client the caller has: under the interleaved-thinking beta
    the API takes a budget above max_tokens (a live turn, which knows its client, refuses it
    otherwise: test_live). A max_tokens that is no whole number >= 1 is refused by name."""
    t = mem.create_thread(model=MODEL, thinking=THINKING)
    mem.append_message(t, "user", "Weather in Lyon?")
    fork = mem.fork(t)  # inherits the budget
    for thread in (t, fork):
        assert anthropic_request(mem, thread, max_tokens=max_tokens)["max_tokens"] == max_tokens
    for bad in (0, -1, 2048.0, True, "3000"):
        with pytest.raises(InvalidEvent, match="^max_tokens: must be a whole number >= 1"):
            anthropic_request(mem, t, max_tokens=bad)


def test_a_fork_that_turns_thinking_on_inside_a_tool_loop_sends_it_disabled_until_the_next_turn(mem: Store) -> None:
    """The loop's answer had no thinking block, so the API refused the fork's request with
    thinking enabled; a tool loop is one turn, and thinking changes between turns only."""
    t = mem.create_thread(model=MODEL, tools=[{"name": "weather", "input_schema": {"type": "object"}}])
    mem.append_message(t, "user", "Weather in Lyon?")
    mem.append_message(t, "assistant", [text("Checking."), use("tu_1")])
    waiting = mem.fork(t, config={"thinking": THINKING}, unanswered="keep")  # at the call, its result not in yet
    mem.append_message(t, "user", [result("tu_1")])
    answered = mem.fork(t, config={"thinking": THINKING})  # at the result, the answer not in yet
    mem.append_message(waiting, "user", [result("tu_1")])
    for fork in (waiting, answered):
        kwargs = anthropic_request(mem, fork)
        assert kwargs["thinking"] == {"type": "disabled"} and api_takes_its_thinking(kwargs)
        validate_request(kwargs)
        mem.append_message(fork, "assistant", "Sunny.")
        mem.append_message(fork, "user", "And in Nice?")  # the next turn thinks
        kwargs = anthropic_request(mem, fork)
        assert kwargs["thinking"] == THINKING and kwargs["max_tokens"] == 4096 + 2048
        assert anthropic_request(mem, fork, at=thread_state(mem, fork).length - 2)["thinking"] == {"type": "disabled"}  # as it was
    loop = mem.fork(answered, config={"thinking": {"type": "disabled"}})  # thinking off: nothing to change
    assert anthropic_request(mem, loop)["thinking"] == {"type": "disabled"}


def test_a_redacted_tool_loop_answer_sends_thinking_disabled_until_the_next_turn(mem: Store) -> None:
    """Its skeleton keeps the tool call, not the thinking block, so the loop's turn no longer
    opened with one, and the API refused every request of the thread until the loop ended."""
    t = mem.create_thread(model=MODEL, thinking=THINKING)
    mem.append_message(t, "user", "Weather in Lyon?")
    call = mem.append_message(t, "assistant", [SIGNED, text("Checking."), use("tu_1")])
    mem.append_message(t, "user", [result("tu_1")])
    assert anthropic_request(mem, t)["thinking"] == THINKING  # the loop opened with thinking
    mem.redact(call.position, reason="personal data", actor="ops")
    kwargs = anthropic_request(mem, t)
    assert kwargs["thinking"] == {"type": "disabled"} and api_takes_its_thinking(kwargs)
    assert kwargs["messages"][1]["content"][-1]["id"] == "tu_1"  # the exchange is kept
    validate_request(kwargs)
    mem.append_message(t, "assistant", [SIGNED, text("Sunny.")])
    mem.append_message(t, "user", "And in Nice?")
    assert anthropic_request(mem, t)["thinking"] == THINKING  # an earlier turn needs no thinking block


@pytest.mark.parametrize(("config", "where"), [
    ({"tools": [{"name": "weather"}]}, "tools[0]"),
    ({"tools": [{"name": "weather", "input_schema": "an object"}]}, "tools[0]"),
    ({"tools": [{"x": 1}]}, "tools[0]"),
    ({"tools": ["weather"]}, "tools[0]"),
    ({"system": [{"text": "You plan trips."}]}, "system[0]"),
    ({"system": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}, "system[0]"),
], ids=["tool-without-schema", "tool-schema-not-an-object", "no-tool", "tool-as-text", "system-block-untyped",
        "system-block-not-text"])
def test_a_configuration_no_request_could_send_is_refused_when_made(mem: Store, config: dict[str, Any], where: str) -> None:
    """A thread's system prompt and tools go into every request of it and of its forks: one the
    SDK's MessageCreateParams refuses was stored, and every request built from it was invalid."""
    parent = mem.create_thread(model=MODEL)
    mem.append_message(parent, "user", "hi")
    before = mem.last_position()
    with pytest.raises(InvalidEvent) as refused:
        mem.create_thread(model=MODEL, **config)
    assert where in refused.value.field
    with pytest.raises(InvalidEvent) as refused:
        mem.fork(parent, config=config)
    assert refused.value.field.startswith(f"config.{where.split('[')[0]}")
    assert mem.last_position() == before
    good = mem.create_thread(model=MODEL, system=[text("You plan trips.")], tools=[
        {"name": "weather", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web_search"}])
    mem.append_message(good, "user", "hi")
    validate_request(anthropic_request(mem, good))


@pytest.mark.parametrize("tool", [
    {"type": "tool_search_tool_regex", "name": "tool_search_tool_regex"},
    {"type": "tool_search_tool_bm25", "name": "tool_search_tool_bm25"},
    {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
], ids=["regex-undated", "bm25-undated", "regex-dated"])
def test_a_tool_type_the_sdk_spells_two_ways_is_taken_either_way(mem: Store, tool: dict[str, Any]) -> None:
    """The SDK's tool search tools take their dated `type` or the undated one: only the first
    spelling was known, so a thread given the other was refused ("unknown tool type")."""
    deferred = {"name": "weather", "input_schema": {"type": "object"}, "defer_loading": True}
    t = mem.create_thread(model=MODEL, tools=[tool, deferred])
    mem.append_message(t, "user", "hi")
    validate_request(anthropic_request(mem, t))


def test_a_thinking_block_without_a_signature_is_left_out_of_the_request(mem: Store) -> None:
    """pi keeps another provider's thinking, and thinking it could not sign, with an empty
    signature: the request sent it, and the API, which checks every thinking block's
    signature, refused every request of the thread. It is left out; a signed one stays."""
    t = mem.create_thread(model="claude-x")
    mem.append_message(t, "user", "first")
    mem.append_message(t, "assistant", [{"type": "thinking", "thinking": "unsigned", "signature": ""},
                                        {"type": "text", "text": "one"}])
    mem.append_message(t, "user", "second")
    mem.append_message(t, "assistant", [{"type": "thinking", "thinking": "signed", "signature": "c2ln"},
                                        {"type": "text", "text": "two"}])
    mem.append_message(t, "user", "third")
    kwargs = anthropic_request(mem, t, cache=False)
    validate_request(kwargs)
    assert [m["content"] for m in kwargs["messages"] if m["role"] == "assistant"] == [
        [{"type": "text", "text": "one"}],
        [{"type": "thinking", "thinking": "signed", "signature": "c2ln"}, {"type": "text", "text": "two"}]]


def _retrieval_fork(store: Store, retrieval: str) -> str:
    """A note fork whose passages tie on words, so BM25's whole-index statistics decide between them."""
    t = store.create_thread(model="claude-test", system="You help.")
    for i in range(15):
        store.append_message(t, "user", f"alpha note {i} " + "filler " * (i % 5))
        store.append_message(t, "assistant", f"beta note {i} " + "padding " * (i % 7))
    return store.fork(t, context="note", retrieval=retrieval)


def _written_elsewhere(store: Store) -> None:
    """What changes BM25's statistics and nothing of the fork's history: an unrelated thread and a redaction there."""
    other = store.create_thread(title="unrelated")
    for _ in range(200):
        store.append_message(other, "user", "alpha " * 3)
    for _ in range(100):
        store.append_message(other, "user", "zebra")
    store.redact(store.event_at(other, 3).position, reason="pii", actor="ops")


@pytest.mark.parametrize("retrieval", ["first_turn", "per_turn"])
def test_a_note_forks_live_requests_rebuild_the_same_bytes_whatever_is_written_elsewhere(mem: Store, retrieval: str) -> None:
    """Retrieval ranks by BM25, which on SQLite reads statistics of the whole index: messages in
    an unrelated thread, a redaction there, or the fork's own later turns changed which
    passages a request already sent carried, so `check_request` reported MISMATCH on a request
    nothing in its history changed, and later requests changed the first turn's block (the
    prompt cache's prefix). A live turn records the passages it sent; every rebuild reads them."""
    from messages_api import MessagesAPI, message

    from threadlog import run_turn

    fork = _retrieval_fork(mem, retrieval)
    with MessagesAPI() as api:
        api.reply_json(message([text("first answer")], id="msg_0"))
        assert run_turn(mem, fork, "alpha beta", api.client(0, 10.0)).status == "ok"
        _written_elsewhere(mem)
        for turn in range(1, 6):
            api.reply_json(message([text(f"answer {turn}")], id=f"msg_{turn}"))
            assert run_turn(mem, fork, f"alpha beta beta {turn}", api.client(0, 10.0)).status == "ok"
            _written_elsewhere(mem) if turn == 3 else None
        sent = [r.body for r in api.requests]
    assert b"[retrieval]" in sent[0]
    answers = [e.offset for e in mem.read(fork) if "request" in e.meta]
    assert len(answers) == 6
    for offset in answers:
        check = check_request(mem, fork, offset)
        assert check.ok, (offset, check.reason)
    assert request_body(anthropic_request(mem, fork, answers[0])) == sent[0]  # replayed to that point: what was sent
    first, last = json.loads(sent[0]), json.loads(sent[-1])
    assert last["messages"][0]["content"][0]["text"] == first["messages"][0]["content"][0]["text"]  # the cache's prefix
    recorded = [mem.event_at(fork, offset).meta["request"].get("passages") for offset in answers]
    assert all(r is not None for r in recorded) if retrieval == "per_turn" else recorded[1:] == [None] * 5


def _block(kwargs: dict[str, Any]) -> str:
    """The request's one retrieval block."""
    blocks = [b["text"] for m in kwargs["messages"] for b in m["content"] if b.get("text", "").startswith("[retrieval]")]
    assert len(blocks) == 1
    return blocks[0]


def test_a_recorded_passage_redacted_since_is_left_out_and_the_check_names_it(mem: Store) -> None:
    from messages_api import MessagesAPI, message

    from threadlog import run_turn

    fork = _retrieval_fork(mem, "first_turn")
    with MessagesAPI() as api:
        api.reply_json(message([text("noted")]))
        assert run_turn(mem, fork, "alpha beta", api.client(0, 10.0)).status == "ok"
    answer = mem.head(fork) - 2  # the run's end follows it
    parts = mem.event_at(fork, answer).meta["request"]["passages"]
    (user, carried), = parts.items()
    gone = carried[0][0]
    assert f"### offset {gone} ·" in _block(anthropic_request(mem, fork))
    mem.redact(mem.event_at(fork, gone).position, reason="pii", actor="ops")
    block = _block(anthropic_request(mem, fork))
    assert f"### offset {gone} ·" not in block and all(f"### offset {o} ·" in block for o, _ in carried[1:])
    check = check_request(mem, fork, answer)
    assert not check.ok and check.redacted == [gone] and str(gone) in check.reason


def test_passages_not_in_the_recorded_form_are_refused_by_name(mem: Store) -> None:
    fork = _retrieval_fork(mem, "first_turn")
    mem.append_message(fork, "user", "alpha beta")
    for bad, said in [("x", "must be a dict"), ({"1": [[0, 0]]}, "not the offset of a message after the fork point"),
                      ({"32": [[31, 0]]}, "each an offset below 31"), ({"32": [[1, True]]}, "not [[1, True]]")]:
        with pytest.raises(InvalidEvent, match=re.escape(said)) as caught:
            anthropic_request(mem, fork, passages=bad)
        assert str(caught.value).startswith("passages: ")


def test_a_record_past_the_fork_point_is_passed_over_and_the_turn_searched(mem: Store) -> None:
    """The meta schema takes any offsets; one naming no event of the parent below the fork
    point (written by hand, or copied from another fork) is no record of this fork's."""
    fork = _retrieval_fork(mem, "first_turn")
    mem.append_message(fork, "user", "alpha beta")
    searched = anthropic_request(mem, fork)
    mem.append(fork, [{"type": "message.appended", "data": {"role": "assistant", "content": "ok"},
                       "meta": {"request": {"digest": "sha256:" + "0" * 64, "model": "m", "max_tokens": 1,
                                            "passages": {"32": [[40, 0]]}}}}])
    assert anthropic_request(mem, fork, mem.head(fork) - 1) == searched


def _turns(store: Store, thread: str, count: int) -> list[bytes]:
    """`count` live turns on `thread`; the bodies sent."""
    from messages_api import MessagesAPI, message

    from threadlog import run_turn

    with MessagesAPI() as api:
        for turn in range(count):
            api.reply_json(message([text(f"answer {turn}")], id=f"msg_{turn}"))
            assert run_turn(store, thread, f"alpha beta {turn}", api.client(0, 10.0)).status == "ok"
        return [r.body for r in api.requests]


@pytest.mark.parametrize("how", ["note", "full", "note-of-full"])
def test_a_note_forks_answers_check_through_a_fork_of_it(mem: Store, how: str) -> None:

    """`check_request(fork, offset)` of an answer the fork inherits: the history up to there is the
    note fork's, so is the request. It used the fork's own fork point (parent_offset), so the
    note fork's records were refused as 'not after the fork point' (and breakpoints moved)."""
    note = _retrieval_fork(mem, "per_turn")
    _turns(mem, note, 3)
    fork = mem.fork(note, context="note", retrieval="per_turn") if how == "note" else mem.fork(note)
    if how == "note-of-full":
        fork = mem.fork(fork, context="note", retrieval="first_turn")
    inherited = checkable_offsets(mem, note)
    assert inherited == checkable_offsets(mem, fork)
    for offset in inherited:
        check = check_request(mem, fork, offset)
        assert check.ok, (offset, check.reason)


def test_an_answer_a_fork_of_a_fork_inherits_checks(mem: Store) -> None:
    """The same without retrieval: a fork's fork point placed a breakpoint its parent's request never had."""

    t = mem.create_thread(model="claude-test", system="You help.")
    mem.append_message(t, "user", "hello")
    mem.append_message(t, "assistant", "hi")
    first = mem.fork(t)
    _turns(mem, first, 2)
    second = mem.fork(first)
    for offset in checkable_offsets(mem, second):
        check = check_request(mem, second, offset)
        assert check.ok, (offset, check.reason)


@pytest.mark.parametrize("retrieval", ["first_turn", "per_turn"])
def test_redacting_an_answer_keeps_the_block_of_the_message_it_answered(mem: Store, retrieval: str) -> None:

    """A redaction keeps the answer's meta (its record: positions, no text), but `_recorded`
    passed over a redacted answer: its turn's message was searched again, and on SQLite (BM25)
    the block before the redacted answer changed (the cache's prefix, what the model saw)."""
    fork = _retrieval_fork(mem, retrieval)
    sent = _turns(mem, fork, 1)
    answer = checkable_offsets(mem, fork)[0]
    _written_elsewhere(mem)
    mem.redact(mem.event_at(fork, answer).position, reason="pii", actor="ops")
    assert mem.event_at(fork, answer).meta["request"]["passages"]  # kept by the redaction
    block = anthropic_request(mem, fork)["messages"][0]["content"][1]["text"]
    assert block.startswith("[retrieval]") and block.encode() in sent[0].replace(b'\\"', b'"').replace(b"\\n", b"\n")


def test_a_check_after_an_answer_was_redacted_needs_no_search(tmp_path: Path) -> None:

    """Read-only with the index behind (`threadlog request --check` on a file it may not write):
    the check of a later answer searched again for the redacted answer's turn and raised
    StoreError (the index cannot catch up) instead of saying the history changed."""
    path = str(tmp_path / "t.db")
    store = Store(path)
    fork = _retrieval_fork(store, "per_turn")
    _turns(store, fork, 2)
    first, second = checkable_offsets(store, fork)
    store.redact(store.event_at(fork, first).position, reason="pii", actor="ops")
    store.append_message(store.create_thread(), "user", "later, elsewhere")  # the index is behind now
    store.close()
    with Store(path, read_only=True) as reader:
        assert check_request(reader, fork, first).ok
        check = check_request(reader, fork, second)
        assert not check.ok and check.redacted == [first]


def test_a_check_names_only_what_was_redacted_after_its_request_was_built(mem: Store) -> None:
    """A redaction recorded before a turn was already in effect when the turn's request was
    built: the check said the history changed since the request was sent at that offset too,
    sending an audit to an event that changed nothing the model saw."""
    t = mem.create_thread(model="claude-test")
    early = mem.append_message(t, "user", "my key is sk-1")
    said = mem.append_message(t, "assistant", "noted")
    mem.redact(early.position, reason="key", actor="ops")
    _turns(mem, t, 1)
    answer, = checkable_offsets(mem, t)
    assert check_request(mem, t, answer).ok
    mem.redact(said.position, reason="pii", actor="ops")
    check = check_request(mem, t, answer)
    assert not check.ok and check.redacted == [said.offset]
    assert check.reason == f"the history changed since it was sent: redacted event(s) at offset {said.offset}"


def test_an_answer_the_release_before_records_recorded_still_checks(tmp_path: Path) -> None:
    """A note fork's answer recorded by fb7f934 (no `passages` in its meta) is searched again
    when checked; the passages found are the same, but the block now orders two documents of
    one event by their part, where fb7f934 ordered them by their text: MISMATCH with nothing
    in the history changed."""
    db = tmp_path / "t.db"
    shutil.copy(Path(__file__).parent / "fixtures" / "retrieval-fb7f934.db", db)
    with Store(str(db)) as store:
        [answer] = checkable_offsets(store, "note-fork")
        check = check_request(store, "note-fork", answer)
        assert check.ok, check.reason


def test_the_fork_boilerplate_is_inside_the_prefix_siblings_cache(mem: Store) -> None:
    """`_shared_blocks` marks the placeholder results as the last block siblings share; with
    `boilerplate=` the shared boilerplate comes after that breakpoint, so no sibling reads it
    from the prompt cache (the module doc: the breakpoint goes on the last block siblings share)."""
    t = mem.create_thread(model="claude-test", system="You help.")
    mem.append_message(t, "user", "Research two destinations.")
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "tu_agent", "name": "Agent", "input": {}}])
    for kid in mem.fan_out(t, ["Research Lyon.", "Research Nice."], boilerplate=FORK_BOILERPLATE):
        primed = anthropic_request(mem, kid)["messages"][-1]["content"]
        assert [b["type"] for b in primed] == ["tool_result", "text", "text"]
        assert ["cache_control" in b for b in primed] == [False, True, True], json.dumps(primed)[:300]


def test_a_request_below_a_forks_point_names_the_fork_asked_for(mem: Store) -> None:
    """fe7f473 builds a request as of an offset at or below a fork's fork point as its parent's,
    and the refusal then names the parent: `threadlog request KID --at 1` said thread PARENT
    has no message to send."""
    t = mem.create_thread(model="claude-test")
    mem.append_message(t, "user", "hello")
    mem.append_message(t, "assistant", "hi")
    kid = mem.fork(t)
    with pytest.raises(InvalidEvent, match=fr"^at: thread '{kid}' has no message to send as of its first 1 event\(s\): "):
        anthropic_request(mem, kid, 1)


def test_a_request_as_of_events_holding_no_message_says_what_at_counts(mem: Store) -> None:
    """`anthropic_request(store, t, 0)` (`threadlog request T --at 0`) said the thread names no
    model: its first 0 events hold none, not even the thread.created that names it. An `at`
    whose events hold no message is refused saying what `at` counts and the smallest that
    holds one (or that the thread holds none yet)."""
    t = mem.create_thread(model="claude-test")
    mem.append(t, [{"type": "title.set", "data": {"title": "trip"}}])
    mem.append_message(t, "user", "hello")
    for at in (0, 1, 2):
        with pytest.raises(InvalidEvent) as caught:
            anthropic_request(mem, t, at)
        assert str(caught.value) == (f"at: thread '{t}' has no message to send as of its first {at} event(s): at counts "
                                     "the events the request is built from, its thread.created first; its first message "
                                     "is at offset 2, so at must be 3..3")
    assert anthropic_request(mem, t, 3, cache=False)["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    empty = mem.create_thread(model="claude-test")
    for at in (0, 1):
        with pytest.raises(InvalidEvent, match=r"as of its first \d event\(s\): at counts .*; it holds no message yet$"):
            anthropic_request(mem, empty, at)


@pytest.mark.parametrize("how", ["fork", "fan_out"])
def test_a_fork_of_a_note_fork_shows_the_blocks_its_parent_sent(mem: Store, how: str) -> None:
    """A full fork (or a sub-agent) of a note fork sent the note fork's turns without their
    retrieval blocks: its model saw another history than the one its parent's answers were
    given, and its requests shared no prefix with its parent's (the prompt cache)."""
    note = _retrieval_fork(mem, "per_turn")
    sent = _turns(mem, note, 2)
    if how == "fork":
        child = mem.fork(note)
        tail = _turns(mem, child, 1)[0]
    else:
        mem.append_message(note, "user", "split it")
        mem.append_message(note, "assistant", [{"type": "tool_use", "id": "tu_1", "name": "Agent", "input": {}}])
        [child] = mem.fan_out(note, ["go"])
        tail = request_body(anthropic_request(mem, child))
    def plain(body: bytes) -> list[Any]:
        return [[{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]] for m in json.loads(body)["messages"]]
    parent, mine = plain(sent[-1]), plain(tail)
    assert mine[:len(parent)] == parent and sum("[retrieval]" in json.dumps(m) for m in mine) == 2
    for offset in checkable_offsets(mem, child):
        check = check_request(mem, child, offset)
        assert check.ok, (offset, check.reason)


def test_a_fork_of_a_note_fork_whose_turns_no_live_turn_answered_shows_no_block(mem: Store) -> None:
    """Only what the note fork's live turns recorded is shown: nothing is searched for (what a
    request of the release before showed, so its recorded requests still check)."""
    note = _retrieval_fork(mem, "per_turn")
    mem.append_message(note, "user", "alpha beta")
    mem.append_message(note, "assistant", "noted")
    child = mem.fork(note)
    mem.append_message(child, "user", "alpha again")
    assert "[retrieval]" not in json.dumps(anthropic_request(mem, child))


@pytest.mark.parametrize("base", ["first_turn", "off"])
def test_a_fork_of_a_note_fork_follows_its_mode_past_a_turn_that_overrode_it(mem: Store, base: str) -> None:
    """A turn run with retrieval='per_turn' records a block the note fork's later requests do
    not show (its own mode); a fork of it showed that block, so it did not start as them."""
    from messages_api import MessagesAPI, message

    from threadlog import run_turn

    note = _retrieval_fork(mem, base)
    with MessagesAPI() as api:
        for turn, mode in enumerate([None, "per_turn", None]):
            api.reply_json(message([text(f"answer {turn}")], id=f"msg_{turn}"))
            assert run_turn(mem, note, f"alpha beta {turn}", api.client(0, 10.0), retrieval=mode).status == "ok"
        last = json.loads(api.requests[-1].body)
    child = mem.fork(note)
    mem.append_message(child, "user", "next")
    def plain(kwargs: dict[str, Any]) -> list[Any]:
        return [[{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]] for m in kwargs["messages"]]
    assert plain(anthropic_request(mem, child))[:len(last["messages"])] == plain(last)
    for thread in (note, child):
        assert all(check_request(mem, thread, offset).ok for offset in checkable_offsets(mem, thread))


@pytest.mark.parametrize("content", ["", "  ", [], [text(" ")]], ids=["empty", "blank", "no-blocks", "blank-block"])
def test_a_failed_tool_result_with_nothing_to_say_still_says_something(mem: Store, content: Any) -> None:
    # The API refuses an is_error tool_result without content ("content cannot be empty if
    # `is_error` is true"): a tool that failed silently, or a result whose blank text the
    # request drops, made every later request of the thread fail.
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [use("a"), use("b")])
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "a", "content": content, "is_error": True},
                                   {"type": "tool_result", "tool_use_id": "b", "content": content}])
    kwargs = anthropic_request(mem, t)
    validate_request(kwargs)
    failed, quiet = plain(kwargs)[2]["content"]
    assert failed["is_error"] is True and failed["content"] == NO_OUTPUT
    assert quiet.get("content") in ("", "  ", [], None)   # a result that did not fail may be empty: as it was


@pytest.mark.parametrize("last", ["Searching now.  \n", "Done.\t"])
def test_a_request_ending_on_an_answer_sends_its_last_text_without_trailing_whitespace(mem: Store, last: str) -> None:
    # A request that ends on the model's answer (a paused turn going on) has the model carry on
    # from that answer, and the API refuses one whose last text ends in whitespace ("final
    # assistant content cannot end with trailing whitespace"); earlier texts are sent as stored.
    t = mem.create_thread(model=MODEL)
    mem.append_message(t, "user", "look it up")
    mem.append_message(t, "assistant", [text("First.  "), text(last)])
    kwargs = anthropic_request(mem, t)
    assert plain(kwargs)[-1] == {"role": "assistant", "content": [text("First.  "), text(last.rstrip())]}
    assert plain(anthropic_request(mem, t, 2))[-1] == {"role": "user", "content": [text("look it up")]}
    mem.append_message(t, "user", "and then?")
    assert plain(anthropic_request(mem, t))[1] == {"role": "assistant", "content": [text("First.  "), text(last)]}
