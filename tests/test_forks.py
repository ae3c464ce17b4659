"""Forks and fan-outs: O(1) writes, every option, every refusal (and refusals change nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import DEFAULT_PLACEHOLDER, ForkRefused, InvalidEvent, Store, ThreadNotFound
from eventstore.prepare import prepare
from tests.backends import dump, file_dump, postgres_url
from tests.procs import started_together
from projections import anthropic_request, thread_state
from threadlog.render import tree_lines


def tool_call(store: Store, t: str, *ids: str) -> None:
    store.append_message(t, "assistant", [{"type": "tool_use", "id": i, "name": "search", "input": {}} for i in ids])


def answer(store: Store, t: str, *ids: str) -> None:
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids])


@pytest.fixture
def convo(store: Store) -> str:
    t = store.create_thread(title="Trip", metadata={"user": "ana", "title_done": True})
    store.append_message(t, "user", "hi")
    store.append_message(t, "assistant", "hello")
    store.append_message(t, "user", "more")
    return t


def test_fork_writes_one_stream_row_and_one_event(store: Store, convo: str) -> None:
    before_streams, before_events = store.counts()
    parent_rows = [e.to_json() for e in store.read(convo)]
    f = store.fork(convo, at=2)
    assert store.counts() == (before_streams + 1, before_events + 1)
    assert [e.to_json() for e in store.read(convo)] == parent_rows  # never the parent
    own = list(store.read(f, 2))
    assert [(e.type, e.stream_id, e.offset) for e in own] == [("thread.forked", f, 2)]
    assert own[0].data == {
        "parent_id": convo,
        "parent_offset": 2,
        "options": {"todos": "blank", "metadata": "blank", "context": "full", "retrieval": "off", "unanswered": "refuse", "kind": "fork"},
    }
    info = store.thread(f)
    assert (info.parent_id, info.parent_offset, info.root_id, info.depth, info.head, info.kind) == (convo, 2, convo, 1, 3, "fork")


def test_fork_reads_as_parent_prefix_plus_own(store: Store, convo: str) -> None:
    f = store.fork(convo, at=3)
    store.append_message(f, "user", "branch")
    store.append_message(convo, "user", "main")
    assert [e.to_json() for e in store.read(f, 0, 3)] == [e.to_json() for e in store.read(convo, 0, 3)]
    assert [e.data.get("content", [{}])[0].get("text") for e in store.read(f, 3)] == [None, "branch"]


def test_default_fork_is_at_head(store: Store, convo: str) -> None:
    f = store.fork(convo)
    assert store.thread(f).parent_offset == store.head(convo) == 4


def test_fork_of_fork_below_its_base(store: Store, convo: str) -> None:
    f = store.fork(convo, at=3)
    store.append_message(f, "assistant", "f")
    g = store.fork(f, at=2)  # entirely inside the root's part of f's history
    assert [e.stream_id for e in store.read(g)] == [convo, convo, g]
    h = store.fork(f, at=5)
    assert [e.stream_id for e in store.read(h)] == [convo] * 3 + [f, f, h]


def test_fork_options_are_recorded(store: Store, convo: str) -> None:
    f = store.fork(convo, todos="inherit", metadata={"keep": ["user"]}, context="note", retrieval="first-turn", transcript="/tmp/p.md", actor="ana")
    event = store.event_at(f, 4)
    assert event.data["options"] == {
        "todos": "inherit", "metadata": {"keep": ["user"]}, "context": "note", "retrieval": "first_turn",
        "unanswered": "refuse", "kind": "fork", "transcript": "/tmp/p.md",
    }
    assert event.meta == {"actor": "ana"}
    g = store.fork(convo, todos=[{"content": "book", "status": "pending"}], metadata={"tenant": "t1"})
    assert store.event_at(g, 4).data["options"]["metadata"] == {"tenant": "t1"}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"todos": "some"}, "todos"),
        ({"metadata": 3}, "metadata"),
        ({"context": "half"}, "context"),
        ({"retrieval": "always"}, "retrieval"),
        ({"unanswered": "ignore"}, "unanswered"),
    ],
    ids=["todos", "metadata", "context", "retrieval", "unanswered"],
)
def test_bad_fork_options(store: Store, convo: str, kwargs: dict[str, object], field: str) -> None:
    before = dump(store)
    with pytest.raises(InvalidEvent) as info:
        store.fork(convo, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert dump(store) == before


@pytest.mark.parametrize(
    "kwargs, field, why",
    [
        ({"todos": [{"content": "book", "status": "done"}]}, "todos[0].status", "'pending', 'in_progress' or 'completed'"),
        ({"todos": [{"content": "book"}, {"text": "pay"}]}, "todos[1].content", "Field required"),
        ({"todos": "keep"}, "todos", "'blank', 'inherit' or a list of todos"),
        ({"metadata": ["user"]}, "metadata", "'blank', 'inherit', {'keep': [keys]} or a map"),
    ],
    ids=["todo-status", "todo-content", "todos-word", "metadata-list"],
)
def test_bad_todos_or_metadata_named_where_they_are_wrong(store: Store, convo: str, kwargs: dict[str, object], field: str,
                                                          why: str) -> None:
    # Not "should be 'blank' or 'inherit'" for a list of todos with one bad todo.
    before = dump(store)
    with pytest.raises(InvalidEvent) as info:
        store.fork(convo, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field and why in info.value.why
    assert dump(store) == before


@pytest.mark.parametrize("keep", ["user", ["user", 1], None], ids=["one-name", "not-names", "none"])
def test_metadata_keep_takes_a_list_of_keys(store: Store, convo: str, keep: object) -> None:
    # Not the fork's metadata {"keep": "user"}, with "user" lost.
    before = dump(store)
    with pytest.raises(InvalidEvent) as info:
        store.fork(convo, metadata={"keep": keep})
    assert info.value.field == "metadata.keep" and "list of the parent's metadata keys" in info.value.why
    assert dump(store) == before


def test_metadata_keep_takes_a_tuple_of_keys_as_a_list(store: Store, convo: str) -> None:
    f = store.fork(convo, metadata={"keep": ("user",)}, event_id="k-1")
    assert store.event_at(f, 4).data["options"]["metadata"] == {"keep": ["user"]}
    assert store.fork(convo, metadata={"keep": ("user",)}, event_id="k-1") == f  # a retry


def refuse(store: Store, reason: str, call, *args, **kwargs) -> ForkRefused:  # type: ignore[no-untyped-def]
    before = dump(store)
    with pytest.raises(ForkRefused) as info:
        call(*args, **kwargs)
    assert info.value.reason == reason
    assert dump(store) == before
    return info.value


@pytest.mark.parametrize("at", [0, -1, 5, 99, "2", True], ids=["zero", "negative", "past-head", "far", "string", "bool"])
def test_offset_out_of_range(store: Store, convo: str, at: object) -> None:
    refuse(store, "offset_out_of_range", store.fork, convo, at)


def test_empty_thread_and_prefix_without_message(store: Store, convo: str) -> None:
    """agentty: an empty thread cannot be forked, and the refusal says why (it named an offset
    the caller never gave: "at 1: there is no message before that offset")."""
    t = store.create_thread()
    store.append(t, [{"type": "title.set", "data": {"title": "still empty"}}])
    error = refuse(store, "empty", store.fork, t)
    assert str(error) == f"cannot fork {t!r}: it holds no message yet, so there is nothing to fork"
    error = refuse(store, "empty", store.fork, convo, 1)
    assert str(error).endswith(f"(its first message is at offset 1, so at must be 2..{store.head(convo)})")


def test_busy_at_fork_point_but_not_before(store: Store, convo: str) -> None:
    store.append(convo, [{"type": "run.started", "data": {"run_id": "r"}}])
    store.append_message(convo, "assistant", "thinking")
    refuse(store, "busy", store.fork, convo)
    refuse(store, "busy", store.fork, convo, 5)
    assert store.fork(convo, at=4)  # before the run: a safe point
    store.append(convo, [{"type": "run.finished", "data": {"run_id": "r", "status": "ok"}}])
    assert store.fork(convo)


def test_unanswered_tool_calls_refused_with_ids_or_dropped(store: Store, convo: str) -> None:
    tool_call(store, convo, "toolu_a", "toolu_b")
    error = refuse(store, "unanswered_tool_calls", store.fork, convo)
    assert error.tool_use_ids == ["toolu_a", "toolu_b"]
    f = store.fork(convo, unanswered="drop")
    assert store.event_at(f, 5).data["dropped_tool_use_ids"] == ["toolu_a", "toolu_b"]
    with pytest.raises(InvalidEvent, match="not pending"):  # the fork no longer waits on them
        answer(store, f, "toolu_a")
    answer(store, convo, "toolu_a", "toolu_b")
    assert store.fork(convo)  # answered: a safe point again
    assert store.fork(convo, at=4)  # before the call


def test_dropping_the_only_messages_calls_is_refused_as_a_fork_of_nothing(store: Store) -> None:
    """A thread whose only messages are tool calls waiting for results (a session cut off after
    its first call): `threadlog fork --unanswered drop` made a fork with no message, whose
    request then said so. `empty="refuse"` refuses it as a fork before the first message is,
    naming the calls and what to do; a message other than those calls before the point is
    enough. (By default `fork` still makes it: an import's branch goes on in it with its own
    events.)"""
    t = store.create_thread(model="m")
    tool_call(store, t, "toolu_a")
    tool_call(store, t, "toolu_b")
    error = refuse(store, "empty", store.fork, t, unanswered="drop", empty="refuse")
    assert error.tool_use_ids == ["toolu_a", "toolu_b"]
    assert str(error) == (f"cannot fork {t!r} at 3: its only messages are tool calls waiting for results (toolu_a (offset 1), "
                          "toolu_b (offset 2)), which unanswered='drop' leaves out, and a fork holds a message: answer them "
                          "first and fork after, keep them waiting in the fork (unanswered='keep'), or start a new thread")
    refuse(store, "empty", store.fork, t, 2, unanswered="drop", empty="refuse")
    with pytest.raises(InvalidEvent, match="empty: must be 'refuse' or 'allow', not 'no'"):
        store.fork(t, unanswered="drop", empty="no")
    assert store.fork(t, unanswered="drop")  # made by default, for a caller whose events go on in it
    store.append_message(t, "user", "never mind")
    f = store.fork(t, 4, unanswered="drop", empty="refuse")  # the question stays in the fork's view
    assert [m.role for m in thread_state(store, f).messages] == ["user"]
    u = store.create_thread(model="m")
    store.append_message(u, "assistant", [{"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_c", "name": "search", "input": {}}])
    g = store.fork(u, unanswered="drop", empty="refuse")  # the text stays
    assert [m.content for m in thread_state(store, g).messages] == [[{"type": "text", "text": "Let me look."}]]
    store.verify()


THOUGHT = {"type": "thinking", "thinking": "Which file?", "signature": "c2ln"}
CALL = {"type": "tool_use", "id": "toolu_a", "name": "search", "input": {}}
LEFT_OUT = {  # messages beside which the waiting call toolu_a is all: is a fork that drops it left with a message to send?
    "thinking": ([("assistant", [THOUGHT, CALL])], True),
    "redacted thinking": ([("assistant", [{"type": "redacted_thinking", "data": "ZW5j"}, CALL])], True),
    "unsigned thinking": ([("assistant", [{"type": "thinking", "thinking": "hm", "signature": ""}, CALL])], True),
    "blank text": ([("assistant", [THOUGHT, {"type": "text", "text": " \n"}, CALL])], True),
    "a blank user message": ([("user", [{"type": "text", "text": ""}]), ("assistant", [THOUGHT, CALL])], True),
    "text": ([("assistant", [THOUGHT, {"type": "text", "text": "Let me look."}, CALL])], False),
    "thinking of the user's": ([("user", [THOUGHT]), ("assistant", [CALL])], False),
    "a question": ([("user", [{"type": "text", "text": "Where?"}]), ("assistant", [THOUGHT, CALL])], False),
}


@pytest.mark.parametrize(("content", "also"), [
    ("calls", ""),
    ("thinking", "and blocks a request leaves out of a message that holds nothing else (thinking, blank text), "),
], ids=["only-calls", "thinking-and-a-call"])
def test_the_cli_refuses_a_fork_that_would_hold_no_message(tmp_path: Path, content: str, also: str) -> None:
    """`threadlog fork --unanswered drop` of a thread whose only message is a call waiting for
    its result, alone or after the answer's thinking: refused naming the call, the file as it was."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(model="m")
        if content == "calls":
            tool_call(store, t, "toolu_a")
        else:
            store.append_message(t, "assistant", [THOUGHT, CALL])
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "fork", t, "--unanswered", "drop"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (f"error: cannot fork {t!r} at 2: its only messages are tool calls waiting for results (toolu_a "
                             f"(offset 1)), which --unanswered drop leaves out, {also}and a fork holds a message: answer them "
                             "first and fork after, keep them waiting in the fork (--unanswered keep), or start a new thread "
                             "(`threadlog new`)\n")
    assert file_dump(db) == before


