"""lineage, blame and diff: where a thread came from and how two threads differ."""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import InvalidEvent, Store
from threadlog import blame, diff, lineage, save_snapshot, thread_state
from projections.lineage import iter_blame
from tests.backends import mem_on_every_backend  # noqa: F401 (`mem`: these projections on every backend)


def _tree(store: Store) -> tuple[str, str, str, str]:
    t = store.create_thread()
    store.append_message(t, "user", "a", actor="ana")
    store.append_message(t, "assistant", "b", actor="model")
    f = store.fork(t, at=2)
    store.append_message(f, "user", "f1")
    g = store.fork(f)
    store.append_message(g, "user", "g1", origin="imported", occurred_at="2024-01-01T00:00:00Z")
    h = store.fork(t)
    store.append_message(t, "user", "t3")
    return t, f, g, h


def test_lineage_lists_ancestors_with_fork_offsets_then_descendants(mem: Store) -> None:
    t, f, g, h = _tree(mem)
    out = lineage(mem, f)
    assert [(e.id, e.relation, e.parent_offset) for e in out] == [(t, "ancestor", None), (f, "self", 2), (g, "descendant", 4)]
    assert [e.id for e in lineage(mem, t)] == [t, f, g, h]


def test_blame_names_stream_offset_position_time_actor_origin(mem: Store) -> None:
    t, f, g, _ = _tree(mem)
    entries = blame(mem, g)
    assert [(e.stream_id, e.offset, e.inherited) for e in entries] == [(t, 1, True), (f, 3, True), (g, 5, False)]
    assert entries[0].actor == "ana" and entries[0].position == mem.event_at(g, 1).position
    assert (entries[2].origin, entries[2].time) == ("imported", "2024-01-01T00:00:00Z")


def test_blame_of_a_note_fork_points_at_the_fork_event(mem: Store) -> None:
    t, *_ = _tree(mem)
    n = mem.fork(t, context="note")
    [entry] = blame(mem, n)
    assert (entry.kind, entry.stream_id, entry.offset) == ("fork_note", n, mem.thread(n).parent_offset)


def test_diff_finds_the_common_ancestor_and_each_side(mem: Store) -> None:
    t, f, g, h = _tree(mem)
    d = diff(mem, g, h)
    assert (d.common_ancestor, d.fork_offset) == (t, 2)
    assert [m["content"][0]["text"] for m in d.a.messages] == ["f1", "g1"]
    assert [m["content"][0]["text"] for m in d.b.messages] == ["b"]
    d = diff(mem, t, f)
    assert (d.common_ancestor, d.fork_offset) == (t, 2) and [m["offset"] for m in d.b.messages] == [3]
    assert diff(mem, f, g).common_ancestor == f and diff(mem, f, g).fork_offset == 4
    other = mem.create_thread()
    assert diff(mem, t, other).common_ancestor is None and diff(mem, t, other).fork_offset == 0
    assert diff(mem, t, t).a.messages == []


@pytest.mark.parametrize("limit", [-1, 2.0, "3", 2**64], ids=["negative", "float", "text", "past-2**63"])
def test_a_diff_limit_that_is_no_count_is_refused_by_name(mem: Store, limit: Any) -> None:
    """It went to itertools.islice unchecked: ValueError ('Stop argument for islice() must be None or an integer')."""
    t, f, _, _ = _tree(mem)
    with pytest.raises(InvalidEvent, match="^limit: "):
        diff(mem, t, f, limit=limit)


def _messages(n: int) -> list[dict[str, object]]:
    return [{"type": "message.appended", "data": {"role": ("user", "assistant")[i % 2], "content": [{"type": "text", "text": f"m{i}"}]}}
            for i in range(n)]


def test_blame_follows_the_view_past_compactions_notes_and_dropped_calls(mem: Store) -> None:
    t = mem.create_thread()
    mem.append(t, _messages(4))
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}])
    d = mem.fork(t, unanswered="drop")
    mem.append(d, _messages(2))
    mem.append(d, [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 3}}])
    mem.append(d, _messages(1))
    n = mem.fork(d, context="note")
    mem.append(n, _messages(2))
    for thread in (t, d, n):
        view = thread_state(mem, thread).messages
        assert [(e.index, e.kind, e.role, e.offset) for e in blame(mem, thread)] == [
            (i, m.kind, m.role, m.offset) for i, m in enumerate(view)]
        # From any entry on (the viewer's later pages): the same entries, counted alike.
        whole = blame(mem, thread)
        for start in range(len(whole) + 2):
            assert list(iter_blame(mem, thread, start=start)) == whole[start:], (thread, start)
    assert "toolu_1" not in str(thread_state(mem, d).messages)


def test_the_model_view_and_a_diff_side_keep_how_a_refused_answer_ended(mem: Store) -> None:
    """The model view's messages kept role and content only, a diff side's too: a reader of
    either (the viewer's replay and diff pages) could not tell a refused answer from an empty
    one. Each keeps the refusal now, read from a snapshot or not; the request leaves it out."""
    t = mem.create_thread(thread_id="t")
    mem.append_message(t, "user", "hi")
    details = {"type": "refusal", "category": "cyber", "explanation": "No."}
    mem.append(t, [{"type": "message.appended", "data": {"role": "assistant", "content": [{"type": "text", "text": ""}],
                                                          "stop_reason": "refusal", "stop_details": details}},
                   {"type": "message.appended", "data": {"role": "assistant", "content": [{"type": "text", "text": ""}],
                                                          "stop_reason": "refusal"}},
                   {"type": "message.appended", "data": {"role": "assistant", "content": [{"type": "text", "text": "ok"}],
                                                          "stop_reason": "end_turn"}}])
    before = thread_state(mem, t).messages
    save_snapshot(mem, t)
    for messages in (before, thread_state(mem, t).messages):
        assert [m.refusal for m in messages] == [None, "cyber: No.", "", None]
        assert messages[1].to_param() == {"role": "assistant", "content": [{"type": "text", "text": ""}]}
    other = mem.create_thread(thread_id="other")
    side = diff(mem, t, other).a.messages
    assert [(m.get("stop_reason"), m.get("stop_details")) for m in side] == [
        (None, None), ("refusal", details), ("refusal", None), ("end_turn", None)]
