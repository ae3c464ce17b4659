"""`compaction.recorded` end to end: where a compaction may cut a thread's history, and what
the model is sent after one.

A compaction's summary stands for the messages below its `through_offset`; the request sends
a tool result only right after the message holding its call. A cut between an assistant
message's tool calls and their results would send the results without their calls, which the
request leaves out: an answer (a human's, to an interrupt) the model never reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import InvalidEvent, Store
from projections import anthropic_request, blame, check_request, display_rows, thread_state, transcript
from threadlog import export_all, import_events
from threadlog.cli import cli
from threadlog.export import dump_lines
from threadlog.live import Interrupt, resolve_interrupt, run_turn

from messages_api import MessagesAPI, message
from tests.backends import dump, file_dump

MODEL = "claude-test-1"
TOOLS = [
    {"name": "weather", "description": "Weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "ask_human", "description": "Ask the user", "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}}},
]


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def use(id: str, name: str = "weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def compaction(summary: str, through: int) -> dict[str, Any]:
    return {"type": "compaction.recorded", "data": {"summary": summary, "through_offset": through}}


def called(store: Store) -> str:
    """A thread whose offset 2 asks for the weather and offset 3 answers it."""
    t = store.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS)
    store.append_message(t, "user", "Weather in Lyon?")  # 1
    store.append_message(t, "assistant", [*text("Checking."), use("toolu_1", city="Lyon")])  # 2
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}])  # 3
    store.append_message(t, "assistant", "Sunny in Lyon.")  # 4
    return t


def test_a_compaction_between_a_call_and_its_result_is_refused_naming_both(store: Store) -> None:
    t = called(store)
    before = dump(store)
    with pytest.raises(InvalidEvent) as refused:
        store.append(t, [compaction("They asked about Lyon.", 3)])
    assert refused.value.field == "events[0].data.through_offset"
    said = str(refused.value)
    assert "toolu_1" in said and "offset 2" in said and "offset 3" in said
    assert "through 2" in said and "through 4" in said  # the two cuts that keep the pair together
    assert dump(store) == before
    for through in (2, 4, 5):  # before the call, after the result, the head: each is taken
        store.append(t, [compaction("They asked about Lyon.", through)])
        assert anthropic_request(store, t)["messages"]


def test_a_compaction_over_calls_still_waiting_for_results_is_refused(store: Store) -> None:
    """The calls' results come after the compaction, so the model would get them alone."""
    t = called(store)
    store.append_message(t, "user", "And in Nice?")  # 5
    store.append_message(t, "assistant", [use("toolu_2", city="Nice")])  # 6
    before = dump(store)
    with pytest.raises(InvalidEvent, match="toolu_2") as refused:
        store.append(t, [compaction("Lyon was sunny; Nice asked.", 7)])
    assert "not all in yet" in str(refused.value) and "through 6" in str(refused.value)
    assert dump(store) == before
    # In the same batch as the results, after them: taken.
    store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rain"}]}}, compaction("Lyon sunny, Nice rain.", 8)])
    assert thread_state(store, t).messages[0].kind == "summary"


def test_a_fork_that_dropped_the_calls_may_compact_through_them(mem: Store) -> None:
    """A fork that dropped the waiting calls never gets their results: no pair to cut."""
    t = called(mem)
    mem.append_message(t, "user", "And in Nice?")
    mem.append_message(t, "assistant", [use("toolu_2", city="Nice")])
    f = mem.fork(t, unanswered="drop")
    mem.append_message(f, "user", "Never mind Nice.")
    mem.append(f, [compaction("Lyon was sunny.", 7)])
    assert [m.kind for m in thread_state(mem, f).messages] == ["summary", "message"]


