"""The store's contract, run against every backend in `conftest.BACKENDS`.

Atomic batches, expected-version conflicts, idempotent retries, contiguous offsets per
thread, increasing global positions: what every backend must guarantee.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eventstore import ConcurrencyError, InvalidEvent, Store, StoreError, ThreadNotFound
from tests.backends import BACKENDS, BackendCase, dump


def msg(text: str, **meta: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "user", "content": text}, "meta": meta}


def test_create_thread_starts_with_thread_created(store: Store) -> None:
    t = store.create_thread(title="Trip", system="You plan trips.", metadata={"user": "ana"})
    [event] = store.read(t)
    assert (event.offset, event.type, event.stream_id) == (0, "thread.created", t)
    assert event.data == {"title": "Trip", "system": "You plan trips.", "metadata": {"user": "ana"}}
    assert store.head(t) == 1


def test_offsets_contiguous_and_positions_increasing(store: Store) -> None:
    a, b = store.create_thread(), store.create_thread()
    for i in range(5):
        store.append(a, [msg(f"a{i}")])
        store.append(b, [msg(f"b{i}"), msg(f"b{i}'")])
    for thread, n in ((a, 6), (b, 11)):
        assert [e.offset for e in store.read(thread)] == list(range(n))
    positions = [e.position for e in store.read_all()]
    assert positions == sorted(positions) and len(set(positions)) == 17


def test_batch_is_atomic(store: Store) -> None:
    t = store.create_thread()
    before = dump(store)
    with pytest.raises(InvalidEvent) as info:
        store.append(t, [msg("fine"), {"type": "message.appended", "data": {"role": "user", "content": []}}])
    assert info.value.field == "events[1].data.content"
    assert dump(store) == before
    assert store.head(t) == 1


def test_batch_returns_recorded_events_in_order(store: Store) -> None:
    t = store.create_thread()
    recorded = store.append(t, [msg("one"), msg("two")])
    assert [(e.offset, e.data["content"][0]["text"]) for e in recorded] == [(1, "one"), (2, "two")]
    assert [e.to_json() for e in recorded] == [e.to_json() for e in store.read(t, 1)]


@pytest.mark.parametrize("expect", [0, 1, 3, 50], ids=["zero", "behind", "ahead", "far-ahead"])
def test_wrong_expected_head_is_refused(store: Store, expect: int) -> None:
    t = store.create_thread()
    store.append(t, [msg("x")])
    before = dump(store)
    with pytest.raises(ConcurrencyError) as info:
        store.append(t, [msg("y")], expect=expect)
    assert (info.value.expected, info.value.actual) == (expect, 2)
    assert dump(store) == before


def test_exact_expected_head_appends(store: Store) -> None:
    t = store.create_thread()
    [event] = store.append(t, [msg("x")], expect=1)
    assert event.offset == 1
    assert store.append(t, [msg("y")], expect="stream_exists")[0].offset == 2


def test_no_stream_refuses_existing_thread(store: Store) -> None:
    t = store.create_thread()
    with pytest.raises(ConcurrencyError) as info:
        store.append(t, [{"type": "thread.created", "data": {}}], expect="no_stream")
    assert info.value.actual == 1


def test_no_stream_creates_a_thread_with_a_chosen_id(store: Store) -> None:
    [event] = store.append("session-42", [{"type": "thread.created", "data": {"title": "x"}}], expect="no_stream")
    assert (event.stream_id, event.offset) == ("session-42", 0)
    assert store.create_thread(thread_id="other") == "other"


@pytest.mark.parametrize("expect", ["any", "stream_exists", 0], ids=str)
def test_unknown_thread(store: Store, expect: object) -> None:
    with pytest.raises(ThreadNotFound):
        store.append("nope", [msg("x")], expect=expect)  # type: ignore[arg-type]
    with pytest.raises(ThreadNotFound):
        store.read("nope")
    assert store.counts() == (0, 0)


def test_idempotent_retry_returns_the_original(store: Store) -> None:
    t = store.create_thread()
    first = store.append(t, [msg("x", event_id="e-1"), msg("y", event_id="e-2")], expect=1)
    before = dump(store)
    # The retry states the head it saw before the first attempt: still no conflict.
    again = store.append(t, [msg("x", event_id="e-1"), msg("y", event_id="e-2")], expect=1)
    assert [e.to_json() for e in again] == [e.to_json() for e in first]
    assert dump(store) == before


def test_a_retried_create_thread_returns_the_thread_it_made(store: Store) -> None:
    """A thread created with an event id and no thread id: the retry after a timeout got a new
    id drawn, and was refused as an event id of another thread, where a retried fork returns
    its fork."""
    t = store.create_thread(title="Trip", metadata={"user": "ana"}, event_id="c-1")
    before = dump(store)
    assert store.create_thread(title="Trip", metadata={"user": "ana"}, event_id="c-1") == t
    assert dump(store) == before
    with pytest.raises(InvalidEvent, match="'c-1' is already stored at position 1 with different content"):
        store.create_thread(title="Other", event_id="c-1")
    (stored,) = store.append(t, [msg("x", event_id="e-1")])
    with pytest.raises(InvalidEvent, match=f"'e-1' is already used in thread '{t}' \\(position {stored.position}\\)"):
        store.create_thread(title="Trip", event_id="e-1")
    assert store.counts() == (1, 2)


def test_partial_retry_and_foreign_event_ids_are_refused(store: Store) -> None:
    t, u = store.create_thread(), store.create_thread()
    (stored,) = store.append(t, [msg("x", event_id="e-1")])
    before = dump(store)
    # Each refusal names the id and the position that holds it.
    with pytest.raises(InvalidEvent, match=f"1 of the batch's 2 .*'e-1' at position {stored.position}\\)"):
        store.append(t, [msg("new", event_id="e-9"), msg("x", event_id="e-1")])
    with pytest.raises(InvalidEvent, match=f"'e-1' is already used in thread '{t}' \\(position {stored.position}\\)"):
        store.append(u, [msg("x", event_id="e-1")])
    with pytest.raises(InvalidEvent, match="repeats"):
        store.append(u, [msg("x", event_id="e-5"), msg("y", event_id="e-5")])
    assert dump(store) == before


def test_read_ranges(store: Store) -> None:
    t = store.create_thread()
    store.append(t, [msg(str(i)) for i in range(9)])
    assert [e.offset for e in store.read(t, 3, 6)] == [3, 4, 5]
    assert [e.offset for e in store.read(t, 8)] == [8, 9]
    assert list(store.read(t, 20)) == []


def test_read_all_after_and_limit(store: Store) -> None:
    t = store.create_thread()
    store.append(t, [msg(str(i)) for i in range(5)])
    everything = [e.position for e in store.read_all()]
    assert [e.position for e in store.read_all(after=everything[1], limit=2)] == everything[2:4]
    assert list(store.read_all(limit=0)) == []


def test_append_message_text_and_blocks(store: Store) -> None:
    t = store.create_thread()
    text = store.append_message(t, "user", "hi", actor="ana", event_id="m1")
    assert text.data["content"] == [{"type": "text", "text": "hi"}]
    assert text.meta == {"actor": "ana", "event_id": "m1"} and text.event_id == "m1"
    blocks = store.append_message(t, "assistant", [{"type": "text", "text": "yo"}], model="claude-x", stop_reason="end_turn")
    assert blocks.data == {"role": "assistant", "content": [{"type": "text", "text": "yo"}], "model": "claude-x", "stop_reason": "end_turn"}


def test_event_models_are_accepted(store: Store) -> None:
    from threadlog import Event, MessageAppended, TitleSet

    t = store.create_thread()
    out = store.append(t, [TitleSet(title="New"), Event.of(MessageAppended(role="user", content="hi"), actor="bot")])
    assert out[0].data == {"title": "New"}
    assert out[1].meta == {"actor": "bot"} and out[1].data["content"][0]["text"] == "hi"


def test_reserved_types_cannot_be_appended(store: Store) -> None:
    t = store.create_thread()
    for type_, data in (
        ("thread.forked", {"parent_id": t, "parent_offset": 1, "options": {}}),
        ("event.redacted", {"position": 1, "reason": "x", "actor": "y"}),
        ("thread.created", {}),
    ):
        with pytest.raises(InvalidEvent):
            store.append(t, [{"type": type_, "data": data}])
    assert store.head(t) == 1


def test_reopening_a_file_keeps_everything(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Store(tmp_path / "x.db") as s:
        t = s.create_thread(title="kept")
        s.append_message(t, "user", "hello")
        before = [e.to_json() for e in s.read(t)]
    with Store(tmp_path / "x.db", synchronous="FULL") as s:
        assert [e.to_json() for e in s.read(t)] == before
        assert (s.journal_mode, s.synchronous) == ("wal", "FULL")
        s.verify()


@pytest.mark.parametrize("call", [
    lambda s, bad: s.fork(bad), lambda s, bad: list(s.read(bad)), lambda s, bad: s.event_at(bad, 0),
    lambda s, bad: s.append_message(bad, "user", "x"), lambda s, bad: s.title(bad), lambda s, bad: s.count(bad, "x"),
    lambda s, bad: s.subtree(bad), lambda s, bad: s.pending_tool_uses(bad), lambda s, bad: s.threads(root=bad),
    lambda s, bad: s.drop_snapshots(thread=bad), lambda s, bad: s.nearest_snapshot("p", 1, bad, 1),
    lambda s, bad: s.append(bad, [{"type": "title.set", "data": {"title": "x"}}], expect="stream_exists"),
], ids=["fork", "read", "event_at", "append", "title", "count", "subtree", "pending", "threads", "drop_snapshots", "nearest",
        "stream_exists"])
def test_a_thread_id_holding_nul_is_no_thread(store: Store, call: Any) -> None:
    """No id holds U+0000 (ids are printable), so every backend answers 'not found', the error
    callers catch; PostgreSQL, whose text cannot hold it, answered a generic database error."""
    thread = store.create_thread(title="t")
    before = dump(store)
    with pytest.raises(ThreadNotFound):
        call(store, thread[:4] + "\x00")
    assert store.ids_starting("a\x00") == [] and store.threads_starting("a\x00") == [] and store.count(thread, "a\x00") == 0
    assert dump(store) == before


def test_threads_starting_names_only_the_threads_written_since(store: Store) -> None:
    """What a reader that keeps an index of a family of ids (a LangGraph line and its branches)
    asks, instead of one lookup for each of them, however many did not change."""
    for name in ("job", "job.a", "job.b", "jobber"):
        store.create_thread(title=name, thread_id=name)
        store.append(name, [msg("hello")])
    store.fork("job", at=2, fork_id="job.c")
    mark = store.last_position()
    assert [t.id for t in store.threads_starting("job")] == ["job", "job.a", "job.b", "job.c", "jobber"]
    assert store.threads_starting("job", after=mark) == []
    store.append("job.b", [msg("hi")])
    store.fork("job.a", at=2, fork_id="job.a.d")
    changed = store.threads_starting("job", after=mark)
    assert [(t.id, t.head) for t in changed] == [("job.a.d", 3), ("job.b", 3)]
    assert changed == [store.thread("job.a.d"), store.thread("job.b")]
    with pytest.raises(InvalidEvent, match="after"):
        store.threads_starting("job", after=-1)


def test_ids_starting_with_a_prefix_are_all_of_them_and_only_them(store: Store) -> None:
    """The range ended at `prefix + U+10FFFF`: an id holding U+10FFFF just after the prefix was
    left out, and so was one starting with U+10FFFF from the ids starting with "". SQL's LIKE
    wildcards and backslashes in a prefix are text like any other."""
    ids = ["job", "job\U0010ffff", "job\U0010ffffx", "jo\U0010ffff", "jp", "j%b", "j_b", "j\\b", "a\ud7ffz", "a\ue000",
           "\U0010ffff"]
    for name in ids:
        store.create_thread(title="t", thread_id=name)
    for prefix in ["job", "job\U0010ffff", "jo", "j%", "j_", "j\\", "a\ud7ff", "", "\U0010ffff", "\U0010ffff\U0010ffff"]:
        wanted = sorted(name for name in ids if name.startswith(prefix))
        assert [t.id for t in store.threads_starting(prefix)] == wanted, prefix
        assert store.ids_starting(prefix, limit=100) == wanted, prefix


@pytest.mark.parametrize("name", ["@last", "@mine"])
def test_a_thread_id_starting_with_at_is_refused_and_nothing_is_written(store: Store, name: str) -> None:
    """`@last` names the latest active thread for every reader (the CLI, the web viewer, the
    command a fork's note gives the model): a thread with that id would never be read by it."""
    t = store.create_thread(title="t")
    store.append_message(t, "user", "hi")
    before = dump(store)
    with pytest.raises(InvalidEvent, match="starts with '@'"):
        store.create_thread(thread_id=name)
    with pytest.raises(InvalidEvent, match="starts with '@'"):
        store.fork(t, fork_id=name)
    with pytest.raises(InvalidEvent, match="starts with '@'"):
        store.append(name, [{"type": "thread.created", "data": {}}], expect="no_stream")
    assert dump(store) == before
    assert store.fork(t, fork_id="a@b") == "a@b"  # elsewhere in an id, '@' is text


def _raised(interrupt_id: str, tool_use_id: str) -> dict[str, Any]:
    return {"type": "interrupt.raised", "data": {"interrupt_id": interrupt_id, "tool_use_id": tool_use_id}}


def test_a_tool_call_waits_on_one_interrupt_at_a_time(store: Store) -> None:
    """A second interrupt on a tool call another pending interrupt waits on was recorded: its
    answer and the first's both became that call's one result, and one was dropped unseen.
    Refused, in a later append or the same batch, naming the pending one; once that one is
    resolved or cancelled the call may be asked about again."""
    t = store.create_thread(title="book")
    store.append_message(t, "user", "book a train")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "book", "input": {}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "pay", "input": {}}])
    store.append(t, [_raised("q1", "toolu_1")])
    before = dump(store)
    for batch, at in (([_raised("q2", "toolu_1")], 0), ([_raised("q2", "toolu_2"), _raised("q3", "toolu_2")], 1)):
        with pytest.raises(InvalidEvent) as refused:
            store.append(t, batch)
        assert refused.value.field == f"events[{at}].data.tool_use_id"
        assert str(refused.value).endswith(f"tool_use '{batch[at]['data']['tool_use_id']}' already waits on interrupt "
                                           f"'{'q1' if at == 0 else 'q2'}': a call takes one answer; resolve or cancel "
                                           "that interrupt first"), str(refused.value)
        assert dump(store) == before
    store.append(t, [_raised("q2", "toolu_2")])  # another call
    store.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "q1", "answer": "the 08:00"}},
                     _raised("q3", "toolu_1")])
    store.append(t, [{"type": "interrupt.cancelled", "data": {"interrupt_id": "q3", "reason": "asked again"}},
                     _raised("q4", "toolu_1")])
    assert store.pending_interrupts(t) == ("q2", "q4")
    fork = store.fork(t, unanswered="keep")  # the fork's own interrupts: the parent's are demoted there
    store.append(fork, [_raised("q5", "toolu_1")])
    with pytest.raises(InvalidEvent, match="already waits on interrupt 'q5'"):
        store.append(fork, [_raised("q6", "toolu_1")])


