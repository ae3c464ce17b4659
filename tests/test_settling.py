"""Settling an interrupt by hand: the human's answer (`resolve_interrupt`, `threadlog interrupt
resolve`) or its withdrawal (`cancel_interrupt`, `threadlog interrupt cancel`), on real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import InvalidEvent, Store, cancel_interrupt, import_events, resolve_interrupt, thread_state
from threadlog.cli import cli
from tests.backends import file_dump
from tests.test_restore import old_backup

ROOT = Path(__file__).resolve().parent.parent


def invoke(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    return result.exit_code, result.stdout, result.stderr


def asking(db: Path) -> str:
    """A thread whose tool call waits on interrupt `q1` ("Which day?")."""
    with Store(db) as store:
        t = store.create_thread(title="trip")
        store.append_message(t, "user", "Book a train")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "ask_human", "input": {}}])
        store.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "q1", "tool_use_id": "toolu_1",
                                                               "question": "Which day?"}}])
    return t


def test_cancel_interrupt_withdraws_a_question_and_refuses_what_the_command_refuses(tmp_path: Path) -> None:
    """Python had no way to cancel an interrupt but an `interrupt.cancelled` built by hand, whose
    blank reason the store took. `cancel_interrupt` records it with its reason (`cancelled` unless
    given), and refuses what `threadlog interrupt cancel` refuses, the file left as it was: an id
    not pending, one already settled, a blank reason."""
    db = tmp_path / "t.db"
    t = asking(db)
    refusals: list[tuple[str, Any, str]] = [
        ("q2", "moot", "interrupt_id: interrupt 'q2' is not pending in this thread (pending: 'q1')"),
        ("q1", " \n", "reason: is blank: say why the interrupt no longer needs an answer"),
        ("q1", None, "reason: must be text saying why the interrupt no longer needs an answer, not NoneType"),
    ]
    before = file_dump(db)
    for interrupt_id, reason, refusal in refusals:
        with Store(db) as store, pytest.raises(InvalidEvent) as refused:
            cancel_interrupt(store, t, interrupt_id, reason)
        assert str(refused.value) == refusal
        assert file_dump(db) == before
    with Store(db) as store:
        cancelled = cancel_interrupt(store, t, "q1", reason="booked by phone")
        assert (cancelled.type, cancelled.data) == ("interrupt.cancelled", {"interrupt_id": "q1", "reason": "booked by phone"})
        assert cancelled.offset == store.head(t) - 1
        state = thread_state(store, t)
        assert state.pending_interrupts == [] and state.status == "idle"
    after = file_dump(db)
    for settle in (lambda store: cancel_interrupt(store, t, "q1"), lambda store: resolve_interrupt(store, t, "q1", "Monday")):
        with Store(db) as store, pytest.raises(InvalidEvent, match=r"interrupt 'q1' is not pending in this thread "
                                                                   r"\(no interrupt is\)$"):
            settle(store)
        assert file_dump(db) == after
    with Store(db) as store:
        store.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "q2", "tool_use_id": "toolu_1"}}])
        assert cancel_interrupt(store, t, "q2").data["reason"] == "cancelled"


def test_interrupt_cancel_records_what_cancel_interrupt_does_and_refuses_alike(tmp_path: Path) -> None:
    """`threadlog interrupt cancel` writes through `cancel_interrupt`: the same event, the same
    refusals, each named by the argument the user typed, the file left as it was."""
    db = tmp_path / "t.db"
    t = asking(db)
    before = file_dump(db)
    code, _, err = invoke(db, "interrupt", "cancel", t, "q2")
    assert (code, err) == (1, "error: INTERRUPT_ID: interrupt 'q2' is not pending in this thread (pending: 'q1')\n")
    assert file_dump(db) == before
    code, out, _ = invoke(db, "interrupt", "cancel", t, "q1", "--reason", "booked by phone")
    assert (code, out) == (0, "offset 4 position 5\n")
    with Store(db) as store:
        assert store.event_at(t, 4).data == {"interrupt_id": "q1", "reason": "booked by phone"}
    after = file_dump(db)
    code, _, err = invoke(db, "interrupt", "cancel", t, "q1")
    assert (code, err) == (1, "error: INTERRUPT_ID: interrupt 'q1' is not pending in this thread (no interrupt is)\n")
    assert file_dump(db) == after


@pytest.mark.parametrize("command", [["resolve", "--answer", "Monday"], ["cancel"]], ids=["resolve", "cancel"])
def test_settling_an_interrupt_from_the_command_line_does_not_load_the_sdk(tmp_path: Path, command: list[str]) -> None:
    """`threadlog interrupt resolve` imported the live turns, and with them the `anthropic` SDK
    (seconds) to write one event; a human answering from a shell loop paid that every time."""
    db = tmp_path / "t.db"
    t = asking(db)
    script = ("import sys\nfrom threadlog.cli import cli\n"
              "try:\n    cli(sys.argv[1:])\nexcept SystemExit as done:\n    print(done.code, 'anthropic' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script, "--db", str(db), "interrupt", command[0], t, "q1", *command[1:]],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 False", done.stdout + done.stderr


def answered_while_waiting(tmp_path: Path) -> Path:
    """A file an older release wrote: thread `S` holds a result (offset 4) for the call that
    interrupt `q1` waits on, and interrupt `q2` raised on a call that never waited. Appends
    refuse both now; such a file still restores."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {}}
    events = [("thread.created", {"title": "t"}), ("message.appended", {"role": "user", "content": [{"type": "text", "text": "go"}]}),
              ("message.appended", {"role": "assistant", "content": [call]}),
              ("interrupt.raised", {"interrupt_id": "q1", "tool_use_id": "toolu_1", "question": "later"}),
              ("message.appended", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]}),
              ("interrupt.raised", {"interrupt_id": "q2", "tool_use_id": "toolu_9", "question": "which?"})]
    db = tmp_path / "old.db"
    with Store(db) as store:
        assert import_events(store, old_backup(tmp_path / "old.jsonl", events)).added == len(events)
    return db