def test_a_note_fork_may_compact_through_a_pair_its_view_does_not_hold(store: Store) -> None:
    """A note fork's view starts from its note: the parent's call and result are not in it, so a
    cut between them splits nothing the model is sent (it was refused). A full fork, whose view
    holds them, is still refused, and so is a cut through a pair of the note fork's own."""
    t = called(store)
    note = store.fork(t, context="note")  # its note at offset 5
    store.append_message(note, "user", "And Paris?")  # 6
    store.append(note, [compaction("They asked about Lyon.", 3)])
    assert [m.kind for m in thread_state(store, note).messages] == ["fork_note", "summary", "message"]
    assert [m["role"] for m in anthropic_request(store, note)["messages"]] == ["user"]
    deeper = store.fork(note)  # a full fork of it: its view starts from the same note
    store.append(deeper, [compaction("They asked about Lyon and Paris.", 3)])
    assert [m.kind for m in thread_state(store, deeper).messages] == ["fork_note", "summary", "message"]

    store.append_message(note, "assistant", [use("toolu_9", city="Paris")])  # 8
    store.append_message(note, "user", [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"}])  # 9
    full = store.fork(t)
    before = dump(store)
    with pytest.raises(InvalidEvent, match="toolu_9") as refused:
        store.append(note, [compaction("Paris asked.", 9)])
    assert refused.value.field == "events[0].data.through_offset"
    with pytest.raises(InvalidEvent, match="toolu_1") as refused:
        store.append(full, [compaction("They asked about Lyon.", 3)])
    assert refused.value.field == "events[0].data.through_offset"
    assert dump(store) == before


def test_a_compaction_while_an_interrupt_waits_is_refused_and_the_answer_reaches_the_model(file_store: Store,
                                                                                          api: MessagesAPI) -> None:
    """Compacted while a turn waited on a human's answer, the resumed turn sent the summary
    alone: the answer and the other call's result, after a cut between them and their calls,
    were left out of the request."""
    t = file_store.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS)

    def ask_human(question: str) -> str:
        raise Interrupt(question)

    tools = {"weather": lambda city: f"{city}: sunny", "ask_human": ask_human}
    api.reply_json(message([use("tu_1", city="Lyon"), use("tu_2", "ask_human", question="Which day?")], "tool_use"))
    turn = run_turn(file_store, t, "Plan it", api.client(0, 10.0), tools=tools)
    assert turn.status == "interrupted" and turn.interrupt_id
    before = file_dump(file_store.path)
    with pytest.raises(InvalidEvent, match="tu_2"):
        file_store.append(t, [compaction("Planning a trip; asked which day.", file_store.head(t))])
    assert file_dump(file_store.path) == before
    resolve_interrupt(file_store, t, turn.interrupt_id, "Tuesday")
    with pytest.raises(InvalidEvent, match="tu_2"):  # answered, but its result is written when the turn goes on
        file_store.append(t, [compaction("Planning a trip; asked which day.", file_store.head(t))])
    api.reply_json(message(text("Tuesday in Lyon: sunny.")))
    assert run_turn(file_store, t, None, api.client(0, 10.0), tools=tools).status == "ok"
    answers = {b["tool_use_id"]: b["content"] for b in api.requests[-1].json["messages"][-1]["content"]}
    assert answers == {"tu_1": "Lyon: sunny", "tu_2": "Tuesday"}
    file_store.append(t, [compaction("Tuesday in Lyon: sunny.", file_store.head(t))])
    api.reply_json(message(text("A hotel too.")))
    assert run_turn(file_store, t, "And a hotel?", api.client(0, 10.0), tools=tools).status == "ok"
    sent = api.requests[-1].json["messages"]
    assert [b["text"] for b in sent[0]["content"]] == ["Tuesday in Lyon: sunny.", "And a hotel?"]
    assert all(check_request(file_store, t, e.offset).ok for e in file_store.read(t)
                        if e.type == "message.appended" and "request" in e.meta)


def test_the_cli_refuses_a_cut_pair_and_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(str(db)) as store:
        t = called(store)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "emit", t, "compaction.recorded", "--data",
                                       '{"summary": "Lyon.", "through_offset": 3}'])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "toolu_1" in result.stderr
    assert file_dump(db) == before


