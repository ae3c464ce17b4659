"""An answer a LangGraph graph recorded keeps the stop reason its provider gave, in the
provider's own words (LangChain's `response_metadata`: OpenAI's `finish_reason`, Anthropic's
`stop_reason`), so one cut off at the token limit (`length`) reads as cut short, not whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store
from threadlog.cli import cli

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402


def _stop_reasons_kept(db: Path, thread_id: str, answers: list[AIMessage]) -> tuple[str, list[Any]]:
    """Run a graph answering each of `answers` in turn on `thread_id`: the thread and the stop
    reason each answer's event keeps."""
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = _answering(saver, answers)
        config: Any = {"configurable": {"thread_id": thread_id}}
        for i in range(len(answers)):
            app.invoke({"messages": [HumanMessage(f"Q{i}", id=f"h{i}")]}, config)
        thread = saver.threadlog_thread(config)
        return thread, [e.data.get("stop_reason") for e in store.read(thread)
                        if e.type == "message.appended" and e.data["role"] == "assistant"]


def _answering(saver: ThreadlogSaver, answers: list[AIMessage]) -> Any:
    replies = iter(answers)
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [next(replies)]})
    graph.add_edge(START, "model")
    return graph.compile(checkpointer=saver)


def test_a_langgraph_answer_keeps_its_provider_s_stop_reason(tmp_path: Path) -> None:
    """`finish_reason: length` read as a whole answer: every stop reason was left behind."""
    db = tmp_path / "t.db"
    answers = [AIMessage("The first step is", id="a1", response_metadata={"finish_reason": "length", "model_name": "gpt"}),
               AIMessage("Filtered", id="a2", response_metadata={"finish_reason": "content_filter"}),
               AIMessage("Done.", id="a3", response_metadata={"stop_reason": "end_turn"}),
               AIMessage("Calling", id="a4", response_metadata={"finish_reason": "tool_calls"}),
               AIMessage("Whole", id="a5", response_metadata={"finish_reason": "stop"}),
               # Gemini's and Cohere's words: whole answers left unmarked, a known one in its lowercase
               AIMessage("Gemini", id="a6", response_metadata={"finish_reason": "STOP"}),
               AIMessage("Cohere", id="a7", response_metadata={"finish_reason": "COMPLETE"}),
               AIMessage("Gemini cut", id="a8", response_metadata={"finish_reason": "MAX_TOKENS"}),
               AIMessage("Unheard of", id="a9", response_metadata={"finish_reason": "x" * 20})]
    thread, said = _stop_reasons_kept(db, "ana", answers)
    assert said == ["length", "content_filter", "end_turn", "tool_calls", "stop", "stop", None, "max_tokens", None]
    rows = json.loads(CliRunner().invoke(cli, ["--db", str(db), "rows", thread, "--json"]).stdout)
    assert [r["text"] for r in rows if r["kind"] == "cut_short"] == [
        "cut off at the token limit (length)", "cut off by a content filter (content_filter)",
        "cut off before the tool call it stopped for (tool_calls)", "cut off at the token limit (max_tokens)"]


class _Spoken(str):
    """A finish_reason of a provider's own str type: one that claims to equal every word (and
    hashes as `stop`), and one whose lowercase is no text."""


class _EqualToAll(_Spoken):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("stop")


class _LowerNoText(_Spoken):
    def lower(self) -> Any:  # type: ignore[override]
        return ["stop"]


def test_a_stop_reason_of_a_str_subclass_is_read_by_its_text(tmp_path: Path) -> None:
    """A `finish_reason` given as a str subclass was looked up by its own `__eq__` and `lower`:
    one equal to everything kept its text (a screen-clearing escape) as a known stop reason,
    and one whose `lower()` gave a list failed the graph's step with TypeError."""
    from projections.stops import source_stop_reason

    assert source_stop_reason(_EqualToAll("junk\x1b[2J")) is None
    assert source_stop_reason(_LowerNoText("LENGTH")) == "length"
    kept = source_stop_reason(_EqualToAll("length"))
    assert kept == "length" and type(kept) is str
    db = tmp_path / "t.db"
    answers = [AIMessage("Odd", id="a1", response_metadata={"finish_reason": _LowerNoText("LENGTH")}),
               AIMessage("Odder", id="a2", response_metadata={"finish_reason": _EqualToAll("junk\x1b[2J")})]
    thread, said = _stop_reasons_kept(db, "odd", answers)
    assert said == ["length", None]