@pytest.mark.parametrize("name", list(LEFT_OUT), ids=list(LEFT_OUT))
def test_a_fork_left_holding_only_what_a_request_leaves_out_is_refused_as_a_fork_of_nothing(store: Store, name: str) -> None:
    """An answer of thinking and a tool call waiting for its result: `fork --unanswered drop`
    made a fork whose view held only the thinking, which the request leaves out of an answer
    holding nothing else ("no message to send"). `empty="refuse"` refuses it as it does a fork of
    calls alone, by the request's own rule: a message left holding only blocks the request leaves
    out (thinking alone in an answer, blank text, thinking without a signature) counts as none.
    Refused exactly when the fork's request would have no message, and nothing is written."""
    messages, empty = LEFT_OUT[name]
    t = store.create_thread(model="m")
    for role, content in messages:
        store.append_message(t, role, content)
    made = store.fork(t, unanswered="drop")  # by default made all the same: its request says whether it has a message
    try:
        sent = bool(anthropic_request(store, made)["messages"])
    except InvalidEvent as error:
        assert "has no message to send" in str(error)
        sent = False
    assert sent is not empty
    before = dump(store)
    if not empty:
        assert store.fork(t, unanswered="drop", empty="refuse")
        return
    error = refuse(store, "empty", store.fork, t, unanswered="drop", empty="refuse")
    assert error.tool_use_ids == ["toolu_a"]
    assert dump(store) == before
    at = len(messages) + 1
    assert str(error) == (f"cannot fork {t!r} at {at}: its only messages are tool calls waiting for results (toolu_a (offset "
                          f"{at - 1})), which unanswered='drop' leaves out, and blocks a request leaves out of a message "
                          "that holds nothing else (thinking, blank text), and a fork holds a message: answer them first "
                          "and fork after, keep them waiting in the fork (unanswered='keep'), or start a new thread")


