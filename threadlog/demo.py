"""`threadlog demo`: a small conversation that shows what threadlog keeps, and says so.

Running it again adds nothing: the demo thread has a fixed id, and a file that already
holds it is shown as it is.
"""

from __future__ import annotations

from collections.abc import Iterator

from eventstore import Store, StoreError
from projections import display_rows

from .listing import sub_agents
from .render import row_line, tree_lines
from .subagents import report

DEMO_THREAD = "demo-trip-to-lyon"


def build_demo(store: Store) -> tuple[dict[str, object], bool]:
    """A trip-planning thread with a tool call, an interrupt, a fork and two sub-agent forks,
    the first of which has answered and reported back.

    Returns the ids (`thread`, `fork` at an earlier offset, `subagents`) and whether they
    were built now (False when the file already held the demo).
    """
    if store.ids_starting(DEMO_THREAD, 1) == [DEMO_THREAD]:
        return _built(store), False
    try:
        t = _start(store)
    except StoreError:
        if store.ids_starting(DEMO_THREAD, 1) == [DEMO_THREAD]:  # another `threadlog demo` started it meanwhile
            return _built(store), False
        raise
    try:
        ids = _build(store, t)
    except StoreError as error:  # this one started it (a full disk stops it part way): what it wrote stays
        error.add_note(f"{store.path} holds the part of the demo written before it, not whole: build the demo on a new "
                       "file (threadlog --db demo.db demo)")
        raise
    return ids, True


def _built(store: Store) -> dict[str, object]:
    """The ids of the demo a file holds, once it holds it whole; else `StoreError` saying so (a
    demo is about fifteen writes: another `threadlog demo` may be building it, or one was stopped)."""
    below = store.subtree(DEMO_THREAD)[1:]
    forks = [t.id for t in below if t.kind == "fork"]
    subagents = [t.id for t in below if t.kind == "subagent"]
    # The sub-agent's report is the last message (a redaction since appends its record after it).
    last = next((e for e in reversed(list(store.read(DEMO_THREAD))) if e.type == "message.appended"), None)
    if not forks or len(subagents) != 2 or last is None or last.data.get("role") != "user":
        raise StoreError(f"{store.path} holds a demo conversation that is not whole yet: another `threadlog demo` is "
                         "building it, or one was stopped part way; run it again in a moment, or on a new file "
                         "(threadlog --db demo.db demo)")
    return {"thread": DEMO_THREAD, "fork": forks[0], "subagents": subagents}


def _start(store: Store) -> str:
    """The demo's thread, made: refused when another `threadlog demo` made it first."""
    return store.create_thread(
        title="Trip to Lyon",
        system="You plan train trips.",
        model="claude-sonnet-4-5",
        tools=[{"name": "search_trains", "description": "Search trains", "input_schema": {"type": "object"}}],
        metadata={"user": "ana", "locale": "fr"},
        thread_id=DEMO_THREAD,
    )


def _build(store: Store, t: str) -> dict[str, object]:
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
    early = store.fork(t, at=2, metadata={"keep": ["user"]}, title="Trip to Marseille")
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
    store.append_message(subagents[0], "assistant", "Hotel Part-Dieu: 92 EUR a night, 3 minutes from the station.")
    report(store, subagents[0])
    return {"thread": t, "fork": early, "subagents": subagents}


def demo_lines(store: Store, ids: dict[str, object], built: bool) -> Iterator[str]:
    """What the demo prints: what was built, explained in plain words, and what to try next."""
    thread, fork = str(ids["thread"]), str(ids["fork"])
    db = f" --db {store.path}" if store.path != "threadlog.db" else ""
    if built:
        yield f"Built a sample conversation in {store.path}."
    else:
        yield f"{store.path} already holds the sample conversation; nothing was added. Here it is again."
    yield ""
    yield "threadlog keeps every step of an agent's conversation as an event in a log that is never"
    yield "rewritten: messages, tool calls and their results, runs, questions put to a human, forks."
    yield "Everything else (the messages to send the model, a chat view, a transcript) is rebuilt from it."
    yield ""
    yield f"1. The conversation, as a chat UI would show it (threadlog rows {thread}):"
    rows = display_rows(store, thread)
    # The sub-agent's report, the last message: shown in 4. (none in a demo file an older release built)
    last = rows[-1]
    reported = (last.text or "").startswith("<task-notification>")
    report_rows = [row for row in rows if row.offset == last.offset] if reported else []
    for row in rows[:len(rows) - len(report_rows)]:
        yield "     " + row_line(row)
    yield "   → is a tool call the model made and ← its result; ? is an interrupt: the run stopped"
    yield "   to ask the human a question, and the answer was recorded when it came."
    yield ""
    yield "2. The fork tree (threadlog tree): a fork is a new thread that shares its parent's first"
    yield "   N events without copying them, so trying another path costs one event."
    tree = store.subtree(thread)
    for line in tree_lines(tree, store.titles(tree), sub_agents(store, tree)):
        yield "     " + line
    yield f"   {fork} went back to offset 2 and asked for Marseille instead; the original is untouched."
    yield "   The two 'subagent' forks were launched together from the last tool call: each works on"
    yield "   its own directive (a hotel, the weather) with the parent's history as its context."
    yield ""
    yield f"3. The fork as a chat UI shows it (threadlog rows {fork}): the parent's first message, read"
    yield "   from the parent's events (not a copy), the ⑃ card where it branched, then its own message."
    for row in display_rows(store, fork):
        yield "     " + row_line(row)
    if report_rows:
        yield ""
        yield "4. A sub-agent reported back (threadlog report): its answer reached the parent as one"
        yield "   <task-notification> message, which also answered the tool call it was launched from:"
        for row in report_rows[:-1]:
            yield "     " + row_line(row)
        yield from ("       " + line for line in (report_rows[-1].text or "").splitlines())
    yield ""
    yield "Try next:"
    yield f"  threadlog ls --all{db}          every thread, most recently active first"
    yield f"  threadlog show {thread}{db}     the state and the model's view of the messages"
    yield f"  threadlog log {thread}{db}      the raw events, with their hash chain"
    yield f"  threadlog verify{db}            recompute every hash: proof nothing was altered"
    # The thread ends mid-run (the weather sub-agent has not reported), where a fork is refused.
    started = [e.offset for e in store.read(thread) if e.type == "run.started"]
    if started:
        yield f"  threadlog fork {thread} --at {started[-1]}{db}   a new path from before the run still open"