def _result(tool_use_id: str) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_use_id, "content": "done"}]}}


def test_a_result_for_a_call_waiting_on_an_interrupt_is_refused_until_the_interrupt_is_settled(store: Store) -> None:
    """A call's result was recorded while an interrupt still waited on the call: the thread
    stayed `interrupted`, and the answer then given to the interrupt was dropped (the call had
    its result). Refused, naming the interrupt, until it is resolved or cancelled, earlier or
    before the result in the same batch; calls no interrupt waits on take results as before."""
    t = store.create_thread(title="book")
    store.append_message(t, "user", "book a train")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": f"toolu_{n}", "name": "book", "input": {}}
                                          for n in (1, 2, 3)])
    store.append(t, [_raised("q1", "toolu_1")])
    store.append(t, [_raised("q2", "toolu_2")])
    before = dump(store)
    settle = {"type": "interrupt.cancelled", "data": {"interrupt_id": "q1", "reason": "booked by hand"}}
    for batch, at in (([_result("toolu_1")], 0), ([_result("toolu_1"), settle], 0), ([settle, _result("toolu_2")], 1)):
        for _ in range(2):  # the second against the head this store's own write left (PostgreSQL's one round trip)
            with pytest.raises(InvalidEvent) as refused:
                store.append(t, batch)
            assert refused.value.field == f"events[{at}].data.content"
            waiting = batch[at]["data"]["content"][0]["tool_use_id"]
            assert str(refused.value).endswith(
                f"tool_use '{waiting}' waits on interrupt 'q{waiting[-1]}', whose answer becomes its result: resolve that "
                "interrupt (the run resuming records the result), or cancel it before recording this one"), str(refused.value)
            assert dump(store) == before
    store.append(t, [_result("toolu_3")])  # no interrupt waits on it
    store.append(t, [settle, _result("toolu_1")])
    store.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "q2", "answer": "the 08:00"}}])
    store.append(t, [_result("toolu_2")])
    assert store.pending_interrupts(t) == () and store.pending_tool_uses(t) == ()


