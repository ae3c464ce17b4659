"""The parent's side of its sub-agents: their answers (`report`) and their questions
(`questions`).

`report` delivers a sub-agent's answer to the thread that launched it.

In the fork sub-agent design every sub-agent runs in the background: the parent's tool
calls are answered at once with the placeholder its children saw ("Fork started —
processing in background"), and each child's final report reaches the parent later as a
`<task-notification>` user message. `Store.fan_out` makes the children; `report` is the
other half. It appends one user message to the parent:

- `tool_result` blocks for those of the child's launch calls (the ones its placeholder
  results answered) the parent still waits on, with that same placeholder, so the first
  report also closes the parent's tool turn and the request stays valid;
- one text block, the notification: the child's id, a status, its directive (its first
  `SUMMARY_CHARS` characters) and its answer (XML-escaped, so an answer cannot close the tags
  around it).

A launching tool may have raised an `Interrupt` instead of returning the placeholder, so its
call waits on that interrupt ("the sub-agents answer later"). The report answers the call, so
the interrupt has nothing left to answer: the same write cancels it first (`interrupt.cancelled`,
its reason naming the call and the sub-agent), and the parent is idle to go on. Left pending,
the parent's next turn was refused until it was resolved, and the answer given was dropped.

Its meta names where it came from: `causation_id` is the id of the child's event it reports
(its final assistant message, or its last event when the caller gives the text), `actor`
the child. Its `event_id` is derived from the child and that event, so reporting the same
answer again returns the message already written instead of a second one.

`questions` is the design's permission bubbling: a sub-agent's prompts to the human show in
its parent's terminal. It lists the interrupts pending on a thread and on every sub-agent
fork below it, each with the thread it waits in, so whoever watches the parent can answer a
child (`threadlog interrupt resolve KID ID`) without knowing it was asked.
"""

from __future__ import annotations

import html
import re
from hashlib import sha256
from typing import Any, NamedTuple

from eventstore import DEFAULT_PLACEHOLDER, ConcurrencyError, InvalidEvent, RecordedEvent, ReportRefused, Store
from eventstore.errors import named, shown
from eventstore.content import tool_result_ids
from eventstore.launches import launch, took_turn
from projections import thread_state

STATUSES = ("completed", "failed", "killed")


def escape(text: str) -> str:
    """`&`, `<` and `>` escaped, as XML text needs (`xml.sax.saxutils.escape`'s, without its
    import of `urllib.request`, `http.client`, `email` and `ssl` at every command's start)."""
    return html.escape(text, quote=False)


def report(store: Store, subagent: str, text: str | None = None, *, status: str = "completed") -> RecordedEvent:
    """Deliver `subagent`'s answer to its parent as one `<task-notification>` user message;
    returns the message's record.

    Without `text`, the answer is the text of the sub-agent's final assistant message, and
    the sub-agent must have finished (idle, no tool call waiting, an answer of its own after
    its directive). With `text` (a failure, a summary), that is delivered whatever its
    state. `status` is `completed`, `failed` or `killed`. An interrupt pending on a launch call
    the message answers is cancelled before it, in the same write (`settled` finds them). Refused
    (`ReportRefused`, nothing written) when `subagent` is not a sub-agent fork, has no answer
    yet, or when the parent waits on tool calls the sub-agent was not launched from (report
    after their results).
    """
    explicit = text is not None
    if status not in STATUSES:
        raise InvalidEvent("status", f"must be one of {', '.join(STATUSES)}, not {shown(status)}")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise InvalidEvent("text", "must be non-empty text (leave it out to report the sub-agent's final answer)")
    info = store.thread(subagent)
    if info.kind != "subagent" or info.parent_id is None or info.parent_offset is None:
        raise ReportRefused("not_a_subagent", f"{subagent!r} is a {info.kind}, not a sub-agent fork (made by fan_out); "
                            "only a sub-agent reports to the thread that launched it")
    parent, launched_at = info.parent_id, info.parent_offset
    # fan_out wrote its fork event (naming the directive), then the placeholder results and the
    # directive. A sub-agent imported from another tool's session may hold its fork event alone.
    forked, primed, launch_ids = launch(store, info)
    directive = str(forked.data.get("options", {}).get("directive", ""))  # a redacted event keeps none
    content = primed.data.get("content", []) if primed is not None else []
    # A redacted placeholder is not known any more: the default stands in for it.
    placeholder = next((block["content"] for block in content if block.get("type") == "tool_result"
                        and primed is not None and not primed.redacted), DEFAULT_PLACEHOLDER)
    own_from = launched_at + (1 if primed is None else 2)  # the sub-agent's own events start here
    if text is None:
        cause, text = _answer(store, subagent, own_from)
    else:  # its last event, past the records of redactions, which make no new answer to report
        cause = store.event_at(subagent, info.head - 1)
        passed = []
        while cause.type == "event.redacted" and cause.offset > launched_at:
            passed.append(cause)
            cause = store.event_at(subagent, cause.offset - 1)
        # Reported by a release that keyed a report by a redaction's record: that report stands.
        cause = next((record for record in passed if store.event(_report_id(subagent, record)) is not None), cause)
    event_id = _report_id(subagent, cause)
    if text is None:  # the answer was redacted: only a report made before that can be returned
        delivered = store.event(event_id)
        if delivered is None:
            raise ReportRefused("no_answer", f"{subagent!r}'s answer (offset {cause.offset}) was redacted; give the text "
                                "to report")
        return delivered
    notification = {"type": "text", "text": (
        f"<task-notification>\n<task-id>{escape(subagent)}</task-id>\n<status>{status}</status>\n"
        f"<summary>{escape(_summary(directive))}</summary>\n<result>{escape(text)}</result>\n</task-notification>")}
    meta = {"event_id": event_id, "causation_id": cause.event_id, "actor": f"subagent:{subagent}"}
    compare = explicit or status != "completed"  # else the answer is what the first report read from the same event
    # Siblings reporting at once race for the parent's head: each retry follows a write that
    # landed (one of theirs), so this ends; the bound only caps a parent appended to nonstop.
    for _ in range(_ATTEMPTS - 1):
        try:
            return _deliver(store, parent, launched_at, subagent, notification, launch_ids, placeholder, meta, compare)
        except ConcurrencyError:
            continue
    return _deliver(store, parent, launched_at, subagent, notification, launch_ids, placeholder, meta, compare)


