"""Forks and fan-out: a new stream that points at its parent and an offset, in O(1).

A fork writes one `streams` row and one `thread.forked` event, never a copy of the
parent's history. Its safety checks must not scan that history either: they read the
facts stored with the parent's event at offset k - 1 (or on the parent's head), which
every append keeps current (`facts.py`). `Store.fork` and `Store.fan_out` are the public
entry points; they document the options.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .content import THINKING_BLOCKS, tool_use_ids, unsent, without_dropped
from .errors import Deadlocked, ForkRefused, InvalidEvent, KeyClash, ThreadNotFound, named, shown
from .events import ForkOptions, check_depth
from .facts import Facts
from .head import Head
from .ids import CONTROL_CHARACTER, check_id, unprintable
from .launches import launched
from .prepare import PreparedEvent, check_flag, check_thread, check_thread_id, new_id, prepare
from .ranges import MAX_INDEX, is_index, segments
from .recorded import ThreadInfo, acyclic, from_row

if TYPE_CHECKING:
    from .backend import StreamRow
    from .store import Store

DEFAULT_PLACEHOLDER = "Fork started — processing in background"

# The fork sub-agent design's instructions to a child (its `<fork-boilerplate>`), for
# `fan_out(boilerplate=...)`: every sibling reads the same text before its own directive.
FORK_BOILERPLATE = """<fork-boilerplate>
You are a fork worker, not the main agent: you inherited the conversation above, and the text
after this block is your directive.
- Do not launch sub-agents or fork again: carry out the directive yourself.
- No small talk and no meta-commentary: no questions, no suggested next steps.
- Use your tools directly.
- If you change files, commit them, and give each commit's hash in your report.
- End with one report, in this form:
  Scope: <your directive, in one sentence>
  Result: <what you found or did>
  Key files: <the files that matter>
  Files changed: <each with its commit hash; leave out if none>
  Issues: <anything to flag; leave out if none>