def test_a_refusal_for_unanswered_calls_says_where_each_was_made(store: Store, convo: str) -> None:
    """A call an earlier turn abandoned (an imported session's aborted call) stays pending while
    the conversation goes on; a fork at the head much later is refused for it, and an id alone
    did not say the call lay far back, nor that a fork just before it would lose the rest. The
    refusal names the offset of each call's message (one of them in a fork's parent)."""
    tool_call(store, convo, "toolu_old")
    branch = store.fork(convo, unanswered="keep")
    store.append_message(branch, "user", "never mind that, go on")
    store.append_message(branch, "assistant", "going on")
    tool_call(store, branch, "toolu_new")
    error = refuse(store, "unanswered_tool_calls", store.fork, branch)
    assert error.tool_use_ids == ["toolu_old", "toolu_new"]
    assert "tool calls without results: toolu_old (offset 4), toolu_new (offset 8); " in str(error)


def test_unanswered_tool_calls_kept_wait_in_the_fork_for_its_own_results(store: Store, convo: str) -> None:
    """`unanswered="keep"`: the calls waiting at the fork point wait in the fork too (a branch
    that runs the tools again answers them), at the head or at a past offset; the parent
    still waits on its own; the fork's request pairs each call with the fork's result."""
    tool_call(store, convo, "toolu_a", "toolu_b")
    f = store.fork(convo, unanswered="keep")
    forked = store.event_at(f, 5).data
    assert forked["options"]["unanswered"] == "keep" and "dropped_tool_use_ids" not in forked
    answer(store, f, "toolu_b")
    answer(store, f, "toolu_a")
    with pytest.raises(InvalidEvent, match="not pending"):
        answer(store, f, "toolu_a")
    messages = anthropic_request(store, f, model="m", max_tokens=10)["messages"]
    assert [b["id"] for b in messages[-2]["content"]] == ["toolu_a", "toolu_b"]  # the fork's two results, merged
    assert [b["tool_use_id"] for b in messages[-1]["content"] if b["type"] == "tool_result"] == ["toolu_b", "toolu_a"]
    answer(store, convo, "toolu_a", "toolu_b")  # the parent still waited on both
    g = store.fork(convo, at=5, unanswered="keep")  # at the call, past the head
    answer(store, g, "toolu_a", "toolu_b")
    store.verify()


def test_a_note_fork_refuses_to_keep_calls_it_cannot_hold(store: Store, convo: str) -> None:
    """A note fork starts from one note: no tool call waits in it, so `unanswered="keep"` is
    refused (naming the option, nothing written) rather than ignored."""
    tool_call(store, convo, "toolu_a")
    before = dump(store)
    with pytest.raises(InvalidEvent, match="'keep' applies to context='full' forks only") as caught:
        store.fork(convo, context="note", unanswered="keep")
    assert caught.value.field == "unanswered" and dump(store) == before


def test_unanswered_at_a_past_offset(store: Store, convo: str) -> None:
    tool_call(store, convo, "toolu_a")
    answer(store, convo, "toolu_a")
    error = refuse(store, "unanswered_tool_calls", store.fork, convo, 5)
    assert error.tool_use_ids == ["toolu_a"]


def test_note_fork_does_not_carry_unanswered_calls(store: Store, convo: str) -> None:
    tool_call(store, convo, "toolu_a")
    f = store.fork(convo, context="note")
    assert "dropped_tool_use_ids" not in store.event_at(f, 5).data


def test_pending_interrupts_are_demoted_in_the_fork_only(store: Store, convo: str) -> None:
    store.append(convo, [{"type": "interrupt.raised", "data": {"interrupt_id": "q1", "question": "which?"}}])
    f = store.fork(convo)
    assert store.event_at(f, 5).data["demoted_interrupt_ids"] == ["q1"]
    with pytest.raises(InvalidEvent, match="not pending"):
        store.append(f, [{"type": "interrupt.resolved", "data": {"interrupt_id": "q1"}}])
    store.append(convo, [{"type": "interrupt.resolved", "data": {"interrupt_id": "q1", "answer": "a"}}])


