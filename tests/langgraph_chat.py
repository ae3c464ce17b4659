"""A LangGraph chat with a scripted model and one tool, checkpointed by `ThreadlogSaver`.

Run as a process by tests/test_langgraph.py, one turn per run, so that resuming after a
restart is tested for real:

    python tests/langgraph_chat.py DB THREAD TEXT REPLY [--from-turn N]

The model answers `REPLY`; a REPLY of `tool:A,B` first calls the `multiply` tool and then
answers with the product. `--from-turn N` runs the turn from the state as it was after
turn N (time travel). Prints the resulting messages as JSON, one `[role, text]` a message.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from threadlog import Store
from threadlog.integrations.langgraph import ThreadlogSaver


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def script(reply: str) -> list[AIMessage]:
    if not reply.startswith("tool:"):
        return [AIMessage(reply)]
    a, b = (int(x) for x in reply[5:].split(","))
    return [AIMessage("", tool_calls=[{"name": "multiply", "args": {"a": a, "b": b}, "id": f"call_{a}_{b}"}]),
            AIMessage(f"The product is {a * b}.")]


def build(store: Store, reply: str) -> Any:
    model = GenericFakeChatModel(messages=iter(script(reply)))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([multiply]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=ThreadlogSaver(store))


def main(argv: list[str]) -> None:
    db, thread, text, reply, *rest = argv
    with Store(db) as store:
        app = build(store, reply)
        config: Any = {"configurable": {"thread_id": thread}}
        if rest:
            turns = int(rest[rest.index("--from-turn") + 1])
            # The checkpoint where turn N ended: the first (newest) whose state holds N answers and is done.
            config = next(s.config for s in app.get_state_history(config)
                          if not s.next and sum(isinstance(m, HumanMessage) for m in s.values.get("messages", [])) == turns)
        out = app.invoke({"messages": [HumanMessage(text)]}, config)
        print(json.dumps([[m.type, m.content if isinstance(m.content, str) else str(m.content)] for m in out["messages"]]))


if __name__ == "__main__":
    main(sys.argv[1:])
