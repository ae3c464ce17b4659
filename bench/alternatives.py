"""threadlog beside LangGraph's `SqliteSaver` and the OpenAI Agents SDK's `AdvancedSQLiteSession`.

Each system stores the same 1,000 messages (alternating user and assistant text), one call
per message, in its own SQLite file; no model is called. LangGraph runs a messages graph
whose one node appends the incoming message (one `invoke` per message); the Agents SDK
session gets `add_items` per message. Both alternatives run in WAL mode at
`synchronous=FULL` (their defaults), so threadlog runs at `FULL` here too.

The LangGraph graph also runs over `ThreadlogSaver` (threadlog.integrations.langgraph),
beside the same graph over `SqliteSaver`: the drop-in comparison.

For the savers, a fork is measured twice: `copy_thread` (the whole thread under a new id)
and `update_state` from a past checkpoint (LangGraph's time travel; LangGraph's own work on
the 1,000 messages is in both figures).

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypedDict

from eventstore.sqlite import SQLiteBackend
from threadlog import Store, search

from .threads import text_of
from .timing import Measure, compare, interleave

GROUP = "alternatives"

# (messages, chunk, fork rounds) per mode
SIZES = {"smoke": (40, 10, 3), "quick": (1_000, 100, 15), "full": (1_000, 100, 25)}


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


def size_on_disk(path: Path, conn: sqlite3.Connection, store: Store | None = None) -> int:
    """The database's bytes once its WAL is folded in (so every system is measured the same way),
    a threadlog `store`'s with its search index caught up (it is part of what the store keeps).

    Measured by page count after the checkpoint, not by the file's size: before it the file
    lacks the pages that are only in the WAL (after the saver's chat, 4.79 MB of 4.89 MB).

    The WAL is checkpointed but not truncated: a truncated WAL grows again on the next
    commits, and at `synchronous=FULL` every commit that grows a file pays for a journal
    commit of the file system too, which would burden whichever system writes next.
    """
    if store is not None:
        search(store, "index", limit=1)  # the index catches up before it answers
    conn.execute("PRAGMA wal_checkpoint(FULL)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


class ThreadlogSide:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.backend = SQLiteBackend(path, synchronous="FULL")  # kept: its size is read from its connection
        self.store = Store(self.backend)
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
        return size_on_disk(self.path, self.backend.conn, self.store)


class LangGraphSide:
    def __init__(self, path: Path, saver: str = "sqlite") -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.graph.message import add_messages

        # Functional form: the annotations must be objects, not strings, for LangGraph to read them.
        State = TypedDict("State", {"messages": Annotated[list[Any], add_messages], "incoming": dict[str, str]})  # type: ignore[misc, unused-ignore]

        def append(state: Any) -> dict[str, Any]:
            return {"messages": [state["incoming"]]}

        graph = StateGraph(State)
        graph.add_node("append", append)
        graph.add_edge(START, "append")
        graph.add_edge("append", END)
        self.path = path
        if saver == "threadlog":  # the same graph over ThreadlogSaver, at the same synchronous=FULL
            from threadlog.integrations.langgraph import ThreadlogSaver

            backend = SQLiteBackend(path, synchronous="FULL")
            self.conn = backend.conn
            self.store: Store | None = Store(backend)
            self.saver: Any = ThreadlogSaver(self.store)
        else:
            self.store = None
            self.conn = sqlite3.connect(str(path), check_same_thread=False)
            self.saver = SqliteSaver(self.conn)
        self.app = graph.compile(checkpointer=self.saver)
        self.config: dict[str, Any] = {"configurable": {"thread_id": "bench"}}
        self.copies = 0

    def add(self, role: str, text: str) -> None:
        self.app.invoke({"incoming": {"role": role, "content": text}}, self.config)  # type: ignore[call-overload, unused-ignore]

    def fork_sample(self, messages: int) -> Callable[[], float]:
        """Branch from the checkpoint that holds `messages` messages (a new child checkpoint)."""
        point = next(s.config for s in self.app.get_state_history(self.config, limit=12)  # type: ignore[arg-type, unused-ignore]
                     if len(s.values.get("messages", ())) == messages)

        def sample() -> float:
            start = time.perf_counter()
            self.app.update_state(point, {"messages": []})
            return time.perf_counter() - start
        return sample

    def copy_sample(self) -> float:
        """Copy the whole thread to a new thread id (`copy_thread`). SqliteSaver has no
        `copy_thread`: its copy is what LangGraph's in-memory and Postgres savers do, every
        checkpoint and write row copied under the new id (then deleted again, untimed)."""
        self.copies += 1
        target = f"copy-{self.copies}"
        if hasattr(self.saver, "copy_thread") and type(self.saver).__name__ == "ThreadlogSaver":
            start = time.perf_counter()
            self.saver.copy_thread("bench", target)
            return time.perf_counter() - start
        start = time.perf_counter()
        with self.conn:
            for table, columns in (("checkpoints", "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"),
                                   ("writes", "checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value")):
                self.conn.execute(f"INSERT INTO {table} (thread_id, {columns}) SELECT ?, {columns} FROM {table} WHERE thread_id = ?",
                                  (target, "bench"))
        seconds = time.perf_counter() - start
        with self.conn:
            for table in ("checkpoints", "writes"):
                self.conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (target,))
        return seconds

    def size(self) -> int:
        return size_on_disk(self.path, self.conn, self.store)


class AgentsSide:
    def __init__(self, path: Path) -> None:
        from agents.extensions.memory import AdvancedSQLiteSession

        self.path = path
        self.loop = asyncio.new_event_loop()
        self.session = AdvancedSQLiteSession(session_id="bench", db_path=path, create_tables=True)

    def add(self, role: str, text: str) -> None:
        self.loop.run_until_complete(self.session.add_items([{"role": role, "content": text}]))  # type: ignore[list-item, misc, unused-ignore]

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


LABELS = {"agents": "Agents SDK AdvancedSQLiteSession", "langgraph": "LangGraph SqliteSaver"}
MAKERS = {"agents": AgentsSide, "langgraph": LangGraphSide}
NEEDS = {"agents": "openai-agents", "langgraph": "langgraph-checkpoint-sqlite"}


def _chat(sides: Mapping[str, Any], count: int, chunk: int) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The same chat of `count` messages written to every side, `chunk` messages a sample and
    the sides interleaved: the script, and each side's seconds per message."""
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
    return script, {name: sum(seconds) / count for name, seconds in appends.items()}


def _pair(name: str, workdir: Path, count: int, chunk: int, fork_rounds: int) -> list[Measure]:
    """threadlog and one alternative, side by side: appends, size, fork at the last user message.

    Each pair has its own threadlog file and runs after the previous pair is done and
    flushed (`os.sync`), so one system's large writes (LangGraph stores the whole state in
    every checkpoint) do not land in another pair's fsyncs.
    """
    os.sync()
    sides: dict[str, Any] = {"threadlog": ThreadlogSide(workdir / f"{name}-threadlog.db"),
                             name: MAKERS[name](workdir / f"{name}.db")}
    script, per_message = _chat(sides, count, chunk)
    sizes = {side: sides[side].size() for side in sides}
    # The same fork point everywhere: just before the last user message.
    last_user = max(i for i, (role, _) in enumerate(script) if role == "user")
    point = {"agents": last_user // 2 + 1, "langgraph": last_user}[name]  # the SDK counts user turns from 1
    forks = interleave({"threadlog": sides["threadlog"].fork_sample(1 + last_user), name: sides[name].fork_sample(point)},
                       fork_rounds)
    for side in sides.values():
        if hasattr(side, "close"):
            side.close()
    label = LABELS[name]
    context = {"messages": count, "synchronous": "FULL", "journal_mode": "wal",
               "threadlog_db_bytes": sizes["threadlog"], f"{name}_db_bytes": sizes[name]}
    return [
        Measure(GROUP, f"append per message vs {label}", per_message["threadlog"], "s", label, per_message[name], "faster",
                count // chunk, context),
        Measure(GROUP, f"database size after {count:,} messages vs {label}", sizes["threadlog"], "bytes", label, sizes[name],
                "smaller", extra={"target": "size_langgraph"} if name == "langgraph" else {}),
        compare(GROUP, f"fork at message {last_user:,} vs {label}", forks, "threadlog", name, label=label, kind="faster",
                **({"target": "fork_agents"} if name == "agents" else {})),
    ]


def _savers(workdir: Path, count: int, chunk: int, fork_rounds: int) -> list[Measure]:
    """The same LangGraph graph checkpointed by ThreadlogSaver and by SqliteSaver: appends,
    size, and a branch (`update_state` from the checkpoint before the last user message)."""
    os.sync()
    sides = {"threadlog": LangGraphSide(workdir / "saver-threadlog.db", "threadlog"),
             "langgraph": LangGraphSide(workdir / "saver-sqlite.db")}
    script, per_message = _chat(sides, count, chunk)
    sizes = {name: side.size() for name, side in sides.items()}
    last_user = max(i for i, (role, _) in enumerate(script) if role == "user")
    forks = interleave({name: side.fork_sample(last_user) for name, side in sides.items()}, fork_rounds)
    copies = interleave({name: side.copy_sample for name, side in sides.items()}, 3)
    label = "LangGraph SqliteSaver"
    context = {"messages": count, "synchronous": "FULL", "journal_mode": "wal",
               "threadlog_db_bytes": sizes["threadlog"], "langgraph_db_bytes": sizes["langgraph"]}
    return [
        Measure(GROUP, "ThreadlogSaver: graph step per message vs SqliteSaver", per_message["threadlog"], "s", label,
                per_message["langgraph"], "faster", count // chunk, context),
        Measure(GROUP, f"ThreadlogSaver: database size after {count:,} messages vs SqliteSaver", sizes["threadlog"], "bytes",
                label, sizes["langgraph"], "smaller", extra={"target": "size_langgraph_saver"}),
        compare(GROUP, f"ThreadlogSaver: copy_thread of {count:,} messages vs SqliteSaver's rows copied", copies, "threadlog",
                "langgraph", label=label, kind="faster", target="fork_langgraph_saver"),
        compare(GROUP, f"ThreadlogSaver: update_state at message {last_user:,} (a branch) vs SqliteSaver", forks, "threadlog",
                "langgraph", label=label, kind="faster"),
    ]


def run(mode: str, workdir: Path) -> list[Measure]:
    count, chunk, fork_rounds = SIZES[mode]
    versions = available()
    out = []
    for name in ("agents", "langgraph"):
        if NEEDS[name] in versions:
            out.extend(_pair(name, workdir, count, chunk, fork_rounds))
            out[-3].extra["versions"] = versions
            if name == "langgraph":
                out.extend(_savers(workdir, count, chunk, fork_rounds))
        else:
            out.append(Measure(GROUP, LABELS[name], 0.0, "s", extra={"skipped": "not installed (pip install -e '.[bench]')"}))
    return out