def test_unknown_parent(store: Store) -> None:
    with pytest.raises(ThreadNotFound):
        store.fork("nope")


def test_fork_id_must_be_new(store: Store, convo: str) -> None:
    f = store.fork(convo)
    before = dump(store)
    with pytest.raises(InvalidEvent):
        store.fork(convo, fork_id=f)
    assert dump(store) == before


def test_a_retried_fork_with_an_event_id_returns_the_fork_it_made(store: Store, convo: str) -> None:
    f = store.fork(convo, at=2, event_id="fork-1", actor="ops")
    before = dump(store)
    assert store.fork(convo, at=2, event_id="fork-1", actor="ops") == f  # a retry after a lost answer
    assert store.fork(convo, event_id="fork-1", actor="ops") == f  # at=None: whatever the head was then
    assert dump(store) == before


@pytest.mark.parametrize("changed", [{"at": 3}, {"metadata": "inherit"}, {"fork_id": "another"}, {"thread": "other"}])
def test_an_event_id_names_one_fork(store: Store, convo: str, changed: dict[str, object]) -> None:
    other = store.create_thread()
    store.append_message(other, "user", "x")
    store.fork(convo, at=2, event_id="fork-1")
    before = dump(store)
    call = {"thread": convo, "at": 2, **changed}
    parent = other if call.pop("thread") == "other" else convo
    with pytest.raises(InvalidEvent, match="event id 'fork-1' is already stored at position .* a new fork needs a new id"):
        store.fork(parent, event_id="fork-1", **call)  # type: ignore[arg-type]
    assert dump(store) == before


@pytest.mark.parametrize("first, again", [("T1", "T2"), (None, "T2")])
def test_a_retry_with_another_title_is_refused(store: Store, convo: str, first: str | None, again: str) -> None:
    f = store.fork(convo, at=2, event_id="fork-1", title=first)
    before = dump(store)
    with pytest.raises(InvalidEvent, match="event id 'fork-1' is already stored .* a new fork needs a new id"):
        store.fork(convo, at=2, event_id="fork-1", title=again)  # not the fork that id made: it would lose the title
    assert dump(store) == before
    assert store.fork(convo, at=2, event_id="fork-1", title=first) == f
    store.append(f, [{"type": "title.set", "data": {"title": "renamed"}}])  # a later title is the fork's own: a retry still finds the one it was made with
    assert store.fork(convo, at=2, event_id="fork-1", title=first) == f
    if first is None:  # nor is a title set after the fork taken for the one it was made with
        with pytest.raises(InvalidEvent, match="a new fork needs a new id"):
            store.fork(convo, at=2, event_id="fork-1", title="renamed")


def test_a_retry_of_a_fork_whose_title_was_redacted_returns_it(store: Store, convo: str) -> None:
    f = store.fork(convo, at=2, event_id="fork-1", title="secret title")
    titled = store.event_at(f, 3)  # the title.set after the fork's event
    assert (titled.type, titled.data) == ("title.set", {"title": "secret title"})
    store.redact(titled.position, reason="pii", actor="ops")
    assert store.fork(convo, at=2, event_id="fork-1", title="secret title") == f


def test_a_fork_cannot_take_the_event_id_of_a_message(store: Store, convo: str) -> None:
    store.append_message(convo, "user", "again", event_id="msg-1")
    before = dump(store)
    with pytest.raises(InvalidEvent, match="'msg-1' is already stored .*message.appended"):
        store.fork(convo, event_id="msg-1")
    assert dump(store) == before


# -- fan-out ------------------------------------------------------------------------------------


@pytest.fixture
def mid_turn(store: Store, convo: str) -> str:
    store.append(convo, [{"type": "run.started", "data": {"run_id": "r"}}])
    tool_call(store, convo, "toolu_1", "toolu_2")
    return convo


def test_fan_out_from_mid_turn(store: Store, mid_turn: str) -> None:
    before = store.counts()
    kids = store.fan_out(mid_turn, ["check prices", "check times"])
    assert store.counts() == (before.threads + 2, before.events + 4)
    primed = [list(store.read(k, 6)) for k in kids]
    for kid, (forked, message) in zip(kids, primed):
        assert store.thread(kid).kind == "subagent"
        assert forked.type == "thread.forked" and message.meta == {"origin": "primed"}
    first, second = (m.data["content"] for _, m in primed)
    # Byte-identical up to the directive: same placeholder results, only the last block differs.
    assert first[:-1] == second[:-1] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": DEFAULT_PLACEHOLDER},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": DEFAULT_PLACEHOLDER},
    ]
    assert (first[-1], second[-1]) == ({"type": "text", "text": "check prices"}, {"type": "text", "text": "check times"})
    assert [p[0].data["options"]["directive"] for p in primed] == ["check prices", "check times"]
    # The parent is untouched and still waits for its own results.
    answer(store, mid_turn, "toolu_1", "toolu_2")


def test_fan_out_todos_and_metadata_are_one_choice_for_every_sibling(store: Store, convo: str) -> None:
    """Sagents: todos and metadata are blank in a fork unless asked for, and the choice is made
    once on the shared base, so every sibling of a fan-out gets the same; what differs per
    fork is its directive. The parent keeps its own."""
    store.append(convo, [{"type": "todos.set", "data": {"todos": [{"content": "book", "status": "pending"}]}}])

    def launched(call: str, directives: list[str], **options: object) -> list[str]:
        tool_call(store, convo, call)  # a call of its own each: a call's sub-agents are launched once
        kids = store.fan_out(convo, directives, **options)  # type: ignore[arg-type]
        answer(store, convo, call)
        return kids

    blank = launched("toolu_1", ["one", "two"])
    kept = launched("toolu_2", ["three", "four"], todos="inherit", metadata={"keep": ["user"]})
    seeded = launched("toolu_3", ["five", "six"], todos=[{"content": "report"}], metadata={"tenant": "t1"})
    for kids, todos, metadata in ((blank, [], {}),
                                  (kept, [{"content": "book", "status": "pending"}], {"user": "ana"}),
                                  (seeded, [{"content": "report"}], {"tenant": "t1"})):
        states = [thread_state(store, kid) for kid in kids]
        assert [(s.todos, s.metadata, s.kind) for s in states] == [(todos, metadata, "subagent")] * 2
        assert states[0].messages[:-1] == states[1].messages[:-1]  # one base, then each its directive
        assert [s.directive for s in states] != [None, None] and states[0].directive != states[1].directive
    parent = thread_state(store, convo)
    assert parent.metadata == {"user": "ana", "title_done": True} and parent.todos == [{"content": "book", "status": "pending"}]