def test_an_answer_to_an_interrupt_whose_call_has_its_result_is_refused_until_cancelled(store: Store) -> None:
    """A log an older release wrote may hold a call's result recorded while an interrupt waited
    on the call, or an interrupt raised on a call that never waited (appends refuse both now).
    An answer to such an interrupt was taken and read by nothing: no waiting call takes it.
    Refused, naming the call and where its result is (alone or after other events, and against
    the head this store's own write left), the log left as it was; cancelling it settles it,
    and an interrupt on a call made in the same batch is answered as before."""
    from tests.test_restore import old_export

    call = {"type": "tool_use", "id": "toolu_1", "name": "book", "input": {}}
    old = [{"type": "thread.created", "data": {"title": "book"}},
           {"type": "message.appended", "data": {"role": "assistant", "content": [call]}},
           _raised("q1", "toolu_1"), _result("toolu_1"), _raised("q2", "toolu_9")]
    store.restore(enumerate(old_export([(event["type"], event["data"]) for event in old]), 1))
    before = dump(store)
    resolved = {"type": "interrupt.resolved", "data": {"interrupt_id": "q1", "answer": "the 08:00"}}
    for batch, at in (([resolved], 0), ([msg("which train?"), resolved], 1)):
        for _ in range(2):  # the second against the head this store's own write left (PostgreSQL's one round trip)
            with pytest.raises(InvalidEvent) as refused:
                store.append("S", batch)
            assert refused.value.field == f"events[{at}].data.interrupt_id"
            assert refused.value.why == ("interrupt 'q1' was raised on tool_use 'toolu_1', which already has its result (at "
                                         "offset 3): an answer would be the result of no call; cancel the interrupt instead")
            assert dump(store) == before
    with pytest.raises(InvalidEvent, match="tool_use 'toolu_9', which is not waiting for its result in this thread"):
        store.append("S", [{"type": "interrupt.resolved", "data": {"interrupt_id": "q2"}}])
    assert dump(store) == before
    store.append("S", [{"type": "interrupt.cancelled", "data": {"interrupt_id": q, "reason": "moot"}} for q in ("q1", "q2")])
    store.append("S", [{"type": "message.appended", "data": {"role": "assistant", "content": [call]}}, _raised("q3", "toolu_1"),
                       {"type": "interrupt.resolved", "data": {"interrupt_id": "q3", "answer": "the 09:00"}}])
    assert store.pending_interrupts("S") == () and store.pending_tool_uses("S") == ("toolu_1",)


