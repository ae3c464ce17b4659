"""`Store.append_prepared`: events prepared once (by an importer's pre-write check) are
written without being serialized again, and the store's checks still hold for them."""

from __future__ import annotations

import pytest

from eventstore import InvalidEvent, Store
from eventstore.prepare import prepare


def _call(tool_id: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "assistant", "content": [
        {"type": "tool_use", "id": tool_id, "name": "Read", "input": {}}]}, "meta": {"event_id": f"call-{tool_id}"}}


def _result(tool_id: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}]}, "meta": {"event_id": f"result-{tool_id}"}}


def test_prepared_events_read_back_as_appended_ones(store: Store) -> None:
    thread = store.create_thread()
    other = store.create_thread()
    events = [_call("a"), _result("a")]
    written = store.append_prepared(thread, [prepare(e, i) for i, e in enumerate(events)])
    store.append(other, [dict(e, meta={}) for e in events])
    assert [e.data for e in store.read(thread)][1:] == [e.data for e in store.read(other)][1:]
    assert [e.event_id for e in written] == ["call-a", "result-a"]
    assert store.append_prepared(thread, [prepare(e, i) for i, e in enumerate(events)]) == written  # a retry adds nothing
    store.verify()


def test_prepared_events_meet_the_same_refusals(store: Store) -> None:
    thread = store.create_thread()
    before = store.counts()
    with pytest.raises(InvalidEvent, match="not pending"):
        store.append_prepared(thread, [prepare(_result("never-called"), 0)])
    with pytest.raises(InvalidEvent, match="thread.created only starts a thread"):
        store.append_prepared(thread, [prepare({"type": "thread.created", "data": {}}, 0)])
    with pytest.raises(InvalidEvent, match="takes the PreparedEvents"):
        store.append_prepared(thread, [_call("b")])  # type: ignore[list-item]
    with pytest.raises(InvalidEvent, match="empty"):
        store.append_prepared(thread, [])
    assert store.counts() == before


def test_a_generator_of_prepared_events_is_appended_whole(store: Store) -> None:
    """The check that every item is a PreparedEvent read a generator to its end, and the
    append then found it empty ('the batch is empty')."""
    thread = store.create_thread()
    events = [_call("g"), _result("g")]
    written = store.append_prepared(thread, (prepare(e, i) for i, e in enumerate(events)))
    assert [e.event_id for e in written] == ["call-g", "result-g"]


@pytest.mark.parametrize("batch", [None, 3, object()], ids=["none", "int", "object"])
def test_a_batch_that_is_no_list_is_refused_by_name(store: Store, batch: object) -> None:
    """`append(thread, None)` raised TypeError: 'NoneType' object is not iterable."""
    thread = store.create_thread()
    before = store.counts()
    with pytest.raises(InvalidEvent, match=f"^events: must be a list of events, not {type(batch).__name__}$"):
        store.append(thread, batch)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match="takes the PreparedEvents"):
        store.append_prepared(thread, batch)  # type: ignore[arg-type]
    assert store.counts() == before