</fork-boilerplate>"""


def fork(store: Store, thread: str, at: int | None, *, todos: Any, metadata: Any, context: str, retrieval: str,
         unanswered: str, transcript: str | None, fork_id: str | None, kind: str, busy: str, meta: dict[str, Any],
         config: dict[str, Any] | None = None, title: str | None = None, retry: bool = True, empty: str = "allow") -> str:
    """`Store.fork`: one fork of `thread` at `at` (default: its head), in one transaction."""
    check_thread("thread", thread)
    for name, value in (("busy", busy), ("empty", empty)):
        if value not in ("refuse", "allow"):
            raise InvalidEvent(name, f"must be 'refuse' or 'allow', not {shown(value)}")
    check_flag("retry", retry)
    options = _options(todos=todos, metadata=metadata, context=context, retrieval=retrieval, unanswered=unanswered,
                       transcript=transcript, kind=kind, config=config)
    if title is not None and not isinstance(title, str):
        raise InvalidEvent("title", f"must be text, not {type(title).__name__}")
    own = {key: value for key, value in meta.items() if key != "event_id"}  # the id names the fork's event
    titled = [] if title is None else [prepare({"type": "title.set", "data": {"title": title}, "meta": own}, "title")]
    chosen = None if fork_id is None else check_thread_id("fork_id", fork_id)
    for last in (False, True):
        try:
            with store.backend.transaction():
                if "event_id" in meta:
                    retried = _made_before(store, thread, at, options, chosen, check_id("meta.event_id", meta["event_id"]), title)
                    if retried is not None:
                        if not retry:
                            raise InvalidEvent("meta.event_id", f"fork {retried!r} was already made with event id "
                                               f"{meta['event_id']!r}, and this fork takes no retry (retry=False)")
                        return retried
                return _fork(store, thread, at, options, chosen or new_id(), meta, titled, allow_busy=busy == "allow",
                             allow_empty=empty == "allow")
        except KeyClash:
            # Another process stored this fork's event id or fork id meanwhile (PostgreSQL, where
            # writers meet only at the parent's lock): once more, it is read and answered by name.
            if last or ("event_id" not in meta and chosen is None):
                raise
    raise AssertionError("unreachable")


def _made_before(store: Store, thread: str, at: Any, options: ForkOptions, fork_id: str | None, event_id: str,
                 title: str | None) -> str | None:
    """The fork an earlier call with this `event_id` made, when this call is its retry (the same
    parent, and the same offset, options, fork id and title where this call names them): a
    retried fork returns it, as a retried append returns its records. None when the id is unused."""
    stored = store.backend.events_by_id([event_id])
    if not stored:
        return None
    row = from_row(stored[0])
    data = row.data
    same = (row.type == "thread.forked" and row.offset == data.get("parent_offset") and data.get("parent_id") == thread
            and at in (None, row.offset) and fork_id in (None, row.stream_id)
            and data.get("options") == options.model_dump(exclude_none=True))
    if same and title is not None:
        # The title the fork was made with: the event after its thread.forked, written with it (at
        # the same time), unless redacted since (then there is nothing left to compare).
        stored_title = store.backend.event_at(row.stream_id, row.offset + 1)
        titled = None if stored_title is None else from_row(stored_title)
        same = titled is not None and titled.type == "title.set" and titled.recorded_at == row.recorded_at and (
            titled.redacted or titled.data.get("title") == title)
    if not same:
        raise InvalidEvent("meta.event_id", f"event id {event_id!r} is already stored at position {row.position} "
                           f"(thread {row.stream_id!r}, {row.type}) and this is not the fork it made; a retry must resend "
                           "the same fork, and a new fork needs a new id")
    return row.stream_id


def fan_out(store: Store, thread: str, directives: Sequence[str], placeholder: str, *, todos: Any, metadata: Any,
            meta: dict[str, Any], boilerplate: str | None = None) -> list[str]:
    """`Store.fan_out`: one sub-agent fork per directive at the parent's head, in one transaction."""
    check_thread("thread", thread)
    if isinstance(directives, str) or not isinstance(directives, Sequence):
        raise InvalidEvent("directives", "must be a list of strings")
    if not directives:
        raise ForkRefused("no_directives", "fan_out needs at least one directive")
    if not all(isinstance(d, str) and d.strip() for d in directives):
        raise InvalidEvent("directives", "every directive must be non-empty text")
    if not isinstance(placeholder, str) or not placeholder:
        raise InvalidEvent("placeholder", "must be non-empty text")
    if boilerplate is not None and not (isinstance(boilerplate, str) and boilerplate.strip()):
        raise InvalidEvent("boilerplate", f"must be non-empty text (FORK_BOILERPLATE is the design's), or None for the "
                                          f"directive alone, not {shown(boilerplate)}")
    if "event_id" in meta:
        raise InvalidEvent("meta.event_id", "fan_out writes two events for each fork, and one event id can name only one "
                           "event; leave event_id out (correlation_id can tie them to a request)")
    ids = [new_id() for _ in directives]
    for attempt in range(_FAN_OUT_ATTEMPTS):
        try:
            _fan_out_once(store, thread, directives, ids, placeholder, boilerplate, todos, metadata, meta)
            return ids
        except Deadlocked:  # another fan_out took positions twice at once (PostgreSQL): nothing written
            if attempt == _FAN_OUT_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.01 * 2 ** attempt))
    return ids


# How many times a fan_out the server cancelled in a deadlock with another is run (PostgreSQL:
# each takes positions once a fork, and two such transactions at once wait for each other).
_FAN_OUT_ATTEMPTS = 8


