"""display_rows: one row per thing a UI shows, stable ids, primed messages invisible."""

from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import Store
from threadlog import display_rows
from tests.backends import mem_on_every_backend  # noqa: F401 (`mem`: these projections on every backend)


def _thread(store: Store) -> str:
    t = store.create_thread()
    store.append_message(t, "user", "Find a train")
    store.append_message(t, "assistant", [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Searching."},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"to": "Lyon"}},
    ])
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "08:00", "is_error": True}])
    store.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "ask", "question": "Which?"}}])
    return t


def test_one_row_per_visible_thing(mem: Store) -> None:
    t = _thread(mem)
    rows = display_rows(mem, t)
    assert [r.kind for r in rows] == ["text", "thinking", "text", "tool_call", "tool_result", "interrupt"]
    thinking, call, result, card = rows[1], rows[3], rows[4], rows[5]
    assert thinking.collapsed is True
    assert (call.name, call.input, call.status) == ("search", {"to": "Lyon"}, "error")
    assert (result.tool_use_id, result.status) == ("toolu_1", "error")
    assert (card.text, card.status) == ("Which?", "pending")
    event = mem.event_at(t, 2)
    assert call.id == f"{event.event_id}:2" and (call.stream_id, call.offset, call.time) == (t, 2, event.recorded_at)


def test_ids_are_stable_and_status_changes_in_place(mem: Store) -> None:
    t = _thread(mem)
    before = {r.id: r for r in display_rows(mem, t)}
    mem.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "ask", "answer": "08:00"}}])
    mem.append_message(t, "user", "thanks")
    after = display_rows(mem, t)
    assert [r.id for r in after][: len(before)] == list(before)
    assert after[5].status == "resolved" and after[-1].text == "thanks"
    assert display_rows(mem, t) == after  # deterministic


def test_an_interrupt_row_holds_what_answered_or_withdrew_it(mem: Store) -> None:
    """The human's answer is part of the conversation: its row shows it (and a cancellation's
    reason), on a page too, where the answer is past the page's events."""
    t = _thread(mem)
    mem.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "again", "question": "Sure?"}}])
    mem.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "ask", "answer": {"train": "08:00", "seats": 2}}}])
    mem.append(t, [{"type": "interrupt.cancelled", "data": {"interrupt_id": "again", "reason": "the user left"}}])
    asked, again = display_rows(mem, t)[5:7]
    assert (asked.status, asked.answer, asked.reason) == ("resolved", {"train": "08:00", "seats": 2}, None)
    assert (again.status, again.answer, again.reason) == ("cancelled", None, "the user left")
    assert asked.to_json()["answer"] == {"train": "08:00", "seats": 2} and "reason" not in asked.to_json()
    (paged,) = display_rows(mem, t, start=4, stop=5)  # the interrupt's page alone: its answer comes later
    assert (paged.status, paged.answer) == ("resolved", {"train": "08:00", "seats": 2})
    before = display_rows(mem, t, at=5)[5]  # as of before the answer
    assert (before.status, before.answer) == ("pending", None)
    fork = mem.fork(t, 5)  # demoted by the fork: cancelled, for the reason `fork`
    demoted = [r for r in display_rows(mem, fork) if r.kind == "interrupt"][0]
    assert (demoted.status, demoted.answer, demoted.reason) == ("cancelled", None, "fork")
    assert [r.reason for r in display_rows(mem, t) if r.kind == "interrupt"] == [None, "the user left"]  # not in the parent


def test_a_server_tool_call_and_a_document_say_which_they_are(mem: Store) -> None:
    """Blocks of other types are placeholders, but ones that say which they are: a web search's
    name, query and id, its result's call id, a document's title."""
    t = mem.create_thread()
    mem.append_message(t, "user", [{"type": "document", "title": "Timetable",
                                    "source": {"type": "text", "media_type": "text/plain", "data": "08:00 Lyon"}},
                                   {"type": "text", "text": "When?"}])
    mem.append_message(t, "assistant", [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "trains to Lyon"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": [{"type": "web_search_result", "url": "https://example.com", "title": "SNCF", "encrypted_content": "e"}]},
        {"type": "text", "text": "At eight."},
    ])
    document, _, call, result, _ = display_rows(mem, t)
    assert (document.kind, document.text) == ("document", "[document] Timetable")
    assert (call.kind, call.text, call.name, call.input, call.tool_use_id) == (
        "server_tool_use", "[server_tool_use] web_search", "web_search", {"query": "trains to Lyon"}, "srvtoolu_1")
    assert (result.kind, result.text, result.tool_use_id, result.input) == (
        "web_search_tool_result", "[web_search_tool_result]", "srvtoolu_1", None)