_ATTEMPTS = 100

# The most characters of the directive a notification's summary repeats. The directive is the
# parent's own (in its launch call); repeated whole, escaped (`<` is four characters), a long
# one made a report larger than an event holds, and the sub-agent could never report.
SUMMARY_CHARS = 2000


def _summary(directive: str) -> str:
    return directive if len(directive) <= SUMMARY_CHARS else directive[:SUMMARY_CHARS] + "…"


def _report_id(subagent: str, cause: RecordedEvent) -> str:
    """The event id of `subagent`'s report of the event `cause`: reporting it again is a retry."""
    return "report-" + sha256(f"{subagent}\n{cause.event_id}".encode()).hexdigest()[:32]


def _deliver(store: Store, parent: str, launched_at: int, subagent: str, notification: dict[str, str], launch_ids: list[str],
             placeholder: Any, meta: dict[str, str], compare: bool) -> RecordedEvent:
    """One attempt: the message built against the parent's head as read now, appended only
    if that is still its head (else `ConcurrencyError`)."""
    delivered = store.event(meta["event_id"])
    if delivered is not None:  # a retry: returned as it was, whatever the parent did since
        return _reported(delivered, parent, subagent, notification, meta, compare)
    head = store.head(parent)  # read first: the append expects it, so nothing moves the parent in between
    waiting = store.pending_tool_uses(parent)
    if waiting and any(took_turn(event) for event in store.read(parent, launched_at, head)):
        launch_ids = []  # the parent took another turn since: what it waits on now is that turn's, even a reused id
    other = [tool_use_id for tool_use_id in waiting if tool_use_id not in launch_ids]
    if other:
        raise ReportRefused("parent_waiting", f"{parent!r} waits on tool calls {subagent!r} was not launched from "
                            f"({', '.join(other)}); record their results, then report")
    answer: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": tool_use_id, "content": placeholder}
                                     for tool_use_id in waiting]
    answer.append(notification)
    asked = store.interrupted_calls(parent) if waiting else {}
    cancelled = [_cancelled(asked[tool_use_id], tool_use_id, subagent, meta) for tool_use_id in waiting if tool_use_id in asked]
    event = {"type": "message.appended", "data": {"role": "user", "content": answer}, "meta": meta}
    try:
        return store.append(parent, [*cancelled, event], expect=head)[-1]
    except InvalidEvent:
        # Another process delivered the same report meanwhile, built against another head (its
        # placeholder results differ): a retry, returned as it was. (It exited 1 with "already
        # stored with different content", where reporting again writes nothing.)
        delivered = store.event(meta["event_id"])
        if delivered is None:
            raise
        return _reported(delivered, parent, subagent, notification, meta, compare)