def _fan_out_once(store: Store, thread: str, directives: Sequence[str], ids: list[str], placeholder: str,
                  boilerplate: str | None, todos: Any, metadata: Any, meta: dict[str, Any]) -> None:
    with store.backend.transaction(reserves_twice=len(directives) > 1):
        # Held before the parent is read, so that what is read of it (its head, the sub-agents
        # launched from it) stays so until this commits: another fan_out of it at the same time
        # waits here, then finds this one's sub-agents.
        store.backend.lock_stream(thread)
        rows = acyclic(store.backend.ancestry(thread))
        if not rows:
            raise ThreadNotFound(thread)
        # Of the streams whose events its history reads: a fork of a sub-agent taken at its fork
        # point reads the parent's history alone, and launches as the parent would.
        read = {stream_id for stream_id, _, _ in segments([ThreadInfo.from_row(row) for row in rows])}
        nested = next((row.id for row in rows if row.kind == "subagent" and row.id in read), None)
        if nested:
            where = "a sub-agent fork" if nested == thread else f"inside sub-agent fork {nested!r}"
            raise ForkRefused("recursion", f"{thread!r} is {where}; sub-agents cannot fan out again")
        pending = Facts.stored(rows[0].facts, rows[0].id)
        waiting = pending.tools  # the tool calls the parent's head waits on
        if not waiting:
            raise ForkRefused("no_pending_tool_use", f"{thread!r} has no tool_use waiting for a result at its head; "
                              "fan_out launches sub-agents from an assistant tool call")
        before = launched(store, thread, rows[0].head, waiting, pending.runs)
        if before:
            raise _already_launched(thread, waiting, before)
        for fork_id, directive in zip(ids, directives):
            options = _options(todos=todos, metadata=metadata, kind="subagent", directive=directive)
            content: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": tid, "content": placeholder} for tid in waiting
            ]
            if boilerplate is not None:
                content.append({"type": "text", "text": boilerplate})
            content.append({"type": "text", "text": directive})
            primed = prepare({"type": "message.appended", "data": {"role": "user", "content": content},
                              "meta": {**meta, "origin": "primed"}}, "fan_out")
            _fork(store, thread, None, options, fork_id, meta, [primed], fan_out=True)


# The sub-agents an `already_launched` refusal names; its `subagent_ids` holds them all.
_NAMED = 10


def _already_launched(thread: str, waiting: Sequence[str], before: list[tuple[ThreadInfo, list[str]]]) -> ForkRefused:
    """The refusal of a fan_out whose calls already have sub-agents (`before`): it names them, so
    a caller whose first fan_out committed but never returned their ids finds them."""
    answered = {call for _, calls in before for call in calls}
    calls = [call for call in waiting if call in answered]
    ids = [info.id for info, _ in before]
    names = ", ".join(map(named, ids[:_NAMED])) + (f", … ({len(ids)} in all)" if len(ids) > _NAMED else "")
    points = ", ".join(map(str, sorted({info.parent_offset for info, _ in before if info.parent_offset is not None})))
    return ForkRefused("already_launched", f"{thread!r} already launched sub-agents for its tool calls "
                       f"{', '.join(map(named, calls))}: {names} (forked at {points}); launching more would answer those "
                       "calls again. Run them and report their answers (report(store, kid); one that failed: "
                       "report(store, kid, text, status='failed')), or record the calls' results; nothing was written",
                       calls, ids)


def check_fork_point(thread: str, at: Any, head: int, first_message: int | None, doing: str = "fork") -> None:
    """Refuse an `at` no fork of `thread` (`head` events, its first message at `first_message`)
    can start at: one that is no number of events, or names any other range than the one a
    fork takes, first_message + 1..head (a fork holds a message). Past either end the range is
    named the same way; `doing` is what the caller was asked (a rerun forks too)."""
    if not isinstance(at, int) or isinstance(at, bool):
        raise ForkRefused("offset_out_of_range", f"cannot {doing} {thread!r} at {shown(at)}: at must be a number of events "
                          f"(an integer), not {type(at).__name__}")
    if first_message is None:
        raise ForkRefused("empty", f"cannot {doing} {thread!r}: it holds no message yet, so there is nothing to fork")
    points = f"{first_message + 1}..{head}"
    if not is_index(at, 1, head):
        raise ForkRefused("offset_out_of_range", f"cannot {doing} {thread!r} at {shown(at)}: it holds offsets 0..{head - 1}, "
                          f"so at must be {points}")
    if first_message >= at:
        raise ForkRefused("empty", f"cannot {doing} {thread!r} at {at}: there is no message before that offset (its first "
                          f"message is at offset {first_message}, so at must be {points})")


def _called_where(store: Store, thread: str, at: int, ids: Sequence[str]) -> str:
    """The pending tool calls, each with the offset of the message that made it: a call an
    earlier turn abandoned (an import's aborted call) may lie far before the fork point, and
    an id alone does not say so. Read only on the way to a refusal."""
    offsets: dict[str, int] = {}
    wanted = set(ids)
    for event in store.read(thread, 0, at):
        content = event.data.get("content") if event.type == "message.appended" else None
        if isinstance(content, list):
            offsets.update((id_, event.offset) for id_ in tool_use_ids(content) if id_ in wanted)
    return ", ".join(f"{id_} (offset {offsets[id_]})" if id_ in offsets else id_ for id_ in ids)


