"""`threadlog demo`: a small conversation that exercises every kind of event and fork."""

from __future__ import annotations

from eventstore import Store


def build_demo(store: Store) -> dict[str, object]:
    """A trip-planning thread with a tool call, an interrupt, a fork and a fan-out.

    Returns the ids: `thread`, `fork` (at an earlier offset), `subagents` (fan-out).
    """
    t = store.create_thread(
        title="Trip to Lyon",
        system="You plan train trips.",
        model="claude-sonnet-4-5",
        tools=[{"name": "search_trains", "description": "Search trains", "input_schema": {"type": "object"}}],
        metadata={"user": "ana", "locale": "fr"},
    )
    store.append_message(t, "user", "Find me a train from Paris to Lyon on Friday morning.")
    store.append(t, [{"type": "run.started", "data": {"run_id": "run-1"}}])
    store.append_message(
        t,
        "assistant",
        [
            {"type": "text", "text": "Let me search the timetable."},
            {"type": "tool_use", "id": "toolu_01", "name": "search_trains", "input": {"from": "Paris", "to": "Lyon", "day": "Friday"}},
        ],
    )
    store.append_message(
        t, "user", [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "TGV 6601 08:00 → 09:56, TGV 6603 09:00 → 10:56"}]
    )
    store.append_message(t, "assistant", "Two trains fit: 08:00 and 09:00. Shall I book one?")
    store.append(
        t,
        [
            {"type": "interrupt.raised", "data": {"interrupt_id": "ask-1", "question": "Which train should I book?"}},
            {"type": "run.finished", "data": {"run_id": "run-1", "status": "ok"}},
        ],
    )
    early = store.fork(t, at=2, metadata={"keep": ["user"]})
    store.append_message(early, "user", "Actually, I'd rather go to Marseille.")
    store.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "ask-1", "answer": "08:00"}}])
    store.append_message(t, "user", "The 08:00 one. Also check hotels and the weather.")
    store.append(t, [{"type": "run.started", "data": {"run_id": "run-2"}}])
    store.append_message(
        t,
        "assistant",
        [{"type": "tool_use", "id": "toolu_02", "name": "Agent", "input": {"prompt": "research in parallel"}}],
    )
    subagents = store.fan_out(t, ["Find a hotel near Lyon Part-Dieu.", "Check Friday's weather in Lyon."])
    return {"thread": t, "fork": early, "subagents": subagents}
