"""Which tool call each interrupt waits on, and what an append may not do to it.

A tool raising an interrupt leaves its call waiting for the human's answer, which becomes
the call's result when the run resumes. An interrupt therefore belongs to the call it was
raised on, not to the id: an older release recorded a result for a call while its interrupt
waited, and a later call may reuse that id. `InterruptedCalls` follows both, from the
stream's own events (`Store._interrupted_calls`) and then through a batch (`check_batch`),
which refuses what would leave an answer read by nothing. Appends only: a log an older
release wrote must still verify and restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .content import tool_result_ids, tool_use_ids
from .errors import InvalidEvent, named
from .events import MessageAppended
from .prepare import PreparedEvent

RAISED = "interrupt.raised"
RESOLVED = "interrupt.resolved"
SETTLED = (RESOLVED, "interrupt.cancelled")


class InterruptedCalls:
    """The interrupts raised on tool calls, as the events so far leave them.

    `asked`: tool_use id -> the pending interrupt raised on that call. `stale`: pending
    interrupt id -> the tool_use id it was raised on, a call that no longer waits (its result
    was recorded, in a log an older release wrote, or it never waited), whatever later call
    reuses the id. `waiting`: the calls waiting for their results, from the head on (`at_head`).
    Of the stored events, `raised_at`: interrupt id -> the offset it was raised at, and
    `result_at`: stale interrupt id -> the offset of its call's result, which a refusal names
    (a later call reusing the id may have a result of its own, further on).
    """

    __slots__ = ("asked", "raised_at", "result_at", "stale", "waiting")

    def __init__(self) -> None:
        self.asked: dict[str, str] = {}
        self.stale: dict[str, str] = {}
        self.waiting: set[str] = set()
        self.raised_at: dict[str, int] = {}
        self.result_at: dict[str, int] = {}

    def message(self, uses: list[str], results: list[str], offset: int | None = None) -> None:
        """A call answered (by the message at `offset`, when stored), or made anew under an id an
        interrupt was raised on: that interrupt's call no longer waits, whatever it is still
        pending for."""
        for call in (*results, *uses):
            interrupt_id = self.asked.pop(call, None)
            if interrupt_id is not None:
                self.stale[interrupt_id] = call
                if offset is not None and call in results:
                    self.result_at[interrupt_id] = offset
        self.waiting.difference_update(results)
        self.waiting.update(uses)

    def raised(self, interrupt_id: str, call: str, offset: int | None = None) -> None:
        self.asked[call] = interrupt_id
        self.result_at.pop(interrupt_id, None)  # an id settled before may be raised again
        if offset is not None:
            self.raised_at[interrupt_id] = offset

    def settled(self, interrupt_id: str) -> None:
        call = next((call for call, asked in self.asked.items() if asked == interrupt_id), None)
        if call is not None:
            del self.asked[call]
        self.stale.pop(interrupt_id, None)

    def fold(self, offset: int, type_: str, data: dict[str, Any]) -> None:
        """One stored event, at `offset`, as it was taken: nothing is refused here."""
        interrupt_id = data.get("interrupt_id")
        if type_ == MessageAppended.type:
            content = data.get("content")
            if isinstance(content, list):
                self.message(tool_use_ids(content), tool_result_ids(content), offset)
        elif type_ == RAISED and isinstance(interrupt_id, str) and isinstance(data.get("tool_use_id"), str):
            self.raised(interrupt_id, data["tool_use_id"], offset)
        elif type_ in SETTLED and isinstance(interrupt_id, str):
            self.settled(interrupt_id)

    def at_head(self, pending: Iterable[str], waiting: Iterable[str]) -> InterruptedCalls:
        """Kept to the interrupts `pending` at the head, where `waiting` are the calls waiting
        for their results; one asked about a call that does not wait there (raised on one that
        never waited, in a log an older release wrote) is stale."""
        held, self.waiting = set(pending), set(waiting)
        for call, interrupt_id in list(self.asked.items()):
            if call not in self.waiting:
                del self.asked[call]
                self.stale[interrupt_id] = call
        self.asked = {call: interrupt_id for call, interrupt_id in self.asked.items() if interrupt_id in held}
        self.stale = {interrupt_id: call for interrupt_id, call in self.stale.items() if interrupt_id in held}
        return self

    @property
    def needs_messages(self) -> bool:
        """Whether a stored message can change what this holds: only once an interrupt was raised
        on a call, so a fold decodes no message before that."""
        return bool(self.asked)


def binds_calls(batch: Sequence[PreparedEvent], interrupts: tuple[str, ...]) -> bool:
    """Whether `batch` raises an interrupt on a tool call or, with `interrupts` pending before
    it, holds a tool result (its call may be one of theirs) or an answer (its call may have a
    result): then `check_batch` judges it."""
    for item in batch:
        if item.type == RAISED and item.data.get("tool_use_id") is not None:
            return True
        if interrupts and item.type == RESOLVED:
            return True
        if interrupts and item.type == MessageAppended.type and not item.plain and tool_result_ids(item.data["content"]):
            return True
    return False


def check_batch(calls: InterruptedCalls, batch: Sequence[PreparedEvent],
                answered_at: Callable[[str, int | None], int | None]) -> None:
    """Refuse what would leave an interrupt on a tool call answering nothing (`calls`: as the
    stream's head leaves them), since its answer becomes the call's one result: a second
    interrupt on that call (one answer would be dropped unseen), a result for the call while
    the interrupt is pending (the thread stayed interrupted, and the answer later given was
    dropped), and an answer to an interrupt whose call no longer waits (`answered_at` finds
    its result, in a log an older release wrote), even when a later call reuses its id: a
    resumed run answers the waiting calls with their own interrupts' answers only, and read
    that answer nowhere, or gave it to the wrong call; cancelling settles such an interrupt."""
    for i, item in enumerate(batch):
        if item.type == MessageAppended.type:
            if item.plain:
                continue
            content = item.data["content"]
            results = tool_result_ids(content)
            unsettled = next((call for call in results if call in calls.asked), None)
            if unsettled is not None:
                raise InvalidEvent(f"events[{i}].data.content",
                                   f"tool_use {named(unsettled)} waits on interrupt {named(calls.asked[unsettled])}, whose "
                                   "answer becomes its result: resolve that interrupt (the run resuming records the result), "
                                   "or cancel it before recording this one")
            calls.message(tool_use_ids(content), results)
        elif item.type == RAISED:
            call = item.data.get("tool_use_id")
            if call in calls.asked:
                raise InvalidEvent(f"events[{i}].data.tool_use_id",
                                   f"tool_use {named(call)} already waits on interrupt {named(calls.asked[call])}: "
                                   "a call takes one answer; resolve or cancel that interrupt first")
            if call is not None:
                calls.raised(item.data["interrupt_id"], call)
        elif item.type in SETTLED:
            interrupt_id = item.data["interrupt_id"]
            call = calls.stale.get(interrupt_id)
            if item.type == RESOLVED and call is not None:
                raise InvalidEvent(f"events[{i}].data.interrupt_id", _answers_no_call(interrupt_id, call, calls, answered_at))
            calls.settled(interrupt_id)


def _answers_no_call(interrupt_id: str, call: str, calls: InterruptedCalls,
                     answered_at: Callable[[str, int | None], int | None]) -> str:
    """Why an answer to `interrupt_id`, raised on `call`, which no longer waits, is refused: with
    where its call's result is, the one after the interrupt, else one before it (`answered_at`
    below the offset the interrupt was raised at), from which on the id named other calls."""
    offset = calls.result_at.get(interrupt_id)
    if offset is None:
        offset = answered_at(call, calls.raised_at.get(interrupt_id))
    if call in calls.waiting:  # under a later call reusing the id
        where = "was not waiting for its result then" if offset is None else f"has its result (at offset {offset})"
        return (f"interrupt {named(interrupt_id)} was raised on an earlier tool_use {named(call)}, which {where}; the call "
                "waiting under that id now is a later one, whose result the answer must not become: cancel the interrupt "
                "instead")
    where = "is not waiting for its result in this thread" if offset is None else f"already has its result (at offset {offset})"
    return (f"interrupt {named(interrupt_id)} was raised on tool_use {named(call)}, which {where}: an answer would be the "
            "result of no call; cancel the interrupt instead")
