"""`ThreadlogSession` fed the items of real recorded OpenAI exchanges (tests/fixtures/openai-exchanges).

Each exchange gives the items an Agents SDK run stores in its session: the items of each
request's `input` the session does not hold yet, then the response's `output` items, parsed
and turned into input items by the SDK (`ModelResponse.to_input_items`). A Chat Completions
answer goes through the SDK's own converter (`Converter.message_to_output_items`); of its
requests only the messages the SDK takes as items (`Converter.maybe_easy_input_message`) are
kept, and a tool's reply becomes the item the SDK makes of a tool's return value
(`ItemHelpers.tool_call_output_item`; in the image exchange the tool gives its text and the
image pydantic-ai sent after it). Chat Completions messages the SDK has no converter for
(a `tool` message alone, a `system` one) are left out, as are exchanges with other providers.
Two Responses API exchanges are also served as they were recorded, on 127.0.0.1, to a real
`Runner` run: what it stores is what the derivation above gives.

The SDK's own sessions are the oracle: `SQLiteSession` for the protocol,
`AdvancedSQLiteSession` for branches.
"""

from __future__ import annotations

import asyncio
import html
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")
pytest.importorskip("starlette")

from agents import (  # noqa: E402
    Agent, ItemHelpers, OpenAIResponsesModel, Runner, ToolOutputImage, ToolOutputText, function_tool, set_tracing_disabled,
)
from agents.extensions.memory import AdvancedSQLiteSession  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory import SQLiteSession  # noqa: E402
from agents.models.chatcmpl_converter import Converter  # noqa: E402
from agents.usage import Usage  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openai.types.chat import ChatCompletionMessage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputItem  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.cli import cli  # noqa: E402
from threadlog.integrations.openai_agents import ThreadlogSession  # noqa: E402
from threadlog.web import create_app  # noqa: E402
from tests.messages_api import MessagesAPI  # noqa: E402
from tests.test_openai_agents import read_by_another_process  # noqa: E402

EXCHANGES = sorted((Path(__file__).parent / "fixtures" / "openai-exchanges").glob("*.json"))
OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _outputs(output: list[Any]) -> list[dict[str, Any]]:
    """Output items as the SDK stores them once a model answered with them."""
    return [dict(item) for item in ModelResponse(output=output, usage=Usage(), response_id=None).to_input_items()]


def _responses(body: dict[str, Any], answer: dict[str, Any], items: list[dict[str, Any]], sent: int) -> int:
    """Add one Responses API exchange's items; returns the items the next request repeats."""
    given = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    chained = "conversation" in body or body.get("previous_response_id")  # the server holds the history
    items += given if chained else given[sent:]
    outputs = _outputs([OUTPUT_ITEM.validate_python(item) for item in answer["output"]])
    items += outputs
    return 0 if chained else len(given) + len(outputs)


def _chat(body: dict[str, Any], answer: dict[str, Any], items: list[dict[str, Any]], sent: int) -> int:
    """Add one Chat Completions exchange's items; returns the messages the next request repeats."""
    messages = body["messages"]
    shown = set()  # a user message showing a tool's file: part of that tool's output here
    for i, message in enumerate(messages[sent:], start=sent):
        if i in shown:
            continue
        if message.get("role") == "tool":
            call = ResponseFunctionToolCall.model_validate(next(
                item for item in items if item.get("type") == "function_call" and item["call_id"] == message["tool_call_id"]))
            following = messages[i + 1] if i + 1 < len(messages) else {}
            parts = [part for part in following.get("content") or () if isinstance(part, dict)]
            output: Any = message["content"]
            if any(part.get("type") == "image_url" for part in parts):
                shown.add(i + 1)
                output = [ToolOutputText(text=message["content"])] + [
                    ToolOutputImage(image_url=part["image_url"]["url"]) if part["type"] == "image_url"
                    else ToolOutputText(text=part["text"]) for part in parts]
            items.append(dict(ItemHelpers.tool_call_output_item(call, output)))
        elif message.get("tool_calls"):  # an earlier answer, replayed (from another model here)
            items += _outputs(Converter.message_to_output_items(ChatCompletionMessage.model_validate(message)))
        elif Converter.maybe_easy_input_message(message) is not None:
            items.append(message)
    items += _outputs(Converter.message_to_output_items(ChatCompletionMessage.model_validate(answer["choices"][0]["message"])))
    return len(messages) + 1


