"""`ThreadlogSaver` under a real LangGraph graph (tests/langgraph_chat.py, a scripted model
and one tool): turns run in separate processes, resume from the log, time-travel into a
threadlog fork, and the log verifies; deletions erase payloads and keep the chain."""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from threadlog import InvalidEvent, Store, search, thread_state, transcript  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver, line_id  # noqa: E402

CHAT = str(Path(__file__).resolve().parent / "langgraph_chat.py")


def turn(db: Path, text: str, reply: str, *extra: str) -> list[list[str]]:
    done = subprocess.run([sys.executable, CHAT, str(db), "ana", text, reply, *extra], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result: list[list[str]] = json.loads(done.stdout)
    return result


def cli(db: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", str(db), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_runs_resume_in_a_new_process_and_time_travel_is_a_fork(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    first = turn(db, "What is 6 times 7?", "tool:6,7")
    assert first == [["human", "What is 6 times 7?"], ["ai", ""], ["tool", "42"], ["ai", "The product is 42."]]
    second = turn(db, "Thanks! And in French?", "Quarante-deux.")  # a new process: the state comes from the log
    assert second == [*first, ["human", "Thanks! And in French?"], ["ai", "Quarante-deux."]]
    branch = turn(db, "And 3 times 5?", "tool:3,5", "--from-turn", "1")  # time travel to the end of turn 1
    assert branch == [*first, ["human", "And 3 times 5?"], ["ai", ""], ["tool", "15"], ["ai", "The product is 15."]]

    root = line_id("ana", "")
    tree = json.loads(cli(db, "tree", root, "--json"))
    forks = [entry for entry in tree if entry["parent_id"] is not None]
    assert len(forks) == 1 and forks[0]["parent_id"] == root  # LangGraph's branch is a threadlog fork
    assert "ok:" in cli(db, "verify")

    with Store(db) as store:
        fork = forks[0]["id"]
        assert forks[0]["kind"] == "fork" and forks[0]["title"] == "ana"
        texts = [block.get("text") for m in thread_state(store, fork).messages for block in m.content]
        assert "And 3 times 5?" in texts and "Thanks! And in French?" not in texts
        assert "Thanks! And in French?" in transcript(store, root) and "3 times 5" in transcript(store, fork)
        assert [hit.thread for hit in search(store, "French")] == [root]
        # A fork costs one event, not a copy of the parent's checkpoints.
        assert store.thread(fork).head - store.thread(fork).parent_offset < len(branch) * 4
        # The latest state of the LangGraph thread is the branch's (the newest checkpoint).
        saver = ThreadlogSaver(store)
        latest = saver.get_tuple({"configurable": {"thread_id": "ana", "checkpoint_ns": ""}})
        assert latest is not None
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]][-1] == "The product is 15."


