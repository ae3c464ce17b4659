"""What is pending after an event: open runs, unanswered tool calls, unresolved interrupts.

Forks must stay O(1), so their safety checks cannot fold the parent's history. Instead
every append folds these few facts forward from the previous event's and stores them on
the new row (`events.pending`, NULL when nothing is pending) and on the stream's head. A
fork at any offset k reads the facts of the one event at k - 1. The same fold is what
refuses a `tool_result` for a `tool_use` that is not waiting, or a resolution of an
interrupt that is not pending.

A `tool_use` id names one pending call: an id repeated within one message, or sent again
while a call with that id still waits for its result, is refused (one result would answer
both). Once its result has come back the id is no longer pending and may be used again:
the facts know only what is pending, and looking further back would make every append
read the thread's history. (The Messages API may refuse a request that repeats an id.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .content import tool_result_ids, tool_use_ids
from .errors import InvalidEvent, StoreError, named, shown


# `json.dumps(..., separators=(",", ":"))` builds a new encoder on every call; this is the same one, once.
_encode = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class Facts:
    runs: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    interrupts: tuple[str, ...] = ()

    def dump(self) -> str | None:
        if not (self.runs or self.tools or self.interrupts):
            return None
        parts = {"runs": self.runs, "tools": self.tools, "interrupts": self.interrupts}
        return _encode({k: list(v) for k, v in parts.items() if v})

    @classmethod
    def load(cls, text: str | None) -> Facts:
        if not text:
            return NONE
        raw = json.loads(text)
        return cls(tuple(raw.get("runs", ())), tuple(raw.get("tools", ())), tuple(raw.get("interrupts", ())))

    @classmethod
    def stored(cls, text: str | None, stream_id: str) -> Facts:
        """`load` for a write: facts it cannot read (only an edit outside threadlog stores them)
        refuse the write, naming the stream. (`verify` calls `load` and names the position.)"""
        try:
            return cls.load(text)
        except (ValueError, TypeError, AttributeError, RecursionError):
            raise StoreError(f"the pending facts stored for {stream_id!r} cannot be read: the row was altered outside "
                             "threadlog (`threadlog verify` names it); nothing was written") from None


NONE = Facts()


_SHOWN = 5  # the pending ids a refusal of one that is not pending names


def _pending(items: tuple[str, ...], what: str) -> str:
    """What is pending, for a refusal of an id that is not, so a mistyped id (`interrupt
    resolve T q2` for q1) shows the right one: "pending: 'q1'", or "no interrupt is"."""
    if not items:
        return f"no {what} is"
    return f"pending: {', '.join(named(item) for item in items[:_SHOWN])}{', …' if len(items) > _SHOWN else ''}"


def _without(items: tuple[str, ...], gone: list[str], what: str, field: str) -> tuple[str, ...]:
    """`items` less `gone`, in order; looked up in sets: one message of N results answering N
    calls took N² comparisons (16,000 results: 5 s, twice over in an import)."""
    held = set(items)
    missing = [item for item in gone if item not in held]
    if missing:
        raise InvalidEvent(field, f"{what} {named(missing[0])} is not pending in this thread ({_pending(items, what)})")
    dropped = set(gone)
    return tuple(item for item in items if item not in dropped)


def _check_new_calls(pending: tuple[str, ...], uses: list[str], field: str) -> None:
    """Refuse a `tool_use` id that is already pending, or that the message repeats."""
    seen = set(pending)
    for tool_use_id in uses:
        if tool_use_id in seen:
            why = "is already waiting for its result" if tool_use_id in pending else "appears twice in this message"
            raise InvalidEvent(field, f"tool_use id {named(tool_use_id)} {why}; every pending tool call needs its own id")
        seen.add(tool_use_id)


def advance(facts: Facts, type_: str, data: dict[str, Any], field: str = "data") -> Facts:
    """The facts after appending one event; raises `InvalidEvent` if the event contradicts them."""
    if type_ == "message.appended":
        content = data["content"]
        uses, results = tool_use_ids(content), tool_result_ids(content)
        role = data["role"]
        if uses and role != "assistant":
            raise InvalidEvent(f"{field}.content", "tool_use blocks belong in an assistant message")
        if results and role != "user":
            raise InvalidEvent(f"{field}.content", "tool_result blocks belong in a user message")
        if not (uses or results):
            return facts
        tools = _without(facts.tools, results, "tool_use", f"{field}.content")
        if uses:
            _check_new_calls(tools, uses, f"{field}.content")
        return Facts(facts.runs, tools + tuple(uses), facts.interrupts)
    if type_ == "run.started":
        return Facts(facts.runs + (data["run_id"],), facts.tools, facts.interrupts)
    if type_ == "run.finished":
        runs = _without(facts.runs, [data["run_id"]], "run", f"{field}.run_id")
        return Facts(runs, facts.tools, facts.interrupts)
    if type_ == "interrupt.raised":
        if data["interrupt_id"] in facts.interrupts:
            raise InvalidEvent(f"{field}.interrupt_id", f"interrupt {named(data['interrupt_id'])} is already pending")
        return Facts(facts.runs, facts.tools, facts.interrupts + (data["interrupt_id"],))
    if type_ in ("interrupt.resolved", "interrupt.cancelled"):
        interrupts = _without(facts.interrupts, [data["interrupt_id"]], "interrupt", f"{field}.interrupt_id")
        return Facts(facts.runs, facts.tools, interrupts)
    return facts


def check_interrupted_call(facts: Facts, data: dict[str, Any], field: str = "data") -> None:
    """Refuse an `interrupt.raised` whose `tool_use_id` names no tool call waiting for its
    result: the human's answer becomes that call's result when the run resumes (`run_turn`),
    and with no such call it answers nothing. Appends only, not in `advance`: an older release
    recorded any id (see `_Chain.rows`)."""
    tool_use_id = data.get("tool_use_id")
    if tool_use_id is not None and tool_use_id not in facts.tools:
        raise InvalidEvent(f"{field}.tool_use_id", f"tool_use {named(tool_use_id)} is not waiting for its result in this "
                                                   f"thread ({_pending(facts.tools, 'tool_use')}); an interrupt's "
                                                   "tool_use_id names the waiting call its answer becomes the result of")


def after_fork(parent: Facts, forked: dict[str, Any]) -> Facts:
    """The facts after a `thread.forked` event, given the parent's at the fork point.

    A fork starts idle: no run (busy forks are refused) and every interrupt demoted. The
    parent's unanswered tool calls stay pending only in a full-context fork that did not
    drop them: a fan-out's, whose next event answers them, or one with `unanswered="keep"`.
    """
    carries = forked["options"].get("context", "full") == "full" and not forked.get("dropped_tool_use_ids")
    return Facts((), parent.tools, ()) if carries and parent.tools else NONE