def _resolved(interrupt_id: str, answer: str = "Monday") -> dict[str, Any]:
    return {"type": "interrupt.resolved", "data": {"interrupt_id": interrupt_id, "answer": answer}}


def test_an_interrupt_takes_no_answer_for_a_later_call_reusing_its_calls_id(store: Store) -> None:
    """In a log an older release wrote, interrupt q1's call may hold its result while q1 waits.
    A later call reusing the id toolu_1 made q1 look like its question: an answer to q1 was
    taken (in the write making the call or after it), and became the later call's result.
    An interrupt belongs to the call it was raised on: the answer is refused, naming where that
    call's result is, the log left as it was; the later call may be asked about anew."""
    from tests.test_restore import old_export

    call = {"type": "tool_use", "id": "toolu_1", "name": "book", "input": {}}
    again = {"type": "message.appended", "data": {"role": "assistant", "content": [call]}}
    old = [{"type": "thread.created", "data": {"title": "book"}}, again, _raised("q1", "toolu_1"), _result("toolu_1")]
    store.restore(enumerate(old_export([(event["type"], event["data"]) for event in old]), 1))
    why = ("interrupt 'q1' was raised on an earlier tool_use 'toolu_1', which has its result (at offset 3); the call "
           "waiting under that id now is a later one, whose result the answer must not become: cancel the interrupt instead")
    for batch, at in (([again, _resolved("q1")], 1), ([_resolved("q1")], 0)):
        before = dump(store)
        for _ in range(2):  # the second against the head this store's own write left (PostgreSQL's one round trip)
            with pytest.raises(InvalidEvent) as refused:
                store.append("S", batch)
            assert (refused.value.field, refused.value.why) == (f"events[{at}].data.interrupt_id", why)
            assert dump(store) == before
        if at == 1:
            store.append("S", [again])
    store.append("S", [_raised("q2", "toolu_1")])  # the later call's own question
    store.append("S", [_resolved("q2", "the 09:00"), {"type": "run.started", "data": {"run_id": "r1"}}, _result("toolu_1")])
    store.append("S", [{"type": "interrupt.cancelled", "data": {"interrupt_id": "q1", "reason": "its call has its result"}}])
    assert store.pending_interrupts("S") == () and store.pending_tool_uses("S") == ()
    assert store.verify().events == 10