def test_fan_out_refusals(store: Store, mid_turn: str, convo: str) -> None:
    refuse(store, "no_directives", store.fan_out, mid_turn, [])
    [kid] = store.fan_out(mid_turn, ["go"], placeholder="started")
    tool_call(store, kid, "toolu_9")
    refuse(store, "recursion", store.fan_out, kid, ["again"])
    answer(store, kid, "toolu_9")
    grandchild = store.fork(kid)
    tool_call(store, grandchild, "toolu_8")
    refuse(store, "recursion", store.fan_out, grandchild, ["again"])
    # A fork of the sub-agent taken at its fork point holds none of its events (no directive):
    # it is the parent's history, which fans out (it was refused as "inside sub-agent fork").
    before_launch = store.fork(kid, at=store.thread(kid).parent_offset, unanswered="keep", busy="allow")
    assert [e.stream_id for e in store.read(before_launch)][:-1] == [mid_turn] * store.thread(kid).parent_offset
    assert len(store.fan_out(before_launch, ["once more"])) == 1
    idle = store.create_thread()
    store.append_message(idle, "user", "x")
    refuse(store, "no_pending_tool_use", store.fan_out, idle, ["go"])
    before = dump(store)
    with pytest.raises(InvalidEvent):
        store.fan_out(mid_turn, ["ok", ""])
    with pytest.raises(InvalidEvent, match="meta.event_id: fan_out writes two events for each fork"):
        store.fan_out(mid_turn, ["ok"], event_id="one-id")  # one id for 2 x N events
    for blank in ["", " \n", 5]:
        with pytest.raises(InvalidEvent, match=r"^boilerplate: must be non-empty text"):
            store.fan_out(mid_turn, ["ok"], boilerplate=blank)  # type: ignore[arg-type]
    assert dump(store) == before


def test_a_second_fan_out_for_calls_already_launched_is_refused_naming_their_sub_agents(store: Store, convo: str) -> None:
    """A fan-out run again for the same calls (a process killed after its commit, before it
    said what it made) launched a second set of sub-agents, each answering the calls again.
    It is refused, naming the calls and the sub-agents already launched for them."""
    tool_call(store, convo, "toolu_1", "toolu_2")
    kids = store.fan_out(convo, ["find a hotel", "check the weather"])
    refused = refuse(store, "already_launched", store.fan_out, convo, ["find a hotel"])
    assert (refused.subagent_ids, refused.tool_use_ids) == (kids, ["toolu_1", "toolu_2"])
    assert str(refused).startswith(f"{convo!r} already launched sub-agents for its tool calls 'toolu_1', 'toolu_2': "
                                   f"{kids[0]!r}, {kids[1]!r} (forked at 5)")
    assert "report(store, kid)" in str(refused) and str(refused).endswith("nothing was written")
    answer(store, convo, "toolu_1")  # one call answered by hand: the other still has its sub-agents
    assert refuse(store, "already_launched", store.fan_out, convo, ["again"]).tool_use_ids == ["toolu_2"]
    answer(store, convo, "toolu_2")
    refuse(store, "no_pending_tool_use", store.fan_out, convo, ["again"])
    # The next turn may reuse an id: its call is a new one, launched anew.
    tool_call(store, convo, "toolu_1")
    (again,) = store.fan_out(convo, ["find another hotel"])
    assert refuse(store, "already_launched", store.fan_out, convo, ["x"]).subagent_ids == [again]


