"""Live turns whose answers hold server tools' blocks (web search, web fetch, code execution).

The API runs these tools itself and answers with their calls and results in one message:
`run_turn` keeps the message whole, sends it back as it came in the next request, and
`check_request` rebuilds that request byte for byte.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import Store
from projections import check_request
from projections.request import checkable_offsets
from threadlog.live import run_turn

from messages_api import MessagesAPI, message

MODEL = "claude-test-1"
WEB_SEARCH = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]


def answer(api: MessagesAPI, body: dict[str, Any], stream: bool) -> None:
    (api.reply_sse if stream else api.reply_json)(body)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("error_code", ["max_uses_exceeded", "too_many_requests", "unavailable"])
def test_a_web_search_that_failed_is_kept_and_sent_back(file_store: Store, api: MessagesAPI, stream: bool,
                                                       error_code: str) -> None:
    # A search the API could not run answers with an error object where results go (not a list).
    searched = [
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "weather in Lyon"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
         "content": {"type": "web_search_tool_result_error", "error_code": error_code}},
        {"type": "text", "text": "I could not search the web just now."},
    ]
    t = file_store.create_thread(title="t", model=MODEL, tools=WEB_SEARCH)
    answer(api, message(searched), stream)
    turn = run_turn(file_store, t, "Weather in Lyon?", api.client(), stream=stream)
    assert (turn.status, turn.error, turn.text) == ("ok", None, "I could not search the web just now.")
    assert turn.messages[0].data["content"] == searched

    answer(api, message([{"type": "text", "text": "Try again later."}]), stream)
    assert run_turn(file_store, t, "And now?", api.client(), stream=stream).status == "ok"
    sent_back = api.requests[-1].json["messages"][1]
    assert sent_back["role"] == "assistant" and sent_back["content"] == searched
    for offset in (m.offset for m in turn.messages):
        assert check_request(file_store, t, offset).ok
    file_store.verify()


# A tool the model calls from the code it runs in the API's code execution container
# (programmatic tool calling), as recorded from the API.
GET_WEATHER = {"name": "get_weather", "description": "Weather in a city", "input_schema": {"type": "object"},
               "allowed_callers": ["code_execution_20260120"]}
CONTAINER = {"id": "container_011CYVPF4iP8oD6Vsz1NhVih", "expires_at": "2026-02-25T20:07:37.475893Z"}


def from_code(id: str, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "get_weather", "input": {"location": city},
            "caller": {"type": "code_execution_20260120", "tool_id": "srvtoolu_017SzB73BSitzNFo1Xb3bq7S"}}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_tool_results_for_calls_made_from_code_name_its_container(file_store: Store, api: MessagesAPI, stream: bool) -> None:
    # The API runs the code on in the container the answer names: the results go back with its id,
    # or the API refuses them ("container_id is required when there are pending tool uses").
    t = file_store.create_thread(title="t", model=MODEL, tools=[GET_WEATHER])
    running = [{"type": "text", "text": "I'll check."},
               {"type": "server_tool_use", "id": "srvtoolu_017SzB73BSitzNFo1Xb3bq7S", "name": "code_execution",
                "input": {"code": "print(await get_weather({'location': 'Lyon'}))"}, "caller": {"type": "direct"}},
               from_code("toolu_1", "Lyon")]
    answer(api, {**message(running, "tool_use"), "container": CONTAINER}, stream)
    answer(api, {**message([from_code("toolu_2", "Paris")], "tool_use"), "container": CONTAINER}, stream)
    answer(api, {**message([{"type": "text", "text": "Sunny in both."}]), "container": CONTAINER}, stream)
    turn = run_turn(file_store, t, "Weather in Lyon and Paris?", api.client(), stream=stream,
                    tools={"get_weather": lambda location: f"sunny in {location}"})
    assert (turn.status, turn.error, turn.text) == ("ok", None, "Sunny in both.")
    assert [m.data["container"] for m in turn.messages] == [CONTAINER] * 3
    assert [r.json.get("container") for r in api.requests] == [None, CONTAINER["id"], CONTAINER["id"]]
    for offset in (m.offset for m in turn.messages):
        assert check_request(file_store, t, offset).ok

    # A later question answers no call made from code: it names no container.
    answer(api, message([{"type": "text", "text": "Yes."}]), stream)
    assert run_turn(file_store, t, "Sure?", api.client(), stream=stream).status == "ok"
    assert "container" not in api.requests[-1].json
    file_store.verify()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_server_tool_id_the_server_sends_again_is_sent_back_once(file_store: Store, api: MessagesAPI, stream: bool) -> None:
    # A server repeating a search's id in a later answer: both answers are kept as they came, and
    # the next request (which held the id twice, refused by the API) sends the second renamed.
    def search(query: str) -> list[dict[str, Any]]:
        return [{"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": query}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
                {"type": "text", "text": f"Nothing on {query}."}]

    t = file_store.create_thread(title="t", model=MODEL, tools=WEB_SEARCH)
    for query in ("lyon", "paris"):
        answer(api, message(search(query)), stream)
        assert run_turn(file_store, t, f"{query}?", api.client(), stream=stream).status == "ok"
    answer(api, message([{"type": "text", "text": "Done."}]), stream)
    assert run_turn(file_store, t, "Done?", api.client(), stream=stream).status == "ok"
    sent = [b for m in api.requests[-1].json["messages"] if m["role"] == "assistant" for b in m["content"]]
    calls = [b["id"] for b in sent if b["type"] == "server_tool_use"]
    assert calls[0] == "srvtoolu_01" and len(set(calls)) == 2
    assert [b["tool_use_id"] for b in sent if b["type"] == "web_search_tool_result"] == calls
    for offset in checkable_offsets(file_store, t):
        assert check_request(file_store, t, offset).ok
    file_store.verify()
