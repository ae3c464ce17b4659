"""`ThreadlogSaver` used as LangGraph users use a checkpointer: `list`/`get_tuple` at the edges
of their arguments, where `SqliteSaver` is the reference (the saver is a one-line replacement
for it). Real SQLite files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402


def echo(saver: ThreadlogSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


@pytest.fixture
def chat(tmp_path: Path) -> tuple[Store, ThreadlogSaver, list[str]]:
    store = Store(tmp_path / "edges.db")
    saver = ThreadlogSaver(store)
    app = echo(saver)
    for thread in ("a", "b"):
        for text in ("one", "two", "three"):
            app.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread}})
    ids = [c.checkpoint["id"] for c in saver.list({"configurable": {"thread_id": "a"}})]
    assert len(ids) == 9
    return store, saver, ids


def test_list_and_get_tuple_read_their_arguments_as_sqlite_saver_does(chat: tuple[Store, ThreadlogSaver, list[str]]) -> None:
    """`limit` below zero is no limit (SQLite's LIMIT -1: it dropped the oldest checkpoints), a
    filter value None matches a missing key (`IS NULL`: it matched nothing), and an empty
    checkpoint_id is none (get_tuple gave None, so a graph run with one started afresh)."""
    store, saver, ids = chat
    a: Any = {"configurable": {"thread_id": "a"}}
    ids_of = lambda tuples: [c.checkpoint["id"] for c in tuples]  # noqa: E731
    for limit, expected in ((None, ids), (0, []), (1, ids[:1]), (-1, ids), (-3, ids), (100, ids)):
        assert ids_of(saver.list(a, limit=limit)) == expected, limit
    assert ids_of(saver.list(a, before={"configurable": {"checkpoint_id": ids[3]}})) == ids[4:]
    assert ids_of(saver.list(a, before={"configurable": {"checkpoint_id": ids[3]}}, limit=-1)) == ids[4:]
    assert ids_of(saver.list(a, filter={"missing": None})) == ids
    assert len(list(saver.list(None, filter={"missing": None, "source": "loop"}))) == 12
    assert ids_of(saver.list(a, filter={"step": 1})) == [c.checkpoint["id"] for c in saver.list(a) if c.metadata["step"] == 1]
    empty: Any = {"configurable": {"thread_id": "a", "checkpoint_id": ""}}
    latest = saver.get_tuple(empty)
    assert latest is not None and latest.checkpoint["id"] == ids[0]
    assert ids_of(saver.list(empty)) == ids
    out = echo(saver).invoke({"messages": [("user", "four")]}, empty)
    assert [m.content for m in out["messages"]] == ["one", "echo: one", "two", "echo: two", "three", "echo: three",
                                                     "four", "echo: four"]
    saver.delete_thread("a")
    assert list(saver.list(a)) == [] and saver.get_tuple(a) is None and len(list(saver.list(None))) == 9
    out = echo(saver).invoke({"messages": [("user", "again")]}, a)  # a deleted thread id starts afresh
    assert [m.content for m in out["messages"]] == ["again", "echo: again"]
    store.verify()
    store.close()
