"""A file `ThreadlogSaver` wrote in its first layout (tests/fixtures/langgraph-v1.db, made by
make_langgraph_v1.py at commit b1502d9: every checkpoint names its parent and stores its
header's changes whole) reads back as LangGraph read it then, and runs on in today's layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver, line_id  # noqa: E402
from threadlog.integrations.langgraph_lines import legacy_line_id  # noqa: E402
from tests.test_langgraph import echo_graph  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shown(value: Any) -> Any:
    if isinstance(value, list):
        return [shown(v) for v in value]
    if isinstance(value, dict):
        return {k: shown(v) for k, v in value.items()}
    if hasattr(value, "content"):
        return [type(value).__name__, value.content, value.id]
    return value


def checkpoints(saver: ThreadlogSaver, thread: str) -> list[dict[str, Any]]:
    """What make_langgraph_v1.py wrote to langgraph-v1.json, read through `saver`."""
    return [{"id": t.config["configurable"]["checkpoint_id"],
             "parent": t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None,
             "metadata": shown(t.metadata), "values": shown(t.checkpoint["channel_values"]),
             "versions": t.checkpoint["channel_versions"], "ts": t.checkpoint["ts"],
             "updated": t.checkpoint.get("updated_channels"),
             "writes": shown([list(w) for w in t.pending_writes or []])}
            for t in saver.list({"configurable": {"thread_id": thread}})]


def counts(store: Store, root: str) -> int:
    """How many checkpoints the line's streams hold, counted by `Store.count` (and checked by reading them)."""
    total = 0
    for stream in store.ids_starting(root, limit=100):
        total += store.count(stream, "langgraph.checkpoint")
        assert store.count(stream, "langgraph.checkpoint") == [e.type for e in store.read(stream)].count("langgraph.checkpoint")
    return total


def test_a_first_layout_file_reads_as_it_was_written_and_runs_on(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "langgraph-v1.db", db)
    expected = json.loads((FIXTURES / "langgraph-v1.json").read_text())
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        root = legacy_line_id("chat", "")  # the id the first layout gave it
        old_counts = counts(store, root)
        for thread, was in expected.items():
            assert checkpoints(saver, thread) == was, thread

        app = echo_graph(saver)
        chat: Any = {"configurable": {"thread_id": "chat"}}
        app.invoke({"messages": [HumanMessage("after the upgrade")]}, chat)
        state = app.get_state(chat)
        assert [m.content for m in state.values["messages"]][-2:] == ["after the upgrade", "echo: after the upgrade"]
        # The new checkpoints rest on the old ones: the old ones still read the same, the new ones
        # name their parents, and a branch from an old checkpoint works too.
        now = checkpoints(saver, "chat")
        assert now[len(now) - len(expected["chat"]):] == expected["chat"]
        old_point = {"configurable": {"thread_id": "chat", "checkpoint_id": expected["chat"][-3]["id"]}}
        app.invoke({"messages": [HumanMessage("from an old point")]}, old_point)
        saver.prune(["chat-copy"])
        store.verify()
        # The old checkpoints' type is stored as text, the new ones' as a code: a count finds both. The
        # new ones went on under the old line's id; a new thread gets today's shorter one.
        assert counts(store, root) > old_counts
        app.invoke({"messages": [HumanMessage("a new thread")]}, {"configurable": {"thread_id": "fresh"}})
        assert store.thread(line_id("fresh", "")).head > 0 and len(line_id("fresh", "")) == 13
        final = {thread: checkpoints(saver, thread) for thread in expected}
    with Store(db) as store:  # a new process: everything read from the log again
        saver = ThreadlogSaver(store)
        assert {thread: checkpoints(saver, thread) for thread in expected} == final
        assert len(final["chat"]) == len(now) + 3 and len(final["chat-copy"]) == 1 and final["plain"] == expected["plain"]


@pytest.mark.parametrize("removal", ["delete_for_runs", "prune"])
def test_what_a_removal_keeps_reads_back_the_same_though_it_rested_on_what_was_removed(tmp_path: Path, removal: str) -> None:
    """A compact checkpoint rests on the event before it (its parent, its metadata, its header)
    and on its parent's writes (its values): when those are removed and erased, what remains
    is written whole first, so it reads back the same, in this process and the next."""
    db = tmp_path / "removal.db"
    runs = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(4)]
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = echo_graph(saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        for i, run_id in enumerate(runs):
            app.invoke({"messages": [HumanMessage(f"turn {i}")]}, {**config, "metadata": {"run_id": run_id}})
        before = {c["id"]: c for c in checkpoints(saver, "t")}
        if removal == "delete_for_runs":
            saver.delete_for_runs(runs[1:3])  # the middle runs: the last run's checkpoints rested on them
        else:
            saver.prune(["t"])  # keeps the latest, whose parent, metadata and values rested on the others
        kept = checkpoints(saver, "t")
        assert 0 < len(kept) < len(before)
        assert all(c == before[c["id"]] for c in kept)
        assert [m.content for m in app.get_state(config).values["messages"]][-2:] == ["turn 3", "echo: turn 3"]
        store.verify()
    with Store(db) as store:  # a new process reads the log again, erased payloads and all
        assert checkpoints(ThreadlogSaver(store), "t") == kept