def echo_graph(saver: ThreadlogSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def test_a_message_list_is_stored_as_what_was_appended(tmp_path: Path) -> None:
    with Store(tmp_path / "grow.db") as store:
        app = echo_graph(ThreadlogSaver(store))
        config: Any = {"configurable": {"thread_id": "t"}}
        for i in range(30):
            app.invoke({"messages": [HumanMessage(f"message number {i} " + "x" * 200)]}, config)
        assert len(app.get_state(config).values["messages"]) == 60
        first = '"content": "message number 0 '
        holding = [e for e in store.read(line_id("t", "")) if e.type.startswith("langgraph.") and first in json.dumps(e.data)]
        # The first message is in the input checkpoint and in the input's write; the checkpoint that added it
        # names that write, or holds the message when LangGraph's background put of the write came after it
        # (a busy machine: 1 run in 40 with two cores loaded); the 118 checkpoints after them store only
        # what they appended.
        kinds = [e.type for e in holding]
        assert kinds[:1] == ["langgraph.checkpoint"] and kinds.count("langgraph.checkpoint") <= 2
        assert kinds.count("langgraph.writes") <= 1 and len(holding) <= 3


def test_async_graph_copy_and_delete_keep_the_log_verifiable(tmp_path: Path) -> None:
    db = tmp_path / "async.db"
    secret = "my card is 4111 1111 1111 1111"

    async def run() -> None:
        with Store(db) as store:
            saver = ThreadlogSaver(store)
            app = echo_graph(saver)
            await app.ainvoke({"messages": [HumanMessage(secret)]}, {"configurable": {"thread_id": "src"}})
            await saver.acopy_thread("src", "dst")
            copied = await app.aget_state({"configurable": {"thread_id": "dst"}})
            assert copied.values["messages"][0].content == secret
            await saver.adelete_thread("src")
            assert await saver.aget_tuple({"configurable": {"thread_id": "src", "checkpoint_ns": ""}}) is None
            kept = await app.aget_state({"configurable": {"thread_id": "dst"}})
            assert kept.values["messages"][0].content == secret  # the copy still holds what it shares
            await saver.adelete_thread("dst")
            assert await saver.aget_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": ""}}) is None
            report = store.verify()
            assert report.redacted > 0

    asyncio.run(run())
    assert secret.encode() not in db.read_bytes()  # erased by redaction, no copy left in the file


def test_a_copy_holds_every_branch_as_it_was_and_outlives_its_source(tmp_path: Path) -> None:
    with Store(tmp_path / "copy.db") as store:
        saver = ThreadlogSaver(store)
        app = echo_graph(saver)
        src: Any = {"configurable": {"thread_id": "src"}}
        for text in ("one", "two", "three"):
            app.invoke({"messages": [HumanMessage(text)]}, src)
        past = next(s.config for s in app.get_state_history(src) if len(s.values.get("messages", [])) == 2 and not s.next)
        app.invoke({"messages": [HumanMessage("branch")]}, past)  # time travel: a second stream in the source
        before = [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "src", "checkpoint_ns": ""}})]
        saver.copy_thread("src", "dst")
        app.invoke({"messages": [HumanMessage("after the copy")]}, src)  # the source goes on; the copy does not see it
        dst: Any = {"configurable": {"thread_id": "dst", "checkpoint_ns": ""}}
        assert [t.checkpoint["id"] for t in saver.list(dst)] == before
        saver.delete_thread("src")
        assert list(saver.list({"configurable": {"thread_id": "src", "checkpoint_ns": ""}})) == []
        assert [t.checkpoint["id"] for t in saver.list(dst)] == before
        contents = [[m.content for m in t.checkpoint["channel_values"].get("messages", [])] for t in saver.list(dst)]
        assert ["one", "echo: one", "branch", "echo: branch"] in contents and ["one", "echo: one", "two", "echo: two",
                                                                                 "three", "echo: three"] in contents
        app.invoke({"messages": [HumanMessage("four")]}, {"configurable": {"thread_id": "dst"}})  # the copy runs on
        assert app.get_state({"configurable": {"thread_id": "dst"}}).values["messages"][-1].content == "echo: four"
        store.verify()
        saver.delete_thread("dst")
        assert store.verify().redacted > 0
    assert b"after the copy" not in (tmp_path / "copy.db").read_bytes()
    assert b"branch" not in (tmp_path / "copy.db").read_bytes()


def test_an_interrupted_run_resumes_from_another_store_and_two_writers_share_a_thread(tmp_path: Path) -> None:
    from langgraph.types import Command, interrupt

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("May I book the 08:04?")
        return {"messages": [AIMessage(f"Booked: {answer}")]}

    def build(store: Store) -> Any:
        graph = StateGraph(MessagesState)
        graph.add_node("ask", ask)
        graph.add_edge(START, "ask")
        return graph.compile(checkpointer=ThreadlogSaver(store))

    db = tmp_path / "hitl.db"
    config: Any = {"configurable": {"thread_id": "trip"}}
    with Store(db) as first:
        paused = build(first).invoke({"messages": [HumanMessage("Book me a train")]}, config)
        assert paused["__interrupt__"][0].value == "May I book the 08:04?"
    with Store(db) as second, Store(db) as third:  # a restart; then two writers on one thread
        done = build(second).invoke(Command(resume="yes"), config)
        assert done["messages"][-1].content == "Booked: yes"
        other = echo_graph(ThreadlogSaver(third))
        mine = echo_graph(ThreadlogSaver(second))
        other.invoke({"messages": [HumanMessage("from the other writer")]}, config)
        mine.invoke({"messages": [HumanMessage("from this one")]}, config)
        final = [m.content for m in other.get_state(config).values["messages"]]
        assert final[-4:] == ["from the other writer", "echo: from the other writer", "from this one", "echo: from this one"]
        second.verify()