def test_a_refused_answer_names_the_result_of_the_call_its_interrupt_was_raised_on(store: Store) -> None:
    """Interrupt q1 waits on the call toolu_1 of offset 1, whose result (offset 3) an older
    release recorded; later calls reused the id, one of them answered (offset 5). A refused
    answer to q1 named offset 5, the result of another call, as where q1's call has its result.
    It names offset 3, whether a later call waits under the id or none does; an interrupt
    raised on a call whose result came before it still names that result."""
    from tests.test_restore import old_export

    call = {"type": "message.appended", "data": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "book", "input": {}}]}}
    old = [{"type": "thread.created", "data": {"title": "book"}}, call, _raised("q1", "toolu_1"), _result("toolu_1"),
           call, _result("toolu_1"), _raised("q2", "toolu_1")]
    store.restore(enumerate(old_export([(event["type"], event["data"]) for event in old]), 1))
    before = dump(store)
    for resolved, why in (("q1", "interrupt 'q1' was raised on tool_use 'toolu_1', which already has its result (at offset 3)"),
                          ("q2", "interrupt 'q2' was raised on tool_use 'toolu_1', which already has its result (at offset 5)")):
        with pytest.raises(InvalidEvent) as refused:
            store.append("S", [_resolved(resolved)])
        assert refused.value.why.startswith(why + ": an answer would be the result of no call"), refused.value.why
    assert dump(store) == before
    store.append("S", [call])  # a later call waits under the id
    before = dump(store)
    with pytest.raises(InvalidEvent) as refused:
        store.append("S", [_resolved("q1")])
    assert refused.value.why.startswith("interrupt 'q1' was raised on an earlier tool_use 'toolu_1', which has its result "
                                        "(at offset 3); "), refused.value.why
    assert dump(store) == before