def recorded_items(path: Path) -> list[dict[str, Any]]:
    """The items a run made of the exchanges in `path` would have stored, in order."""
    items: list[dict[str, Any]] = []
    sent = {"responses": 0, "chat": 0}
    for exchange in json.loads(path.read_text(encoding="utf-8")):
        uri, body, answer = exchange["request"]["uri"], exchange["request"]["body"], exchange["response"]["body"]
        if uri.endswith("/v1/responses"):
            sent["responses"] = _responses(body, answer, items, sent["responses"])
        elif uri.endswith("/v1/chat/completions"):
            sent["chat"] = _chat(body, answer, items, sent["chat"])
    return items


RECORDED = {path.stem: recorded_items(path) for path in EXCHANGES}
NAMES = [name for name, items in RECORDED.items() if items]


def test_every_recorded_exchange_gives_items() -> None:
    assert len(NAMES) == len(EXCHANGES) == 7
    kinds = {item.get("type", "message") for items in RECORDED.values() for item in items}
    assert {"message", "function_call", "function_call_output", "reasoning"} <= kinds
    outputs = [item["output"] for items in RECORDED.values() for item in items if item.get("type") == "function_call_output"]
    assert any(isinstance(output, list) and any(part.get("type") == "input_image" for part in output) for output in outputs)
    assert any(item.get("encrypted_content") for items in RECORDED.values() for item in items)


@pytest.fixture(params=NAMES)
def items(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return RECORDED[request.param]


def test_items_come_back_exactly_one_call_per_item_or_all_at_once(tmp_path: Path, items: list[dict[str, Any]]) -> None:
    oracle = SQLiteSession("ana")
    run(oracle.add_items(items))
    with Store(tmp_path / "a.db") as store:
        one_by_one, at_once = ThreadlogSession("one", store), ThreadlogSession("all", store)
        for item in items:
            run(one_by_one.add_items([item]))
        run(at_once.add_items(items))
        for session in (one_by_one, at_once):
            assert run(session.get_items()) == items == run(oracle.get_items())
            for limit in range(1, len(items) + 2):
                assert run(session.get_items(limit=limit)) == items[-limit:] == run(oracle.get_items(limit=limit))
        assert run(one_by_one.pop_item()) == items[-1] == run(oracle.pop_item())
        assert run(one_by_one.get_items()) == items[:-1] == run(oracle.get_items())
        store.verify()
    oracle.close()


def _stored(db: Path, items: list[dict[str, Any]]) -> str:
    """`items` added to session `ana` in the file `db`, the session closed; its thread."""
    session = ThreadlogSession("ana", db)
    run(session.add_items(items))
    thread = session.thread
    assert thread is not None
    session.close()
    return thread


def test_a_new_process_reads_the_same_items(tmp_path: Path, items: list[dict[str, Any]]) -> None:
    db = tmp_path / "a.db"
    _stored(db, items)
    assert read_by_another_process(db, "ana") == items
    with Store(db) as store:
        store.verify()


def test_a_branch_from_every_turn_keeps_both_branches_exact(tmp_path: Path, items: list[dict[str, Any]]) -> None:
    with Store(tmp_path / "a.db") as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items(items))
        oracle = AdvancedSQLiteSession(session_id="ana", create_tables=True)
        run(oracle.add_items(items))
        turns = run(session.get_conversation_turns())
        untimed = [{key: value for key, value in turn.items() if key != "timestamp"} for turn in turns]
        assert untimed == [{key: value for key, value in turn.items() if key != "timestamp"}
                           for turn in run(oracle.get_conversation_turns())]
        for turn in range(1, len(turns) + 1):
            run(session.switch_to_branch("main"))
            run(oracle.switch_to_branch("main"))
            name = run(session.create_branch_from_turn(turn, f"from-{turn}"))
            run(oracle.create_branch_from_turn(turn, name))
            below = run(oracle.get_items())
            assert run(session.get_items()) == below
            run(session.add_items(items[len(below):]))  # the branch goes on with the same items
            assert run(session.get_items()) == items
            run(session.switch_to_branch("main"))
            assert run(session.get_items()) == items
            run(session.switch_to_branch(name))
            assert run(session.get_items()) == items
            assert run(session.pop_item()) == items[-1]
            assert run(session.get_items()) == items[:-1]
        run(session.switch_to_branch("main"))
        assert run(session.get_items()) == items
        store.verify()
        oracle.close()


