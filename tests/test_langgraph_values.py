"""Invariant: whatever a LangGraph run puts, `ThreadlogSaver` gives back, for every
checkpoint, branches and message deltas included (hypothesis drives the runs)."""

from __future__ import annotations

import enum
from typing import Any

import pytest

pytest.importorskip("langgraph")

from hypothesis import example, given, settings, strategies as st  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402


class Status(str, enum.Enum):
    NEW = "new"
    DONE = "done"


def exact(value: Any) -> Any:
    """`value` with every type and dict key order spelled out (`==` sees neither: a str enum's
    member equals its str, and dicts in any order are equal). Messages compare as they are:
    the key order inside a message is not kept (langgraph_values.py)."""
    if type(value) is dict:
        return ("dict", [(key, exact(item)) for key, item in value.items()])
    if type(value) is list and not all(isinstance(item, BaseMessage) for item in value):
        return ("list", [exact(item) for item in value])
    return (type(value).__name__, repr(value) if type(value) is float else value)  # -0.0 == 0.0


STEP = st.one_of(
    st.tuples(st.just("say"), st.text(max_size=20)),  # the messages list grows
    st.tuples(st.just("rewrite"), st.integers(0, 5)),  # ... or is cut (not an append)
    st.tuples(st.just("edit"), st.text(max_size=5)),  # ... or its last message is replaced (same length)
    st.tuples(st.just("note"), st.dictionaries(st.text(max_size=5), st.integers() | st.none(), max_size=3)),
    st.tuples(st.just("drop"), st.just(None)),  # a channel emptied
    st.tuples(st.just("status"), st.sampled_from(list(Status))),  # a str enum's member: not the str it equals
    st.tuples(st.just("stamp"), st.datetimes()),  # a message holding what JSON cannot (a datetime, an int key)
    st.tuples(st.just("branch"), st.integers(0, 50)),  # the next step starts from an earlier checkpoint
)


@settings(max_examples=40, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=14))
def test_every_checkpoint_reads_back_as_it_was_put(steps: list[tuple[str, Any]]) -> None:
    with Store(":memory:") as store:
        saver = ThreadlogSaver(store)
        put: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (id, values, versions)
        parent: tuple[str, dict[str, Any], dict[str, Any]] | None = None
        for i, (kind, arg) in enumerate(steps):
            if kind == "branch" and put:
                parent = put[arg % len(put)]
                continue
            values = dict(parent[1]) if parent else {}
            versions = dict(parent[2]) if parent else {}
            changed = {}
            if kind == "say":
                message = (HumanMessage if i % 2 else AIMessage)(arg, id=f"m{i}")
                values["messages"] = [*values.get("messages", []), message]
                changed["messages"] = True
            elif kind == "rewrite" and values.get("messages"):
                values["messages"] = values["messages"][:arg]
                changed["messages"] = True
            elif kind == "edit" and values.get("messages"):
                values["messages"] = [*values["messages"][:-1], HumanMessage(arg, id=f"e{i}")]
                changed["messages"] = True
            elif kind == "note":
                values["note"] = arg
                changed["note"] = True
            elif kind == "status":
                values["status"] = arg
                changed["status"] = True
            elif kind == "stamp":
                message = AIMessage("at", id=f"s{i}", additional_kwargs={"at": arg, "by": {7: "int key"}})
                values["messages"] = [*values.get("messages", []), message]
                changed["messages"] = True
            elif kind == "drop" and "note" in values:
                del values["note"]
                changed["note"] = True
            new_versions = {ch: i + 1 for ch in changed}  # increasing along every chain
            versions.update(new_versions)
            checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6(clock_seq=i)), "channel_values": values,
                               "channel_versions": dict(versions)}
            config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            if parent:
                config["configurable"]["checkpoint_id"] = parent[0]
            saver.put(config, checkpoint, {"step": i}, new_versions)
            parent = (checkpoint["id"], values, versions)
            put.append(parent)
        for cid, values, versions in put:
            got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}})
            assert got is not None
            assert got.checkpoint["channel_values"] == values
            # Each value's types and key order too (the channels' own order is LangGraph's to choose).
            assert {ch: exact(v) for ch, v in got.checkpoint["channel_values"].items()} == {ch: exact(v) for ch, v in values.items()}
            assert got.checkpoint["channel_versions"] == versions
        store.verify()


SCALARS = st.sampled_from([True, 1, 1.0, False, 0, 0.0, -0.0, "1"])  # equal under ==, three by three, not by type


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(SCALARS, SCALARS, SCALARS, st.booleans()), min_size=1, max_size=6))
@example([(0.0, 1, 0.0, True), (-0.0, 2, -0.0, True)])
def test_values_equal_to_their_parents_but_of_another_type_read_back_as_put(steps: list[tuple[Any, Any, Any, bool]]) -> None:
    """A checkpoint stores what differs from its parent (metadata, versions) and names its
    parent's write when the value is that write; `==` took True, 1 and 1.0 for one value, so
    metadata {"flag": True, "step": 2.0} read back {"flag": 1, "step": 2}, and -0.0 read back 0.0."""
    with Store(":memory:") as store:
        saver = ThreadlogSaver(store)
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        put = []
        for i, (value, version, flag, new) in enumerate(steps):
            if put and not new:  # the channel keeps its parent's value and version
                value, version = put[-1][0]["channel_values"]["x"], put[-1][0]["channel_versions"]["x"]
            elif put:  # the value is the parent's pending write to the channel (LangGraph's usual case)
                saver.put_writes(config, [("x", value)], f"task-{i}")
            checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6(clock_seq=i)), "channel_values": {"x": value},
                               "channel_versions": {"x": version}}
            metadata = {"step": [i, float(i)][i % 2], "flag": flag}
            config = saver.put(config, checkpoint, metadata, {"x": version} if new or not put else {})
            put.append((checkpoint, metadata))
        for checkpoint, metadata in put:
            got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}})
            assert got is not None
            assert exact(got.checkpoint["channel_values"]) == exact(checkpoint["channel_values"])
            assert exact(got.checkpoint["channel_versions"]) == exact(checkpoint["channel_versions"])
            assert exact({k: got.metadata[k] for k in metadata}) == exact(metadata)