class _WaitsInsideItsWrite(Store):
    """A store whose writes each call `wait_for_writes` from inside their own transaction,
    keeping what it raised."""

    refused: list[BaseException]

    def _write(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self.wait_for_writes()
        except BaseException as error:  # kept for the test to read
            self.refused.append(error)
        return super()._write(*args, **kwargs)


@pytest.mark.parametrize("case", BACKENDS, ids=[case.id for case in BACKENDS])
def test_wait_for_writes_inside_a_transaction_is_refused_saying_which_and_what_to_do(case: BackendCase, tmp_path: Path) -> None:
    """Inside `consistent()` SQLite's wait returned at once, and PostgreSQL's was refused saying
    it "would hold the order lock to its end": one backend was silent, neither said what was
    open nor what to do. Both now name the transaction and say to wait after it ends."""
    store = _WaitsInsideItsWrite(case.make(tmp_path))
    store.refused = []
    try:
        thread = store.create_thread(title="waits")
        assert [str(error) for error in store.refused] == [
            "wait_for_writes: a write transaction is open on this store, and the writes the wait is for may be waiting "
            "for it; nothing was waited for: call it after the transaction ends"]
        assert [e.type for e in store.read(thread)] == ["thread.created"]  # the write goes on: the refusal was caught
        with store.consistent():
            with pytest.raises(StoreError, match="^" + re.escape(
                    "wait_for_writes: a read transaction (`with store.consistent():`) is open on this store, and a read "
                    "inside it would not see the writes waited for; nothing was waited for: call it after the `with` block "
                    "ends") + "$"):
                store.wait_for_writes()
        store.wait_for_writes()
    finally:
        store.close()


@pytest.mark.parametrize("case", BACKENDS, ids=[case.id for case in BACKENDS])
def test_wait_for_writes_on_a_closed_store_says_it_is_closed(case: BackendCase, tmp_path: Path) -> None:
    """On SQLite `wait_for_writes` after `close()` raised the driver's ProgrammingError ('Cannot
    operate on a closed database'), where every other call says the store is closed."""
    store = case.make(tmp_path)
    store.close()
    with pytest.raises(StoreError, match=r"is closed; open it again to read or write$"):
        store.wait_for_writes()