LOOSE_TOOL_CALLS = [
    [[ToolMessage("from a trimmed history", tool_call_id="gone"), HumanMessage("go on")]],
    [[AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]), ToolMessage("one", tool_call_id="c1"),
      ToolMessage("again", tool_call_id="c1")]],
    [[AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]), HumanMessage("never mind")],
     [AIMessage("let me retry", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])]],
    [[AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}, {"name": "g", "args": {}, "id": "c1"}])]],
]


@pytest.mark.parametrize("turns", LOOSE_TOOL_CALLS, ids=["result-without-call", "two-results", "id-reused-while-pending",
                                                         "id-twice-in-one-message"])
def test_messages_that_pair_tool_calls_loosely_are_checkpointed_as_the_in_memory_saver_does(
        tmp_path: Path, turns: list[list[Any]]) -> None:
    """Models and trimmed histories produce tool messages the Messages API would refuse;
    LangGraph's own savers checkpoint them, and so must this one (its message events are a
    view: what cannot pair there is left out of the view, not out of the checkpoint)."""
    from langgraph.checkpoint.memory import InMemorySaver

    def build(saver: Any) -> Any:
        graph = StateGraph(MessagesState)
        graph.add_node("noop", lambda state: {"messages": []})
        graph.add_edge(START, "noop")
        return graph.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "t"}}
    oracle = build(InMemorySaver())
    with Store(tmp_path / "loose.db") as store:
        app = build(ThreadlogSaver(store))
        for messages in turns:
            oracle.invoke({"messages": messages}, config)
            app.invoke({"messages": messages}, config)
        assert app.get_state(config).values == oracle.get_state(config).values
        assert len(list(app.get_state_history(config))) == len(list(oracle.get_state_history(config)))
        store.verify()


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


DEEP_STEPS = {
    "state-value": lambda: {"note": nested(150)},
    "message-content": lambda: {"messages": [AIMessage([{"type": "text", "text": "hi", "extra": nested(95)}], id="a1")]},
    "message-kwargs": lambda: {"messages": [AIMessage("hi", additional_kwargs={"x": nested(95)}, id="a1")]},
    "tool-call-args": lambda: {"messages": [AIMessage("", tool_calls=[{"name": "f", "args": {"q": nested(97)}, "id": "c1"}], id="a1"),
                                            ToolMessage("done", tool_call_id="c1", id="t1")]},
}


@pytest.mark.parametrize("step", list(DEEP_STEPS.values()), ids=list(DEEP_STEPS))
def test_deeply_nested_values_are_checkpointed_as_the_in_memory_saver_does(tmp_path: Path, step: Any) -> None:
    """An event holds JSON nested at most 100 levels; LangGraph's savers (msgpack) hold
    deeper values, so one that would nest past the limit is stored through the serializer."""
    from langgraph.checkpoint.memory import InMemorySaver

    class State(MessagesState):
        note: Any

    def build(saver: Any) -> Any:
        graph = StateGraph(State)
        graph.add_node("step", lambda state: step())
        graph.add_edge(START, "step")
        return graph.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "t"}}
    oracle = build(InMemorySaver())
    oracle.invoke({"messages": [HumanMessage("go", id="h1")]}, config)
    with Store(tmp_path / "deep.db") as store:
        app = build(ThreadlogSaver(store))
        app.invoke({"messages": [HumanMessage("go", id="h1")]}, config)
        assert app.get_state(config).values == oracle.get_state(config).values
        assert "go" in transcript(store, line_id("t", ""))
        store.verify()


def test_a_refused_checkpoint_on_a_new_branch_leaves_no_fork_behind(tmp_path: Path) -> None:
    """Running from an older checkpoint forks the log before the checkpoint is appended; a
    checkpoint the store refuses (text that is not UTF-8) must refuse before that fork."""
    from typing import TypedDict

    class State(TypedDict):
        note: str

    graph = StateGraph(State)
    graph.add_node("keep", lambda state: {"note": state["note"]})
    graph.add_edge(START, "keep")
    with Store(tmp_path / "refused.db") as store:
        app = graph.compile(checkpointer=ThreadlogSaver(store))
        config: Any = {"configurable": {"thread_id": "t"}}
        app.invoke({"note": "one"}, config)
        app.invoke({"note": "two"}, config)
        past = list(app.get_state_history(config))[-2].config
        before = (store.counts(), [t.id for t in store.all_threads()])
        with pytest.raises(InvalidEvent, match="UTF-8"):
            app.invoke({"note": "lone \ud800 surrogate"}, past)
        assert (store.counts(), [t.id for t in store.all_threads()]) == before
        app.invoke({"note": "three"}, past)  # the branch is made when a checkpoint can be stored on it
        assert app.get_state(config).values == {"note": "three"}
        store.verify()


