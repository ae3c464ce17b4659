"""A process sharing one LangGraph thread through `ThreadlogSaver`, for tests/test_langgraph_shared.py:

- `python tests/langgraph_worker.py invoke DB NAME COUNT`: prints `ready`, waits for a line on
  stdin, then runs an echo graph COUNT times on the thread `shared`, with the user messages
  `NAME-0`, `NAME-1`, …, each answered `echo NAME: NAME-i`; prints `done`.
- `python tests/langgraph_worker.py delete DB COUNT`: prints `ready`, waits for a line, then
  COUNT times `delete_thread("shared")`, every third one `prune(["shared"])` instead; prints `done`.
- `python tests/langgraph_worker.py hammer DB STREAM SECONDS`: prints `ready`, waits for a line,
  then appends `title.set` events to STREAM one transaction after another for SECONDS; prints `done`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402


def invoke(saver: ThreadlogSaver, name: str, count: int) -> None:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo {name}: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    for i in range(count):
        out = app.invoke({"messages": [("user", f"{name}-{i}")]}, {"configurable": {"thread_id": "shared"}})
        assert out["messages"][-1].content == f"echo {name}: {name}-{i}"


def delete(saver: ThreadlogSaver, count: int) -> None:
    for i in range(count):
        time.sleep(0.02)  # let the writers get a few steps in between
        if i % 3 == 2:
            saver.prune(["shared"])
        else:
            saver.delete_thread("shared")


def hammer(store: Store, stream: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        store.append(stream, [{"type": "title.set", "data": {"title": "busy"}}])


def main() -> None:
    mode, db, *args = sys.argv[1:]
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        print("ready", flush=True)
        sys.stdin.readline()
        if mode == "invoke":
            invoke(saver, args[0], int(args[1]))
        elif mode == "delete":
            delete(saver, int(args[0]))
        elif mode == "hammer":
            hammer(store, args[0], float(args[1]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        print("done", flush=True)


if __name__ == "__main__":
    main()
