"""A tool_use id names one pending call (eventstore/facts.py).

Repeated while pending (in one message, or again before its result) it is refused with the
id named, and the pending calls stay as they were. Once its result came back the id may be
used again: the pending facts know only what is pending (appends stay O(1)), and each result
answers exactly one call.
"""

from __future__ import annotations

from typing import Any

import pytest

from threadlog import ForkRefused, InvalidEvent, Store


def call(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "search", "input": {"q": tool_id}}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "done"}


def pending(store: Store, thread: str) -> list[str]:
    with pytest.raises(ForkRefused) as refused:
        store.fork(thread)
    return refused.value.tool_use_ids


def test_a_repeated_pending_id_is_refused_and_pending_is_unchanged(file_store: Store) -> None:
    t = file_store.create_thread()
    file_store.append_message(t, "user", "go")
    file_store.append_message(t, "assistant", [call("X"), call("D")])
    with pytest.raises(InvalidEvent, match="'D' is already waiting for its result") as caught:
        file_store.append_message(t, "assistant", [call("D")])
    assert caught.value.field == "events[0].data.content"
    with pytest.raises(InvalidEvent, match="'Y' appears twice in this message"):
        file_store.append_message(t, "assistant", [call("Y"), call("Z"), call("Y")])
    assert pending(file_store, t) == ["X", "D"]  # was ["X", "D", "D"]: one result cleared both
    file_store.append_message(t, "user", [result("D")])
    assert pending(file_store, t) == ["X"]
    file_store.verify()


def test_an_id_may_be_used_again_after_its_result(file_store: Store) -> None:
    t = file_store.create_thread()
    file_store.append_message(t, "user", "go")
    file_store.append_message(t, "assistant", [call("R")])
    file_store.append_message(t, "user", [result("R")])
    file_store.append_message(t, "assistant", [call("R")])  # accepted: nothing named R is pending
    assert pending(file_store, t) == ["R"]
    with pytest.raises(InvalidEvent, match="'R' is already waiting"):
        file_store.append_message(t, "assistant", [call("R")])
    file_store.append_message(t, "user", [result("R")])
    with pytest.raises(InvalidEvent, match="'R' is not pending"):  # one result answers one call
        file_store.append_message(t, "user", [result("R")])
    file_store.fork(t)
    file_store.verify()


def test_fan_out_answers_each_pending_call_once(file_store: Store) -> None:
    t = file_store.create_thread()
    file_store.append_message(t, "user", "go")
    file_store.append_message(t, "assistant", [call("A"), call("B")])
    [sub] = file_store.fan_out(t, ["look"])
    primed = list(file_store.read(sub))[-1]
    assert [b["tool_use_id"] for b in primed.data["content"] if b["type"] == "tool_result"] == ["A", "B"]
    with pytest.raises(InvalidEvent, match="'A' is not pending"):
        file_store.append_message(sub, "user", [result("A")])
    file_store.verify()


def test_refusals_name_a_huge_id_cut_short(file_store: Store) -> None:
    """Tool call and run ids are any text: a refusal echoed a 1 MB one whole."""
    huge = "x" * 1_000_000
    t = file_store.create_thread()
    file_store.append_message(t, "user", "go")
    file_store.append_message(t, "assistant", [call(huge)])
    refusals = []
    with pytest.raises(InvalidEvent) as repeated:
        file_store.append_message(t, "assistant", [call(huge)])
    refusals.append(repeated.value)
    with pytest.raises(InvalidEvent) as unknown:
        file_store.append_message(t, "user", [result(huge + "y")])
    refusals.append(unknown.value)
    file_store.append_message(t, "user", [result(huge)])
    file_store.append(t, [{"type": "run.started", "data": {"run_id": huge}}])
    with pytest.raises(InvalidEvent) as started:
        file_store.append(t, [{"type": "run.started", "data": {"run_id": huge}}])
    refusals.append(started.value)
    with pytest.raises(ForkRefused) as busy:
        file_store.fork(t)
    refusals.append(busy.value)
    for refusal in refusals:
        assert len(str(refusal)) < 500 and "'xxxx" in str(refusal), str(refusal)[:300]