@pytest.mark.parametrize("before", ["draft", 3, None], ids=["text", "int", "none"])
def test_a_channel_that_becomes_a_message_list_is_checkpointed_as_the_in_memory_saver_does(tmp_path: Path, before: Any) -> None:
    """A channel held a value that is not a message list, then a list of messages: `put` read
    the parent's value as messages and failed ('str' object has no attribute 'id')."""
    from langgraph.checkpoint.memory import InMemorySaver

    class State(TypedDict):
        out: Any

    graph = StateGraph(State)
    graph.add_node("draft", lambda state: {"out": before})
    graph.add_node("final", lambda state: {"out": [AIMessage("final answer", id="a1")]})
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "final")
    config: Any = {"configurable": {"thread_id": "t"}}
    oracle = graph.compile(checkpointer=InMemorySaver())
    oracle.invoke({"out": None}, config)
    with Store(tmp_path / "becomes.db") as store:
        app = graph.compile(checkpointer=ThreadlogSaver(store))
        app.invoke({"out": None}, config)
        assert [s.values for s in app.get_state_history(config)] == [s.values for s in oracle.get_state_history(config)]
        assert "final answer" in transcript(store, line_id("t", ""))
        store.verify()


COPY_THEN_DELETE = {
    "copy-first": lambda saver: (saver.delete_thread("dst"), saver.delete_thread("src")),
    "source-first": lambda saver: (saver.delete_thread("src"), saver.delete_thread("dst")),
    "runs-in-both": lambda saver: saver.delete_for_runs([RUN]),
}
RUN = "00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize("remove", list(COPY_THEN_DELETE.values()), ids=list(COPY_THEN_DELETE))
def test_deletions_after_a_copy_and_its_source_are_deleted_skip_what_is_erased(tmp_path: Path, remove: Any) -> None:
    """Once a copy and its source were both deleted, the events they shared were erased by
    whichever came second, and the other's index still listed them: every later deletion
    on that saver tried to erase them again ('position 2 is already redacted')."""
    db = tmp_path / "erased.db"
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = echo_graph(saver)
        app.invoke({"messages": [HumanMessage("shared secret")]}, {"configurable": {"thread_id": "src", "run_id": RUN}})
        saver.copy_thread("src", "dst")
        app.invoke({"messages": [HumanMessage("other")]}, {"configurable": {"thread_id": "other"}})
        remove(saver)
        saver.delete_for_runs(["no such run"])
        saver.prune(["src", "dst"])
        saver.delete_thread("dst")
        saver.delete_thread("other")
        assert list(saver.list(None)) == []
        assert store.verify().redacted > 0
    assert b"shared secret" not in db.read_bytes()


class Noted(MessagesState):
    note: str


FORKED_THEN_REMOVED = {
    "delete_thread": lambda saver: saver.delete_thread("ana"),
    "prune-delete": lambda saver: saver.prune(["ana"], strategy="delete"),
    "delete_for_runs": lambda saver: saver.delete_for_runs([RUN]),
}


@pytest.mark.parametrize("remove", list(FORKED_THEN_REMOVED.values()), ids=list(FORKED_THEN_REMOVED))
def test_a_thread_forked_from_the_cli_keeps_its_messages_when_the_langgraph_thread_is_removed(
        tmp_path: Path, remove: Any) -> None:
    """`threadlog fork` of a LangGraph thread makes a thread no LangGraph thread names. A
    deletion asked every fork below the deleted events whether it had deleted them too, read
    this one's fork options as a copy's, and stopped on an AttributeError, half done (the
    deletion recorded, nothing erased). The fork's messages are its own history and stay; the
    checkpoints, which only LangGraph reads, are erased."""
    db = tmp_path / "forked.db"

    def reply(state: Noted) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")], "note": "api key sk-live-0042"}

    graph = StateGraph(Noted)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app: Any = graph.compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage("Book me a train")]}, {"configurable": {"thread_id": "ana", "run_id": RUN}})
        fork = cli(db, "fork", line_id("ana", "")).strip()
        cli(db, "append", fork, "--role", "user", "--text", "What if I fly?")
        remove(saver)
        assert saver.get_tuple({"configurable": {"thread_id": "ana"}}) is None
        assert list(saver.list(None)) == []
        shown = transcript(store, fork)
        assert "Book me a train" in shown and "echo: Book me a train" in shown and "What if I fly?" in shown
        assert store.verify().redacted > 0
    assert b"sk-live-0042" not in db.read_bytes()


def extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Logs(TypedDict):
    """A `DeltaChannel` that snapshots every third update (a run updates it twice), and one that
    does not in these runs."""

    often: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=3)]
    rarely: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=100)]


@pytest.mark.parametrize("channel", ["often", "rarely"])
def test_prune_keeps_what_a_delta_channel_is_rebuilt_from(tmp_path: Path, channel: str) -> None:
    """A `DeltaChannel` stores no value between its snapshots: it is replayed from the writes
    of the checkpoints before, back to the last snapshot. `prune` kept only the latest
    checkpoint, and the channel read back empty, without an error."""
    graph = StateGraph(Logs)
    graph.add_node("n", lambda state: {channel: ["node"]})
    graph.add_edge(START, "n")
    db = tmp_path / "delta.db"
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = graph.compile(checkpointer=saver)
        for i in range(4):
            app.invoke({channel: [f"in{i}"]}, config)
        before = app.get_state(config).values
        assert before[channel] == [item for i in range(4) for item in (f"in{i}", "node")]
        count = len(list(saver.list(config)))
        latest = saver.get_tuple(config)
        assert latest is not None and channel not in latest.checkpoint["channel_values"]  # not a snapshot
        saver.prune(["t"])
        assert app.get_state(config).values == before
        kept = len(list(saver.list(config)))
        assert kept < count if channel == "often" else kept == count  # the snapshot's ancestors go; with none, all stay
        store.verify()
    with Store(db) as store:  # as a new process
        assert graph.compile(checkpointer=ThreadlogSaver(store)).get_state(config).values == before


class Total(TypedDict):
    total: Annotated[float, operator.add]


