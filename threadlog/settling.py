"""Settling an interrupt by hand: the human's answer (`resolve_interrupt`) or its withdrawal
(`cancel_interrupt`), and the refusal of a turn until then, naming both (`unsettled`).

Kept apart from the live turns, which import the `anthropic` SDK (seconds to load): each of
these writes one event and needs none of it, nor does `threadlog interrupt resolve|cancel`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from eventstore import InvalidEvent, RecordedEvent, Store

# Where a refusal of the one event each function builds names its fields.
_BUILT = "events[0].data."


@contextlib.contextmanager
def _parameters_named(whole: str | None = None) -> Iterator[None]:
    """A refusal names the parameter the caller gave (`interrupt_id`, `answer`, `reason`), not
    its place in the event built from it (`events[0].data.interrupt_id`), a batch the caller
    never wrote; a refusal of the event's whole data (not JSON) names `whole`, the one parameter
    that can make it so, when there is one."""
    try:
        yield
    except InvalidEvent as error:
        field = error.field[len(_BUILT):] if error.field.startswith(_BUILT) else whole if error.field == _BUILT[:-1] else None
        if field:
            error.field = field
            error.args = (f"{error.field}: {error.why}",)
        raise


def resolve_interrupt(store: Store, thread: str, interrupt_id: str, answer: Any) -> RecordedEvent:
    """Record the human's answer to a pending interrupt; `run_turn(store, thread, None, ...)`
    then resumes, giving the answer to the tool call that asked. Refused (`InvalidEvent`,
    nothing written) for an interrupt that is not pending, and for one whose call already has
    its result (a log an earlier release wrote may hold such): no call would take the answer,
    and only `cancel_interrupt` settles it."""
    with _parameters_named("answer" if isinstance(interrupt_id, str) else None):  # an id of text is JSON
        return store.append(thread, [{"type": "interrupt.resolved", "data": {"interrupt_id": interrupt_id, "answer": answer}}])[0]


def cancel_interrupt(store: Store, thread: str, interrupt_id: str, reason: str = "cancelled") -> RecordedEvent:
    """Record that a pending interrupt no longer needs an answer, and why (the thread is no
    longer `interrupted`). A tool call that waited on it still waits for its result: record
    one, or continue the thread with `run_turn`, which calls its tool again. Refused
    (`InvalidEvent`, nothing written) for an interrupt that is not pending, resolved or
    cancelled already among them, and for a blank reason, which would show as none."""
    if not isinstance(reason, str):
        raise InvalidEvent("reason", "must be text saying why the interrupt no longer needs an answer, "
                                     f"not {type(reason).__name__}")
    if not reason.strip():
        raise InvalidEvent("reason", "is blank: say why the interrupt no longer needs an answer")
    with _parameters_named():
        return store.append(thread, [{"type": "interrupt.cancelled", "data": {"interrupt_id": interrupt_id, "reason": reason}}])[0]


def unsettled(thread: str, interrupt_id: str, answer: str = "resolve_interrupt", cancel: str = "cancel_interrupt") -> str:
    """Why no turn starts on `thread` while `interrupt_id` is pending, naming both ways to settle
    it: the functions, or (`threadlog ask` passes them) the commands. Naming only the answer
    left a question that needs none with no way out in sight."""
    return f"thread {thread!r} waits on interrupt {interrupt_id!r}; first answer it ({answer}) or cancel it ({cancel})"
