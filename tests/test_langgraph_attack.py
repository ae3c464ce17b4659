"""ThreadlogSaver with checkpoint namespaces whose stream ids collide.

A LangGraph thread and namespace map to one threadlog stream, `line_id`: 10 hex digits of
the thread id's SHA-256 and 8 of the namespace's. Eight hex digits are 32 bits, so among
the namespaces of one thread (a subgraph's is "node:<task id>", new for every run) two share
a stream with even odds among about 77,000 of them, and 1 in 100 threads with 10,000 subgraph runs has such
a pair; "child:866" and "child:65516" are one. Then each reads the other's checkpoints.
The saver reads which thread and namespace a root stream was created for, and gives the
second one the next free id (`ID~1`), so each keeps its own checkpoints.
"""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from threadlog import InvalidEvent, Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402

A, B = "child:866", "child:65516"


def test_the_two_namespaces_do_collide_in_32_bits() -> None:
    assert hashlib.sha256(A.encode()).hexdigest()[:8] == hashlib.sha256(B.encode()).hexdigest()[:8]


def test_namespaces_whose_hashes_share_32_bits_keep_their_own_checkpoints(tmp_path: Path) -> None:
    with Store(tmp_path / "ns.db") as store:
        saver = ThreadlogSaver(store)
        for ns, value in ((A, "alpha"), (B, "beta")):
            checkpoint: Any = {**empty_checkpoint(), "channel_values": {"note": value}, "channel_versions": {"note": "1"}}
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}, checkpoint, {"source": "input", "step": 0},
                      {"note": "1"})
        got = {ns: saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}) for ns in (A, B)}
        listed = sorted(c.config["configurable"]["checkpoint_ns"] for c in saver.list({"configurable": {"thread_id": "t"}}))
    assert {ns: t.checkpoint["channel_values"] for ns, t in got.items() if t is not None} == {A: {"note": "alpha"},
                                                                                              B: {"note": "beta"}}
    assert listed == sorted([A, B])


# -- thread ids whose hashes share the 10 hex digits of the listing prefix ----------------------

C, D = "user-130570", "user-428401"


def _put(saver: ThreadlogSaver, thread: str, value: Any, parent: str | None = None, **metadata: Any) -> dict[str, Any]:
    checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6()), "channel_values": {"x": value}, "channel_versions": {"x": 1}}
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": "", **({"checkpoint_id": parent} if parent else {})}}
    returned: dict[str, Any] = saver.put(config, checkpoint, {"who": thread, **metadata}, {"x": 1})
    return returned


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_threads_sharing_a_hash_prefix_touch_only_their_own_checkpoints(tmp_path: Path) -> None:
    """Listing, copying, deleting and pruning one thread read every root under its 10-digit
    prefix and took the other thread's too: `delete_thread(C)` erased D."""
    assert hashlib.sha256(C.encode()).hexdigest()[:10] == hashlib.sha256(D.encode()).hexdigest()[:10]
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        _put(saver, C, "c")
        _put(saver, D, "d")
        assert [t.metadata["who"] for t in saver.list(_config(C))] == [C]
        saver.copy_thread(D, "copy-of-d")
        copied = saver.get_tuple(_config("copy-of-d"))
        assert copied is not None and copied.checkpoint["channel_values"] == {"x": "d"}
        saver.delete_thread(C)
        kept = saver.get_tuple(_config(D))
        assert saver.get_tuple(_config(C)) is None and kept is not None and kept.checkpoint["channel_values"] == {"x": "d"}
        _put(saver, C, "c again")
        saver.prune([D])
        again = saver.get_tuple(_config(C))
        assert again is not None and again.checkpoint["channel_values"] == {"x": "c again"}