def _fork_point(store: Store, thread: str, at: Any) -> tuple[list[StreamRow], list[ThreadInfo], int]:
    """The rows and threads of `thread`'s ancestry a fork at `at` reads, and `at` (its head when
    None), refused (`check_fork_point`) when no fork can start there."""
    # The streams holding the event before the fork point (only the thread's own row when
    # `at` is none or not an offset: its head's hash and facts are on the row).
    rows = acyclic(store.backend.ancestry(thread, at - 1 if is_index(at, 1) else MAX_INDEX))
    if not rows:
        raise ThreadNotFound(thread)
    ancestry = [ThreadInfo.from_row(row) for row in rows]
    if at is None:
        at = ancestry[0].head
    check_fork_point(thread, at, ancestry[0].head, rows[0].first_message_offset)
    return rows, ancestry, at


def _left_empty(store: Store, thread: str, first_message: int | None, at: int, ids: set[str]) -> bool | None:
    """Whether a fork of `thread` at `at` dropping the tool calls with these ids has no message
    to send: None when a message below `at` keeps a block a request sends; else whether a
    message held more than those calls (thinking, blank text). A message counts as none when,
    the dropped calls gone, it holds only blocks a model request leaves out of it
    (`projections.request`): those it leaves out anywhere (`unsent`), and thinking in an answer
    holding nothing else. Read from the first message to the first other one, which is reached
    after the messages that made those calls at most."""
    more = False
    for _, type_, data in store.read_data(thread, first_message or 0, at):
        if type_ != "message.appended":
            continue
        content = data.get("content")
        if not (isinstance(content, list) and content and all(isinstance(block, dict) for block in content)):
            return None
        kept = without_dropped(content, ids)
        sent = [block for block in kept if not unsent(block)]
        if sent and not (data.get("role") == "assistant" and all(block.get("type") in THINKING_BLOCKS for block in sent)):
            return None
        more = more or bool(kept)
    return more


def _fork(store: Store, thread: str, at: Any, options: ForkOptions, fork_id: str, meta: dict[str, Any],
          then: list[PreparedEvent], fan_out: bool = False, allow_busy: bool = False, allow_empty: bool = True) -> str:
    """Check and write one fork (inside the caller's transaction); `then` follows its event.
    `allow_empty=False` refuses (`empty`) a fork whose dropped calls are all its messages send
    (`_left_empty`)."""
    rows, ancestry, at = _fork_point(store, thread, at)
    parent, first_message = ancestry[0], rows[0].first_message_offset
    prev_hash, facts = chained_to(store, rows, ancestry, at)
    if facts.runs and not (fan_out or allow_busy):
        raise ForkRefused("busy", f"cannot fork {thread!r} at {at}: run {named(facts.runs[-1])} is in progress there; "
                          "fork after it finishes or at an earlier offset")
    dropped: list[str] = []
    if facts.tools and options.context == "full" and not fan_out and options.unanswered != "keep":
        if options.unanswered == "refuse":
            raise ForkRefused(
                "unanswered_tool_calls",
                f"cannot fork {thread!r} at {at}: tool calls without results: {_called_where(store, thread, at, facts.tools)}; "
                "fork at an earlier offset or pass unanswered='drop' (or 'keep')",
                list(facts.tools),
            )
        dropped = list(facts.tools)
        more = None if allow_empty else _left_empty(store, thread, first_message, at, set(dropped))
        if more is not None:
            beside = (", and blocks a request leaves out of a message that holds nothing else (thinking, blank text)"
                      if more else "")
            raise ForkRefused("empty", f"cannot fork {thread!r} at {at}: its only messages are tool calls waiting for results "
                              f"({_called_where(store, thread, at, dropped)}), which unanswered='drop' leaves out{beside}, "
                              "and a fork holds a message: answer them first and fork after, keep them waiting in the fork "
                              "(unanswered='keep'), or start a new thread", dropped)
    if store.backend.stream(fork_id) is not None:
        raise InvalidEvent("fork_id", f"thread {fork_id!r} already exists")
    data: dict[str, Any] = {"parent_id": thread, "parent_offset": at, "options": options.model_dump(exclude_none=True)}
    if dropped:
        data["dropped_tool_use_ids"] = dropped
    if facts.interrupts:
        data["demoted_interrupt_ids"] = list(facts.interrupts)
    forked = prepare({"type": "thread.forked", "data": data, "meta": meta}, "fork")
    store._write(fork_id, Head.fork(parent, at, prev_hash, facts, first_message), [forked, *then])
    return fork_id


