"""A LangGraph run whose messages are edited after they were stored (human review of a tool
call with `update_state`, a node returning a message of the same id): threadlog's view of the
thread shows what LangGraph's state holds, the original stays in the parent of the fork, and
LangGraph reads every checkpoint as its own savers do. A message only removed (a
`RemoveMessage`, a graph trimming its history) forks nothing and stays in the view."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from eventstore import sqlite as sqlite_backend  # noqa: E402
from threadlog import Store, StoreError, anthropic_request, display_rows, transcript  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver, line_id  # noqa: E402

CONFIG: Any = {"configurable": {"thread_id": "ana"}}


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def call(a: int, b: int, mid: str = "ai-1") -> AIMessage:
    return AIMessage("", id=mid, tool_calls=[{"name": "multiply", "args": {"a": a, "b": b}, "id": "call_1"}])


def agent_graph(saver: Any, review: bool = False) -> Any:
    """A scripted model that calls `multiply` once, then answers; stops before the tool runs
    (or, with `review`, asks a reviewer node through `interrupt` for the call's arguments)."""
    model = GenericFakeChatModel(messages=iter([call(6, 7), AIMessage("The product is 48.", id="ai-2")]))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def reviewer(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        args = interrupt({"proposed": last.tool_calls[0]["args"]})
        return {"messages": [AIMessage("", id=last.id, tool_calls=[{**last.tool_calls[0], "args": args}])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return ("review" if review else "tools") if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([multiply]))
    graph.add_edge(START, "agent")
    graph.add_edge("tools", "agent")
    if review:
        graph.add_node("review", reviewer)
        graph.add_edge("review", "tools")
        graph.add_conditional_edges("agent", route, ["review", END])
        return graph.compile(checkpointer=saver)
    graph.add_conditional_edges("agent", route, ["tools", END])
    return graph.compile(checkpointer=saver, interrupt_before=["tools"])


def edit_by_update_state(app: Any) -> None:
    app.invoke({"messages": [HumanMessage("What is 6 times 7?", id="h-1")]}, CONFIG)
    assert app.get_state(CONFIG).next == ("tools",)
    app.update_state(CONFIG, {"messages": [call(6, 8)]})  # the reviewer's edit: the same id, other arguments
    app.invoke(None, CONFIG)


def edit_in_a_node(app: Any) -> None:
    app.invoke({"messages": [HumanMessage("What is 6 times 7?", id="h-1")]}, CONFIG)
    app.invoke(Command(resume={"a": 6, "b": 8}), CONFIG)


EDITS = {"update-state": (edit_by_update_state, False), "interrupt-in-a-node": (edit_in_a_node, True)}


def steady(values: dict[str, Any]) -> dict[str, Any]:
    """A state's values with the id ToolNode draws for each tool message left out."""
    return {key: [m.model_copy(update={"id": None}) if isinstance(m, ToolMessage) else m for m in value]
            if key == "messages" else value for key, value in values.items()}


def history(app: Any) -> list[tuple[Any, ...]]:
    """LangGraph's view of a thread, less what differs between any two runs (ids, times)."""
    states = list(app.get_state_history(CONFIG))
    ids = [s.config["configurable"]["checkpoint_id"] for s in states]
    parents = [ids.index(s.parent_config["configurable"]["checkpoint_id"]) if s.parent_config else None for s in states]
    return [(parent, steady(s.values), s.next, {k: v for k, v in s.metadata.items() if k != "run_id"}, [t.name for t in s.tasks],
             [i.value for i in s.interrupts]) for parent, s in zip(parents, states)]


def oracles(tmp_path: Path, build: Any, drive: Any) -> list[list[tuple[Any, ...]]]:
    """The histories LangGraph's InMemorySaver and SqliteSaver keep of the same run."""
    out = []
    with sqlite3.connect(tmp_path / "oracle.sqlite", check_same_thread=False) as conn:
        for saver in (InMemorySaver(), SqliteSaver(conn)):
            app = build(saver)
            drive(app)
            out.append(history(app))
    return out


@pytest.mark.parametrize("edit", list(EDITS.values()), ids=list(EDITS))
def test_an_edited_tool_call_is_what_the_thread_shows_and_the_original_stays_in_the_parent(tmp_path: Path, edit: Any) -> None:
    drive, review = edit
    with Store(tmp_path / "edit.db") as store:
        saver = ThreadlogSaver(store)
        app = agent_graph(saver, review)
        drive(app)
        assert [m.content for m in app.get_state(CONFIG).values["messages"]][-2:] == ["48", "The product is 48."]

        thread = saver.threadlog_thread(CONFIG)
        assert thread != line_id("ana", "") and store.thread(thread).parent_id == line_id("ana", "")
        shown = transcript(store, thread)
        assert '`{"a":6,"b":8}`' in shown and '"b":7' not in shown  # the call that ran, beside its result
        built = anthropic_request(store, thread, model="m")
        uses = [block for m in built["messages"] for block in m["content"] if block["type"] == "tool_use"]
        results = [block for m in built["messages"] for block in m["content"] if block["type"] == "tool_result"]
        assert [u["input"] for u in uses] == [{"a": 6, "b": 8}] and [r["tool_use_id"] for r in results] == ["call_1"]
        assert results[0]["content"] in ("48", [{"type": "text", "text": "48"}])
        rows = display_rows(store, thread)  # the viewer's: a fork marker, then the call that ran
        assert [(r.kind, r.input) for r in rows if r.kind in ("fork", "tool_call")] == [("fork", None), ("tool_call", {"a": 6, "b": 8})]
        # The audit trail: the call as the model proposed it, where and by whom it was written.
        original = [e for e in store.read(line_id("ana", "")) if e.type == "message.appended"
                    and any(b.get("input") == {"a": 6, "b": 7} for b in e.data["content"])]
        assert len(original) == 1 and original[0].offset < store.thread(thread).parent_offset + 1
        assert original[0].offset >= store.thread(thread).parent_offset  # the fork starts just below it
        store.verify()

        mine = history(app)
    with Store(tmp_path / "edit.db") as again:  # as another process reads it
        assert history(agent_graph(ThreadlogSaver(again), review)) == mine
    for oracle in oracles(tmp_path, lambda saver: agent_graph(saver, review), drive):
        assert mine == oracle


def one_node(reply: Any, saver: Any) -> Any:
    """A graph of one node, `reply`, on `saver`."""
    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=saver)


def chat_graph(saver: Any) -> Any:
    """Echoes the last human message; a `forget` node removes the message named in the input's
    `remove` key (a RemoveMessage, as a node trimming history writes it)."""

    def reply(state: MessagesState) -> dict[str, Any]:
        last = [m for m in state["messages"] if isinstance(m, HumanMessage)][-1]
        return {"messages": [AIMessage(f"echo: {last.content}", id=f"a-{last.id}")]}

    return one_node(reply, saver)


def two_turns_then(change: Any) -> Any:
    def drive(app: Any) -> None:
        app.invoke({"messages": [HumanMessage("Find me a train to Lyon", id="h1")]}, CONFIG)
        app.invoke({"messages": [HumanMessage("Leaving at nine", id="h2")]}, CONFIG)
        app.update_state(CONFIG, {"messages": change})
        app.invoke({"messages": [HumanMessage("Thanks", id="h3")]}, CONFIG)
    return drive


CHANGES = {
    # A message further back: the first answer, replaced; what follows it is shown again after it.
    "replace-further-back": (two_turns_then([AIMessage("Trains to Lyon leave hourly.", id="a-h1")]),
                             ["Find me a train to Lyon", "Trains to Lyon leave hourly.", "Leaving at nine",
                              "echo: Leaving at nine", "Thanks", "echo: Thanks"], ["echo: Find me a train to Lyon"]),
    # Removed and replaced at once: the fork is below the replaced message; one removed before it stays shown.
    "remove-and-replace": (two_turns_then([RemoveMessage(id="h1"), AIMessage("Noted: nine.", id="a-h2")]),
                           (["echo: Find me a train to Lyon", "Leaving at nine", "Noted: nine.", "Thanks", "echo: Thanks"],
                            ["Find me a train to Lyon", "echo: Find me a train to Lyon", "Leaving at nine", "Noted: nine.",
                             "Thanks", "echo: Thanks"]), ["echo: Leaving at nine"]),
    # The first message: there is no message below it to fork at, so the branch starts anew.
    "replace-the-first": (two_turns_then([HumanMessage("Find me a train to Paris", id="h1")]),
                          ["Find me a train to Paris", "echo: Find me a train to Lyon", "Leaving at nine",
                           "echo: Leaving at nine", "Thanks", "echo: Thanks"], ["Find me a train to Lyon"]),
}


@pytest.mark.parametrize("change", list(CHANGES.values()), ids=list(CHANGES))
def test_a_replaced_message_is_gone_from_the_threads_view_and_kept_in_its_parent(tmp_path: Path, change: Any) -> None:
    drive, expected, replaced = change
    held, shown = expected if isinstance(expected, tuple) else (expected, expected)
    with Store(tmp_path / "chat.db") as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        drive(app)
        assert [m.content for m in app.get_state(CONFIG).values["messages"]] == held

        thread = saver.threadlog_thread(CONFIG)
        assert thread != line_id("ana", "")
        texts = [block["text"] for m in anthropic_request(store, thread, model="m")["messages"] for block in m["content"]]
        assert texts == shown  # the request rebuilt from the thread is what the graph holds (and what it removed)
        assert all(text in transcript(store, line_id("ana", "")) for text in replaced)
        store.verify()
        mine = history(app)
    for oracle in oracles(tmp_path, chat_graph, drive):
        assert mine == oracle


def test_a_removed_message_stays_in_the_view_and_forks_nothing(tmp_path: Path) -> None:
    drive = two_turns_then([RemoveMessage(id="h2"), RemoveMessage(id="a-h2")])
    with Store(tmp_path / "remove.db") as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        drive(app)
        assert [m.content for m in app.get_state(CONFIG).values["messages"]] == [
            "Find me a train to Lyon", "echo: Find me a train to Lyon", "Thanks", "echo: Thanks"]
        assert saver.threadlog_thread(CONFIG) == line_id("ana", "") and store.counts().threads == 1
        texts = [block["text"] for m in anthropic_request(store, line_id("ana", ""), model="m")["messages"]
                 for block in m["content"]]
        assert texts == ["Find me a train to Lyon", "echo: Find me a train to Lyon", "Leaving at nine",
                         "echo: Leaving at nine", "Thanks", "echo: Thanks"]  # what was appended, as it was
        store.verify()
        mine = history(app)
    for oracle in oracles(tmp_path, chat_graph, drive):
        assert mine == oracle


def trimming_graph(saver: Any) -> Any:
    """Answers every message, then keeps only the last four once there are more than six
    (RemoveMessage for the rest, as LangGraph's summarization pattern trims history)."""

    def reply(state: MessagesState) -> dict[str, Any]:
        history = state["messages"]
        trim = [RemoveMessage(id=m.id) for m in history[:-4]] if len(history) > 6 else []
        return {"messages": [AIMessage(f"answer {len(history)}"), *trim]}

    return one_node(reply, saver)


def test_a_graph_trimming_its_history_every_few_steps_never_branches(tmp_path: Path) -> None:
    with Store(tmp_path / "trim.db") as store:
        app = trimming_graph(ThreadlogSaver(store))
        for i in range(40):
            app.invoke({"messages": [HumanMessage(f"q {i}")]}, CONFIG)
        assert len(app.get_state(CONFIG).values["messages"]) < 8
        assert store.counts().threads == 1  # a fork per trim made each step slower than the one before
        shown = transcript(store, line_id("ana", ""))
        assert all(f"q {i}" in shown for i in range(40))  # every message, as it was appended


def test_a_graph_that_only_appends_never_branches(tmp_path: Path) -> None:
    with Store(tmp_path / "plain.db") as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        for i in range(3):
            app.invoke({"messages": [HumanMessage(f"turn {i}", id=f"h{i}")]}, CONFIG)
        app.update_state(CONFIG, {"messages": [HumanMessage("a note", id="n1")]})  # a new message: appended
        assert saver.threadlog_thread(CONFIG) == line_id("ana", "")
        assert [t.id for t in store.all_threads()] == [line_id("ana", "")]
        assert "a note" in transcript(store, line_id("ana", ""))
        with pytest.raises(StoreError, match="'bob': no checkpoint is stored yet"):
            saver.threadlog_thread({"configurable": {"thread_id": "bob"}})


def test_threadlog_thread_says_what_it_cannot_name(tmp_path: Path) -> None:
    """A config naming no thread raised a bare KeyError; a namespace without checkpoints, a
    deleted thread and a deleted checkpoint were all 'no checkpoint yet' of the thread."""
    with Store(tmp_path / "names.db") as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        first = app.invoke({"messages": [HumanMessage("Hi", id="h1")]}, CONFIG)
        assert first["messages"][-1].content == "echo: Hi"
        old = app.get_state(CONFIG).config
        app.invoke({"messages": [HumanMessage("Again", id="h2")]}, CONFIG)
        for config, says in [({}, "names none"), ({"configurable": {}}, "names none"), (None, "is a NoneType"),
                             ({"configurable": {"thread_id": "ana", "checkpoint_ns": "inner:1"}},
                              "'ana', namespace 'inner:1': no checkpoint is stored yet"),
                             ({"configurable": {"thread_id": "ana", "checkpoint_id": "nope"}}, "checkpoint 'nope' is not stored")]:
            with pytest.raises(StoreError, match=says):
                saver.threadlog_thread(config)
        saver.prune(["ana"])
        with pytest.raises(StoreError, match=f"checkpoint '{old['configurable']['checkpoint_id']}' was deleted"):
            saver.threadlog_thread(old)
        saver.delete_thread("ana")
        with pytest.raises(StoreError, match=r"'ana': no checkpoint is stored \(its checkpoints were deleted\)"):
            saver.threadlog_thread(CONFIG)


def test_an_edited_tool_result_answers_the_call_below_the_fork(tmp_path: Path) -> None:
    """The fork point falls between a call and its result: the call stays waiting in the fork,
    and the edited result answers it there (a fork dropping it showed neither)."""
    with Store(tmp_path / "result.db") as store:
        saver = ThreadlogSaver(store)
        app = agent_graph(saver)
        edit_by_update_state(app)
        result = app.get_state(CONFIG).values["messages"][2]
        app.update_state(CONFIG, {"messages": [ToolMessage("49", id=result.id, tool_call_id="call_1")]})
        built = anthropic_request(store, saver.threadlog_thread(CONFIG), model="m")
        blocks = [block for m in built["messages"] for block in m["content"]]
        assert [(b["type"], b.get("input") or b.get("content") or b.get("text")) for b in blocks] == [
            ("text", "What is 6 times 7?"), ("tool_use", {"a": 6, "b": 8}), ("tool_result", "49"),
            ("text", "The product is 48.")]
        store.verify()


def test_a_step_reads_as_much_of_the_log_with_many_branches_as_with_few(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every edit is a branch of the line; reading what another writer appended looked up each
    branch's head, one query a branch, so each step of a thread edited often cost more."""
    statements: list[str] = []
    connect = sqlite_backend._connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    with Store(tmp_path / "many.db") as other:
        monkeypatch.setattr(sqlite_backend, "_connect", traced)
        store = Store(tmp_path / "many.db")  # the reader's: every statement it runs is counted
        monkeypatch.undo()
        app = chat_graph(ThreadlogSaver(other))  # another process's graph
        app.invoke({"messages": [HumanMessage("Find me a train to Lyon", id="h1")]}, CONFIG)
        reader = ThreadlogSaver(store)
        read = []
        for edit in range(30):
            app.update_state(CONFIG, {"messages": [AIMessage(f"Trains to Lyon: edit {edit}", id="a-h1")]})
            statements.clear()
            got = reader.get_tuple(CONFIG)
            read.append(len(statements))
            assert got is not None and got.checkpoint["channel_values"]["messages"][-1].content == f"Trains to Lyon: edit {edit}"
        store.close()
        assert other.counts().threads == 31
        assert read[-1] == read[4], read


def test_a_message_emitted_again_with_other_metadata_alone_forks_nothing(tmp_path: Path) -> None:
    """A model's message put back under its id with only its metadata changed (usage, the
    provider's response metadata, extra kwargs) shows as it did: no fork, the view stays."""
    with Store(tmp_path / "meta.db") as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        app.invoke({"messages": [HumanMessage("Find me a train to Lyon", id="h1")]}, CONFIG)
        answer = app.get_state(CONFIG).values["messages"][-1]
        for update in ({"response_metadata": {"model_name": "m-2", "stop_reason": "end_turn"}},
                       {"usage_metadata": {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}},
                       {"additional_kwargs": {"refusal": None}, "name": "planner"}):
            app.update_state(CONFIG, {"messages": [answer.model_copy(update=update)]})
        assert app.get_state(CONFIG).values["messages"][-1].name == "planner"
        assert saver.threadlog_thread(CONFIG) == line_id("ana", "") and store.counts().threads == 1
        app.update_state(CONFIG, {"messages": [answer.model_copy(update={"content": "Hourly, from Part-Dieu."})]})
        thread = saver.threadlog_thread(CONFIG)  # an edit of what is shown still forks
        assert thread != line_id("ana", "")
        assert [b["text"] for m in anthropic_request(store, thread, model="m")["messages"] for b in m["content"]] == [
            "Find me a train to Lyon", "Hourly, from Part-Dieu."]
        store.verify()


def test_a_copy_of_an_edited_thread_shows_what_the_copy_holds(tmp_path: Path) -> None:
    """The copy forked the source's root: its thread showed the answer as first written and
    none of the turns after the edit, though LangGraph's copy holds them."""
    db = tmp_path / "copy.db"
    drive = two_turns_then([AIMessage("Trains to Lyon leave hourly.", id="a-h1")])
    bob: Any = {"configurable": {"thread_id": "bob"}}
    edited = ["Find me a train to Lyon", "Trains to Lyon leave hourly.", "Leaving at nine", "echo: Leaving at nine",
              "Thanks", "echo: Thanks"]
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        drive(app)
        saver.copy_thread("ana", "bob")

        def shown(config: Any) -> list[str]:
            thread = saver.threadlog_thread(config)
            return [b["text"] for m in anthropic_request(store, thread, model="m")["messages"] for b in m["content"]]

        assert [m.content for m in app.get_state(bob).values["messages"]] == edited
        assert saver.threadlog_thread(bob) == line_id("bob", "") and shown(bob) == edited

        def states(config: Any) -> list[tuple[Any, ...]]:
            return [(s.config["configurable"]["checkpoint_id"], s.values, s.next) for s in app.get_state_history(config)]

        assert states(bob) == states(CONFIG)  # every checkpoint of the source, as LangGraph reads it
        app.invoke({"messages": [HumanMessage("And back?", id="h4")]}, bob)
        assert shown(bob) == [*edited, "And back?", "echo: And back?"] and saver.threadlog_thread(bob) == line_id("bob", "")
        saver.delete_thread("ana")  # the copy keeps what it shares
        assert shown(bob)[:2] == edited[:2] and app.get_state(bob).values["messages"][1].content == edited[1]
        store.verify()
        saver.delete_thread("bob")
        assert list(saver.list(None)) == [] and store.verify().redacted > 0
    assert b"hourly" not in db.read_bytes() and b"echo: Find me" not in db.read_bytes()


def test_prune_erases_the_original_of_an_edited_message_that_no_checkpoint_left_holds(tmp_path: Path) -> None:
    """The original shares its id with what replaced it, so a remaining checkpoint holding the
    edit kept the original's payload too, though no checkpoint left holds or shows it."""
    db = tmp_path / "prune.db"
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        app = chat_graph(saver)
        app.invoke({"messages": [HumanMessage("Book Lyon", id="h1")]}, CONFIG)
        app.invoke({"messages": [HumanMessage("Card 4111-1111", id="h2")]}, CONFIG)
        app.update_state(CONFIG, {"messages": [AIMessage("Card noted.", id="a-h2")]})  # the reviewer's edit
        app.invoke({"messages": [HumanMessage("Thanks", id="h3")]}, CONFIG)
        held = ["Book Lyon", "echo: Book Lyon", "Card 4111-1111", "Card noted.", "Thanks", "echo: Thanks"]
        saver.prune(["ana"])
        assert [m.content for m in app.get_state(CONFIG).values["messages"]] == held
        thread = saver.threadlog_thread(CONFIG)
        assert [b["text"] for m in anthropic_request(store, thread, model="m")["messages"] for b in m["content"]] == held
        assert store.verify().redacted > 0
    assert b"echo: Card 4111" not in db.read_bytes()  # the answer as first written, edited away and pruned
    assert b"echo: Book Lyon" in db.read_bytes()  # one the remaining checkpoint shows stays