def test_a_checkpoint_put_as_its_own_parent_replaces_it_and_the_thread_stays_readable(tmp_path: Path) -> None:
    """Re-putting a checkpoint with the config its put returned named it as its own parent:
    accepted, then every read of the thread failed ("a parent the log no longer holds")."""
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        first = _put(saver, "t", 1)
        checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6()), "channel_values": {"x": 2}, "channel_versions": {"x": 2}}
        returned = saver.put(first, checkpoint, {"step": 1}, {"x": 2})
        saver.put(returned, checkpoint, {"step": 1}, {"x": 2})
        latest = saver.get_tuple(_config("t"))
        assert latest is not None and latest.checkpoint["channel_values"] == {"x": 2}
        assert latest.parent_config is not None and latest.parent_config["configurable"]["checkpoint_id"] == first["configurable"]["checkpoint_id"]
        assert len(list(saver.list(_config("t")))) == 2
        lone: Any = {**empty_checkpoint(), "id": str(uuid6()), "channel_values": {"x": 3}, "channel_versions": {"x": 1}}
        saver.put({"configurable": {"thread_id": "u", "checkpoint_ns": "", "checkpoint_id": lone["id"]}}, lone, {}, {"x": 1})
        got = saver.get_tuple(_config("u"))
        assert got is not None and got.checkpoint["channel_values"] == {"x": 3}
        assert store.verify().events > 0


@pytest.mark.parametrize("metadata", [{"note": {"__record__": {}}}, {"note": {"__record__": {"json": 42}}},
                                      {"note": {"__record__": {"serde": "msgpack", "b64": ""}}}])
def test_metadata_shaped_like_a_stored_record_reads_back_as_it_was_put(tmp_path: Path, metadata: dict[str, Any]) -> None:
    """It was decoded as one: `{"__record__": {}}` made every read of the thread fail, and a
    crafted `serde` value would have been handed to the deserializer."""
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        _put(saver, "t", 1, **metadata)
        got = saver.get_tuple(_config("t"))
        assert got is not None and got.metadata["note"] == metadata["note"]


def test_a_list_filter_matches_metadata_that_is_not_plain_json(tmp_path: Path) -> None:
    day = datetime.date(2024, 1, 2)
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        _put(saver, "t", 1, day=day)
        assert len(list(saver.list(_config("t"), filter={"day": day}))) == 1
        assert list(saver.list(_config("t"), filter={"day": datetime.date(2024, 1, 3)})) == []


def test_a_thread_id_utf8_cannot_encode_is_refused_by_name(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        with pytest.raises(InvalidEvent, match="thread_id: surrogates not allowed"):
            _put(saver, "t\ud800", 1)
        with pytest.raises(InvalidEvent, match="checkpoint_ns"):
            saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "n\udc80"}})
        assert store.counts().events == 0


@pytest.mark.parametrize("kwargs", [{"created": datetime.datetime(2024, 1, 1)}, {"meta": {7: "int key"}}, {"raw": b"\x00\xff"}],
                         ids=["datetime", "int-key", "bytes"])
