"""`display_rows`: one row per thing a chat UI shows, with ids stable enough to upsert.

A row's id is derived from the event that made it (`event_id`, plus `:i` for the i-th
content block; an event of one row whose id already ends in `:<number>` gets `:0`, or the
interrupt `E:0` took the row id of message `E`'s first block and hid it), so re-rendering
after more events keeps every old row's id; a row whose
status changes later (a tool call answered, an interrupt resolved or demoted by a fork)
keeps its id and changes in place. An answer the model refused (`stop_reason: refusal`)
ends with a `refusal` row, one it did not end whole (`max_tokens`, …) with a `cut_short`
row, `E:N` for a message of N blocks: no block's id, nor another event's (an event id ending
in `:<number>` has a suffix of its own added). A paused answer (`pause_turn`) that no message
follows as of `at` has that row too (`projections.stops`; a message of calls a fork dropped
follows nothing); the message that goes on from it takes the row away again, the one row that
goes rather than changes. Rows of a
`context="note"` fork start over at the fork card: the fork's screen shows the ⑃ card and
what happened after it, not the parent.

Gotcha: messages with `origin="primed"` (placed into a fork before any run, as `fan_out`
does) make no row, and do not answer the parent's tool-call rows either; imported and
live messages do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from eventstore import InvalidEvent, RecordedEvent, Store
from eventstore.cuts import is_note
from eventstore.errors import shown

from .dropped import calls_only
from .injected import injected_blocks, injected_by
from .stops import blank_text, cut_short, refusal
from .state import shown_as_run


@dataclass(slots=True)
class Row:
    """One UI row. `kind` is one of text, tool_call, tool_result, thinking, interrupt, fork,
    compaction, run (a run that ended `error` or `cancelled`, or `ok` with an error, a stream
    that failed after its whole answer came: its status, and its error as `text`; a model call
    cut off or failed before it gave anything shows only so), refusal
    (an answer the model refused: the category and explanation its `stop_details` give, as
    `text`, `category: explanation`; its text blocks that are blank make no row), cut_short
    (an answer the model did not end whole: what cut it short and its stop reason, as `text`,
    `cut off at the token limit (max_tokens)`, its blank text making no row either), or a
    content block type (image, document, server_tool_use, …) shown as a
    placeholder that says which one it is where the block does (`[document] <title>`, a server
    tool call's name, input and id).

    `injected_by` names the tool that wrote a user message's text into the conversation, or
    this block of a message the user typed (`projections.injected`): a UI shows it as the
    harness's, not as typed by the user.
    An interrupt's row holds the `answer` that resolved it, or the `reason` that cancelled it
    (`fork` when a fork demoted it)."""

    id: str
    kind: str
    stream_id: str
    offset: int
    time: str
    role: str | None = None
    text: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    interrupt_id: str | None = None
    status: str | None = None
    collapsed: bool | None = None
    injected_by: str | None = None
    answer: Any = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict, those that are None left out (as `--json` prints it)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


# The end of a message's row id (`:<block>`); an event of one row whose own id ends so is told apart.
_BLOCK_SUFFIX = re.compile(r":[0-9]+\Z")


def _base(event: RecordedEvent, suffix: str | None = None) -> dict[str, Any]:
    """The fields every row has; `suffix` names a message's block (`:i`)."""
    if suffix is None:
        suffix = ":0" if _BLOCK_SUFFIX.search(event.event_id) else ""
    return {"id": event.event_id + suffix, "stream_id": event.stream_id, "offset": event.offset, "time": event.time}


def _message_rows(event: RecordedEvent, rows: dict[str, Row], calls: dict[str, str]) -> str | None:
    """Add the rows of a message, read as the last one so far; the id of its `cut_short` row
    when that holds only while no message follows it (a paused answer's), else None."""
    role = event.data.get("role")
    injected = injected_by(event.meta) if event.meta else None
    blocks_injected = injected_blocks(event.meta) if event.meta else {}
    said, cut = refusal(event.data), cut_short(event.data, last=True)
    content = event.data.get("content") or []
    for i, block in enumerate(content):
        kind = block.get("type")
        base = _base(event, f":{i}")
        who = injected or blocks_injected.get(i)
        if who is not None:
            base["injected_by"] = who
        if (said is not None or cut is not None) and blank_text(block):
            continue  # such an answer often holds one empty text block, an empty bubble: its last row says why
        if kind == "text":
            rows[base["id"]] = Row(kind="text", role=role, text=block.get("text", ""), **base)
        elif kind == "tool_use":
            rows[base["id"]] = Row(kind="tool_call", role=role, name=block.get("name"), input=block.get("input"),
                                   tool_use_id=block.get("id"), status="pending", **base)
            calls[block.get("id", "")] = base["id"]
        elif kind == "tool_result":
            status = "error" if block.get("is_error") else "ok"
            rows[base["id"]] = Row(kind="tool_result", role=role, tool_use_id=block.get("tool_use_id"), status=status, **base)
            call = rows.get(calls.get(block.get("tool_use_id", ""), ""))
            if call is not None:
                call.status = status
        elif kind in ("thinking", "redacted_thinking"):
            rows[base["id"]] = Row(kind="thinking", role=role, text=block.get("thinking"), collapsed=True, **base)
        else:
            rows[base["id"]] = _other(block, str(kind), role, base)
    if said is not None:  # after the blocks, under the id a block N would have: no block's or event's row has it
        base = _base(event, f":{len(content)}")
        rows[base["id"]] = Row(kind="refusal", role=role, text=said or None, **base)
    elif cut is not None:  # the same place: a message has one stop reason
        base = _base(event, f":{len(content)}")
        rows[base["id"]] = Row(kind="cut_short", role=role, text=cut, **base)
        if cut_short(event.data) is None:  # cut short only as the last message: a paused answer
            return str(base["id"])
    return None


def _other(block: dict[str, Any], kind: str, role: Any, base: dict[str, Any]) -> Row:
    """A row of another block type: `[kind]`, with what says which one it is where the block
    has it (a server or MCP tool call's name, input and id, a result's call id, a document's
    or search result's title)."""
    name, title = block.get("name"), block.get("title")
    call_id = block.get("id") if kind.endswith("tool_use") else block.get("tool_use_id")
    shown = name if isinstance(name, str) else title if isinstance(title, str) else None
    return Row(kind=kind, role=role, text=f"[{kind}]" if shown is None else f"[{kind}] {shown}",
               name=name if isinstance(name, str) else None, input=block.get("input"),
               tool_use_id=call_id if isinstance(call_id, str) else None, **base)


class _Fold:
    """The rows built so far, and what can still change their status."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.calls: dict[str, str] = {}  # tool_use id -> row id
        self.interrupts: dict[str, str] = {}  # interrupt id -> row id
        # The messages since the last one that is more than tool calls (it first): the row of its
        # mark if it is a paused answer (`_message_rows`), and the calls of one holding nothing
        # else (`calls_only`; None for any other). A fork that drops all of a message's calls
        # leaves it out of the view, so the last message of the view, whose paused answer keeps
        # its row, is known once the read ends (`ended`).
        self.tail: list[tuple[str | None, frozenset[str] | None]] = []

    def add(self, event: RecordedEvent) -> None:
        """The rows `event` makes, and the statuses it changes."""
        data = event.data
        if event.type == "message.appended":
            self._followed(data, _message_rows(event, self.rows, self.calls) if event.origin != "primed" else None)
        elif event.type == "interrupt.raised" and "interrupt_id" in data:
            base = _base(event)
            self.rows[base["id"]] = Row(kind="interrupt", text=data.get("question"), interrupt_id=data["interrupt_id"],
                                        status="pending", **base)
            self.interrupts[data["interrupt_id"]] = base["id"]
        elif event.type == "run.finished" and shown_as_run(data):
            base = _base(event)
            self.rows[base["id"]] = Row(kind="run", text=data.get("error"), status=data["status"], **base)
        elif event.type == "compaction.recorded" and "through_offset" in data:
            text = f"Compacted: messages before offset {data['through_offset']} are summarised for the model"
            base = _base(event)
            self.rows[base["id"]] = Row(kind="compaction", text=text, **base)
        elif event.type == "thread.forked":
            if is_note(event.type, data):
                self.rows, self.calls, self.interrupts, self.tail = {}, {}, {}, []
            self._forked(data)
            text = f"⑃ Forked from {data['parent_id']} at {data['parent_offset']}"
            base = _base(event)
            self.rows[base["id"]] = Row(kind="fork", text=text, **base)
        else:
            self._resolved(event.type, data)

    def settle(self, event: RecordedEvent) -> None:
        """Only the statuses `event` changes: for the events past a page. A call past the page
        with the id of one on it names a new call (an id may be used again once answered):
        results after it are not the page's."""
        if event.type == "message.appended":
            self._followed(event.data, None)
            if event.origin != "primed":
                for block in event.data.get("content") or []:
                    if block.get("type") == "tool_use":
                        self.calls.pop(block.get("id", ""), None)
                    elif block.get("type") == "tool_result":
                        call = self.rows.get(self.calls.pop(block.get("tool_use_id", ""), ""))
                        if call is not None:
                            call.status = "error" if block.get("is_error") else "ok"
        elif event.type == "thread.forked":
            self._forked(event.data)
        else:
            self._resolved(event.type, event.data)

    def _followed(self, data: dict[str, Any], paused: str | None) -> None:
        """A message (its event's data; `paused`: the row of its mark if it is a paused answer)
        follows: the paused answers' rows before it go, the model went on from them (a primed
        message follows them too, as the model view reads it); but for one holding nothing but
        tool calls, which a fork may yet drop (`tail`)."""
        calls = calls_only(data.get("content") or [])
        if calls is not None:
            self.tail.append((paused, calls))
        else:
            self._took([row for row, _ in self.tail])
            self.tail = [(paused, None)]
        if all(row is None for row, _ in self.tail):
            self.tail = []  # no paused answer's row a later message or drop could concern

    def _took(self, rows: list[str | None]) -> None:
        """The rows of paused answers a message went on from go."""
        for row in rows:
            if row is not None:
                self.rows.pop(row, None)

    def ended(self) -> None:
        """The read ended: the paused answers before the last message of the view were gone on from."""
        self._took([row for row, _ in self.tail[:-1]])
        self.tail = self.tail[-1:]

    def unsettled(self) -> bool:
        """Whether a later event could still change a row's status, or take a paused answer's row away."""
        return any(row is not None for row, _ in self.tail) or bool(self.interrupts) or any(
            self.rows[row].status == "pending" for row in self.calls.values() if row in self.rows)

    def _resolved(self, type_: str, data: dict[str, Any]) -> None:
        if type_ in ("interrupt.resolved", "interrupt.cancelled"):
            row = self.rows.get(self.interrupts.pop(data.get("interrupt_id", ""), ""))
            if row is not None:
                if type_ == "interrupt.resolved":
                    row.status, row.answer = "resolved", data.get("answer")
                else:
                    row.status, row.reason = "cancelled", data.get("reason")

    def _forked(self, data: dict[str, Any]) -> None:
        for interrupt_id in list(self.interrupts):
            row = self.rows.get(self.interrupts.pop(interrupt_id))
            if row is not None:
                row.status, row.reason = "cancelled", "fork"  # the reason the event catalogue gives a demotion
        dropped = data.get("dropped_tool_use_ids") or []
        for tool_use_id in dropped:
            self.rows.pop(self.calls.pop(tool_use_id, ""), None)
        if dropped:  # a message of dropped calls alone leaves the view (`dropped_whole`): not its last, nor gone on from
            gone = [(row, calls) for row, calls in self.tail if calls is not None and calls.issubset(dropped)]
            self._took([row for row, _ in gone])
            self.tail = [entry for entry in self.tail if entry not in gone]


def display_rows(store: Store, thread: str, at: int | None = None, *, start: int = 0, stop: int | None = None) -> list[Row]:
    """The rows a UI shows for `thread` after its first `at` events (default: all).

    `start`/`stop` give one page: the rows of the events at offsets start..stop-1, with the
    statuses they have as of `at`. Events past the page are read only while a row of the
    page can still change (a tool call or an interrupt waiting, a paused answer's row), so the page of a long
    thread costs about its own events. Gotcha: a page that ends before a `context="note"`
    fork's card keeps its rows, though the whole view starts over at that card.
    """
    head = store.head(thread)
    if at is not None and (not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= head):
        raise InvalidEvent("at", f"{shown(at)} is outside thread {thread!r}: at must be 0..{head}")
    end = head if at is None else at
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= end:
        raise InvalidEvent("start", f"{shown(start)} is outside thread {thread!r} as of {end} events: start must be 0..{end}")
    if stop is not None and (not isinstance(stop, int) or isinstance(stop, bool) or stop < start):
        raise InvalidEvent("stop", f"{shown(stop)} must be an offset at or after start {start}")
    page_stop = end if stop is None else min(stop, end)
    fold = _Fold()
    for event in store.read(thread, start, page_stop):
        fold.add(event)
    if page_stop < end and fold.unsettled():
        for event in store.read(thread, page_stop, end):
            fold.settle(event)
            if not fold.unsettled():
                break
    fold.ended()
    return list(fold.rows.values())
