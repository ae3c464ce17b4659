"""`ThreadlogSaver` used as LangGraph users use a checkpointer: several processes on one thread
(writers racing, a process deleting and pruning while others write), `put` after a deletion,
and `list`/`get_tuple` at the edges of their arguments, where `SqliteSaver` is the reference
(the saver is a one-line replacement for it). Real SQLite files, real processes
(`tests/langgraph_worker.py`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint  # noqa: E402

from eventstore import ThreadInfo  # noqa: E402
from threadlog import InvalidEvent, Store, StoreError  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver, line_id  # noqa: E402
from tests.procs import all_done, started_together  # noqa: E402
from tests.test_langgraph import echo_graph  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "langgraph_worker.py")
SHARED: Any = {"configurable": {"thread_id": "shared"}}


def start_together(db: Path, *argvs: list[str]) -> None:
    """Run the workers at once (past their slow imports); each must end with `done`."""
    Store(db).close()
    with started_together([[WORKER, argv[0], str(db), *argv[1:]] for argv in argvs]) as procs:
        all_done(procs, timeout=300)


def contents(checkpoint: Any) -> list[str]:
    return [m.content for m in checkpoint.checkpoint["channel_values"].get("messages", [])]


def test_two_processes_running_one_thread_lose_no_turn(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    start_together(db, ["invoke", "a", "12"], ["invoke", "b", "12"])
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        listed = list(saver.list(SHARED))
        assert len(listed) == 2 * 12 * 3  # input, loop before the node, loop after it: every put kept
        by_id = {c.config["configurable"]["checkpoint_id"]: c for c in listed}
        for c in listed:
            assert saver.get_tuple(c.config) is not None
            if c.parent_config:  # a checkpoint's messages are its parent's, plus at most the step's one
                parent = contents(by_id[c.parent_config["configurable"]["checkpoint_id"]])
                assert contents(c)[:len(parent)] == parent and len(contents(c)) - len(parent) <= 1
        answered = {m[-2] for c in listed if (m := contents(c)) and m[-1].startswith("echo")}
        assert answered == {f"{w}-{i}" for w in "ab" for i in range(12)}
        store.verify()


def test_a_thread_deleted_and_pruned_by_one_process_while_two_write_stays_readable(tmp_path: Path) -> None:
    """The deleting process appends its `langgraph.deleted` to the thread's root, which does not
    conflict with a writer appending to a branch, and then erases the deleted checkpoints'
    payloads. A writer that had not seen the deletion stored its checkpoint as changes from a
    deleted parent: once erased, every read of the thread failed ("stored as changes from a
    parent the log no longer holds"), in the writers too. And a deletion racing a writer's
    append raised ConcurrencyError to its caller."""
    db = tmp_path / "deleted.db"
    start_together(db, ["invoke", "a", "30"], ["invoke", "b", "30"], ["delete", "25"])
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        listed = list(saver.list(SHARED))
        for c in listed:
            assert saver.get_tuple(c.config) is not None
        latest = saver.get_tuple(SHARED)
        assert (latest is None) == (listed == [])
        store.verify()
        app = echo_graph(saver)
        out = app.invoke({"messages": [("user", "after")]}, SHARED)  # the thread goes on
        assert [m.content for m in out["messages"]][-2:] == ["after", "echo: after"]
        store.verify()


def test_a_put_waits_out_another_process_appending_to_its_stream(tmp_path: Path) -> None:
    """A put refused because another process appended to its stream first reads what it wrote
    and tries again. Eight tries in a row, with no wait between them, were all refused while
    three processes appended steadily (as a deletion does: one `event.redacted` per erased
    event), and the put raised ConcurrencyError; it now tries again, with waits, for 30 s."""
    db = tmp_path / "busy.db"
    with Store(db) as store:
        saver = ThreadlogSaver(store)
        parent = put(saver, "t", None, {"n": 0}, ["n"], 0)
    with started_together([[WORKER, "hammer", str(db), line_id("t", ""), "3"]] * 3) as procs, Store(db) as store:
        saver = ThreadlogSaver(store)
        step = 0
        while procs[0].poll() is None:  # put after put for as long as the other process writes
            step += 1
            parent = put(saver, "t", parent, {"n": step}, ["n"], step)
        all_done(procs, timeout=60)
        got = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert got is not None and got.checkpoint["channel_values"] == {"n": step}
        titles = [e for e in store.read(line_id("t", "")) if e.type == "title.set"]
        assert len(titles) > 100  # the others did append all along
        store.verify()


def put(saver: ThreadlogSaver, thread: str, parent: str | None, values: dict[str, Any], new: list[str], step: int) -> str:
    versions = {channel: str(step) for channel in values}
    checkpoint: Any = {**empty_checkpoint(), "channel_values": values, "channel_versions": versions}
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": "", **({"checkpoint_id": parent} if parent else {})}}
    done = saver.put(config, checkpoint, {"source": "loop", "step": step}, {channel: versions[channel] for channel in new})
    return str(done["configurable"]["checkpoint_id"])


def test_a_checkpoint_put_on_a_deleted_parent_keeps_every_value(tmp_path: Path) -> None:
    """A checkpoint stores only the channels new in it and reads the others from its parents;
    put on a deleted parent (a run resumed from a config read before a delete_thread), the
    others were gone: `get_tuple` gave only the new channels. SqliteSaver keeps them all."""
    with Store(tmp_path / "orphan.db") as store:
        saver = ThreadlogSaver(store)
        first = put(saver, "t", None, {"a": 1, "b": "two"}, ["a", "b"], 1)
        saver.delete_thread("t")
        second = put(saver, "t", first, {"a": 1, "b": "two", "c": [3]}, ["c"], 2)
        got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": second}})
        assert got is not None and got.checkpoint["channel_values"] == {"a": 1, "b": "two", "c": [3]}
        assert got.parent_config is not None and got.parent_config["configurable"]["checkpoint_id"] == first
        assert [c.checkpoint["id"] for c in saver.list({"configurable": {"thread_id": "t"}})] == [second]
        store.verify()


def two_turns(saver: ThreadlogSaver) -> Any:
    """Two echo turns on thread "t"; the checkpoint after the first (the one a put resumes from)."""
    app = echo_graph(saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [HumanMessage("one")]}, config)
    old = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert old is not None
    app.invoke({"messages": [HumanMessage("two")]}, config)
    return old


def put_three(saver: ThreadlogSaver, old: Any) -> Any:
    """Put, on `old`, a checkpoint holding its messages and a new one, "three"; its config."""
    messages = [*old.checkpoint["channel_values"]["messages"], HumanMessage("three", id="m3")]
    new = create_checkpoint(old.checkpoint, None, 5)
    new["channel_values"], new["channel_versions"] = {"messages": messages}, {"messages": "99"}
    return saver.put(old.config, new, {"source": "update", "step": 5}, {"messages": "99"})


def test_a_checkpoint_put_on_a_pruned_parent_shows_only_its_new_messages(tmp_path: Path) -> None:
    """Resting on a pruned parent, a checkpoint stores every value, but the messages its
    branch's history already shows (kept: the latest checkpoint holds them) are not shown
    again: the transcript read 'one', 'echo: one', 'one', 'echo: one', 'three'."""
    with Store(tmp_path / "pruned.db") as store:
        saver = ThreadlogSaver(store)
        old = two_turns(saver)
        saver.prune(["t"])  # keeps the latest: `old` is deleted, its messages stay shown
        done = put_three(saver, old)
        branch = next(t.id for t in store.threads(limit=None) if t.parent_id is not None)
        texts = [block["text"] for _, type_, data in store.read_data(branch) if type_ == "message.appended"
                 for block in data["content"]]
        assert texts == ["one", "echo: one", "three"]
        got = saver.get_tuple(done)
        assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == ["one", "echo: one", "three"]
        store.verify()


@pytest.mark.parametrize("writer", ["the deleter", "a fresh saver", "a saver that read the line before"])
def test_a_put_on_a_pruned_parent_branches_at_it_whichever_saver_puts_it(tmp_path: Path, writer: str) -> None:
    """A saver that had not indexed the pruned checkpoint (a fresh process: its event is erased)
    put the checkpoint on the latest one's stream, whose history showed 'two' and 'echo: two',
    which the checkpoint does not hold; the deleter, whose index still knew where the pruned
    one was, forked a branch there. The deletion now records where each checkpoint was, so
    every saver branches at the same place."""
    path = tmp_path / "pruned.db"
    with Store(path) as store:
        deleter = ThreadlogSaver(store)
        old = two_turns(deleter)
        with Store(path) as other_store:
            before = ThreadlogSaver(other_store)
            assert before.get_tuple(old.config) is not None  # indexed before the prune
            deleter.prune(["t"])
            with Store(path) as fresh_store:
                saver = {"the deleter": deleter, "a fresh saver": ThreadlogSaver(fresh_store), "a saver that read the line before": before}[writer]
                done = put_three(saver, old)
                holder = next(t for t in store.threads(limit=None) if t.parent_id is not None)
                texts = [block["text"] for _, type_, data in store.read_data(holder.id) if type_ == "message.appended"
                         for block in data["content"]]
                assert texts == ["one", "echo: one", "three"]
                for reader in (deleter, before, ThreadlogSaver(fresh_store)):
                    got = reader.get_tuple(done)
                    assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == ["one", "echo: one", "three"]
        store.verify()


@pytest.mark.parametrize("at", [None, "elsewhere", "far"])
def test_a_put_on_a_parent_deleted_where_no_record_says_starts_a_thread_showing_only_its_messages(tmp_path: Path, at: Any) -> None:
    """An older release's deletion did not record where the checkpoint was (and an event
    appended by hand may name a place outside the line, or past its end): a saver that reads
    it after the event was erased does not know where to branch, and starts a new thread
    holding the checkpoint whole (not the latest stream, whose history shows 'two')."""
    with Store(tmp_path / "legacy.db") as store:
        saver = ThreadlogSaver(store)
        old = two_turns(saver)
        root = line_id("t", "")
        cid = old.checkpoint["id"]
        event = next(e for e in store.read(root) if e.type == "langgraph.checkpoint" and e.data["checkpoint_id"] == cid)
        store.create_thread(title="elsewhere", thread_id="lg-elsewhere")
        store.append_message("lg-elsewhere", "user", "not this line's")
        where = {"far": {cid: [root, 10_000]}, "elsewhere": {cid: ["lg-elsewhere", 1]}}.get(at)
        store.append(root, [{"type": "langgraph.deleted", "data": {"checkpoint_ids": [cid], "reason": "prune",
                                                                   **({"at": where} if where else {})}}])
        store.redact(event.position, reason="an older release's prune", actor="test")
        fresh = ThreadlogSaver(store)
        done = put_three(fresh, old)
        holder = next(t for t in store.threads(limit=None) if t.id.startswith(root + "."))
        assert holder.parent_id is None
        texts = [block["text"] for _, type_, data in store.read_data(holder.id) if type_ == "message.appended"
                 for block in data["content"]]
        assert texts == ["one", "echo: one", "three"]
        got = ThreadlogSaver(store).get_tuple(done)
        assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == ["one", "echo: one", "three"]
        store.verify()


def test_a_checkpoint_put_naming_no_parent_shows_only_its_new_messages(tmp_path: Path) -> None:
    """A direct caller's put with no checkpoint_id on a line that has checkpoints: the
    transcript read one, echo: one, then one, echo: one again before three."""
    with Store(tmp_path / "orphan.db") as store:
        saver = ThreadlogSaver(store)
        echo_graph(saver).invoke({"messages": [HumanMessage("one")]}, {"configurable": {"thread_id": "t"}})
        latest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert latest is not None
        messages = [*latest.checkpoint["channel_values"]["messages"], HumanMessage("three", id="m3")]
        new = create_checkpoint(latest.checkpoint, None, 5)
        new["channel_values"], new["channel_versions"] = {"messages": messages}, {"messages": "99"}
        done = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, new, {"source": "update", "step": 5},
                         {"messages": "99"})
        texts = [block["text"] for thread in store.threads(limit=None) for _, type_, data in store.read_data(thread.id)
                 if type_ == "message.appended" for block in data["content"]]
        assert texts == ["one", "echo: one", "three"]
        got = saver.get_tuple(done)
        assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == ["one", "echo: one", "three"]
        store.verify()


@pytest.fixture
def chat(tmp_path: Path) -> tuple[Store, ThreadlogSaver, list[str]]:
    store = Store(tmp_path / "edges.db")
    saver = ThreadlogSaver(store)
    app = echo_graph(saver)
    for thread in ("a", "b"):
        for text in ("one", "two", "three"):
            app.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread}})
    ids = [c.checkpoint["id"] for c in saver.list({"configurable": {"thread_id": "a"}})]
    assert len(ids) == 9
    return store, saver, ids


def test_list_and_get_tuple_read_their_arguments_as_sqlite_saver_does(chat: tuple[Store, ThreadlogSaver, list[str]]) -> None:
    """`limit` below zero is no limit (SQLite's LIMIT -1: it dropped the oldest checkpoints), a
    filter value None matches a missing key (`IS NULL`: it matched nothing), and an empty
    checkpoint_id is none (get_tuple gave None, so a graph run with one started afresh)."""
    store, saver, ids = chat
    a: Any = {"configurable": {"thread_id": "a"}}
    ids_of = lambda tuples: [c.checkpoint["id"] for c in tuples]  # noqa: E731
    for limit, expected in ((None, ids), (0, []), (1, ids[:1]), (-1, ids), (-3, ids), (100, ids)):
        assert ids_of(saver.list(a, limit=limit)) == expected, limit
    assert ids_of(saver.list(a, before={"configurable": {"checkpoint_id": ids[3]}})) == ids[4:]
    assert ids_of(saver.list(a, before={"configurable": {"checkpoint_id": ids[3]}}, limit=-1)) == ids[4:]
    assert ids_of(saver.list(a, filter={"missing": None})) == ids
    assert len(list(saver.list(None, filter={"missing": None, "source": "loop"}))) == 12
    assert ids_of(saver.list(a, filter={"step": 1})) == [c.checkpoint["id"] for c in saver.list(a) if c.metadata["step"] == 1]
    empty: Any = {"configurable": {"thread_id": "a", "checkpoint_id": ""}}
    latest = saver.get_tuple(empty)
    assert latest is not None and latest.checkpoint["id"] == ids[0]
    assert ids_of(saver.list(empty)) == ids
    out = echo_graph(saver).invoke({"messages": [("user", "four")]}, empty)
    assert [m.content for m in out["messages"]] == ["one", "echo: one", "two", "echo: two", "three", "echo: three",
                                                     "four", "echo: four"]
    saver.delete_thread("a")
    assert list(saver.list(a)) == [] and saver.get_tuple(a) is None and len(list(saver.list(None))) == 9
    out = echo_graph(saver).invoke({"messages": [("user", "again")]}, a)  # a deleted thread id starts afresh
    assert [m.content for m in out["messages"]] == ["again", "echo: again"]
    store.verify()
    store.close()


def test_a_checkpoint_following_one_erased_before_its_writer_restated_it_is_not_read(tmp_path: Path) -> None:
    """The log as a race leaves it: a writer that had not seen a deletion appends a checkpoint
    stored as the step after the one before it in its stream; the deleter then erases that
    one, before the writer restates its checkpoint whole. The erased event's id is gone with
    its payload, so the checkpoint named no parent, was not seen as stranded, and every read
    of the thread failed ("stored as changes from a parent the log no longer holds"), in the
    other processes and in the next deletion too."""
    with Store(tmp_path / "source.db") as source:
        saver = ThreadlogSaver(source)
        first = put(saver, "t", None, {"a": 1}, ["a"], 1)
        second = put(saver, "t", first, {"a": 1, "b": 2}, ["b"], 2)
        put(saver, "t", second, {"a": 1, "b": 2, "c": 3}, ["c"], 3)
        events = [{"type": e.type, "data": e.data} for e in source.read(line_id("t", ""))]
    assert [e["type"] for e in events] == ["thread.created", *["langgraph.checkpoint"] * 3]
    assert events[3]["data"].get("follows") and "checkpoint" not in events[3]["data"]  # a step from the one before
    with Store(tmp_path / "raced.db") as store:
        root = line_id("t", "")
        written = store.append(root, events[:3], expect="no_stream")
        store.append(root, [{"type": "langgraph.deleted", "data": {"checkpoint_ids": [first, second], "reason": "delete_thread"}},
                            events[3]])
        for event in written[1:]:
            store.redact(event.position, reason="LangGraph delete_thread", actor="test")
        reader = ThreadlogSaver(store)
        assert reader.get_tuple({"configurable": {"thread_id": "t"}}) is None  # its writer has not restated it yet
        assert list(reader.list({"configurable": {"thread_id": "t"}})) == []
        later = put(reader, "t", None, {"d": 4}, ["d"], 4)
        got = reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert got is not None and got.config["configurable"]["checkpoint_id"] == later
        reader.delete_thread("t")  # a deleter meeting it leaves it to its writer
        assert reader.get_tuple({"configurable": {"thread_id": "t"}}) is None
        store.verify()


class _PrunedWhileRead(Store):
    """A store whose next `threads_starting` lets another process prune the thread right after
    it answers, before its caller reads the streams it named."""

    meanwhile: Callable[[], None] | None = None

    def threads_starting(self, prefix: str, after: int = 0) -> list[ThreadInfo]:
        found = super().threads_starting(prefix, after)
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return found


def test_a_thread_pruned_while_a_saver_reads_it_reads_as_before_or_after(tmp_path: Path) -> None:
    """A saver reads a line's streams in several queries. Another process's prune ran between
    them: the saver read the pruned checkpoints' events erased, but not the `langgraph.deleted`
    nor the latest checkpoint written again whole (both past the heads it had asked for), so
    the latest one rested on nothing it knew, and `get_tuple` raised "stored as changes from a
    parent the log no longer holds" (seen once in a run of three processes on a busy machine).
    A saver now reads the log as of one moment: the thread as it was, then as it is."""
    db = tmp_path / "raced.db"
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(db) as store:
        echo_graph(ThreadlogSaver(store)).invoke({"messages": [HumanMessage("one")]}, config)
    with Store(db) as deleting, _PrunedWhileRead(db) as reading, Store(db) as watching:
        root = line_id("t", "")
        pruned = [e.offset for e in watching.read(root) if e.type == "langgraph.checkpoint"][:-1]
        failed: list[BaseException] = []

        def prune() -> None:
            try:
                ThreadlogSaver(deleting).prune(["t"])
            except BaseException as error:  # raised again by the test's own thread
                failed.append(error)

        pruning = threading.Thread(target=prune)

        def meanwhile() -> None:  # the prune runs until it has erased what it pruned (its last step waits for readers)
            pruning.start()
            deadline = time.monotonic() + 30
            while not all(watching.event_at(root, offset).redacted for offset in pruned):
                assert pruning.is_alive() and time.monotonic() < deadline, failed
                time.sleep(0.01)

        reading.meanwhile = meanwhile
        saver = ThreadlogSaver(reading)
        during = saver.get_tuple(config)
        pruning.join(timeout=60)
        assert not failed and not pruning.is_alive()
        after = saver.get_tuple(config)
        for got in (during, after):
            assert got is not None and contents(got) == ["one", "echo: one"]
        assert len(list(saver.list(config))) == 1
        watching.verify()


class _HeldOpen(Store):
    """A store whose next write, once it has taken its positions (and, on PostgreSQL, its
    stream's lock), lets another process run before it goes on to commit."""

    meanwhile: Callable[[], None] | None = None

    def _write(self, thread: str, head: Any, batch: Any, position: int | None = None, *args: Any, **kwargs: Any) -> Any:
        meanwhile = self.meanwhile if position else None  # 0: positions the server takes as it writes
        if meanwhile is not None:
            self.meanwhile = None
            meanwhile()
        return super()._write(thread, head, batch, position, *args, **kwargs)


def _a_then_b(store: Store) -> tuple[ThreadlogSaver, str]:
    """LangGraph thread `t`: a checkpoint of `a`, then one adding `b` on it; and a threadlog
    thread `other` beside it, for a write that holds a position below the thread's. Returns the
    saver and the first checkpoint's id."""
    saver = ThreadlogSaver(store)
    first = put_versions(saver, first=None, values={"a": 1}, versions={"a": "1"}, new=["a"])
    put_versions(saver, first, {"a": 1, "b": 2}, {"a": "1", "b": "2"}, ["b"])
    store.create_thread(title="another thread", thread_id="other")
    return saver, first


def put_versions(saver: ThreadlogSaver, first: str | None, values: dict[str, Any], versions: dict[str, str], new: list[str]) -> str:
    """`put` on thread "t", each channel at its own version (those not `new` kept from the parent)."""
    checkpoint: Any = {**empty_checkpoint(), "channel_values": values, "channel_versions": versions}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": first} if first else {})}}
    done = saver.put(config, checkpoint, {"source": "loop", "step": len(values)}, {channel: versions[channel] for channel in new})
    return str(done["configurable"]["checkpoint_id"])


def test_a_put_whose_position_comes_before_a_deletion_but_commits_after_its_read_stays_readable() -> None:
    """On PostgreSQL a write takes its position when it starts and commits later. A put on a
    branch took one below a `delete_thread`'s `langgraph.deleted` (the root's append does not
    wait for a branch's writer) and committed only after the deleter had read the line again,
    which another write committing meanwhile, below both, had moved it to: the deleter did not
    see the checkpoint, and its writer, finding it before the deletion in the log, left it to
    the deleter. Its parents were erased under it, and the put's checkpoint was lost:
    `get_tuple` gave None and `list` nothing. The deleter now waits for the writes that took a
    position before its own, reads them, and writes the checkpoint again whole, as it does one
    that committed first."""
    import psycopg

    from tests.backends import postgres_url

    url = postgres_url()
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(url) as store:
        saver, first = _a_then_b(store)
        branched = put_versions(saver, first, {"a": 1, "b": 3}, {"a": "1", "b": "3"}, ["b"])  # on the first: a branch
    with (_HeldOpen(url) as writing, _HeldOpen(url) as deleting, _HeldOpen(url) as other,
          psycopg.connect(url, autocommit=True) as admin):
        assert any(t.id.startswith(line_id("t", "") + ".") for t in writing.threads(limit=None))
        failed: list[BaseException] = []
        reserved, release = threading.Event(), threading.Event()

        def hold() -> None:
            reserved.set()
            release.wait(60)

        other.meanwhile = hold  # a write to another thread, below the put, open until the deletion's append
        elsewhere = threading.Thread(target=lambda: other.append_message("other", "user", "meanwhile"))
        elsewhere.start()
        assert reserved.wait(30)

        def append_deletion() -> None:  # the write below the put commits before the deletion does
            release.set()
            elsewhere.join(30)

        def delete() -> None:
            try:
                deleting.meanwhile = append_deletion
                ThreadlogSaver(deleting).delete_thread("t")
            except BaseException as error:  # raised again by the test's own thread
                failed.append(error)

        deletion = threading.Thread(target=delete)

        def meanwhile() -> None:  # the deletion runs until it waits for the writes holding positions, this put among them
            deletion.start()
            deadline = time.monotonic() + 30
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%FROM pg_locks WHERE%' "
                                "AND datname = current_database() AND pid <> pg_backend_pid()").fetchone() == (0,):
                assert deletion.is_alive() and time.monotonic() < deadline, failed
                time.sleep(0.01)

        writing.meanwhile = meanwhile
        done = put_versions(ThreadlogSaver(writing), branched, {"a": 1, "b": 3, "c": 4}, {"a": "1", "b": "3", "c": "4"}, ["c"])
        deletion.join(timeout=60)
        assert not failed and not deletion.is_alive() and not elsewhere.is_alive()
        assert writing.meanwhile is None and deleting.meanwhile is None  # each write did wait as told
        deleted = [e for e in writing.read(line_id("t", "")) if e.type == "langgraph.deleted"]
        checkpoint = next(e for t in writing.threads(limit=None) for e in writing.read(t.id)
                          if e.type == "langgraph.checkpoint" and e.data.get("checkpoint_id") == done)
        assert len(deleted) == 1 and checkpoint.position < deleted[0].position  # the order this is about
        with Store(url) as reading:
            for saver in (ThreadlogSaver(reading), ThreadlogSaver(writing), ThreadlogSaver(deleting)):
                got = saver.get_tuple(config)
                assert got is not None and got.checkpoint["id"] == done
                assert got.checkpoint["channel_values"] == {"a": 1, "b": 3, "c": 4}
                assert [c.checkpoint["id"] for c in saver.list(config)] == [done]
            kept = [e.redacted for t in reading.threads(limit=None) for e in reading.read(t.id)
                    if e.type == "langgraph.checkpoint" and e.data.get("checkpoint_id") != done]
            assert kept and all(kept)  # the deletion did erase what it deleted
            reading.verify()


def test_a_deletion_a_reader_held_up_is_finished_by_the_next_call(tmp_path: Path) -> None:
    """Each erasure checkpoints the write-ahead log, which waits for readers: with a read open
    in another connection, `delete_thread` raised after erasing one event, and the next call
    found nothing left to delete (the checkpoints were hidden already) and returned: the other
    payloads stayed in the file. It now erases every event, then checkpoints the log once; a
    call after a held-up one erases what is left."""
    db = tmp_path / "held.db"
    with Store(db, timeout=1.0) as store:
        saver = ThreadlogSaver(store)
        parent = None
        for step in range(4):
            parent = put(saver, "t", parent, {"secret": f"payload-{step}-" * 8}, ["secret"], step)
        reader = sqlite3.connect(db)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # a read held open
        with pytest.raises(StoreError, match="another connection is reading"):
            saver.delete_thread("t")
        reader.rollback()
        reader.close()
        saver.delete_thread("t")
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
        checkpoints = [e for e in store.read(line_id("t", "")) if e.type == "langgraph.checkpoint"]
        assert len(checkpoints) == 4 and all(e.redacted for e in checkpoints)
        store.verify()
    wal = Path(f"{db}-wal")
    assert b"payload-" not in db.read_bytes() and (not wal.exists() or b"payload-" not in wal.read_bytes())


def test_a_copy_onto_a_deleted_thread_is_refused_saying_so(tmp_path: Path) -> None:
    """The refusal said the deleted thread 'already has checkpoints', which it lists none of."""
    with Store(tmp_path / "t.db") as store:
        saver = ThreadlogSaver(store)
        put(saver, "a", None, {"x": "a"}, ["x"], 1)
        put(saver, "b", None, {"x": "b"}, ["x"], 1)
        with pytest.raises(StoreError, match="'a' already has checkpoints"):
            saver.copy_thread("b", "a")
        saver.delete_thread("a")
        before = (store.counts(), store.last_position())
        with pytest.raises(StoreError, match="'a' was deleted, and its log stays.*copy to a new thread id"):
            saver.copy_thread("b", "a")
        assert (store.counts(), store.last_position()) == before
        saver.copy_thread("b", "c")
        got = saver.get_tuple({"configurable": {"thread_id": "c"}})
        assert got is not None and got.checkpoint["channel_values"] == {"x": "b"}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_deletion_inside_a_read_view_is_refused_saying_a_read_is_open(tmp_path: Path, backend: str) -> None:
    """Inside `store.consistent()` (a read transaction) a deletion was refused on PostgreSQL
    with "a write transaction is already open on this store", and on SQLite with "database
    error ...: cannot start a transaction within a transaction": neither said what was open,
    nor what to do. It now names the read view and how to write, and writes nothing."""
    from tests.backends import postgres_url

    target = tmp_path / "t.db" if backend == "sqlite" else postgres_url()
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(target) as store:
        saver = ThreadlogSaver(store)
        first = put(saver, "t", None, {"a": 1}, ["a"], 1)
        put(saver, "t", first, {"a": 1, "b": 2}, ["b"], 2)
        before = (store.counts(), store.last_position())
        for call in (lambda: saver.delete_thread("t"), lambda: saver.prune(["t"]), lambda: saver.prune(["t"], strategy="delete")):
            with store.consistent():
                with pytest.raises(StoreError, match=r"^a read transaction \(`with store.consistent\(\):`\) is open on this "
                                                     r"store, and a write cannot run inside it: nothing was written; write "
                                                     r"after the `with` block ends, or through another Store$"):
                    call()
            assert (store.counts(), store.last_position()) == before
        assert [c.checkpoint["id"] for c in saver.list(config)][-1] == first
        saver.delete_thread("t")
        assert saver.get_tuple(config) is None
        store.verify()


def test_a_deletion_whose_wait_for_earlier_writes_times_out_says_what_to_do_in_one_message() -> None:
    """On PostgreSQL a deletion waits for the writes that took a position before its own
    before it erases anything. When one outlasted the store's timeout, the refusal nested the
    lock's own message ("the database ... stayed locked by another writer (...); retry")
    inside its sentence about the next deletion erasing the rest. It now says, once, what
    happened, why (with the timeout) and what to do; doing it erases the payloads."""
    from tests.backends import postgres_url

    url = postgres_url()
    config: Any = {"configurable": {"thread_id": "t"}}
    with Store(url) as store:
        _a_then_b(store)
    with _HeldOpen(url) as other, Store(url, timeout=1) as deleting:
        reserved, release = threading.Event(), threading.Event()

        def hold() -> None:
            reserved.set()
            release.wait(60)

        other.meanwhile = hold  # a write to another thread that took its position, open until released
        elsewhere = threading.Thread(target=lambda: other.append_message("other", "user", "meanwhile"))
        elsewhere.start()
        try:
            assert reserved.wait(30)
            with pytest.raises(StoreError) as refused:
                ThreadlogSaver(deleting).delete_thread("t")
        finally:
            release.set()
            elsewhere.join(30)
        assert str(refused.value) == (
            "delete_thread of LangGraph thread 't': its checkpoints are deleted (no longer read or listed), but their "
            "payloads are not erased yet: a write to this database begun before the deletion did not end within the "
            "store's timeout (1 s). Once it has ended, run delete_thread, delete_for_runs or prune on this thread "
            "again: any of them erases them")
        saver = ThreadlogSaver(deleting)
        assert saver.get_tuple(config) is None
        saver.delete_thread("t")
        kept = [e.redacted for t in deleting.threads(limit=None) for e in deleting.read(t.id) if e.type == "langgraph.checkpoint"]
        assert len(kept) == 2 and all(kept)
        deleting.verify()


class _BeforeAppend(Store):
    """A store that, before it appends an event of type `before_type`, lets `before` run (once)."""

    before: Callable[[], None] | None = None
    before_type = "langgraph.deleted"

    def append(self, thread: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        hook = self.before
        if hook is not None and any(e.get("type") == self.before_type for e in events):
            self.before = None
            hook()
        return super().append(thread, events, *args, **kwargs)


def test_a_restatement_refused_after_the_deletion_is_recorded_does_not_say_nothing_was_removed(tmp_path: Path) -> None:
    """A checkpoint another process put on a branch just before a prune recorded its deletion
    rests on a checkpoint the prune deleted; the prune writes it again whole before erasing
    anything, and two 18 MiB channels make that event too large. The refusal said "no
    checkpoint was removed", though the prune's deletion was recorded (the deleted checkpoint
    no longer reads), as it is for the leftovers of an earlier deletion. It now says that
    they stay deleted and that nothing was erased."""
    big = 18 << 20
    db = tmp_path / "t.db"
    with _BeforeAppend(db) as deleting, Store(db) as writing:
        saver = ThreadlogSaver(deleting)
        first = put_versions(saver, first=None, values={"a": "x" * big}, versions={"a": "1"}, new=["a"])
        put_versions(saver, first, {"a": "x" * big, "b": "small"}, {"a": "1", "b": "2"}, ["b"])
        branched: list[str] = []
        deleting.before = lambda: branched.append(
            put_versions(ThreadlogSaver(writing), first, {"a": "x" * big, "b": "y" * big}, {"a": "1", "b": "3"}, ["b"]))
        with pytest.raises(InvalidEvent) as refused:
            saver.prune(["t"])
        assert branched
        text = str(refused.value)
        assert "no checkpoint was removed" not in text
        assert (f"prune of LangGraph thread 't': checkpoint {branched[0]!r} rests on deleted checkpoints whose payloads are "
                "still to be erased, so it must be written again whole first, and that event is refused") in text
        assert ("the deleted checkpoints stay deleted (no longer read or listed) and nothing was erased (one written again "
                "whole before it stays, and reads as it did). delete_thread removes the whole thread without writing "
                "anything again") in text
        reading = ThreadlogSaver(writing)
        assert reading.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": first}}) is None  # deleted
        got = reading.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": branched[0]}})
        assert got is not None and len(got.checkpoint["channel_values"]["b"]) == big
        assert not any(e.redacted for t in writing.threads(limit=None) for e in writing.read(t.id))  # nothing erased
        saver.delete_thread("t")
        assert list(saver.list({"configurable": {"thread_id": "t"}})) == []
        deleting.verify()


def test_a_redaction_read_while_a_put_tries_again_is_not_served_from_the_index(tmp_path: Path) -> None:
    """A put refused because another process wrote to its stream first reads the line again,
    from its start. What that process wrote was a redaction by hand (`threadlog redact`) of a
    checkpoint's pending writes: the saver read its `event.redacted` while reading from the
    start, did not rebuild its index for it, and never would (it had read it), so it kept
    serving the erased write, value included. It now answers as a saver new to the thread does."""
    db = tmp_path / "t.db"
    with _BeforeAppend(db) as putting, Store(db) as redacting:
        saver = ThreadlogSaver(putting)
        first = put(saver, "t", None, {"a": 1}, ["a"], 1)
        second = put(saver, "t", first, {"a": 1, "b": 2}, ["b"], 2)
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": second}}
        saver.put_writes(config, [("x", "secret-write")], task_id="task")
        got = saver.get_tuple(config)
        assert got is not None and [w[2] for w in got.pending_writes or ()] == ["secret-write"]
        position = next(e.position for e in redacting.read(line_id("t", "")) if e.type == "langgraph.writes")
        putting.before_type = "langgraph.checkpoint"
        putting.before = lambda: redacting.redact(position, reason="by hand", actor="test")
        put(saver, "t", second, {"a": 1, "b": 2, "c": 3}, ["c"], 3)
        assert putting.before is None and redacting.event_at(line_id("t", ""), 3).redacted
        for reading in (ThreadlogSaver(redacting), saver):
            got = reading.get_tuple(config)
            assert got is not None and got.pending_writes == []