def test_a_message_holding_what_json_cannot_runs_and_reads_back(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """A datetime in a message's `additional_kwargs` (or in a tool call's arguments) failed the
    whole graph run ("not storable as UTF-8 JSON"); an int key came back as a str."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("hello", additional_kwargs=kwargs,
                                       tool_calls=[{"name": "look", "args": {"when": datetime.date(2024, 1, 2)}, "id": "call_1"}])]}

    builder: Any = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    with Store(tmp_path / "t.db") as store:
        graph = builder.compile(checkpointer=ThreadlogSaver(store))
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [("user", "hi")]}, config)
        last = graph.get_state(config).values["messages"][-1]
        assert last.additional_kwargs == kwargs and last.tool_calls[0]["args"] == {"when": datetime.date(2024, 1, 2)}
        # The conversation still shows in threadlog's own view (the call, whose arguments are not JSON, left out).
        shown = [e.data["content"] for e in store.read(next(iter(store.ids_starting("lg-")))) if e.type == "message.appended"]
        assert [b["text"] for blocks in shown for b in blocks if b["type"] == "text"] == ["hi", "hello"]
        assert store.verify().events > 0


def test_a_long_thread_reads_back_in_a_new_process(tmp_path: Path) -> None:
    """Each checkpoint stores only the messages appended since its parent: reading the value
    back recursed once per checkpoint, and a saver that had not read the thread step by step
    (a new process, a `copy_thread`) overflowed Python's stack at ~300 chat turns."""
    from langchain_core.messages import AIMessage, HumanMessage

    path = tmp_path / "long.db"
    config: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    messages: list[Any] = []
    with Store(path) as store:
        saver = ThreadlogSaver(store)
        for i in range(800):
            messages = [*messages, (HumanMessage if i % 2 == 0 else AIMessage)(f"turn {i}", id=f"m{i}")]
            checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6(clock_seq=i)), "channel_values": {"messages": messages},
                               "channel_versions": {"messages": i + 1}}
            config = saver.put(config, checkpoint, {"step": i}, {"messages": i + 1})
    with Store(path) as store:
        fresh = ThreadlogSaver(store)  # as a new process: nothing read yet
        got = fresh.get_tuple({"configurable": {"thread_id": "long", "checkpoint_ns": ""}})
        assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == [f"turn {i}" for i in range(800)]
        fresh.copy_thread("long", "long-copy")
        copied = fresh.get_tuple({"configurable": {"thread_id": "long-copy", "checkpoint_ns": ""}})
        assert copied is not None and len(copied.checkpoint["channel_values"]["messages"]) == 800


@pytest.mark.parametrize("given", ["threadlog.db", Path("threadlog.db"), None], ids=["str", "path", "none"])
def test_a_saver_given_no_store_is_refused_when_made_saying_what_it_takes(given: Any) -> None:
    """`ThreadlogSaver("threadlog.db")` (as `ThreadlogSession` takes a path) was made, and the
    graph's first step failed inside LangGraph with "'str' object has no attribute 'thread'"."""
    from threadlog import StoreError

    with pytest.raises(StoreError, match=r"ThreadlogSaver takes a threadlog Store.*ThreadlogSaver\(Store\(path\)\)"):
        ThreadlogSaver(given)


def test_a_sync_graph_runs_on_a_postgresql_store() -> None:
    """LangGraph calls a synchronous checkpointer from worker threads; the saver opened each
    one a store of its own with the given one's SQLite settings, and on PostgreSQL the first
    step failed ("is not a SQLite database: it has no SQLite settings"), where an async run
    worked. (A store opened again from the URL would lack its password: `store.path` hides it.)"""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from tests.backends import postgres_url

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}

    builder: Any = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    with Store(postgres_url()) as store:
        graph = builder.compile(checkpointer=ThreadlogSaver(store))
        config: Any = {"configurable": {"thread_id": "pg"}}
        graph.invoke({"messages": [HumanMessage("one")]}, config)
        out = graph.invoke({"messages": [HumanMessage("two")]}, config)
        assert [m.content for m in out["messages"]] == ["one", "echo: one", "two", "echo: two"]
        assert len(list(graph.get_state_history(config))) == 6
        store.verify()


class _Xor:
    """A cipher for `EncryptedSerializer` (LangGraph's own takes pycryptodome's AES)."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in ciphertext)


def test_an_encrypting_serializer_is_refused_when_made_instead_of_storing_the_run_in_clear(tmp_path: Path) -> None:
    """`ThreadlogSaver(store, serde=EncryptedSerializer(...))`, as LangGraph's savers take it to
    encrypt checkpoints at rest, was taken, and the run's messages were written in clear text
    (as `message.appended` events and in the checkpoints): only values that are not JSON went
    through the serializer."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from threadlog import StoreError

    db = tmp_path / "t.db"
    with Store(db) as store:
        before = store.counts()
        with pytest.raises(StoreError, match=r"ThreadlogSaver does not encrypt.*EncryptedSerializer"):
            ThreadlogSaver(store, serde=EncryptedSerializer(_Xor()))
        assert store.counts() == before