def test_primed_messages_make_no_rows_imported_ones_do(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_9", "name": "Agent", "input": {}}])
    kids = mem.fan_out(t, ["one", "two"])
    rows = display_rows(mem, kids[0])
    assert not any(r.text == "one" for r in rows)
    assert rows[-1].kind == "fork" and rows[-1].text == f"⑃ Forked from {t} at 3"
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}])
    mem.append_message(t, "user", "from an import", origin="imported")
    assert display_rows(mem, t)[-1].text == "from an import"


def test_fork_card_demoted_interrupt_and_note_reset(mem: Store) -> None:
    t = _thread(mem)
    full = mem.fork(t)
    rows = display_rows(mem, full)
    assert rows[-1].kind == "fork" and rows[-1].text == f"⑃ Forked from {t} at 5"
    assert rows[-2].kind == "interrupt" and rows[-2].status == "cancelled"
    assert display_rows(mem, t)[-1].status == "pending"  # the parent still waits
    note = mem.fork(t, context="note")
    mem.append_message(note, "user", "fresh")
    assert [r.kind for r in display_rows(mem, note)] == ["fork", "text"]


def test_dropped_tool_call_row_vanishes_and_compaction_card(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "go")
    mem.append_message(t, "assistant", [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "toolu_x", "name": "s", "input": {}}])
    f = mem.fork(t, unanswered="drop")
    assert "tool_call" not in [r.kind for r in display_rows(mem, f)]
    mem.append(f, [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 2}}])
    assert display_rows(mem, f)[-1].kind == "compaction"
    assert display_rows(mem, f, at=3)[-1].kind == "tool_call"  # before the fork event, the call is there


def test_a_refused_answer_keeps_its_text_and_ends_with_a_refusal_row(mem: Store) -> None:
    """A refusal may come after some text: the text keeps its row, blank text makes none, and
    the refusal row follows the blocks (with no text when no `stop_details` say why), on a page
    of its event alone too. An answer not refused keeps its blank text's row."""
    t = mem.create_thread()
    mem.append_message(t, "user", "go")
    details = {"type": "refusal", "category": "cyber", "explanation": "No."}
    partly = [{"type": "text", "text": "Sure, the"}, {"type": "text", "text": " \n"}]
    mem.append(t, [{"type": "message.appended", "data": {"role": "assistant", "stop_reason": "refusal", "stop_details": details,
                                                         "content": partly}},
                   {"type": "message.appended", "data": {"role": "assistant", "stop_reason": "refusal",
                                                         "content": [{"type": "text", "text": ""}]}},
                   {"type": "message.appended", "data": {"role": "assistant", "stop_reason": "end_turn",
                                                         "content": [{"type": "text", "text": ""}]}}])
    partial, bare, blank = (mem.event_at(t, offset).event_id for offset in (2, 3, 4))
    rows = display_rows(mem, t)
    assert [(r.id, r.kind, r.text) for r in rows[1:]] == [
        (f"{partial}:0", "text", "Sure, the"), (f"{partial}:2", "refusal", "cyber: No."),
        (f"{bare}:1", "refusal", None), (f"{blank}:0", "text", "")]
    assert display_rows(mem, t, start=2, stop=3) == rows[1:3]


_ID = st.text(alphabet="E:01x", min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["message", "refusal", "interrupt", "compaction"]), _ID), min_size=1, max_size=6,
                unique_by=lambda event: event[1]))
def test_every_event_keeps_its_rows_whatever_the_event_ids(events: list[tuple[str, str]]) -> None:
    """Rows are keyed by id: a message `E` made the row `E:0`, and an interrupt with the event
    id `E:0` took that id, so its row replaced the message's and the viewer and `rows` showed
    no trace of it (the transcript and the model still did). A refused answer's row, after its
    blocks, takes no other row's id either."""
    store = Store(":memory:")
    t = store.create_thread()
    for i, (kind, event_id) in enumerate(events):
        data: dict[str, object] = {
            "message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}, {"type": "text", "text": f"n{i}"}]},
            "interrupt": {"interrupt_id": f"q{i}", "question": f"q{i}?"},
            "refusal": {"role": "assistant", "content": [{"type": "text", "text": f"r{i}"}], "stop_reason": "refusal"},
            "compaction": {"summary": f"s{i}", "through_offset": 1},
        }[kind]
        type_ = {"interrupt": "interrupt.raised", "compaction": "compaction.recorded"}.get(kind, "message.appended")
        store.append(t, [{"type": type_, "data": data, "meta": {"event_id": event_id}}])
    rows = display_rows(store, t)
    assert len({row.id for row in rows}) == len(rows)
    assert len(rows) == sum(2 if kind in ("message", "refusal") else 1 for kind, _ in events)
