"""threadlog beside LangGraph's `SqliteSaver` and the OpenAI Agents SDK's `AdvancedSQLiteSession`.

Each system stores the same 1,000 messages (alternating user and assistant text), one call
per message, in its own SQLite file; no model is called. LangGraph runs a messages graph
whose one node appends the incoming message (one `invoke` per message); the Agents SDK
session gets `add_items` per message. Both alternatives run in WAL mode at
`synchronous=FULL` (their defaults), so threadlog runs at `FULL` here too.

Figures: append time per message (the 1,000 messages written in chunks of 100, the
systems interleaved chunk by chunk), database size after a checkpoint, and the cost of a
fork (threadlog `fork`, SDK `create_branch_from_turn`, LangGraph `update_state` from the
checkpoint) at the same point: just before the last user message.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from threadlog import Store

from .threads import text_of
from .timing import Measure, compare, interleave

GROUP = "alternatives"

# (messages, chunk, fork rounds) per mode
SIZES = {"smoke": (40, 10, 3), "quick": (1_000, 100, 9), "full": (1_000, 100, 15)}


def available() -> dict[str, str]:
    """The alternatives that import, with their versions."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("langgraph", "langgraph-checkpoint-sqlite", "openai-agents"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return found


def size_on_disk(path: Path, conn: sqlite3.Connection) -> int:
    """The file's bytes after folding its WAL in (so every system is measured the same way)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


class ThreadlogSide:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = Store(path, synchronous="FULL")
        self.thread = self.store.create_thread(title="bench")

    def add(self, role: str, text: str) -> None:
        self.store.append_message(self.thread, role, text)

    def fork_sample(self, at: int) -> Callable[[], float]:
        def sample() -> float:
            start = time.perf_counter()
            self.store.fork(self.thread, at=at)
            return time.perf_counter() - start
        return sample

    def size(self) -> int:
        return size_on_disk(self.path, self.store.backend.conn)


class LangGraphSide:
    def __init__(self, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.graph.message import add_messages

        # Functional form: the annotations must be objects, not strings, for LangGraph to read them.
        State = TypedDict("State", {"messages": Annotated[list[Any], add_messages], "incoming": dict[str, str]})  # type: ignore[misc]

        def append(state: Any) -> dict[str, Any]:
            return {"messages": [state["incoming"]]}

        graph = StateGraph(State)
        graph.add_node("append", append)
        graph.add_edge(START, "append")
        graph.add_edge("append", END)
        self.path = path
        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.app = graph.compile(checkpointer=SqliteSaver(self.conn))
        self.config: dict[str, Any] = {"configurable": {"thread_id": "bench"}}

    def add(self, role: str, text: str) -> None:
        self.app.invoke({"incoming": {"role": role, "content": text}}, self.config)

    def fork_sample(self, messages: int) -> Callable[[], float]:
        """Branch from the checkpoint that holds `messages` messages (a new child checkpoint)."""
        point = next(s.config for s in self.app.get_state_history(self.config, limit=12)
                     if len(s.values.get("messages", ())) == messages)

        def sample() -> float:
            start = time.perf_counter()
            self.app.update_state(point, {"messages": []})
            return time.perf_counter() - start
        return sample

    def size(self) -> int:
        return size_on_disk(self.path, self.conn)


class AgentsSide:
    def __init__(self, path: Path) -> None:
        from agents.extensions.memory import AdvancedSQLiteSession

        self.path = path
        self.loop = asyncio.new_event_loop()
        self.session = AdvancedSQLiteSession(session_id="bench", db_path=path, create_tables=True)

    def add(self, role: str, text: str) -> None:
        self.loop.run_until_complete(self.session.add_items([{"role": role, "content": text}]))  # type: ignore[list-item]

    def fork_sample(self, turn: int) -> Callable[[], float]:
        def sample() -> float:
            start = time.perf_counter()
            self.loop.run_until_complete(self.session.create_branch_from_turn(turn))
            seconds = time.perf_counter() - start
            self.loop.run_until_complete(self.session.switch_to_branch("main"))  # not timed
            return seconds
        return sample

    def size(self) -> int:
        with sqlite3.connect(self.path) as conn:
            return size_on_disk(self.path, conn)

    def close(self) -> None:
        self.session.close()
        self.loop.close()


def run(mode: str, workdir: Path) -> list[Measure]:
    count, chunk, fork_rounds = SIZES[mode]
    versions = available()
    sides: dict[str, Any] = {"threadlog": ThreadlogSide(workdir / "alt-threadlog.db")}
    if "langgraph-checkpoint-sqlite" in versions:
        sides["langgraph"] = LangGraphSide(workdir / "alt-langgraph.db")
    if "openai-agents" in versions:
        sides["agents"] = AgentsSide(workdir / "alt-agents.db")
    script = [("user" if i % 2 == 0 else "assistant", text_of(80, i)) for i in range(count)]
    written = {name: 0 for name in sides}

    def chunk_writer(name: str) -> Callable[[], float]:
        def sample() -> float:
            side, begin = sides[name], written[name]
            start = time.perf_counter()
            for role, text in script[begin:begin + chunk]:
                side.add(role, text)
            written[name] = begin + chunk
            return time.perf_counter() - start
        return sample

    appends = interleave({name: chunk_writer(name) for name in sides}, count // chunk, warmup=0)
    per_message = {name: sum(seconds) / count for name, seconds in appends.items()}
    sizes = {name: side.size() for name, side in sides.items()}
    context = {"messages": count, "versions": versions, "synchronous": "FULL", "journal_mode": "wal"}

    # The same fork point everywhere: just before the last user message.
    last_user = max(i for i, (role, _) in enumerate(script) if role == "user")
    # Pairwise, so one system's large writes (LangGraph copies the whole state per
    # checkpoint) do not land in the other pair's fsyncs.
    ours = sides["threadlog"].fork_sample(1 + last_user)
    fork_points = {"agents": last_user // 2 + 1, "langgraph": last_user}
    fork_samples = {name: interleave({"threadlog": ours, name: sides[name].fork_sample(fork_points[name])}, fork_rounds)
                    for name in ("agents", "langgraph") if name in sides}

    out = [Measure(GROUP, f"threadlog: append, per message ({count:,} messages)", per_message["threadlog"], "s",
                   samples=count // chunk, extra=context),
           Measure(GROUP, "threadlog: database size", sizes["threadlog"], "bytes")]
    labels = {"langgraph": "LangGraph SqliteSaver", "agents": "Agents SDK AdvancedSQLiteSession"}
    for name in ("agents", "langgraph"):
        if name not in sides:
            out.append(Measure(GROUP, f"{labels[name]}", 0.0, "s", extra={"skipped": "not installed (pip install -e '.[bench]')"}))
            continue
        out.append(Measure(GROUP, f"append per message vs {labels[name]}", per_message["threadlog"], "s", labels[name],
                           per_message[name], "faster", count // chunk))
        out.append(Measure(GROUP, f"database size vs {labels[name]}", sizes["threadlog"], "bytes", labels[name], sizes[name],
                           "smaller", extra={"target": "size_langgraph"} if name == "langgraph" else {}))
        out.append(compare(GROUP, f"fork at message {last_user:,} vs {labels[name]}", fork_samples[name], "threadlog", name,
                           label=labels[name], kind="faster", **({"target": "fork_agents"} if name == "agents" else {})))
    for side in sides.values():
        if hasattr(side, "close"):
            side.close()
    return out