ANSWERS_NOTHING = {
    "q1": "interrupt 'q1' was raised on tool_use 'toolu_1', which already has its result (at offset 4): an answer would be "
          "the result of no call; cancel the interrupt instead",
    "q2": "interrupt 'q2' was raised on tool_use 'toolu_9', which is not waiting for its result in this thread: an answer "
          "would be the result of no call; cancel the interrupt instead",
}


def test_resolve_interrupt_refuses_an_answer_no_call_would_take_and_it_can_be_cancelled(tmp_path: Path) -> None:
    """On such a file `resolve_interrupt` was taken and its answer read by nothing (the resumed
    turn answers waiting calls only): the thread went on as if the human had been heard. It is
    refused, naming the call and where its result is, the file left as it was; cancelling it
    settles it."""
    db = answered_while_waiting(tmp_path)
    before = file_dump(db)
    for interrupt_id, why in ANSWERS_NOTHING.items():
        with Store(db) as store, pytest.raises(InvalidEvent) as refused:
            resolve_interrupt(store, "S", interrupt_id, "Tuesday")
        assert str(refused.value) == f"interrupt_id: {why}"
        assert file_dump(db) == before
    with Store(db) as store:
        for interrupt_id in ANSWERS_NOTHING:
            cancel_interrupt(store, "S", interrupt_id, "its call has its result")
        assert thread_state(store, "S").status == "idle" and store.verify().events == 8


def test_interrupt_resolve_refuses_an_answer_no_call_would_take_and_cancel_settles_it(tmp_path: Path) -> None:
    db = answered_while_waiting(tmp_path)
    before = file_dump(db)
    for interrupt_id, why in ANSWERS_NOTHING.items():
        code, out, err = invoke(db, "interrupt", "resolve", "S", interrupt_id, "--answer", "Tuesday")
        assert (code, out, err) == (1, "", f"error: INTERRUPT_ID: {why}\n")
        assert file_dump(db) == before
    for interrupt_id in ANSWERS_NOTHING:
        assert invoke(db, "interrupt", "cancel", "S", interrupt_id)[0] == 0
    with Store(db) as store:
        assert thread_state(store, "S").status == "idle"


def test_interrupt_list_names_both_commands_that_settle_what_it_lists(tmp_path: Path) -> None:
    """`interrupt list` is where a person looks for what waits on them; its help named only the
    answer, leaving a question that needs none with no way out in sight."""
    db = tmp_path / "t.db"
    t = asking(db)
    code, out, _ = invoke(db, "interrupt", "list", t)
    assert code == 0 and "q1" in out and "Which day?" in out
    code, out, _ = invoke(db, "interrupt", "list", "--help")
    assert code == 0
    assert "threadlog interrupt resolve ASKING_THREAD ID --answer A" in " ".join(out.split())
    assert "threadlog interrupt cancel ASKING_THREAD ID" in " ".join(out.split())


def test_resolve_interrupt_refusals_name_its_parameters(tmp_path: Path) -> None:
    """Its refusals named the place of each value in the event built from it
    (`events[0].data.interrupt_id`, `events[0].data` for an answer that is not JSON), a batch the
    caller never wrote: they name the parameter given, and the command's option or argument."""
    db = tmp_path / "t.db"
    t = asking(db)
    before = file_dump(db)
    for interrupt_id, answer, refusal in [("nope", "x", "interrupt_id: interrupt 'nope' is not pending in this thread"),
                                          ("q1", {1, 2}, "answer: not storable as UTF-8 JSON"),
                                          ("q1", float("nan"), "answer: not storable as UTF-8 JSON")]:
        with Store(db) as store, pytest.raises(InvalidEvent) as refused:
            resolve_interrupt(store, t, interrupt_id, answer)
        assert str(refused.value).startswith(refusal), refused.value
        assert file_dump(db) == before
    code, _, err = invoke(db, "interrupt", "resolve", t, "nope", "--answer", "x")
    assert code != 0 and "INTERRUPT_ID: interrupt 'nope' is not pending" in err, err
    assert file_dump(db) == before