def _cancelled(interrupt_id: str, tool_use_id: str, subagent: str, meta: dict[str, str]) -> dict[str, Any]:
    """The `interrupt.cancelled` of an interrupt waiting on `tool_use_id`, which the report
    (`meta`) answers: from the same sub-agent event, and with an id derived from the report's,
    so a retry finds it with the message."""
    event_id = "settle-" + sha256(f"{meta['event_id']}\n{interrupt_id}".encode()).hexdigest()[:32]
    reason = f"call {named(tool_use_id)} answered by the report of sub-agent {named(subagent)}"
    return {"type": "interrupt.cancelled", "data": {"interrupt_id": interrupt_id, "reason": reason},
            "meta": {"event_id": event_id, "causation_id": meta["causation_id"], "actor": meta["actor"]}}


def settled(store: Store, delivered: RecordedEvent) -> list[RecordedEvent]:
    """The interrupts the report `delivered` cancelled, their `interrupt.cancelled` records: at
    most one per tool result it holds, written just before it."""
    answered = len(tool_result_ids(delivered.data.get("content") or [])) if not delivered.redacted else 0
    if not answered:
        return []
    before = store.read(delivered.stream_id, max(delivered.offset - answered, 0), delivered.offset)
    return [event for event in before if event.type == "interrupt.cancelled" and event.meta.get("actor") == delivered.meta.get("actor")
            and event.meta.get("causation_id") == delivered.meta.get("causation_id")]


def _reported(delivered: RecordedEvent, parent: str, subagent: str, notification: dict[str, str], meta: dict[str, str],
              compare: bool) -> RecordedEvent:
    """A report delivered before, returned; refused when it was given other text or status."""
    if compare and not delivered.redacted and _said(delivered.data["content"][-1]) != _said(notification):
        raise InvalidEvent("text", f"event {meta['causation_id']!r} of {subagent!r} was already reported, with other "
                           f"text or status, at position {delivered.position} of {parent!r}")
    return delivered


# A notification's summary, escaped (it holds no `<`): a report of the release before repeated
# the directive whole, and retrying it now must find the same report, not other text.
_SUMMARY = re.compile(r"<summary>[^<]*</summary>")


def _said(block: Any) -> Any:
    """A notification block as a retry compares it: its status and result, not its summary."""
    if isinstance(block, dict) and isinstance(block.get("text"), str):
        return {**block, "text": _SUMMARY.sub("", block["text"], count=1)}
    return block


def _answer(store: Store, subagent: str, own_from: int) -> tuple[RecordedEvent, str | None]:
    """The sub-agent's final assistant message and its text (None when it was redacted), or
    the refusal saying why there is none yet."""
    state = thread_state(store, subagent)
    if state.status != "idle":
        why = f"run {named(state.open_runs[-1])} is in progress" if state.open_runs else "an interrupt is pending"
        raise ReportRefused("no_answer", f"{subagent!r} has not finished: {why}; report when it is idle, or give the text")
    pending = store.pending_tool_uses(subagent)
    if pending:
        raise ReportRefused("no_answer", f"{subagent!r} has not finished: tool calls {', '.join(map(named, pending))} await results")
    last = state.messages[-1] if state.messages else None
    if last is None or last.offset < own_from or last.role != "assistant":
        raise ReportRefused("no_answer", f"{subagent!r} has no answer of its own yet: its last message is not an "
                            "assistant message after its directive")
    answer = store.event_at(subagent, last.offset)
    if answer.redacted:
        return answer, None  # known by its id still: an earlier report of it is returned, else refused
    text = "\n\n".join(block["text"] for block in last.content if block.get("type") == "text" and block["text"].strip())
    if not text:
        raise ReportRefused("no_answer", f"{subagent!r}'s last assistant message holds no text to report")
    return answer, text


class Question(NamedTuple):
    """An interrupt waiting for a human: where (`thread`, `offset` of its `interrupt.raised`)
    and what (`interrupt_id`, `question`, the `tool_use_id` that waits on it)."""

    thread: str
    interrupt_id: str
    question: str | None
    tool_use_id: str | None
    offset: int

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return self._asdict()


def questions(store: Store, thread: str) -> list[Question]:
    """The interrupts pending on `thread` and on the sub-agent forks it launched, thread by thread
    in creation order (each thread's oldest first). Only a thread whose row says one is pending
    is folded for its questions."""
    below = store.subtree(thread)
    # Its own sub-agents only: a plain fork is a conversation of its own, and so are the
    # sub-agents it launched (a sub-agent launches none: `fan_out`'s recursion guard).
    asking = [info.id for info in below if (info.id == thread or (info.kind == "subagent" and info.parent_id == thread))
              and store.pending_interrupts(info.id)]
    out = []
    for asker in asking:
        for raised in thread_state(store, asker).pending_interrupts:
            out.append(Question(asker, raised["interrupt_id"], raised.get("question"), raised.get("tool_use_id"),
                                raised["offset"]))
    return out