def chained_to(store: Store, rows: list[StreamRow], ancestry: list[ThreadInfo], at: int) -> tuple[str, Facts]:
    """The hash and pending facts of the event a fork at `at` chains to: the parent's head's,
    kept on its row (`rows[0]`), or those stored with its event at `at - 1`."""
    if at == rows[0].head:
        return rows[0].head_hash, Facts.stored(rows[0].facts, rows[0].id)
    before = store._row_at(ancestry, at - 1)
    return before.hash, Facts.stored(before.facts, before.stream_id)


def _options(**fields: Any) -> ForkOptions:
    check_depth(fields, "")  # names the option: `metadata`, `todos`
    retrieval = fields.get("retrieval")
    if isinstance(retrieval, str):
        fields["retrieval"] = retrieval.replace("-", "_")
    keep = fields.get("metadata")
    if isinstance(keep, dict) and set(keep) == {"keep"}:  # read as keep, never as a map holding one "keep" key
        names = keep["keep"]
        if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
            raise InvalidEvent("metadata.keep", f"must be a list of the parent's metadata keys to keep, not {shown(names)}; "
                                                "nothing was written")
        fields["metadata"] = {"keep": list(names)}  # as stored: a retry passing a tuple again is the same fork
    if fields.get("context", "full") != "note":  # only a note fork's first request reads them
        for name, unused in (("retrieval", "off"), ("transcript", None)):
            if fields.get(name, unused) != unused:
                raise InvalidEvent(name, f"applies to context='note' forks only (this fork has context={fields.get('context')!r}); "
                                         "nothing was written")
    elif isinstance(fields.get("transcript"), str) and (bad := CONTROL_CHARACTER.search(fields["transcript"])) is not None:
        # The note shows the path on a line of its own: a newline would add lines of the caller's to it.
        raise InvalidEvent("transcript", f"holds {unprintable(bad)}; a path to "
                                         "show the model must be printable text; nothing was written")
    elif fields.get("unanswered") == "keep":  # a note fork has no tool call to keep waiting
        raise InvalidEvent("unanswered", "'keep' applies to context='full' forks only (a note fork starts from one note, "
                                         "with no tool call waiting); nothing was written")
    try:
        return ForkOptions.model_validate(fields)
    except InvalidEvent as error:  # raised inside the config (its thinking): named from the option
        raise InvalidEvent(f"config.{error.field}", error.why) from None
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "options"
        if field == "config" and len(first["loc"]) > 1:  # one key of it
            field = f"config.{first['loc'][1]}"
            raise InvalidEvent(field, f"{first['msg']} (got {first['input']!r})") from None
        if field in _FORMS:
            raise _form_error(error, field, fields[field]) from None
        raise InvalidEvent(field, f"{first['msg']} (got {fields.get(field)!r})") from None


# The options that take one of several forms. pydantic reports one error per form it tried,
# the literal words first, so its first error says a list of todos "should be 'blank' or
# 'inherit'" when one todo lacks its content.
_FORMS = {
    "todos": "'blank', 'inherit' or a list of todos ({content, [status], [id]})",
    "metadata": "'blank', 'inherit', {'keep': [keys]} or a map",
}


def _form_error(error: ValidationError, field: str, value: Any) -> InvalidEvent:
    """The error of an option with several forms: the one inside the form the value took (a
    todo of a list: the deepest error, at its path without the form's name), else the forms."""
    deepest = max(error.errors(), key=lambda each: len(each["loc"]))
    if len(deepest["loc"]) > 2:  # (field, form, where in it...)
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in deepest["loc"][2:])
        return InvalidEvent(f"{field}{path}", f"{deepest['msg']}; nothing was written")
    return InvalidEvent(field, f"must be {_FORMS[field]}, not {shown(value)}; nothing was written")
