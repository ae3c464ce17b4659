"""Snapshots: a cache that makes thread_state faster and never changes an answer."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from eventstore.sqlite import SCHEMA_VERSION
from eventstore import InvalidEvent, Store, StoreError
from projections import state as state_module
from projections.request import request_body
from threadlog import anthropic_request, drop_snapshots, save_snapshot, thread_state
from tests.backends import mem_on_every_backend  # noqa: F401 (`mem`: these projections on every backend)

FIXTURE = Path(__file__).parent / "fixtures" / "v1.db"


def _reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the start offset of every fold's raw read."""
    starts: list[int] = []
    real = store.read_raw

    def spy(thread: str, start: int = 0, stop: int | None = None) -> Any:
        starts.append(start)
        return real(thread, start, stop)

    monkeypatch.setattr(store, "read_raw", spy)
    return starts


def _busy_thread(store: Store) -> str:
    t = store.create_thread(title="x", metadata={"k": 1})
    for i in range(40):
        store.append_message(t, "user" if i % 2 == 0 else "assistant", f"m{i}")
        if i == 10:
            store.append(t, [{"type": "todos.set", "data": {"todos": [{"content": "a"}]}}])
        if i == 20:
            store.append(t, [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 15}}])
    return t


def test_snapshot_changes_no_answer_and_dropping_changes_none(mem: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _busy_thread(mem)
    expected = {k: thread_state(mem, t, at=k, use_snapshots=False).to_json() for k in range(0, 43)}
    for at in (5, 12, 25, 42):
        save_snapshot(mem, t, at)
    starts = _reads(mem, monkeypatch)
    for k, value in expected.items():
        assert thread_state(mem, t, at=k).to_json() == value, k
    assert max(starts) == 25  # resumed from a snapshot, not from offset 0
    assert drop_snapshots(mem) == 4
    for k, value in expected.items():
        assert thread_state(mem, t, at=k).to_json() == value, k


def test_a_parents_snapshot_below_the_fork_point_serves_the_fork(mem: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _busy_thread(mem)
    save_snapshot(mem, t, 30)
    save_snapshot(mem, t, 40)  # above the fork point: not valid for the fork
    f = mem.fork(t, at=35, todos="inherit")
    mem.append_message(f, "user", "fork")
    starts = _reads(mem, monkeypatch)
    state = thread_state(mem, f)
    assert starts == [30]
    assert state.to_json() == thread_state(mem, f, use_snapshots=False).to_json()
    assert state.todos == [{"content": "a"}]


def test_a_note_forks_snapshot_and_a_fork_of_it(mem: Store) -> None:
    t = _busy_thread(mem)
    f = mem.fork(t, context="note", metadata="inherit")
    mem.append_message(f, "user", "x")
    save_snapshot(mem, f)
    g = mem.fork(f, unanswered="drop")
    mem.append_message(g, "assistant", "y")
    assert thread_state(mem, g).to_json() == thread_state(mem, g, use_snapshots=False).to_json()


def test_a_snapshot_changes_no_byte_of_the_state_or_the_request(mem: Store) -> None:
    """A key added by `metadata.set` stays last and a fork note's block keeps its key order:
    a snapshot stored them sorted, so `show --json` and `request` printed other bytes once
    `threadlog snapshot` had run, and a recorded request digest no longer matched."""
    t = mem.create_thread(model="m", metadata={"m": 1, "z": 2})
    mem.append_message(t, "user", "hi")
    mem.append(t, [{"type": "metadata.set", "data": {"patch": {"a": 3}}}])
    f = mem.fork(t, context="note", metadata="inherit")
    mem.append_message(f, "user", "next")

    def printed() -> tuple[str, bytes]:
        return json.dumps(thread_state(mem, f).to_json()), request_body(anthropic_request(mem, f))

    expected = printed()
    save_snapshot(mem, f)
    assert printed() == expected


def test_bumping_the_code_version_ignores_old_snapshots(mem: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _busy_thread(mem)
    save_snapshot(mem, t, 30)
    monkeypatch.setattr(state_module, "VERSION", state_module.VERSION + 1)
    starts = _reads(mem, monkeypatch)
    thread_state(mem, t)
    assert starts == [0]


def test_redact_drops_snapshots_so_no_cached_state_keeps_the_secret(mem: Store) -> None:
    t = mem.create_thread()
    secret = mem.append_message(t, "user", "password hunter2")
    mem.append_message(t, "assistant", "noted")
    save_snapshot(mem, t)
    mem.redact(secret.position, "leak", "ops")
    assert mem.count_snapshots() == 0
    assert "hunter2" not in str(thread_state(mem, t).to_json())


def test_snapshot_messages_are_read_back_lazily(mem: Store) -> None:
    t = _busy_thread(mem)
    save_snapshot(mem, t)
    mem.append_message(t, "user", "one more")
    state = thread_state(mem, t)
    assert [m.offset for m in state.messages] == [m.offset for m in thread_state(mem, t, use_snapshots=False).messages]


def test_a_schema_1_database_migrates_and_gains_the_snapshots_table(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    shutil.copy(FIXTURE, db)
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        threads = store.all_threads()
        save_snapshot(store, threads[0].id)
        for info in threads:
            assert thread_state(store, info.id).to_json() == thread_state(store, info.id, use_snapshots=False).to_json()
        store.verify()
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert "snapshots" in tables


@pytest.mark.parametrize("snapshot", [False, True], ids=["rebuilt", "from-snapshot"])
def test_state_messages_work_after_the_store_is_closed(tmp_path: Path, snapshot: bool) -> None:
    """A snapshot changes speed, never behaviour: a state resumed from one answers
    `messages` after `close()` exactly as a rebuilt one does (it used to fail)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = _busy_thread(store)
        expected = [m.to_json() for m in thread_state(store, t, use_snapshots=False).messages]
        if snapshot:
            save_snapshot(store, t)
            store.append_message(t, "user", "one more")
            expected = [m.to_json() for m in thread_state(store, t, use_snapshots=False).messages]
        state = thread_state(store, t)
        assert bool(state._fold.base) is snapshot  # resumed from the snapshot, bodies still in the store
    assert [m.to_json() for m in state.messages] == expected
    assert len(expected) > 20


@pytest.mark.parametrize("made", ["snapshot", "dropped-call", "both"])
def test_a_states_view_answers_after_the_store_is_closed_as_its_messages_do(tmp_path: Path, made: str) -> None:
    """A fork that dropped a call finds that call's message in the store when its view is made:
    its `messages` said the store is closed once it was, with or without a snapshot. And
    `view`, the model view read in parts, said so where `messages` answered (the view is the
    same messages)."""
    with Store(tmp_path / "t.db") as store:
        thread = _busy_thread(store)
        if made != "snapshot":
            store.append_message(thread, "assistant", [{"type": "text", "text": "Looking."},
                                                       {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}])
            thread = store.fork(thread, unanswered="drop")
        if made != "dropped-call":
            save_snapshot(store, thread)
        store.append_message(thread, "user", "one more")
        expected = [m.to_json() for m in thread_state(store, thread, use_snapshots=False).messages]
        state = thread_state(store, thread)
        assert bool(state._fold.base) is (made != "dropped-call") and bool(state._fold.dropped) is (made != "snapshot")
    assert [m.to_json() for m in state.messages] == expected
    assert [m.to_json() for m in state.view[-3:]] == expected[-3:] and state.view[0].to_json() == expected[0]
    assert len(state.view) == len(expected) > 20
    if made != "snapshot":
        assert expected[-2]["content"] == [{"type": "text", "text": "Looking."}]  # the dropped call is out of it


class _Latest:
    """Keeps a thread's state as of the store's closing, to show once it is closed."""

    def __init__(self, store: Store, thread: str) -> None:
        self.store, self.thread, self.state = store, thread, None
        store.finish_before_close(self)

    def store_closing(self) -> None:
        self.state = thread_state(self.store, self.thread)


def test_a_state_read_while_the_store_closes_answers_after_close(tmp_path: Path) -> None:
    """A reader's `store_closing()` that reads a state (resumed from a snapshot, so itself a
    reader): that state was registered after `close()` had listed the readers, was cleared
    uncalled, and its `messages` said the store is closed."""
    with Store(tmp_path / "t.db") as store:
        t = _busy_thread(store)
        save_snapshot(store, t)
        store.append_message(t, "user", "one more")
        expected = [m.to_json() for m in thread_state(store, t, use_snapshots=False).messages]
        latest = _Latest(store, t)
    assert latest.state is not None and latest.state._fold.base  # resumed from the snapshot
    assert [m.to_json() for m in latest.state.messages] == expected


def test_a_reader_registered_after_close_is_refused(tmp_path: Path) -> None:
    """It was taken, never called (or called by a second close(), on the closed connection)."""
    store = Store(tmp_path / "t.db")
    t = store.create_thread()
    store.close()
    with pytest.raises(StoreError, match="is closed; open it again"):
        _Latest(store, t)


def test_states_dropped_before_close_cost_nothing_at_close(mem: Store) -> None:
    t = _busy_thread(mem)
    save_snapshot(mem, t)
    for _ in range(50):
        thread_state(mem, t)  # never viewed, then gone
    assert len(mem._readers) <= 1  # held weakly: at most the last one may linger until collected


ALTERED_STATES = {  # a snapshot's stored state, altered by raw SQL
    "not-json": "'{'",
    "a-blob": "X'00ff'",
    "a-number": "7",
    "a-list": "'[1]'",
    "an-empty-object": "'{}'",
    "another-length": "json_set(state, '$.length', 5)",
    "a-length-of-another-kind": "json_set(state, '$.length', 'x')",
    # The message ranges the view lists the offsets of (a trillion of them, ranges out of order,
    # text, a float, a range past the events it caches, or a negative one; `View`).
    "a-range-of-a-trillion-offsets": "json_set(state, '$.messages', json('[[1, 1000000000000]]'))",
    "ranges-out-of-order": "json_set(state, '$.messages', json('[[20, 31], [1, 10]]'))",
    "ranges-of-text": "json_set(state, '$.messages', json('[[\"1\", \"31\"]]'))",
    "a-range-of-a-float": "json_set(state, '$.messages', json('[[1.5, 31]]'))",
    "a-range-past-the-events-cached": "json_set(state, '$.messages', json('[[1, 33]]'))",
    "a-negative-range": "json_set(state, '$.messages', json('[[-2, 31]]'))",
    "ranges-of-text-not-pairs": "json_set(state, '$.messages', 'xx')",
}


@pytest.mark.parametrize("altered", list(ALTERED_STATES.values()), ids=list(ALTERED_STATES))
def test_an_altered_snapshot_is_not_used_and_verify_names_it(tmp_path: Path, altered: str) -> None:
    """The state and `threadlog show` come from the events, as with no snapshot at all (they
    raised JSONDecodeError, TypeError or KeyError); `verify` names the snapshot."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        for i in range(30):
            store.append_message(thread, "user" if i % 2 else "assistant", f"message {i}")
        save_snapshot(store, thread)
        store.append_message(thread, "user", "after the snapshot")
        truth = thread_state(store, thread, use_snapshots=False)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE snapshots SET state = {altered}")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert thread_state(store, "t") == truth
        assert thread_state(store, "t", at=31) == thread_state(store, "t", at=31, use_snapshots=False)
    shown = CliRunner().invoke(cli, ["--db", str(path), "show", "t", "--no-pager"])
    assert shown.exit_code == 0 and "after the snapshot" in shown.output, shown.output
    verified = CliRunner().invoke(cli, ["--db", str(path), "verify"])
    assert verified.exit_code == 1 and "snapshot of 't' at offset 31" in verified.output, verified.output


def test_a_snapshot_whose_keys_were_reordered_fails_verify(tmp_path: Path) -> None:
    """Key order is printed (`show --json`, a request's bytes): a snapshot is compared with the
    state folded again byte for byte, not as sorted JSON."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(thread_id="t", metadata={"m": 1, "z": 2})
        store.append_message(thread, "user", "hi")
        save_snapshot(store, thread)
        store.verify()
    conn = sqlite3.connect(path)
    (state,) = conn.execute("SELECT state FROM snapshots").fetchone()
    reordered = json.loads(state)
    reordered["metadata"] = dict(reversed(reordered["metadata"].items()))
    conn.execute("UPDATE snapshots SET state = ?", (json.dumps(reordered, separators=(",", ":")),))
    conn.commit()
    conn.close()
    with Store(path) as store, pytest.raises(Exception, match="snapshot of 't' at offset 2 disagrees"):
        store.verify()


def test_a_snapshot_of_keys_json_cannot_tell_apart_is_refused(store: Store) -> None:
    thread = store.create_thread()
    store.append_message(thread, "user", "hi")
    for state in ({1: "int", "1": "text"}, {"a": 1, 2: 3}):
        with pytest.raises(InvalidEvent, match="^state"):
            store.save_snapshot("p", 1, thread, 1, state)
    assert store.nearest_snapshot("p", 1, thread, 1) is None


@pytest.mark.parametrize("at", [2**63, -1, True, b"1", 1.5], ids=repr)
def test_nearest_snapshot_refuses_an_offset_that_is_not_one(store: Store, at: Any) -> None:
    """As every other offset argument: SQLite raised a bare OverflowError past 64 bits, and each
    backend answered some of the others as an offset."""
    thread = store.create_thread(title="t")
    store.append_message(thread, "user", "hi")
    store.save_snapshot("p", 1, thread, 1, {"a": 1})
    with pytest.raises(InvalidEvent, match="^at"):
        store.nearest_snapshot("p", 1, thread, at)
    assert store.nearest_snapshot("p", 1, thread, 1) == (1, {"a": 1})


def test_a_snapshot_keeps_the_threads_thinking_and_one_saved_before_threads_had_it_still_reads(mem: Store) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    for config in (thinking, None):
        t = mem.create_thread(model="m", thinking=config)
        for i in range(6):
            mem.append_message(t, "user" if i % 2 == 0 else "assistant", f"m{i}")
        expected = thread_state(mem, t, use_snapshots=False)
        assert expected.thinking == config
        save_snapshot(mem, t, 4)
        assert thread_state(mem, t) == expected
    # A snapshot an earlier release saved has no `thinking`: it is read as none (no thread had one).
    found = mem.nearest_snapshot(state_module.PROJECTION, state_module.VERSION, t, 4)
    assert found is not None and "thinking" in found[1]
    older = {key: value for key, value in found[1].items() if key != "thinking"}
    mem.drop_snapshots(thread=t)
    mem.save_snapshot(state_module.PROJECTION, state_module.VERSION, t, 4, older, as_of=mem.last_position())
    assert mem.nearest_snapshot(state_module.PROJECTION, state_module.VERSION, t, 4) is not None
    assert thread_state(mem, t) == expected