def test_every_renderer_shows_every_item(tmp_path: Path, items: list[dict[str, Any]]) -> None:
    db = tmp_path / "a.db"
    thread = _stored(db, items)
    for command in ("show", "transcript", "rows"):
        result = CliRunner().invoke(cli, ["--db", str(db), command, thread])
        assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(cli, ["--db", str(db), "rows", thread, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [row["offset"] for row in rows] == list(range(1, len(items) + 1))  # one row per item, in order
    # Reasoning read as the answer when its row was its summary alone: it says what it is.
    assert all(row["text"].startswith("[reasoning]") == (item.get("type") == "reasoning") for item, row in zip(items, rows))
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        page = client.get("/thread", params={"id": thread})
    assert page.status_code == 200
    assert page.text.count('<li class="item ') == len(items)
    for row in rows:  # each row's text is on the page, escaped (a `<think>` tag stays text)
        first = row["text"].strip().splitlines()[0][:30]
        if "*" not in first and "`" not in first:  # markdown would make it markup
            assert html.escape(first, quote=False) in page.text
    assert "<think>" not in page.text


@function_tool
def get_capital(country: str) -> str:
    """The capital of a country (the recorded tool's answer)."""
    return "Potato City"


RUNS = [
    ("pydantic-ai-openai_responses_model_simple_response_with_tool_call", ["What is the capital of PotatoLand?"], [get_capital]),
    ("pydantic-ai-openai_responses_model_thinking_part",
     ["How do I cross the street?", "Considering the way to cross the street, analogously, how do I cross the river?"], []),
]


async def _replayed(session: Any, name: str, texts: list[str], tools: list[Any]) -> tuple[list[Any], list[Any]]:
    """Run the agent on `session` with the recorded answers served on 127.0.0.1; returns the
    session's items and the input of every request the SDK sent."""
    path = EXCHANGES[[p.stem for p in EXCHANGES].index(name)]
    with MessagesAPI() as api:
        for exchange in json.loads(path.read_text(encoding="utf-8")):
            if exchange["request"]["uri"].endswith("/v1/responses"):
                api.reply_json(exchange["response"]["body"])
        client = AsyncOpenAI(base_url=api.url + "/v1", api_key="test", max_retries=0)
        agent = Agent(name="planner", model=OpenAIResponsesModel(model="gpt-5", openai_client=client), tools=tools)
        for text in texts:
            await Runner.run(agent, text, session=session)
        await client.close()
        return await session.get_items(), [captured.json["input"] for captured in api.requests]


@pytest.mark.parametrize(("name", "texts", "tools"), RUNS, ids=[name for name, _, _ in RUNS])
def test_a_run_answered_by_the_recorded_responses_stores_and_sends_what_the_sdk_session_does(
        tmp_path: Path, name: str, texts: list[str], tools: list[Any]) -> None:
    set_tracing_disabled(True)
    session = ThreadlogSession("ana", tmp_path / "a.db")
    stored, sent = run(_replayed(session, name, texts, tools))
    oracle = SQLiteSession("ana")
    assert (stored, sent) == run(_replayed(oracle, name, texts, tools))
    assert stored == RECORDED[name]  # the items derived from the exchanges are the ones a run stores
    # Every request carried the session's items back as they were stored (reasoning with its
    # encrypted content, tool calls with their ids), then the new ones.
    for given in sent:
        assert given == stored[:len(given)]
    assert len(sent[-1]) > len(texts)
    session.close()
    oracle.close()
