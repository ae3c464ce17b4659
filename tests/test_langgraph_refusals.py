"""ThreadlogSaver's refusals and errors say what was wrong in LangGraph's terms.

A value the store refuses (over 32 MiB, text UTF-8 cannot encode) names the thread, the
checkpoint or the task, and the channel: the store's own words ("events[1].data: is 41943358
bytes of JSON") named an event index the graph's author never sees. A checkpoint that cannot
be read because a LangGraph event was redacted by hand says so, instead of "run verify"."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

from threadlog import InvalidEvent, Store, StoreError  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402

HUGE = "x" * (33 << 20)


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def _graph(saver: ThreadlogSaver, note: str) -> Any:
    graph = StateGraph(State)
    graph.add_node("write", lambda state: {"notes": [note]})
    graph.add_edge(START, "write")
    return graph.compile(checkpointer=saver)


@pytest.mark.parametrize("note, why", [(HUGE, "bytes of JSON; an event holds at most"), ("lone \ud800", "UTF-8")],
                         ids=["over-32-MiB", "lone-surrogate"])
def test_a_node_output_the_store_refuses_names_the_thread_task_and_channel(tmp_path: Path, note: str, why: str) -> None:
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        app = _graph(saver, note)
        config: Any = {"configurable": {"thread_id": "ana"}}
        with pytest.raises(InvalidEvent, match=rf"^LangGraph thread 'ana', writes of task '[^']+': channel 'notes': .*{why}"):
            app.invoke({"topic": "trains", "notes": []}, config)
        # The refused write leaves the file as it was; what LangGraph stored before it reads on.
        latest = saver.get_tuple(config)
        assert latest is not None and latest.checkpoint["channel_values"]["topic"] == "trains"
        before = store.counts()
        with pytest.raises(InvalidEvent, match="channel 'notes'"):
            saver.put_writes(latest.config, [("topic", "fine"), ("notes", [note])], "task-1")
        assert store.counts() == before
        store.verify()


def test_a_graph_input_the_store_refuses_names_it_as_the_input(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        app = _graph(ThreadlogSaver(store), "fine")
        with pytest.raises(InvalidEvent, match=r"^LangGraph thread 'ana', checkpoint '[^']+': channel '__start__' "
                                               r"\(the graph's input\): not storable as UTF-8"):
            app.invoke({"topic": "lone \udc80", "notes": []}, {"configurable": {"thread_id": "ana"}}, durability="sync")
        assert store.counts().events == 0  # the first put was refused: the thread was not even created


@pytest.mark.parametrize("kind", ["langgraph.checkpoint", "langgraph.writes"])
def test_a_checkpoint_resting_on_a_hand_redacted_event_says_so_instead_of_sending_to_verify(tmp_path: Path, kind: str) -> None:
    """`threadlog redact` on a LangGraph event leaves the checkpoints stored as changes from it
    unreadable. The error said "run verify", and verify passes (a redaction keeps the chain):
    it now names the redacted event and the way out, delete_thread, after which the thread
    starts again.

    The step is put as LangGraph puts it when the task's writes land first: its input checkpoint,
    the task's writes, then the checkpoint after them, which rests on both. A graph run cannot be
    made to do that every time: LangGraph stores the writes from a thread of its own, and on a busy
    machine all of them may land after the checkpoints that would have rested on them (which then
    store their values whole, and nothing rests on a writes event)."""
    from click.testing import CliRunner

    from threadlog import StoreError
    from threadlog.cli import cli
    from threadlog.integrations.langgraph import line_id
    from tests.test_langgraph_shared import put

    path = tmp_path / "red.db"
    config: Any = {"configurable": {"thread_id": "ana"}}
    with Store(path) as store:
        saver = ThreadlogSaver(store)
        given = put(saver, "ana", None, {"topic": "trains", "notes": []}, ["topic", "notes"], -1)
        saver.put_writes({"configurable": {"thread_id": "ana", "checkpoint_ns": "", "checkpoint_id": given}},
                         [("notes", ["my password is hunter2"])], "task-1")
        put(saver, "ana", given, {"topic": "trains", "notes": ["my password is hunter2"]}, ["notes"], 0)
        target = next(e.position for e in store.read(line_id("ana", "")) if e.type == kind)
    done = CliRunner().invoke(cli, ["--db", str(path), "redact", str(target), "--reason", "secret", "--actor", "ops"])
    assert done.exit_code == 0, done.output
    assert CliRunner().invoke(cli, ["--db", str(path), "verify"]).exit_code == 0
    with Store(path) as store:
        saver = ThreadlogSaver(store)
        app = _graph(saver, "again")
        expected = rf"LangGraph event at position {target} was redacted.*delete_thread removes the thread"
        with pytest.raises(StoreError, match=expected) as refused:
            list(app.get_state_history(config))
        assert "run verify" not in str(refused.value)
        saver.delete_thread("ana")
        app.invoke({"topic": "boats", "notes": []}, config)  # the thread starts again
        assert app.get_state(config).values == {"topic": "boats", "notes": ["again"]}
        store.verify()


def test_a_sqlite_saver_file_is_refused_saying_whose_it_is_and_left_as_it_was(tmp_path: Path) -> None:
    """`Store("checkpoints.sqlite")` on the file `SqliteSaver` wrote (the path kept when
    switching savers) said "pass another --db path", naming neither LangGraph nor what
    happens to the checkpoints in it."""
    path = tmp_path / "checkpoints.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        _graph(saver, "kept").invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "a"}})  # type: ignore[arg-type]
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    with pytest.raises(StoreError, match=r"checkpoints\.sqlite is a LangGraph SqliteSaver database, not a threadlog one: "
                                         r"threadlog does not read its history; give threadlog a new path"):
        Store(path)
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before


def test_a_thread_whose_first_event_was_redacted_keeps_its_checkpoints(tmp_path: Path) -> None:
    """`threadlog redact` of a LangGraph thread's `thread.created` (its title is the thread id,
    which may name a person) erased the thread id its root stream is matched by: the saver took
    the stream for another's, the graph's state read as empty, the next run started a new stream
    beside it, and `delete_thread` left every old checkpoint in the file. The root whose id the
    thread id hashes to is still that thread's."""
    from click.testing import CliRunner

    from threadlog.cli import cli
    from threadlog.integrations.langgraph import line_id

    path = tmp_path / "red.db"
    config: Any = {"configurable": {"thread_id": "ana@example.com"}}
    with Store(path) as store:
        _graph(ThreadlogSaver(store), "first").invoke({"topic": "trains", "notes": []}, config)
        created = next(store.read(line_id("ana@example.com", "")))
    assert created.type == "thread.created"
    done = CliRunner().invoke(cli, ["--db", str(path), "redact", str(created.position), "--reason", "pii", "--actor", "ops"])
    assert done.exit_code == 0, done.output
    with Store(path) as store:
        app = _graph(ThreadlogSaver(store), "second")
        assert app.get_state(config).values == {"topic": "trains", "notes": ["first"]}
        app.invoke({"topic": "trains", "notes": []}, config)
        assert app.get_state(config).values["notes"] == ["first", "second"]
        assert [info.id for info in store.threads(10, None)] == [line_id("ana@example.com", "")]
        ThreadlogSaver(store).delete_thread("ana@example.com")
        assert app.get_state(config).values == {}
        store.verify()