def test_the_run_that_made_the_calls_launches_a_fan_out_per_call(store: Store, convo: str) -> None:
    """In a live turn each launching call's function fans out while the turn's run is open, and
    every sub-agent answers all the message's calls (the fork sub-agent design): the second
    call's launch is not a repeat of the first. Once that run is over, a launch is one."""
    store.append(convo, [{"type": "run.started", "data": {"run_id": "r1"}}])
    tool_call(store, convo, "toolu_1", "toolu_2")
    first = store.fan_out(convo, ["find a hotel"])
    second = store.fan_out(convo, ["check the weather"])
    store.append(convo, [{"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
    assert refuse(store, "already_launched", store.fan_out, convo, ["x"]).subagent_ids == first + second
    # A run started after the calls (a turn resumed) launches them only if none was launched before.
    store.append(convo, [{"type": "run.started", "data": {"run_id": "r2"}}])
    assert refuse(store, "already_launched", store.fan_out, convo, ["x"]).subagent_ids == first + second
    other = store.create_thread()
    store.append_message(other, "user", "go")
    tool_call(store, other, "toolu_1", "toolu_2")
    store.append(other, [{"type": "run.started", "data": {"run_id": "r3"}}])
    assert len(store.fan_out(other, ["a"]) + store.fan_out(other, ["b"])) == 2


def test_a_sub_agent_imported_at_a_call_still_waiting_is_that_calls_launch(store: Store) -> None:
    """A session imported mid-turn (its run left open) holds a Task call waiting on the
    sub-agent the import made at it: a fan-out for that call would launch it a second time."""
    from threadlog import import_claude_code

    session = Path(__file__).parent / "fixtures" / "claude-code" / "inline" / "sidechain.jsonl"
    root = import_claude_code(store, [session]).thread_ids[0]
    (agent,) = [info.id for info in store.subtree(root) if info.kind == "subagent"]
    refused = refuse(store, "already_launched", store.fan_out, root, ["again"])
    assert (refused.subagent_ids, refused.tool_use_ids) == ([agent], list(store.pending_tool_uses(root)))


_FANNER = """
import sys
from eventstore import ForkRefused, Store
store = Store(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
try:
    print(*store.fan_out(sys.argv[2], [sys.argv[3]]))
except ForkRefused as refused:
    print("refused", refused.reason, *refused.subagent_ids)
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_fan_outs_of_one_call_from_processes_at_once_launch_it_once(tmp_path: Path, backend: str) -> None:
    """Three processes fan out for the same call at the same moment: one launches its
    sub-agent, the others are refused naming it (each checked what was launched only once it
    alone could write to the parent)."""
    target = str(tmp_path / "f.db") if backend == "sqlite" else postgres_url()
    for _ in range(3):
        with Store(target) as s:
            t = s.create_thread()
            s.append_message(t, "user", "go")
            tool_call(s, t, "toolu_1")
        with started_together([["-c", _FANNER, target, t, directive] for directive in ("a", "b", "c")]) as procs:
            said = [proc.communicate(timeout=120) for proc in procs]
        assert all(proc.returncode == 0 for proc in procs), [err[-2000:] for _, err in said]
        launched = [out.split() for out, _ in said if not out.startswith("refused")]
        assert len(launched) == 1 and len(launched[0]) == 1, said
        assert sorted(out.split() for out, _ in said if out.startswith("refused")) == [
            ["refused", "already_launched", *launched[0]]] * 2
        with Store(target) as s:
            assert [info.id for info in s.subtree(t) if info.kind == "subagent"] == launched[0]


def test_a_sub_agent_cannot_fan_out_again_once_compacted_nor_through_a_note_fork_of_it(store: Store, mid_turn: str) -> None:
    """The fork sub-agent design keeps its recursion guard where compaction cannot remove it
    (the options, not the messages): a sub-agent whose history was summarised away, and a note
    fork of one (whose view is one note), are still refused, naming the sub-agent."""
    [kid] = store.fan_out(mid_turn, ["go"], boilerplate="<fork-boilerplate>rules</fork-boilerplate>")
    store.append_message(kid, "assistant", "done part one")
    store.append(kid, [{"type": "compaction.recorded", "data": {"summary": "Earlier: part one.", "through_offset": store.head(kid)}}])
    assert not any("fork-boilerplate" in json.dumps(m.content) for m in thread_state(store, kid).messages)
    tool_call(store, kid, "toolu_9")
    error = refuse(store, "recursion", store.fan_out, kid, ["again"])
    assert f"{kid!r} is a sub-agent fork" in str(error)
    answer(store, kid, "toolu_9")
    note = store.fork(kid, context="note")
    tool_call(store, note, "toolu_8")
    error = refuse(store, "recursion", store.fan_out, note, ["again"])
    assert f"inside sub-agent fork {kid!r}" in str(error)


# -- the invariant ------------------------------------------------------------------------------

ops = st.lists(
    st.tuples(st.sampled_from(["append", "fork"]), st.integers(0, 10_000), st.integers(1, 3)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_fork_is_parent_prefix_plus_own_events(script: list[tuple[str, int, int]]) -> None:
    """Over random appends and forks at random offsets: read(fork) == read(parent)[:k] + own,
    and nothing a fork or a child does ever changes the parent's history."""
    store = Store(":memory:")
    root = store.create_thread()
    store.append_message(root, "user", "start")
    threads, snapshots = [root], {}
    for op, pick, n in script:
        target = threads[pick % len(threads)]
        snapshots = {t: [e.to_json() for e in store.read(t)] for t in threads}
        if op == "append":
            store.append(target, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(n)])
        else:
            head = store.head(target)
            at = 2 + pick % (head - 1)  # 2..head: there is a message at offset 1
            child = store.fork(target, at=at)
            assert [e.to_json() for e in store.read(child, 0, at)] == snapshots[target][:at]
            threads.append(child)
        for t in threads:
            if (t != target or op == "fork") and t in snapshots:
                assert [e.to_json() for e in store.read(t)] == snapshots[t]
    for t in threads[1:]:
        info = store.thread(t)
        own = [e.to_json() for e in store.read(t, info.parent_offset)]  # type: ignore[arg-type]
        assert [e.to_json() for e in store.read(t)] == [e.to_json() for e in store.read(info.parent_id, 0, info.parent_offset)] + own  # type: ignore[arg-type]
        assert own[0]["type"] == "thread.forked" and all(e["stream_id"] == t for e in own)
    store.verify()


chains = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(chains, st.integers(0, 40), st.integers(0, 40))
def test_a_read_from_an_offset_reads_the_streams_above_it_only(chain: list[tuple[int, int]], start: int, length: int) -> None:
    """A chain of forks of forks, each at a random offset of the last (an earlier one too:
    below its parent's own events). `ancestry(t, start)` is the start of `ancestry(t)` down
    to the stream holding `start`, and a read or an event from there is the full history's."""
    store = Store(":memory:")
    thread = store.create_thread()
    store.append_message(thread, "user", "start")
    for pick, appended in chain:
        thread = store.fork(thread, at=2 + pick % (store.head(thread) - 1))
        for i in range(appended):
            store.append_message(thread, "user", f"m{i}")
    full = [e.to_json() for e in store.read(thread)]
    stop = start + length
    assert [e.to_json() for e in store.read(thread, start, stop)] == full[start:stop]
    assert [e.to_json() for e in store.read(thread, start)] == full[start:]
    everything = [info.id for info in store.ancestry(thread)]
    some = [info.id for info in store.ancestry(thread, start)]
    assert some == everything[:len(some)]
    assert all(store.thread(i).base > start for i in some[:-1]) and (store.thread(some[-1]).base <= start or some == everything)
    if start < len(full):
        assert store.event_at(thread, start).to_json() == full[start]


def test_reads_from_every_offset_of_a_chain_of_forks(store: Store) -> None:
    """On each backend: forks of forks, one below its parent's own events; from every offset,
    `ancestry(t, start)` stops at the stream holding it, and reads and events agree with the
    whole history."""
    thread = store.create_thread(thread_id="r")
    store.append_message(thread, "user", "start")
    for at, fork_id in ((2, "a"), (3, "b"), (2, "c"), (4, "d")):  # c forks b at 2: below b's own events (3..)
        thread = store.fork(thread, at=at, fork_id=fork_id)
        store.append_message(thread, "user", f"in {fork_id}")
        store.append_message(thread, "assistant", f"in {fork_id} again")
    full = [e.to_json() for e in store.read(thread)]
    chain = [info.id for info in store.ancestry(thread)]
    assert chain == ["d", "c", "b", "a", "r"]
    for start in range(len(full) + 2):
        some = [info.id for info in store.ancestry(thread, start)]
        assert some == ["d"] if start >= 4 else ["d", "c"] if start >= 2 else chain, (start, some)
        assert [e.to_json() for e in store.read(thread, start)] == full[start:]
        assert [e.to_json() for e in store.read(thread, start, start + 2)] == full[start:start + 2]
        if start < len(full):
            assert store.event_at(thread, start).to_json() == full[start]
    with pytest.raises(InvalidEvent, match="start"):
        store.ancestry(thread, -1)


titled = st.lists(st.tuples(st.sampled_from(["fork", "title", "redact", "message"]), st.integers(0, 10_000)), max_size=20)


@settings(max_examples=60, deadline=None)
@given(titled)
def test_titles_and_counts_of_a_tree_are_each_threads(script: list[tuple[str, int]]) -> None:
    """`titles` and `count_each` over random forks (at any offset), messages, title.sets and
    their redactions are `title` and `count` of each thread; a redacted title.set shows the
    title before it."""
    store = Store(":memory:")
    threads = [store.create_thread(title="root")]
    store.append_message(threads[0], "user", "start")
    sets: list[int] = []
    for op, pick in script:
        target = threads[pick % len(threads)]
        if op == "fork":
            threads.append(store.fork(target, at=2 + pick % (store.head(target) - 1)))
        elif op == "title":
            sets.append(store.append(target, [{"type": "title.set", "data": {"title": f"t{pick}"}}])[0].position)
        elif op == "redact" and sets:
            position = sets.pop(pick % len(sets))
            store.redact(position, reason="r", actor="a")
        else:
            store.append_message(target, "user", "m")
    infos = store.subtree(threads[0])
    assert store.titles(infos) == {info.id: store.title(info.id) for info in infos}
    assert store.titles(reversed(infos)) == store.titles(infos)
    assert store.titles(infos[-1:]) == {infos[-1].id: store.title(infos[-1].id)}
    for type_ in ("message.appended", "title.set", "thread.forked"):
        assert store.count_each(reversed(infos), type_) == {info.id: store.count(info.id, type_) for info in infos}
        for info in infos:  # from an offset: the events `read` gives from there
            for start in {0, 2, info.base, info.head}:
                assert store.count(info.id, type_, start) == [e.type for e in store.read(info.id, start)].count(type_)


def test_a_redacted_title_set_shows_the_title_before_it(store: Store) -> None:
    """The title read None once the latest title.set was redacted."""
    thread = store.create_thread(title="first")
    store.append_message(thread, "user", "x")
    store.append(thread, [{"type": "title.set", "data": {"title": "second"}}])
    secret = store.append(thread, [{"type": "title.set", "data": {"title": "my secret"}}])[0]
    fork = store.fork(thread)
    store.redact(secret.position, reason="leak", actor="ops")
    assert store.title(thread) == store.title(fork) == "second"
    assert store.titles(store.subtree(thread)) == {thread: "second", fork: "second"}


def test_the_tree_of_a_chain_of_a_thousand_forks(store: Store) -> None:
    """`threadlog tree` of forks of forks 1,000 deep: it passed Python's recursion limit (an
    error saying an event was nested too deeply), after reading each title down the chain."""
    thread = root = store.create_thread(title="deep", thread_id="root")
    store.append_message(thread, "user", "start")
    for _ in range(1000):
        thread = store.fork(thread)
    titles = store.titles(store.subtree(root))
    assert len(titles) == 1001 and set(titles.values()) == {"deep"}
    assert store.count_each(store.subtree(root), "message.appended") == dict.fromkeys(titles, 1)
    assert store.count_each(store.subtree(root), "thread.forked")[thread] == 1000
    lines = list(tree_lines(store.subtree(root), titles))
    assert len(lines) == 1001 and lines[0].startswith("root  thread, 2 events  deep")
    # Past 20 levels a line says its depth and shows the last 15 levels' rails: indented in
    # full, the last line was 3,000 characters wide.
    assert lines[20] == f"{'   ' * 19}└─ ⑃ {store.subtree(root)[20].id}  fork, 22 events  deep, forked at 21"
    assert lines[-1] == f"(1000 deep) {'   ' * 15}└─ ⑃ {thread}  fork, 1002 events  deep, forked at 1001"
    assert max(map(len, lines)) < 120


def test_subtree_walks_forks_of_forks_only_below_the_thread(store: Store, convo: str) -> None:
    other = store.create_thread()
    store.append_message(other, "user", "elsewhere")
    store.fork(other)
    a = store.fork(convo, at=2)
    b = store.fork(convo)
    store.append_message(a, "user", "a")
    a1 = store.fork(a)
    assert [t.id for t in store.subtree(convo)] == [convo, a, b, a1]
    assert [t.id for t in store.subtree(a)] == [a, a1]
    with pytest.raises(ThreadNotFound):
        store.subtree("nope")


def test_forks_at_lists_one_pages_fork_points_with_their_counts(store: Store, convo: str) -> None:
    """A page's fork cards, from the forks made at its points only: the viewer read the whole
    subtree for them, 2 s a page of a thread with 100,000 forks."""
    at2 = [store.fork(convo, at=2) for _ in range(4)]
    at4 = store.fork(convo)
    store.fork(at2[0])  # a fork of a fork: not the thread's own
    assert [(t.id, n) for t, n in store.forks_at(convo, 0, 4, limit=3)] == [(at2[0], 4), (at2[1], 4), (at2[2], 4), (at4, 1)]
    assert [(t.id, n) for t, n in store.forks_at(convo, 2, 4)] == [(at4, 1)]  # points 3 and 4: after offsets 2 and 3
    assert [t.id for t, _ in store.forks_at(convo, 0, 1)] == []
    assert all(t.parent_id == convo for t, _ in store.forks_at(convo, 0, 99))
    with pytest.raises(ThreadNotFound):
        store.forks_at("nope", 0, 4)
    with pytest.raises(InvalidEvent, match="limit"):
        store.forks_at(convo, 0, 4, limit=-1)


@pytest.mark.parametrize("option", [{"retrieval": "per_turn"}, {"retrieval": "first-turn"}, {"transcript": "parent.md"}],
                         ids=["per_turn", "first_turn", "transcript"])
def test_a_note_forks_options_are_refused_on_a_full_fork(option: dict[str, str]) -> None:
    """`retrieval` and `transcript` only shape a context='note' fork's first request: on a full
    fork they were recorded and then refused by `anthropic_request`, or named a file never written."""
    store = Store(":memory:")
    thread = store.create_thread(title="t")
    store.append_message(thread, "user", "hi")
    before = store.counts()
    with pytest.raises(InvalidEvent, match="context='note' forks only"):
        store.fork(thread, **option)  # type: ignore[arg-type]
    assert store.counts() == before
    store.fork(thread, context="note", **option)  # type: ignore[arg-type]


def test_a_fork_re_framed_as_a_narrower_agent_keeps_none_of_the_parents_configuration(store: Store) -> None:
    """Sagents: system prompt, tools and model are not inherited, so a fork can become a
    narrower agent with no leftover directives. A fork had no way to drop or replace them."""
    from projections import anthropic_request, thread_state

    tools = [{"name": "book", "input_schema": {"type": "object"}}]
    thinking = {"type": "enabled", "budget_tokens": 2048}
    t = store.create_thread(title="Trip", system="You plan whole trips.", model="m-parent", tools=tools, thinking=thinking)
    store.append_message(t, "user", "Find me a hotel and a train")
    narrow = store.fork(t, config={"blank": True, "system": "You only rank hotels.", "model": "m-small"}, title="Hotels")
    state = thread_state(store, narrow)
    assert (state.title, state.system, state.model, state.tools, state.thinking) == ("Hotels", "You only rank hotels.", "m-small",
                                                                                     None, None)
    request = anthropic_request(store, narrow)
    assert "tools" not in request and "thinking" not in request and "whole trips" not in str(request)
    other = store.fork(t, config={"model": "m-other"})  # one key replaced, the rest inherited
    state = thread_state(store, other)
    assert (state.title, state.system, state.model, state.tools, state.thinking) == ("Trip", "You plan whole trips.", "m-other",
                                                                                     tools, thinking)
    assert thread_state(store, store.fork(narrow)).system == "You only rank hotels."  # a fork of the fork keeps the new frame
    parent = thread_state(store, t)
    assert (parent.title, parent.system, parent.model) == ("Trip", "You plan whole trips.", "m-parent")
    assert [store.title(fork) for fork in (narrow, other)] == ["Hotels", "Trip"]  # what ls, tree and search show


@pytest.mark.parametrize(("config", "title", "field"), [
    ({"sytem": "x"}, None, "config.sytem"),
    ({"model": 3}, None, "config.model"),
    ({"model": ""}, None, "config.model"),  # blank: it erased the parent's model, and requests named none
    ({"model": " \t"}, None, "config.model"),
    ({"thinking": {"type": "enabled"}}, None, "config.thinking.budget_tokens"),
    ("blank", None, "config"),
    (None, 3, "title"),
])
def test_a_fork_configuration_or_title_that_is_not_one_is_refused_and_writes_nothing(store: Store, config: object, title: object,
                                                                                      field: str) -> None:
    t = store.create_thread(model="m")
    store.append_message(t, "user", "hi")
    before = dump(store)
    with pytest.raises(InvalidEvent) as refused:
        store.fork(t, config=config, title=title)  # type: ignore[arg-type]
    assert refused.value.field == field
    assert dump(store) == before


@pytest.mark.parametrize("model", ["", "  ", "\n"])
def test_a_thread_naming_a_blank_model_is_refused_and_writes_nothing(store: Store, model: str) -> None:
    before = dump(store)
    with pytest.raises(InvalidEvent, match="blank: name a model") as refused:
        store.create_thread(model=model)
    assert refused.value.field.endswith("model")
    assert dump(store) == before


def test_redacting_a_re_framed_forks_first_event_gives_it_none_of_the_parents_configuration(store: Store) -> None:
    """The redaction's skeleton dropped the fork's config: the narrowed fork then read the
    parent's system prompt and tools, the ones it was re-framed not to have."""
    from projections import anthropic_request, thread_state

    t = store.create_thread(model="m", system="PARENT SECRET", tools=[{"name": "rm_rf", "input_schema": {"type": "object"}}])
    store.append_message(t, "user", "x")
    narrow = store.fork(t, config={"blank": True, "system": "narrow", "model": "m-narrow"})
    store.append_message(narrow, "user", "task")
    forked = next(e for e in store.read(narrow) if e.type == "thread.forked")
    store.redact(forked.position, reason="r", actor="a")
    state = thread_state(store, narrow)
    assert (state.system, state.model, state.tools) == (None, None, None)  # its own erased, the parent's not back
    request = anthropic_request(store, narrow, model="m")
    assert "PARENT SECRET" not in str(request) and "tools" not in request
    store.verify()


def test_a_retry_can_be_refused_instead_of_returned(store: Store) -> None:
    """`retry=False` (what an importer counting its writes asks for): an append or a fork whose
    event was already written is refused, naming it, with nothing written; by default it is
    returned as written."""
    t = store.create_thread()
    batch = [prepare({"type": "message.appended", "data": {"role": "user", "content": "hi"}, "meta": {"event_id": "m1"}}, 0)]
    first = store.append_prepared(t, batch)
    assert store.append_prepared(t, batch) == first
    fork = store.fork(t, event_id="f1")
    assert store.fork(t, event_id="f1") == fork
    before = dump(store)
    for expect in ("any", first[0].offset):
        with pytest.raises(InvalidEvent, match=r"already stored \(event id 'm1' at position \d+\).*retry=False"):
            store.append_prepared(t, batch, expect=expect, retry=False)
    with pytest.raises(InvalidEvent, match=f"fork '{fork}' was already made with event id 'f1'.*retry=False"):
        store.fork(t, event_id="f1", retry=False)
    for not_a_flag in ("no", 0, None):  # would read as false, or true: refused, not guessed
        with pytest.raises(InvalidEvent, match=r"retry: must be True or False"):
            store.append_prepared(t, batch, retry=not_a_flag)  # type: ignore[arg-type]
        with pytest.raises(InvalidEvent, match=r"retry: must be True or False"):
            store.fork(t, event_id="f1", retry=not_a_flag)  # type: ignore[arg-type]
    assert dump(store) == before


def test_a_transcript_path_with_a_byte_that_is_not_utf8_is_refused_as_such(mem: Store) -> None:
    """It was called "the control character '\\udcff'": that is how Python holds a file name's
    byte that is not UTF-8, no control character."""
    t = mem.create_thread()
    mem.append_message(t, "user", "x")
    with pytest.raises(InvalidEvent, match=r"^transcript: holds a byte that is not UTF-8 \(\\udcff\) at index 1; "):
        mem.fork(t, context="note", transcript="n\udcff.md")
