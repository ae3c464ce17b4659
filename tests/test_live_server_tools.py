"""Live turns whose answers hold server tools' blocks (web search, web fetch, code execution).

The API runs these tools itself and answers with their calls and results in one message:
`run_turn` keeps the message whole, sends it back as it came in the next request, and
`check_request` rebuilds that request byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eventstore import Store
from projections import check_request
from threadlog.live import run_turn

from messages_api import MessagesAPI, message

MODEL = "claude-test-1"
WEB_SEARCH = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]


@pytest.fixture
def api() -> Iterator[MessagesAPI]:
    with MessagesAPI() as server:
        yield server


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
