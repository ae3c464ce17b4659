"""display_rows pages: the rows of offsets start..stop-1 are the whole view's rows at those
offsets, with the same statuses, whatever comes after the page (answers, resolutions, forks)."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from threadlog import InvalidEvent, Store, display_rows

# One step of a conversation; each is valid whatever came before it (see _apply).
STEPS = st.lists(st.sampled_from(["say", "call", "answer", "fail", "ask", "resolve", "cancel", "compact", "prime"]),
                 min_size=1, max_size=14)


def _apply(store: Store, thread: str, steps: list[str]) -> None:
    calls: list[str] = []
    asks: list[str] = []
    for i, step in enumerate(steps):
        if step == "say" or (step in ("answer", "fail") and not calls) or (step in ("resolve", "cancel") and not asks):
            store.append_message(thread, "user" if i % 2 else "assistant", f"text {i}")
        elif step == "call":
            calls.append(f"toolu_{i}")
            store.append_message(thread, "assistant", [{"type": "tool_use", "id": calls[-1], "name": "look", "input": {}}])
        elif step in ("answer", "fail"):
            block = {"type": "tool_result", "tool_use_id": calls.pop(0), "content": "ok", "is_error": step == "fail"}
            store.append_message(thread, "user", [block])
        elif step == "ask":
            asks.append(f"ask-{i}")
            store.append(thread, [{"type": "interrupt.raised", "data": {"interrupt_id": asks[-1], "question": "sure?"}}])
        elif step in ("resolve", "cancel"):
            kind = "interrupt.resolved" if step == "resolve" else "interrupt.cancelled"
            data = {"interrupt_id": asks.pop(0), **({"answer": "yes"} if step == "resolve" else {"reason": "no"})}
            store.append(thread, [{"type": kind, "data": data}])
        elif step == "compact":
            try:
                store.append(thread, [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": store.head(thread)}}])
            except InvalidEvent as refused:  # a cut between tool calls and their results: not a step of a valid thread
                assert refused.field.endswith(".through_offset"), refused
        else:
            store.append_message(thread, "user", f"primed {i}", origin="primed")


def _check(store: Store, thread: str) -> None:
    head = store.head(thread)
    for at in (None, head // 2):
        whole = display_rows(store, thread, at)
        end = head if at is None else at
        for start in range(end + 1):
            for stop in range(start, end + 1):
                page = display_rows(store, thread, at, start=start, stop=stop)
                assert page == [row for row in whole if start <= row.offset < stop], (at, start, stop)


@settings(max_examples=60, deadline=None)
@given(STEPS, st.one_of(st.none(), STEPS))
# The fork uses toolu_7 again (the parent's was answered): its failure, past a page holding the
# parent's call, was taken as that call's.
@example(["say"] * 7 + ["call", "answer"], ["say"] * 5 + ["call", "ask", "call", "answer", "fail"])
def test_a_page_is_the_whole_view_sliced(steps: list[str], after_fork: list[str] | None) -> None:
    with Store(":memory:") as store:
        thread = store.create_thread(title="t")
        _apply(store, thread, steps)
        _check(store, thread)
        if after_fork is not None and store.count(thread, "message.appended"):
            fork = store.fork(thread, unanswered="drop")
            _apply(store, fork, after_fork)
            _check(store, fork)