def test_a_reducer_total_equal_to_its_input_keeps_its_type(tmp_path: Path) -> None:
    """The input 1 added to 0.0 is 1.0; the checkpoint stored it as its parent's write (1),
    since 1 == 1.0, and the history read {"total": 1} where InMemorySaver reads 1.0."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = StateGraph(Total)
    graph.add_node("n", lambda state: {"total": 2})
    graph.add_edge(START, "n")
    config: Any = {"configurable": {"thread_id": "t"}}
    oracle = graph.compile(checkpointer=InMemorySaver())
    oracle.invoke({"total": 1}, config)
    with Store(tmp_path / "total.db") as store:
        app = graph.compile(checkpointer=ThreadlogSaver(store))
        app.invoke({"total": 1}, config)
        history = [{k: (type(v), v) for k, v in s.values.items()} for s in app.get_state_history(config)]
        assert history == [{k: (type(v), v) for k, v in s.values.items()} for s in oracle.get_state_history(config)]


class Halves(TypedDict):
    a: str
    b: str


def test_a_prune_that_would_restate_past_an_events_size_is_refused_by_name_and_changes_nothing(tmp_path: Path) -> None:
    """Two 18 MiB channels, each stored in its own checkpoint: `prune` writes the kept one again
    whole (what it rests on is erased), 36 MiB in one event. It was refused as "events[0].data:
    is 37749294 bytes of JSON", naming neither the prune nor the checkpoint; it now says which
    and why, before writing anything, and `delete_thread` still removes the thread."""
    graph = StateGraph(Halves)
    graph.add_node("n1", lambda state: {"a": "x" * (18 << 20)})
    graph.add_node("n2", lambda state: {"b": "y" * (18 << 20)})
    graph.add_edge(START, "n1")
    graph.add_edge("n1", "n2")
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(tmp_path / "big.db") as store:
        saver = ThreadlogSaver(store)
        app = graph.compile(checkpointer=saver)
        app.invoke({"a": "", "b": ""}, config)
        before = (store.counts(), store.last_position())
        with pytest.raises(InvalidEvent, match=r"prune of LangGraph thread 't': checkpoint .* must be written again whole.*"
                                               r"at most 33554432 .*no checkpoint was removed"):
            saver.prune(["t"])
        assert (store.counts(), store.last_position()) == before
        assert len(app.get_state(config).values["b"]) == 18 << 20
        saver.delete_thread("t")
        assert list(saver.list(config)) == []
        store.verify()


class Filled(TypedDict):
    a: str
    b: str
    fill: str


def test_a_deletion_whose_first_restatement_serves_the_next_is_not_refused(tmp_path: Path) -> None:
    """Every checkpoint resting on the deleted ones was checked, up front, for being writable
    whole: the latest (both 18 MiB values, 36 MiB) was refused, though writing the one before
    it again whole leaves the latest resting on nothing deleted, as the release before did."""
    graph = StateGraph(Filled)
    graph.add_node("n", lambda state: {"a": "x" * (18 << 20)} if state["fill"] == "a" else
                   {"b": "y" * (18 << 20)} if state["fill"] == "b" else {})
    graph.add_edge(START, "n")
    first, second = "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(tmp_path / "big.db") as store:
        saver = ThreadlogSaver(store)
        app = graph.compile(checkpointer=saver)
        app.invoke({"fill": "a", "a": "", "b": ""}, {"configurable": {"thread_id": "t", "run_id": first}})
        app.invoke({"fill": "b"}, {"configurable": {"thread_id": "t", "run_id": second}})
        saver.delete_for_runs([first])
        values = app.get_state(config).values
        assert (len(values["a"]), len(values["b"])) == (18 << 20, 18 << 20)
        assert all(c.metadata.get("run_id") != first for c in saver.list(config))
        store.verify()


def log_hints(db: Path, thread: str) -> list[tuple[str, str]]:
    """`threadlog log THREAD` as (type, hint) pairs: what a line says after its hash."""
    return [(parts[3], (parts + [""])[5]) for parts in (line.split(maxsplit=5) for line in cli(db, "log", thread).splitlines())]


def test_log_lines_say_each_checkpoints_step_and_channels_and_each_tasks_writes(tmp_path: Path) -> None:
    """`threadlog log` of a LangGraph thread showed nothing after a checkpoint's or a write's
    hash, most of its lines: which step a checkpoint was, what each task wrote, what a deletion
    removed could only be read in --json."""
    db = tmp_path / "logged.db"
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        echo_graph(saver).invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}})
        saver.copy_thread("t", "kept")  # the copy's log still reads the checkpoints once the source is deleted
        saver.delete_thread("t")
    # In the order LangGraph called the saver: newer releases (1.2.24) put the last task's writes
    # after the checkpoint that follows it, as the ones before did not.
    assert sorted(hint for hint in log_hints(db, line_id("kept", "")) if hint[0].startswith("langgraph.")) == sorted([
        ("langgraph.checkpoint", "step -1, input: __start__"),
        ("langgraph.writes", "task __start__: messages, branch:to:reply"),
        ("langgraph.checkpoint", "next step, loop: branch:to:reply, messages"),
        ("langgraph.writes", "task reply: messages"),
        ("langgraph.checkpoint", "next step: messages")])
    assert ("langgraph.deleted", "delete_thread: 3 checkpoints") in log_hints(db, line_id("t", ""))


def test_log_lines_escape_what_a_graph_names_its_channels_and_nodes(tmp_path: Path) -> None:
    """A channel and a node are named by the graph's code: their names are shown on one line,
    escaped as every other log line's text, so that they cannot drive the terminal."""
    channel, node = "note\x1b[2J\nline\u202eevil", "step\x1b]0;title\x07"
    graph = StateGraph(TypedDict("Named", {channel: str}))
    graph.add_node(node, lambda state: {channel: state[channel] + "!"})
    graph.add_edge(START, node)
    db = tmp_path / "named.db"
    with Store(db) as store:
        graph.compile(checkpointer=ThreadlogSaver(store)).invoke({channel: "hi"}, {"configurable": {"thread_id": "n"}})
    shown = cli(db, "log", line_id("n", ""))
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert r"task step\x1b]0;title\x07: note\x1b[2J line\u202eevil" in shown, shown


def test_a_hand_written_write_naming_no_text_channel_reads_as_json_in_its_log_line(tmp_path: Path) -> None:
    """`threadlog emit` takes any JSON for a write's channel; its log line showed Python's repr
    of it (`{'x': 1}, None`), where every other line shows JSON."""
    db = tmp_path / "emitted.db"
    with Store(db) as store:
        store.create_thread(thread_id="w")
        store.append("w", [{"type": "langgraph.writes", "data": {"task_id": "x", "writes": [{"channel": {"x": 1}}, {"idx": 1}]}}])
    assert ("langgraph.writes", "task x: {…}, null") in log_hints(db, "w")