def test_a_redacted_summary_still_stands_for_the_messages_it_covered(tmp_path: Path) -> None:
    """Redacting a summary that leaked a secret dropped the compaction from every projection:
    the model was sent the whole history the summary stood for again, and the rows and the
    transcript no longer showed that a compaction happened."""
    with Store(tmp_path / "a.db") as store:
        t = called(store)
        leak = store.append(t, [compaction("Lyon is sunny; the key is sk-9", 5)])[0]
        store.append_message(t, "user", "And Nice?")
        store.redact(leak.position, reason="leak", actor="dpo")
        view = thread_state(store, t).messages
        assert [(m.kind, m.offset) for m in view] == [("summary", 5), ("message", 6)]
        assert view[0].content == text("[redacted]")
        assert [(b.kind, b.offset) for b in blame(store, t)] == [("summary", 5), ("message", 6)]
        sent = anthropic_request(store, t, cache=False)["messages"]
        assert sent == [{"role": "user", "content": [*text("[redacted]"), *text("And Nice?")]}]
        assert [row.kind for row in display_rows(store, t)][-2:] == ["compaction", "text"]
        md = transcript(store, t)
        assert "## compaction (messages before offset 5 summarised)" in md and "sk-9" not in md
        store.verify()
        backup = tmp_path / "all.jsonl"
        backup.write_text("".join(dump_lines(export_all(store))), encoding="utf-8")
    with Store(tmp_path / "b.db") as target:
        import_events(target, backup)
        assert target.verify().redacted == 1
        assert [(m.kind, m.offset) for m in thread_state(target, t).messages] == [("summary", 5), ("message", 6)]


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_backup_of_an_earlier_release_holding_a_redacted_compaction_restores(tmp_path: Path) -> None:
    """A redaction by an earlier release kept nothing of a compaction; its backup, restored over
    a copy of the database from before the redaction, carries that redaction over (the skeleton
    is the one that release left) and the compaction then reads as none, as it did there."""
    before = tmp_path / "before.db"
    before.write_bytes((FIXTURES / "compaction-before.db").read_bytes())
    backup = FIXTURES / "compaction-redacted.jsonl"
    with Store(before) as store:
        assert import_events(store, backup).erased == 1
        assert store.verify().redacted == 1
        (t,) = [info.id for info in store.threads(10)]
        assert [m.kind for m in thread_state(store, t).messages] == ["message", "message", "message"]
        assert "sk-9" not in transcript(store, t)
    with Store(tmp_path / "empty.db") as store:
        import_events(store, backup)
        assert store.verify().redacted == 1


def test_a_cut_between_two_assistant_messages_whose_calls_one_message_answers_is_refused(store: Store) -> None:
    """Two assistant messages in a row are one message to the API, and the results after them
    answer the calls of both. A cut between the two was taken: the first's calls were
    summarised, and their results, sent without them, were left out of the request."""
    t = store.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS)
    store.append_message(t, "user", "Weather in Lyon and Nice?")  # 1
    store.append_message(t, "assistant", [use("toolu_1", city="Lyon")])  # 2
    store.append_message(t, "assistant", [use("toolu_2", city="Nice")])  # 3
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rain"}])  # 4
    store.append_message(t, "assistant", "Sunny in Lyon, rain in Nice.")  # 5
    sent = anthropic_request(store, t)["messages"]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["toolu_1", "toolu_2"]  # both answered, as one message
    before = dump(store)
    for through in (3, 4):
        with pytest.raises(InvalidEvent, match="toolu_1") as refused:
            store.append(t, [compaction("Lyon and Nice asked.", through)])
        assert "through 2" in str(refused.value) and "through 5" in str(refused.value)
        assert dump(store) == before
    for through in (2, 5):
        store.append(t, [compaction("Lyon and Nice asked.", through)])
        results = [b for m in anthropic_request(store, t)["messages"] for b in m["content"] if b.get("type") == "tool_result"]
        assert len(results) == (2 if through == 2 else 0)


def test_a_cut_after_an_answer_with_no_call_reads_no_further_back(store: Store) -> None:
    """The calls that matter are those of the last assistant messages below the cut: an older
    call still waiting (never answered, the conversation went on) does not refuse it."""
    t = store.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS)
    store.append_message(t, "user", "Weather in Lyon?")  # 1
    store.append_message(t, "assistant", [use("toolu_1", city="Lyon")])  # 2: never answered
    store.append_message(t, "user", "Never mind.")  # 3
    store.append_message(t, "assistant", "Fine.")  # 4
    store.append_message(t, "user", "Thanks.")  # 5
    store.append(t, [compaction("Nothing asked.", 6)])
    assert thread_state(store, t).messages[0].kind == "summary"
