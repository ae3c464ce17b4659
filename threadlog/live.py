"""Live turns with the `anthropic` SDK: `run_turn` and `rerun` (an interrupt a tool raised is
settled with `resolve_interrupt` or `cancel_interrupt`, threadlog/settling.py).

A turn is recorded as it happens, so a failure loses nothing: `run.started` and the user
message are committed before the API is called; each assistant message is committed as
soon as it arrives (every block, thinking with its signature, model, stop_reason, usage,
the code execution container, every other top-level field the API returned, and in
`meta.request` the request id and the SHA-256 of the exact body sent); the tools' results
follow in one user message; `run.finished` closes the run. An API error, a timeout,
a dropped connection or a tool that raises closes the run with status `error` and the error
text; the thread is idle again and `run_turn` can be called again (one that fails once the whole
answer came, up to its `message_stop`, keeps the answer: the run ends `ok`, that failure its
`error`). Tool calls in an answer
that did not stop for them (cut off at `max_tokens`, their input possibly incomplete) are not
run: each gets an `is_error` result, and the run ends with status `error`.

Each request is `anthropic_request(store, thread)` at the thread's head, and the assistant
message is appended with `expect=` that head, so its offset is exactly the `at` that
rebuilds the request: `check_request` proves, from the log alone, what the model saw. (If
another writer appended meanwhile, the answer is kept after their events and its check says
the history differs.) A note fork's retrieval passages are a search's ranking, not the log's:
the answer records which it searched for (`meta.request.passages`), and every later request
and rebuild reads them from there.

Writes per turn: one append before the call ([run.started, user message]), one for the
answer (at `expect=` that head) and one closing the run (run.finished) for a turn without
tools; a tool round adds one append for its assistant message and one for the results.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import re
import secrets
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2

from eventstore import ConcurrencyError, ForkRefused, InvalidEvent, RecordedEvent, Store, StoreError
from eventstore.errors import named, shown
from eventstore.prepare import prepare
from projections import Message, ThreadState, anthropic_request, body_digest, request_body, thread_state
from projections.stops import PAUSED, blank_text, cut_reason
from projections.request import check_max_tokens, sent_tool_choice

from . import retry_wait
from .keepalive import Stall, StalledStream, read_timeout
from .render import command_line, shell_word
from .returned import returned_fields
from .settling import resolve_interrupt as resolve_interrupt  # here in earlier releases: still importable from here
from .settling import unsettled
from .signals import handled
from .note_tools import extra_tools

Json = dict[str, Any]
Tool = Callable[..., Any]


class BadAnswer(Exception):
    """The API answered with something that is not a message threadlog can keep (not JSON,
    not a message, or blocks the store refuses); the run ends with status `error`."""


# The SDK raises `APIError` subclasses for what the API or the network did; a connection
# dropped while a stream is being read surfaces as the HTTP client's own error.
_FAILURES = (anthropic.APIError, httpx2.HTTPError, BadAnswer, StalledStream)

# What the SDK raises when a response parses as no message: bad JSON (ValueError), JSON nested
# past what Python reads, a stream without `message_start` (an assert in its accumulator).
_UNREADABLE = (ValueError, AssertionError, RecursionError)

# What the SDK raises for the API or the network while a stream is read; anything else it
# raises there comes from events it could not fold into a message (out of order, a block
# that never started, a field missing): an IndexError, AttributeError, TypeError, ...
_TRANSPORT = (anthropic.APIError, httpx2.HTTPError)


class Interrupt(Exception):
    """Raised by a tool to ask the human: the turn stops, `interrupt.raised` is recorded and
    the thread is `interrupted` until `resolve_interrupt`; the answer becomes the tool's result."""

    def __init__(self, question: str | None = None, payload: Any = None) -> None:
        super().__init__(question or "interrupt")
        self.question = question
        self.payload = payload


@dataclass
class Turn:
    """What `run_turn` did: `status` is `ok`, `error` or `interrupted`; `messages` are the
    assistant messages recorded, in order; `text` is the answer's text; `cut_short` says an
    `ok` turn's answer did not end whole. `error` is the failure's text, or, for a turn that did
    not fail, an error the API sent after a whole answer, which is kept (recorded with the run's end)."""

    thread: str
    run_id: str
    status: str = "ok"
    error: str | None = None
    messages: list[RecordedEvent] = field(default_factory=list)
    interrupt_id: str | None = None
    closed: bool = field(default=False, repr=False)  # run.finished is recorded

    @property
    def text(self) -> str:
        """The text blocks of the last assistant message and of those it continues (each
        paused, `stop_reason: pause_turn`, a server tool's long turn), joined as `on_text` got
        them (empty when none was recorded): the last message alone left out what the model
        said before the pause."""
        answer = self.messages[-1:]
        for message in reversed(self.messages[:-1]):
            if message.data.get("stop_reason") != "pause_turn":
                break
            answer.insert(0, message)
        return "".join(b.get("text", "") for m in answer for b in m.data.get("content", []) if b.get("type") == "text")

    @property
    def stop_reason(self) -> str | None:
        """Why the last assistant message stopped (`end_turn`, `refusal`, …; None when none was
        recorded): an answer with no text says why only here."""
        reason = self.messages[-1].data.get("stop_reason") if self.messages else None
        return reason if isinstance(reason, str) else None

    @property
    def cut_short(self) -> bool:
        """Whether the turn ended `ok` on an answer the model did not end whole, as rows and
        `show` mark it (`projections.stops.cut_reason`): cut off (`max_tokens`,
        `model_context_window_exceeded`), stopped for a tool call it does not hold, or stopped
        for a reason this release does not know. A refused answer is not: its `stop_reason` is
        `refusal`, marked apart. The run ended as asked (`run.finished` says `ok`); `text` is
        what came of the answer. A paused answer (`pause_turn`) is sent back and gone on from
        within the turn: a turn that ends on one (its rounds spent, or the request to go on
        failed) ends `error`, and rows and `show` mark the answer paused and not resumed."""
        return self.status == "ok" and bool(self.messages) and cut_reason(self.messages[-1].data, last=True) is not None

    def to_json(self) -> Json:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {"thread": self.thread, "run_id": self.run_id, "status": self.status, "error": self.error,
                "interrupt_id": self.interrupt_id, "text": self.text, "stop_reason": self.stop_reason,
                "cut_short": self.cut_short, "offsets": [m.offset for m in self.messages]}


def _id() -> str:
    return secrets.token_hex(8)


# The model calls one turn makes at most, by default: a sub-agent works alone, so it gets
# more (the fork sub-agent design gives its fork agent `maxTurns: 200`).
ROUNDS = 50
SUBAGENT_ROUNDS = 200


def run_turn(
    store: Store,
    thread: str,
    user_content: str | list[Json] | None,
    client: anthropic.Anthropic,
    model: str | None = None,
    tools: Mapping[str, Tool] | None = None,
    stream: bool = False,
    *,
    max_tokens: int | None = None,
    on_text: Callable[[str], None] | None = None,
    max_rounds: int | None = None,
    retrieval: str | None = None,
) -> Turn:
    """Send `user_content` on `thread`, record everything, run `tools` until the model stops.

    `user_content=None` continues the thread instead: after `resolve_interrupt` it answers
    the waiting tool calls (the interrupted one with the human's answer, the others by
    running them) and calls the model; after a failed turn whose last message is the
    user's, it calls the model again. `tools` maps tool names to callables taking the
    tool's input as keyword arguments; their definitions are the thread's `tools`. With
    `stream=True` the SDK's stream helper is used and `on_text` gets each text delta.
    API and tool failures do not raise: they are recorded, and `Turn.status` says so.

    A callable in `tools` with a `definition` (an Anthropic tool definition, as the handlers
    of `transcript_tools` have) whose name the thread's tools lack is offered to the model
    too, and recorded with the request so `check_request` rebuilds it. `retrieval`
    overrides a note fork's recorded retrieval mode for this turn's requests.

    `max_rounds` bounds the model calls of one turn: by default 200 on a sub-agent fork (the
    fork sub-agent design's `maxTurns`), 50 elsewhere.
    """
    check_client(client)
    check_tools(tools)
    if max_rounds is None:
        max_rounds = SUBAGENT_ROUNDS if store.thread(thread).kind == "subagent" else ROUNDS
    turn = Turn(thread, _id())
    while True:  # the checks and the run's start, against one head: two turns never both start
        seen = store.head(thread)
        state, asked, waiting = _startable(store, thread, user_content, model, max_tokens, _interleaved(client))
        offered = extra_tools(state.tools, tools)
        _check_tool_choice(state, offered, thread)
        answers = _answers(store, thread, asked) if waiting else {}
        _refuse_unanswerable(thread, waiting, tools, answers)
        started = {"type": "run.started", "data": {"run_id": turn.run_id}}
        asking = [] if user_content is None else [{"type": "message.appended", "data": {"role": "user", "content": user_content}}]
        try:
            head = store.append(thread, [started, *asking], expect=seen)[-1].offset + 1
            break
        except ConcurrencyError:
            continue  # another writer moved the thread since it was read (another turn starting?): judged again
    try:
        options = _Options(model, max_tokens, retrieval, offered)
        return _run(store, turn, head, client, options, tools, stream, on_text, max_rounds, answers, waiting)
    except BaseException as error:  # Ctrl-C, or a bug: close the run, then let it go on
        if not turn.closed:
            try:
                with handled((signal.SIGINT,), signal.SIG_IGN):  # a second Ctrl-C there left the run open
                    _finish(store, turn, "cancelled" if isinstance(error, KeyboardInterrupt) else "error", _describe(error))
            except StoreError as unclosed:  # the file stayed locked, say: the run is left open, and the way to close it said
                if not turn.closed:  # (closed, another writer closed it: nothing is left to close)
                    error.add_note(f"run {turn.run_id} of thread {thread} is left open ({unclosed}); close it with: "
                                   f"{closing_command(thread, turn.run_id)}")
        raise


# The longest run id a closing command names whole: a run id is any text, and one of 1 MB made
# an error line of 1 MB and a command no shell runs (an argument holds at most 128 KiB).
_LONGEST_NAMED_RUN = 1000


def closing_command(thread: str, run_id: str) -> str:
    """The command that closes a run its process left open, as `cancelled`, quoted as typed;
    for a run id too long to show, the command reading that data from a file, and what it holds."""
    if len(run_id) > _LONGEST_NAMED_RUN:
        return (command_line("threadlog emit", [thread, "run.finished"], "--data-file FILE") + ', FILE holding {"run_id": '
                f'RUN, "status": "cancelled"}} with RUN the run\'s id ({len(run_id):,} characters) as its run.started holds it')
    data = json.dumps({"run_id": run_id, "status": "cancelled"}, ensure_ascii=False)
    return command_line("threadlog emit", [thread, "run.finished"], f"--data {shell_word(data)}")


def check_client(client: Any) -> None:
    """Refuse, before anything is written, a client a live turn cannot call: the async client's
    calls return coroutines, and its turn failed on one (`'coroutine' object has no attribute
    'parse'`) after its question was recorded."""
    messages = getattr(client, "messages", None)
    if isinstance(messages, anthropic.resources.AsyncMessages):
        raise InvalidEvent("client", f"is an async client ({type(client).__name__}); a live turn calls the API and runs "
                           "the tools synchronously: pass anthropic.Anthropic() (from async code, run the turn on a "
                           "thread: await asyncio.to_thread(run_turn, store, thread, text, anthropic.Anthropic()))")
    if not callable(getattr(messages, "create", None)) or not callable(getattr(messages, "stream", None)):
        raise InvalidEvent("client", f"must be an anthropic.Anthropic client, not {type(client).__name__}")
    headers = getattr(client, "default_headers", None)
    for name, value in headers.items() if isinstance(headers, Mapping) else ():
        # Sent as UTF-8: an environment variable holding other bytes (ANTHROPIC_CUSTOM_HEADERS,
        # ANTHROPIC_API_KEY) reads as lone surrogates, and every request failed to be built after the
        # run had started (`threadlog ask` then blamed a stored event).
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:  # the value not shown: it may be the API key
                raise InvalidEvent("client", f"its header {str(name)[:100]!r} holds bytes that are not UTF-8 (character "
                                   f"{error.start + 1} of its value), which no request can send; fix where it is set "
                                   "(ANTHROPIC_API_KEY, ANTHROPIC_CUSTOM_HEADERS)") from None


def check_tools(tools: Any) -> None:
    """Refuse, before anything is written, `tools` that are not a mapping of tool names to
    callables: the turn failed on one only when the model called it (its run closed with an
    error), or at once after its question was recorded (a list of functions)."""
    if tools is None:
        return
    if not isinstance(tools, Mapping):
        raise InvalidEvent("tools", f"must map tool names to the functions that run them (a dict), not {type(tools).__name__}")
    for name, fn in tools.items():
        if not isinstance(name, str) or not callable(fn):
            raise InvalidEvent("tools", f"{named(name)} must name a function that runs the tool, not {type(fn).__name__}"
                               if isinstance(name, str) else f"a key must be a tool's name, not {type(name).__name__}")


def _interleaved(client: Any) -> bool:
    """Whether `client` sends the interleaved-thinking beta, under which a thinking budget may
    exceed `max_tokens` (it spans the turn's every block). A header's name is any case, and
    `anthropic-beta` lists betas comma-separated, as the SDK sends them."""
    headers = getattr(client, "default_headers", None)
    if not isinstance(headers, Mapping):
        return False
    betas = ",".join(value for name, value in headers.items() if str(name).lower() == "anthropic-beta" and isinstance(value, str))
    return any(beta.strip().startswith("interleaved-thinking-") for beta in betas.split(","))


def _startable(store: Store, thread: str, user_content: str | list[Json] | None,
               model: str | None, max_tokens: int | None, interleaved: bool) -> tuple[ThreadState, int, list[Json]]:
    """The thread's state, if a turn may start on it now (else `InvalidEvent`), with the offset
    of its last assistant message and that message's tool calls still waiting."""
    state = thread_state(store, thread)
    # Before the run starts: the API would refuse every request (unless the beta lets it by).
    check_max_tokens(max_tokens, None if interleaved else state.thinking, thread)
    if state.status == "running":
        # A process killed mid-turn (SIGKILL, a lost machine) never closed its run: the way to close it, whole.
        raise InvalidEvent("thread", f"thread {thread!r} has run {named(state.open_runs[-1])} in progress; wait for it, "
                           f"or, if the process running it is gone, close it: {closing_command(thread, state.open_runs[-1])}")
    if state.pending_interrupts:
        raise InvalidEvent("thread", unsettled(thread, state.pending_interrupts[0]["interrupt_id"]))
    if not (model or state.model):
        raise InvalidEvent("model", f"thread {thread!r} names no model; pass model=... (or create the thread with one)")
    if _blank(user_content):  # the request leaves blank text out: it would end on the last answer (a prefill)
        raise InvalidEvent("user_content", "is blank: a turn asks something; pass the user's message")
    last = state.messages[-1] if state.messages else None
    asked, waiting = _waiting(state.messages)
    if user_content is not None and waiting:
        raise InvalidEvent("user_content", f"thread {thread!r} has tool calls waiting for results; "
                           "continue it with user_content=None first")
    if user_content is None and not waiting and (last is None or last.role == "assistant" and not _paused(store, thread, last)):
        raise InvalidEvent("user_content", f"thread {thread!r} has nothing to continue; pass the user's message")
    return state, asked, waiting


def _check_tool_choice(state: ThreadState, offered: list[Json] | None, thread: str) -> None:
    """Refuse, before the run starts, a thread whose `tool_choice` setting the API would refuse
    in every request of the turn (`sent_tool_choice`), with the tools the turn offers."""
    sent_tool_choice(state.settings.get("tool_choice"), [*(state.tools or ()), *(offered or ())], state.thinking, thread)


def _paused(store: Store, thread: str, message: Message) -> bool:
    """Whether `message`, the assistant's, stopped with `pause_turn` (a server tool's long turn):
    sent back as it is, the model goes on. A turn whose request to go on failed left the thread
    ending on it, and asking again with no new message was refused as having nothing to continue."""
    return any(data.get("stop_reason") == "pause_turn" for _, _, data in store.read_data(thread, message.offset, message.offset + 1))


def _refuse_unanswerable(thread: str, waiting: list[Json], tools: Mapping[str, Tool] | None, answers: Mapping[str, Any]) -> None:
    """Refuse, before the run starts, to continue a thread whose waiting tool call neither a
    resolved interrupt nor a callable in `tools` answers: the turn would record an error result
    for it (a fan-out's sub-agent call, answered by its report, was closed as failed so)."""
    for use in waiting:
        name = use.get("name", "")
        if use.get("id") not in answers and name not in (tools or {}):
            raise InvalidEvent("tools", f"thread {thread!r} waits on the result of tool call {named(use.get('id'))} "
                               f"({named(name)}), which no tool given to this turn runs: answer it first (append its "
                               "tool_result; a sub-agent fork's with `report`), or pass a callable of that name in tools")


def _blank(content: str | list[Json] | None) -> bool:
    """Whether a prompt holds no text but whitespace and no other block."""
    if isinstance(content, str):
        return not content.strip()
    return isinstance(content, list) and all(isinstance(b, dict) and blank_text(b) for b in content)


@dataclass(frozen=True)
class _Options:
    """How each request of a turn is built (what `anthropic_request` takes besides the log)."""

    model: str | None
    max_tokens: int | None
    retrieval: str | None
    extra_tools: list[Json] | None

    def recorded(self) -> Json:
        """What `check_request` needs besides model and max_tokens, for meta.request."""
        return {k: v for k, v in (("retrieval", self.retrieval), ("extra_tools", self.extra_tools)) if v is not None}


def _run(
    store: Store, turn: Turn, head: int, client: anthropic.Anthropic, options: _Options, tools: Mapping[str, Tool] | None,
    stream: bool, on_text: Callable[[str], None] | None, max_rounds: int, answers: dict[str, Any], waiting: list[Json],
) -> Turn:
    """The turn's loop, once its run is open: answer waiting calls, then ask and run tools."""
    thread = turn.thread
    if waiting:
        head, failure, interrupt = _answer_calls(store, thread, waiting, tools, answers, head)
        if failure or interrupt:
            return _stop(store, turn, failure, interrupt)
    for _ in range(max_rounds):
        try:
            searched: Json = {}
            kwargs = anthropic_request(store, thread, head, model=options.model, max_tokens=options.max_tokens,
                                       retrieval=options.retrieval, extra_tools=options.extra_tools, searched=searched)
            reply, sent = _call(client, kwargs, stream, on_text)
            sent.options = options.recorded() | ({"passages": searched} if searched else {})
            answer = _assistant(reply, sent)
        except (*_FAILURES, StoreError) as error:
            return _stop(store, turn, _describe(error), None)
        try:
            recorded = _append_answer(store, thread, answer, head)
        except InvalidEvent as error:  # the API's blocks break a rule of the log: say which
            return _stop(store, turn, f"the API's answer could not be stored: {error}", None)
        except StoreError as error:  # the file stayed locked, say: the answer is shown with the error, not lost unseen
            error.add_note(f"the API's answer {_which(reply)} was not stored; its text: {_text(reply)}")
            raise
        turn.messages.append(recorded)
        head = recorded.offset + 1
        if sent.after is not None:  # said with the run's end (the first, if rounds brought more), the turn going on
            turn.error = turn.error or sent.after
        uses = [b for b in recorded.data["content"] if b.get("type") == "tool_use"]
        if uses and reply.stop_reason != "tool_use":
            return _not_run(store, turn, uses, reply.stop_reason, head)
        if not uses and reply.stop_reason == "pause_turn":
            continue  # a server tool's long turn, paused: sent back as it is, the model goes on (a round)
        if not uses:
            _finish(store, turn, "ok", turn.error)
            return turn
        head, failure, interrupt = _answer_calls(store, thread, uses, tools, {}, head)
        if failure or interrupt:
            return _stop(store, turn, failure, interrupt)
    return _stop(store, turn, _rounds_spent(turn, max_rounds), None)


def _rounds_spent(turn: Turn, max_rounds: int) -> str:
    """Why a turn's rounds ran out: the model still calling tools, or the server pausing its
    answer (`pause_turn`) round after round (it called no tool: saying so sent the reader
    looking for one). The paused answer is kept; continuing the thread goes on from it."""
    paused = 0
    for message in reversed(turn.messages):
        if message.data.get("stop_reason") != PAUSED:
            break
        paused += 1
    rounds = "1 round" if max_rounds == 1 else f"{max_rounds} rounds"
    if not paused:
        return f"the model was still calling tools after {rounds}"
    times = "" if paused == 1 else f" {paused} times in a row"
    return (f"the server paused the answer (stop_reason {PAUSED}){times} and the turn's {rounds} ran out on it: "
            "it is kept, paused and not resumed; continuing the thread goes on from it")


def _not_run(store: Store, turn: Turn, uses: list[Json], stop_reason: Any, head: int) -> Turn:
    """The answer holds tool calls but did not stop to have them run: cut off (`max_tokens`,
    its last input possibly incomplete) or stopped for another reason. They are not run; each
    gets an `is_error` result saying why, so the thread takes a new message and its request
    stays valid, and the run ends with status `error`."""
    ids = ", ".join(named(u["id"]) for u in uses)
    why = f"the answer stopped (stop_reason {stop_reason!r}) with tool call(s) {ids} it did not ask to run; they were not run"
    _record_results(store, turn.thread, [_result(u["id"], why, True) for u in uses], head)
    return _stop(store, turn, why, None)


def _waiting(view: list[Message]) -> tuple[int, list[Json]]:
    """(offset of the last assistant message, its tool_use blocks that have no result yet)."""
    answered: set[str] = set()
    for message in reversed(view):
        if message.role == "assistant":
            uses = [b for b in message.content if b.get("type") == "tool_use" and b.get("id") not in answered]
            return message.offset, uses
        answered.update(b.get("tool_use_id", "") for b in message.content if b.get("type") == "tool_result")
    return 0, []


@dataclass
class _Sent:
    request_id: str | None
    digest: str
    model: str
    max_tokens: int
    stream: bool
    options: Json = field(default_factory=dict)
    after: str | None = None  # an error the API sent after the whole answer, which is kept


def _call(client: anthropic.Anthropic, kwargs: Json, stream: bool, on_text: Callable[[str], None] | None) -> tuple[Any, _Sent]:
    """One API call; returns the message and what was sent (digest of the exact body)."""
    reply: Any
    raw: Any = None
    after: str | None = None
    if not stream:
        try:
            raw = client.messages.with_raw_response.create(**kwargs)
        except ValueError as error:
            # The SDK will not wait over 10 minutes for one answer: it refuses a large max_tokens
            # (a thinking budget) unstreamed, before sending anything. Such a call is streamed.
            if not str(error).startswith("Streaming is required"):
                raise
            stream = True
    if stream:
        with client.messages.stream(**kwargs) as events:
            _refuse_error_body(events.response)
            read = _Read()
            limit = read_timeout(kwargs.get("timeout", getattr(client, "timeout", None)))
            with Stall(limit, events.response.close) as watch:
                try:
                    for text in read.texts(events, watch):
                        if on_text is not None:  # outside the reading: what on_text raises is the caller's
                            on_text(text)
                except (*_TRANSPORT, BadAnswer):
                    watch.check()  # the read failed because the watch closed the stream: say why
                    raise
                if not read.stopped:  # the answer is whole: a stream the server kept open after it is no failure
                    watch.check()
            if not read.started:  # an HTML page, a JSON body: the SDK's own complaint was a bare AssertionError
                kind = events.response.headers.get("content-type", "")
                raise BadAnswer(f"the API's answer is no stream of message events (no message_start came; "
                                f"its content-type: {kind[:100]!r})")
            try:
                reply = events.get_final_message()
            except _UNREADABLE as error:
                raise BadAnswer(f"the API's stream could not be read: {_describe(error)}") from None
            read.check_inputs(reply)
            read.fold(reply)
            for block in reply.content:  # the SDK joined the deltas' text as it came: a character's halves stay apart
                for name in ("text", "thinking"):
                    if isinstance(value := getattr(block, name, None), str):
                        setattr(block, name, _paired(value))
            for name, value in read.late.items():
                if getattr(reply, name, None) is None:  # a field the message holds is not sent again late
                    setattr(reply, name, value)
            if read.late_usage and isinstance(reply.usage, anthropic.BaseModel):
                for name, value in read.late_usage.items():
                    setattr(reply.usage, name, value)
            if not read.stopped:  # the events ended before `message_stop`
                raise anthropic.APIConnectionError(message="the stream ended before the message was complete",
                                                   request=events.response.request)
            # A null stop reason it sent is kept as it came, as the SDK keeps it and as the same answer unstreamed is
            # (the API sends none in a whole message; its tool calls, if any, are not run: `_not_run`).
            if not read.delta:  # the usage is then the count the stream's start guessed
                raise BadAnswer("the API's stream ended (message_stop) with no message_delta, which sends the answer's "
                                "stop reason and its output token count")
            request_id, body = events.request_id, _body(events.response.request, kwargs, True)
            if read.after is not None:
                after = (f"the API's stream failed after the whole answer {_which(reply)} had come, up to "
                         f"its message_stop; the answer is kept: {read.after}")
    else:
        try:
            reply = raw.parse()
        except _UNREADABLE as error:
            raise BadAnswer(f"the API's answer is not JSON: {_describe(error)}") from None
        request_id, body = raw.request_id, _body(raw.http_request, kwargs, False)
        if isinstance(reply, anthropic.types.Message) and getattr(reply, "type", None) == "error":  # typed "message", read as sent
            _refuse_error(reply.model_extra or {})
    if not isinstance(reply, anthropic.types.Message) or not isinstance(reply.content, list):
        what = type(reply.content if isinstance(reply, anthropic.types.Message) else reply).__name__
        raise BadAnswer(f"the API answered with a {what} where a message with a list of content blocks belongs")
    if reply.role != "assistant":  # the SDK builds its models unchecked: a server could say anything here
        raise BadAnswer(f"the API's answer has role {str(reply.role)[:40]!r}; an answer is the assistant's")
    if getattr(reply, "id", None) is not None and not isinstance(reply.id, str):  # none is kept as none: `_which`
        raise BadAnswer(f"the API's answer has id {shown(reply.id)[:100]}, which is no message id (text)")
    for index, block in enumerate(reply.content):
        # A thinking block goes back to the API with its signature, which the API checks: a
        # stream that never sent it left "" (and the next request of the turn refused).
        if getattr(block, "type", None) == "thinking" and not getattr(block, "signature", None):
            raise BadAnswer(f"the answer's thinking block {index} came without its signature")
        number = _non_finite(block.to_dict(mode="python", exclude_unset=True, warnings=False)
                             if isinstance(block, anthropic.BaseModel) else block)
        if number is not None:  # written as JSON it reads null: a tool ran with null for the model's NaN
            name = repr(getattr(block, "id", None) or getattr(block, "type", None))
            raise BadAnswer(f"the answer's content block {index} ({name[:80]}) holds {number}, a number JSON cannot "
                            "hold (recorded, it would read null)")
    if not stream and on_text is not None:
        on_text(_text(reply))
    return reply, _Sent(request_id, body_digest(body), kwargs["model"], kwargs["max_tokens"], stream, after=after)


def _refuse_error_body(response: Any) -> None:
    """A stream answered with a JSON body, not events: `BadAnswer` naming the error it holds, if
    it is one (a proxy's; the SDK found no event in it, and the turn said only that none came).
    Anything else is left for the stream's reading to judge (the body read is read again)."""
    if "json" not in response.headers.get("content-type", ""):
        return
    try:
        body = json.loads(response.read())
    except (ValueError, RecursionError):
        return
    if isinstance(body, dict) and body.get("type") == "error":
        _refuse_error(body)


def _refuse_error(body: Mapping[str, Any]) -> None:
    """`BadAnswer` for an error object answered with status 200 in place of a message, naming
    its type and text, as the SDK names those of an error status (it read the one unstreamed
    as a message with no content)."""
    error = body.get("error")
    said = [str(error.get(key))[:2000] for key in ("type", "message") if error.get(key)] if isinstance(error, dict) else []
    raise BadAnswer(f"the API answered (status 200) with an error in place of a message: {': '.join(said) or 'no reason given'}")


def _non_finite(value: Any) -> str | None:
    """The first number in `value` (a block as the SDK read it) that JSON cannot hold (NaN,
    infinity: what a `NaN` or `1e999` in the answer reads as), as Python writes it; None if none."""
    stack = [value]
    while stack:  # not recursive: an input nested as deep as the SDK reads
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return repr(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _body(request: Any, kwargs: Json, stream: bool) -> bytes:
    """The bytes a request sent, for its digest: as the client kept them, or, for a request the
    client followed a redirect with (whose body it does not keep to be read again), as
    `request_body` writes them, the same bytes (tests/test_live.py holds the two equal)."""
    try:
        return bytes(request.content)
    except httpx2.RequestNotRead:
        return request_body(kwargs, stream)


def _which(reply: Any) -> str:
    """The answer as a message names it, in parentheses: by its id, or as one that came without
    (a proxy's stream may send none; the answer is recorded without a `message_id`)."""
    message_id = getattr(reply, "id", None)
    return f"(message {message_id[:100]})" if isinstance(message_id, str) and message_id else "(which came without a message id)"


def _text(reply: anthropic.types.Message) -> str:
    """The text of a reply's text blocks."""
    return "".join(b.text for b in reply.content if isinstance(b, anthropic.types.TextBlock) and isinstance(b.text, str))


# A character past U+FFFF as UTF-16's two halves: a proxy that cuts text between two deltas
# where UTF-16 does (a JavaScript string's slice) escapes each half on its own ("\ud83d", then
# "\ude00"), and Python, joining the two, keeps two lone surrogates the log cannot store.
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _paired(text: str) -> str:
    """`text` with each surrogate pair in it as the one character it encodes."""
    return _SURROGATE_PAIR.sub(lambda pair: pair.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text)


# The content block deltas the SDK's stream folds into its message (a beta's `compaction_delta`
# `_Read.fold` does), each with the kinds of block it folds into: the SDK drops, unsaid, a delta
# sent for a block of another kind (a tool call's `text_delta`, which left its input `{}`).
_FOLDS_INTO = {"text_delta": ("text",), "citations_delta": ("text",), "thinking_delta": ("thinking",),
               "signature_delta": ("thinking",), "input_json_delta": ("tool_use", "server_tool_use"),
               "compaction_delta": ("compaction",)}
# The stream's events the SDK folds into its message once `message_start` came (it passes over
# any before: `_Read.check_order` refuses them).
_FOLDED = frozenset(("message_delta", "message_stop", "content_block_start", "content_block_delta", "content_block_stop"))
# The fields of a `compaction_delta`, which replace its block's.
_COMPACTION = ("content", "encrypted_content")


def _wrong_usage(event: Any) -> str | None:
    """What is wrong with the usage a stream's `message_start` (its message's) or `message_delta`
    sent, none or no object, said; None for one the SDK can fold, or another event."""
    kind = getattr(event, "type", None)
    if kind not in ("message_start", "message_delta"):
        return None
    usage = getattr(getattr(event, "message", None) if kind == "message_start" else event, "usage", None)
    if isinstance(usage, anthropic.BaseModel):
        return None
    wrong = "no usage" if usage is None else f"a usage that is no object (a {type(usage).__name__[:40]})"
    if kind == "message_start":
        return f"the API's stream sent a message_start whose message has {wrong} (the answer's token counts)"
    return f"the API's stream sent a message_delta with {wrong} (the answer's output token count)"


def _unfoldable(error: BaseException) -> str:
    """What the SDK raised folding a stream's event into its message, with the event named: its
    own words alone (`'NoneType' object has no attribute 'output_tokens'`) said nothing of what
    the server sent."""
    event, trace = None, error.__traceback__
    while trace is not None:  # the innermost fold the error passed through
        # The SDK's fold of an event (`accumulate_event`, as anthropic 2.16 and 2.17 name it):
        # renamed in a later release, the error says the SDK's words without the event.
        if trace.tb_frame.f_code.co_name == "accumulate_event":
            event = trace.tb_frame.f_locals.get("event")
        trace = trace.tb_next
    if (wrong := _wrong_usage(event)) is not None:
        return wrong
    kind = str(getattr(event, "type", ""))[:80]
    what = f" (folding its {kind} event)" if kind else ""
    return f"the API's stream could not be read{what}: {_describe(error)}"


class _Read:
    """What reading a stream saw besides the SDK's message: each tool input's JSON as sent,
    and whether `message_stop` came (a stop reason alone does not make a message whole: the
    SDK takes it from `message_delta`, which out-of-order events can send before the end)."""

    def __init__(self) -> None:
        self.inputs: dict[int, str] = {}
        self.started = False  # `message_start` came: the answer is a stream of message events at all
        self.stopped = False
        self.after: str | None = None  # the error the API (or the network) raised after `message_stop`
        self.delta = False  # a `message_delta` came: the stop reason and the final usage
        self.ended: set[int] = set()  # the blocks `content_block_stop` closed
        self.kinds: list[str] = []  # the type of each block started, by index, as the SDK appends them
        # What `message_delta` events sent that the SDK's Message does not fold in (a beta's
        # `context_management`, beside the delta): the answer's fields all the same.
        self.late: Json = {}
        # Likewise the usage counts of a `message_delta` that the SDK's usage does not name (a
        # beta's `fallback_credit`, `iterations`): totals, so a later one replaces an earlier.
        self.late_usage: Json = {}
        self.held = ""  # a text delta's last character, the first half of a surrogate pair
        # A beta's `compaction_delta`s, which the SDK's stream (not its beta one) drops: by block index.
        self.compactions: dict[int, Json] = {}
        # The model the last `fallback` block says served the answer: `message_start` named the
        # model asked for, before the request fell back (the unstreamed answer names the one that served).
        self.served_by: str | None = None

    def texts(self, events: Any, watch: Stall) -> Iterator[str]:
        """The text deltas of a stream, read to its end; events the SDK cannot fold into a
        message raise `BadAnswer`, the API's and the network's errors pass as they are, unless the
        whole answer came before them (`after` keeps them then). Each wait for the next event is `watch`ed."""
        iterator = iter(events)
        while True:
            try:
                watch.waiting()
                event = next(iterator)
                watch.got()
            except Exception as error:
                # The body's end ends the answer; so does the watch closing a stream the server kept open
                # (pinging) after `message_stop`: the answer is whole by then.
                # So does the API's error, or a dropped connection, once `message_stop` came: the answer is kept, the error said.
                late = self.stopped and isinstance(error, _TRANSPORT)
                if isinstance(error, StopIteration) or (self.stopped and watch.expired) or late:
                    if late:
                        self.after = _describe(error)
                    if self.held:  # no second half came: the lone half, for the answer's check to refuse
                        yield self.held
                    return
                if isinstance(error, _TRANSPORT):
                    raise
                raise BadAnswer(_unfoldable(error)) from None
            # The SDK folds what comes after the end into the message all the same: not an answer sent whole.
            if self.stopped:
                raise BadAnswer(f"the API's stream went on after message_stop (a {event.type} event)")
            if event.type == "content_block_delta" and event.index in self.ended:
                raise BadAnswer(f"the API's stream sent more of content block {event.index} after it stopped")
            if event.type == "content_block_stop":
                self.ended.add(event.index)
            self.check_order(event)
            if event.type == "text":  # a character's first half waits for its second, in the next delta
                piece = self.held + event.text
                self.held = piece[-1:] if "\ud800" <= piece[-1:] <= "\udbff" else ""
                if piece := _paired(piece[:len(piece) - len(self.held)]):
                    yield piece
            elif event.type == "message_start":
                self.started = True
                if (wrong := _wrong_usage(event)) is not None:  # the next delta failed on it, in the SDK's words
                    raise BadAnswer(wrong)
            elif event.type == "message_stop":
                self.stopped = True
            elif event.type == "message_delta":
                self.delta = True
                self.late |= {k: v for part in (event, event.delta) for k, v in (part.model_extra or {}).items() if v is not None}
                spent = getattr(event, "usage", None)
                self.late_usage |= {k: v for k, v in (getattr(spent, "model_extra", None) or {}).items() if v is not None}
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                self.inputs[event.index] = self.inputs.get(event.index, "") + event.delta.partial_json
            elif event.type == "content_block_delta" and event.delta.type == "compaction_delta":
                self.compactions[event.index] = {name: getattr(event.delta, name, None) for name in _COMPACTION}
            elif event.type == "content_block_start" and getattr(event.content_block, "type", None) == "fallback":
                to = getattr(event.content_block, "to", None)  # a beta block: the SDK's stream keeps it as sent, a dict
                model = to.get("model") if isinstance(to, dict) else getattr(to, "model", None)
                if isinstance(model, str):
                    self.served_by = model

    def check_order(self, event: Any) -> None:
        """`BadAnswer` for an event the SDK folds into a message other than the one the stream
        sent: an event before `message_start` (passed over: a `message_delta` there lost the stop
        reason it sent), a second `message_start` (passed over), a block started at another index
        than the next (each later delta then lands in another block), a delta of a kind the SDK
        does not know or one for a block of another kind (passed over: its block would be recorded
        without what it sent, a tool call run with arguments the model never gave)."""
        if event.type in _FOLDED and not self.started:
            raise BadAnswer(f"the API's stream sent a {str(event.type)[:80]} event before its message_start: its events "
                            "are no one message")
        if event.type == "message_start":
            if self.started:
                raise BadAnswer("the API's stream sent a second message_start: its events are no one message")
            # The SDK keeps the blocks it holds (the API's holds none): the stream's blocks come after them.
            held = getattr(event.message, "content", None)
            self.kinds = [str(getattr(block, "type", None)) for block in held] if isinstance(held, list) else []
        elif event.type == "content_block_start":
            if event.index != len(self.kinds):
                raise BadAnswer(f"the API's stream started content block {shown(event.index)[:40]} where block "
                                f"{len(self.kinds)} comes next")
            self.kinds.append(str(getattr(event.content_block, "type", None)))
        elif event.type == "content_block_delta":
            kind = str(event.delta.type)
            if kind not in _FOLDS_INTO:
                raise BadAnswer(f"the API's stream sent a {kind[:80]!r} delta of content block {event.index}, "
                                "which this release cannot fold into the answer")
            block = self.kinds[event.index] if 0 <= event.index < len(self.kinds) else None
            if block not in _FOLDS_INTO[kind]:
                what = f"a {block[:80]!r} block" if block else "which never started"
                raise BadAnswer(f"the API's stream sent a {kind!r} delta of content block {event.index}, {what}")

    def fold(self, reply: Any) -> None:
        """Fold into the SDK's message what it passed over: each compaction block's content, as
        the SDK's beta stream folds a `compaction_delta` (its fields replace the block's), and
        the model a fallback block names as the one that served the answer, as its beta stream
        relabels the message."""
        if self.served_by is not None:
            reply.model = self.served_by
        for index, fields in self.compactions.items():
            block = reply.content[index] if index < len(reply.content) else None
            if getattr(block, "type", None) != "compaction":
                raise BadAnswer(f"the API's stream sent a compaction delta of content block {index}, which is no compaction block")
            for name, value in fields.items():
                setattr(block, name, value)

    def check_inputs(self, reply: Any) -> None:
        """The SDK parses a tool input's JSON leniently (a cut-off `{"city": "Ly` reads as
        `{}`): unless the answer was cut off (`max_tokens`, whose calls are not run), every
        input must be whole JSON, or the call would run with arguments the model never gave."""
        if reply.stop_reason == "max_tokens":
            return
        for index, text in sorted(self.inputs.items()):
            if not text:
                continue
            try:
                json.loads(text)
            except (ValueError, RecursionError):
                block = reply.content[index] if index < len(reply.content) else None
                name = repr(getattr(block, "id", None) or f"block {index}")
                raise BadAnswer(f"the input of tool call {name} did not arrive as whole JSON: {text[:200]!r}") from None


def _returned(reply: anthropic.types.Message) -> Json:
    """The answer's top-level fields besides those `_assistant` writes itself, as the event
    records them (`returned.py`), JSON-ready as the API returned them (nulls inside kept)."""
    extra = reply.model_extra or {}
    fields: Json = {}
    for name in (*reply.model_fields_set, *extra):
        value = extra[name] if name in extra else getattr(reply, name, None)
        try:  # each on its own: a lone surrogate or deep nesting in one failed the whole answer's serialization
            fields[name] = [_plain(item) for item in value] if isinstance(value, list) else _plain(value)
        except (ValueError, RecursionError):
            continue
    return returned_fields(fields)[0]


def _plain(value: Any) -> Any:
    """An SDK model as JSON, with the fields the API sent (nulls kept); anything else as it came."""
    return value.to_dict(mode="json", exclude_unset=True, warnings=False) if isinstance(value, anthropic.BaseModel) else value


def _assistant(reply: Any, sent: _Sent) -> Json:
    """The assistant message event for an SDK `Message`, its blocks as returned: the fields
    the API sent, nulls included (`document_title: null` in a citation is required; left out
    with every null, no answer citing an untitled document could be stored)."""
    # Blocks the SDK could not type (an unknown kind) stay as sent, for the store to judge.
    try:
        content = [block.to_dict(mode="json", exclude_unset=True, warnings=False) if isinstance(block, anthropic.BaseModel) else block
                   for block in reply.content]
    except ValueError as error:  # nested past the depth the SDK's models write (a tool input): it raised out of the turn
        raise BadAnswer(f"the answer's content could not be written as JSON: {error}") from None
    data: Json = {
        "role": "assistant",
        # The API may answer with no block at all; an empty text block keeps the message
        # (the request drops it again).
        "content": content or [{"type": "text", "text": ""}],
        "message_id": reply.id,
        "model": reply.model,
        "stop_reason": reply.stop_reason,
        # `warnings=False`: a field of the wrong type (a string of tokens) is kept as sent; a
        # usage that is no object at all stays as sent too, for the store to judge.
        "usage": reply.usage.to_dict(mode="json", exclude_none=True, warnings=False)
        if isinstance(reply.usage, anthropic.BaseModel) else reply.usage,
    }
    data |= _returned(reply)
    request = {"id": sent.request_id, "digest": sent.digest, "model": sent.model, "max_tokens": sent.max_tokens,
               "stream": sent.stream, **sent.options}
    return {"type": "message.appended", "data": {k: v for k, v in data.items() if v is not None}, "meta": {"request": request}}


def _answer_calls(
    store: Store, thread: str, uses: list[Json], tools: Mapping[str, Tool] | None, answers: Mapping[str, Any], head: int,
) -> tuple[int, str | None, tuple[str, Interrupt] | None]:
    """Run the tool calls and record their results: (the next head, the first failure's text,
    the interrupt raised). Stopped by Ctrl-C (or another exception no tool's failure is), the
    results of the calls that ran are recorded before it goes on: none was, and resuming the
    turn ran them all again (a file written twice, a message sent twice). The calls from the
    stopped one on stay waiting."""
    results: list[Json] = []
    try:
        failure, interrupt = _run_tools(uses, tools, answers, results)
    except BaseException:
        # A second Ctrl-C is held off while they are written, and a failed write does not stand in for the first.
        with handled((signal.SIGINT,), signal.SIG_IGN), contextlib.suppress(StoreError):
            _record_results(store, thread, results, head)
        raise
    head, unstored = _record_results(store, thread, results, head)
    return head, failure or unstored, interrupt


def _run_tools(
    uses: list[Json], tools: Mapping[str, Tool] | None, answers: Mapping[str, Any], results: list[Json],
) -> tuple[str | None, tuple[str, Interrupt] | None]:
    """Run the tool calls in order, adding each one's result to `results` as it ends: (first
    failure text, interrupt as (tool_use_id, it)).

    A call answered by a resolved interrupt gets that answer. An exception becomes an
    `is_error` result; an `Interrupt` stops the batch (calls after it stay waiting), unless
    the log cannot hold it (`_unrecordable`): then it is an exception like any other.
    """
    failure: str | None = None
    for use in uses:
        tool_use_id, name = use["id"], use.get("name", "")
        if tool_use_id in answers:
            results.append(_result(tool_use_id, answers[tool_use_id]))
            continue
        fn = (tools or {}).get(name)
        if fn is None:  # one the model called in this turn (a waiting one is refused before: `_refuse_unanswerable`)
            results.append(_result(tool_use_id, f"tool {name!r} is not available", True))
            failure = failure or f"the model called tool {name!r}, which no tool given to this turn runs"
            continue
        try:
            arguments = use.get("input") or {}
            output = fn(**arguments) if isinstance(arguments, dict) else fn(arguments)
        except Interrupt as interrupt:
            unrecordable = _unrecordable(tool_use_id, interrupt)
            if unrecordable is None:
                return failure, (tool_use_id, interrupt)
            # As any other exception: the call answered, so the thread is not left waiting on it.
            text = f"tool {name!r} raised an Interrupt that cannot be recorded: {unrecordable}"
            results.append(_result(tool_use_id, text, True))
            failure = failure or text
            continue
        except Exception as error:
            text = f"tool {name!r} raised {_describe(error)}"
            results.append(_result(tool_use_id, text, True))
            failure = failure or text
            continue
        undecodable = _undecodable(output)
        if undecodable is not None:  # stored, the API would refuse every later request of the thread
            text = f"tool {name!r} returned {undecodable}, which the API cannot read"
            results.append(_result(tool_use_id, text, True))
            failure = failure or text
            continue
        results.append(_result(tool_use_id, output))
    return failure, None


def _undecodable(output: Any) -> str | None:
    """The first of a tool's content blocks (an image or document it returned) whose base64
    data does not decode, named; None if none. Stored, it was sent with every later request of
    the thread, each refused."""
    if not isinstance(output, list):
        return None
    for index, block in enumerate(output):
        source = block.get("source") if isinstance(block, dict) else None
        data = source.get("data") if isinstance(source, dict) and source.get("type") == "base64" else None
        if isinstance(data, str):  # data of another kind: the store refuses the block, naming it
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                return f"content block {index} (an {str(block.get('type'))[:40]}) whose base64 data does not decode"
    return None


def _result(tool_use_id: str, output: Any, is_error: bool = False) -> Json:
    if isinstance(output, str):
        content: Any = output
    elif isinstance(output, list) and all(isinstance(b, dict) and "type" in b for b in output):
        content = output  # content blocks, as a tool may return them
    else:
        try:
            content = json.dumps(output, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):  # keys that are not text, a cycle, …
            content = repr(output)
    block: Json = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def _append_answer(store: Store, thread: str, answer: Json, head: int) -> RecordedEvent:
    """Append the assistant message at `head`, the offset its request was built at. If
    another writer got there first the answer is still kept, after their events; its
    request check will then say the history differs from what the model saw."""
    try:
        return store.append(thread, [answer], expect=head)[0]
    except ConcurrencyError:
        return store.append(thread, [answer])[0]


def _record_results(store: Store, thread: str, results: list[Json], head: int) -> tuple[int, str | None]:
    """Append the tools' results as one user message: (the next head, why they could not be
    stored, or None). Results the store refuses (blocks it does not know, a lone surrogate,
    nesting too deep, too large) become `is_error` results saying so, so that every call
    still has its result and the model view stays valid."""
    if not results:
        return head, None

    def append(content: list[Json]) -> int:
        return store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": content}}])[0].offset + 1

    try:
        return append(results), None
    except InvalidEvent as error:
        why = f"the tools' results could not be stored: {error}"
        return append([_result(r["tool_use_id"], why, True) for r in results]), why


def _answers(store: Store, thread: str, since: int) -> dict[str, Any]:
    """tool_use id -> the human's answer, from interrupts raised and resolved after `since`."""
    asked: dict[str, str] = {}
    answers: dict[str, Any] = {}
    for offset, type_, data in store.read_data(thread, since):
        if type_ == "interrupt.raised" and data.get("tool_use_id"):
            asked[data["interrupt_id"]] = data["tool_use_id"]
        elif type_ == "interrupt.resolved" and data.get("interrupt_id") in asked:
            answers[asked[data["interrupt_id"]]] = data.get("answer")
    return answers


# The most of a failure's text a run's end records: an API's error can be megabytes (and an
# event holds 32 MiB); past this the text is cut, its length said.
MAX_ERROR_CHARS = 20_000


def _finished(run_id: str, status: str, error: str | None = None) -> Json:
    data: Json = {"run_id": run_id, "status": status}
    if error:
        data["error"] = _storable(error)
    return {"type": "run.finished", "data": data}


def _storable(text: str) -> str:
    """A failure's text as the log can hold it: a lone surrogate (a tool's error may carry one)
    written as its escape, and at most `MAX_ERROR_CHARS` characters. (Refused, the run's end
    was written without the text, and the turn raised where failures are recorded.)"""
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}… (cut: {len(text):,} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _finish(store: Store, turn: Turn, status: str, error: str | None, *before: Json) -> None:
    """Close the turn's run. Another writer may have closed it while the turn ran (the command a
    refused turn names for a run whose process is gone, typed while it was not gone): then the
    log refuses this close as a run not pending, and what the turn wrote before is kept; that
    is said, not that the run is left open (the command that closes it would be refused too).
    What was to be written with the close (the interrupt a tool raised) needs no run: it is
    written alone, so the call its question was asked for can still be answered."""
    try:
        store.append(turn.thread, [*before, _finished(turn.run_id, status, error)])
    except InvalidEvent:
        if turn.run_id in thread_state(store, turn.thread).open_runs:
            raise
        turn.closed = True
        shown_at = command_line("threadlog show", [turn.thread], "--last 2")
        left = "nothing is left to close"
        if before and turn.interrupt_id is not None:
            try:
                store.append(turn.thread, list(before))
                left = f"the tool's question is recorded: {unsettled(turn.thread, turn.interrupt_id)}"
            except InvalidEvent as refused:  # its call answered meanwhile, by the same other writer
                left = f"the tool's question is not recorded ({refused})"
        raise StoreError(f"run {named(turn.run_id)} of thread {named(turn.thread)} was closed by another writer while this "
                         f"turn ran; what the turn recorded before is kept (`{shown_at}`), and {left}") from None
    turn.closed = True


def _stop(store: Store, turn: Turn, failure: str | None, interrupt: tuple[str, Interrupt] | None) -> Turn:
    """Close the run: `error` with the failure's text, or, for an interrupt, record it and
    finish `ok` (the run ended as asked; the thread waits for the human)."""
    if interrupt is not None:
        tool_use_id, raised = interrupt
        turn.interrupt_id = _id()
        _finish(store, turn, "ok", turn.error, _interrupt_raised(turn.interrupt_id, tool_use_id, raised))
        turn.status = "interrupted"
        return turn
    turn.status, turn.error = "error", failure
    _finish(store, turn, "error", failure)
    return turn


def _interrupt_raised(interrupt_id: str, tool_use_id: str, raised: Interrupt) -> Json:
    """The `interrupt.raised` event recording what a tool raised for its call."""
    data: Json = {"interrupt_id": interrupt_id, "tool_use_id": tool_use_id}
    if raised.question is not None:
        data["question"] = raised.question
    if raised.payload is not None:
        data["payload"] = raised.payload
    return {"type": "interrupt.raised", "data": data}


def _unrecordable(tool_use_id: str, raised: Interrupt) -> str | None:
    """Why the log cannot hold the interrupt a tool raised (a question that is not text, a payload
    that is not JSON), or None. Found only when the run closed, it ended the turn with an
    exception and left the call waiting for a result no command could give it."""
    try:
        prepare(_interrupt_raised(_id(), tool_use_id, raised), "interrupt")
    except InvalidEvent as error:
        return str(error)
    return None


def _ends_on_question(store: Store, thread: str, at: int) -> bool:
    """Whether `thread`'s model view as of `at` ends on the user's message (a question no answer
    followed yet)."""
    view = thread_state(store, thread, at).messages
    return bool(view) and view[-1].role == "user"


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    text = f"{type(error).__name__}: {text}" if not text.startswith(type(error).__name__) else text
    if isinstance(error, anthropic.APIStatusError) and (wait := retry_wait.said(error.response)) is not None:
        text += f"; {wait}"
    if isinstance(error, anthropic.APIStatusError) and error.status_code == 413:
        # A request over the API's size is every later request of the thread too (a tool's
        # result of 31 MiB is stored whole): only a smaller history goes on.
        text += ("; the thread's request is over the API's size limit: redact its largest events (threadlog redact) "
                 "or fork it before them (threadlog fork --at), and ask there")
    return text


def rerun(
    store: Store,
    thread: str,
    at: int,
    client: anthropic.Anthropic,
    model: str | None = None,
    tools: Mapping[str, Tool] | None = None,
    *,
    stream: bool = False,
    max_tokens: int | None = None,
) -> str:
    """Fork `thread` at `at` and replay, through `run_turn` with `model`, the user messages
    that followed in the original (tool results are not replayed: the tools run again; nor
    are sub-agents' reports, which answer launches the fork has not made), one turn for the
    messages each original turn answered together.
    Returns the fork; `diff(store, thread, fork)` shows both answers side by side.
    A replayed turn that fails or is interrupted stops the replay (the fork keeps it)."""
    # The prompts each original turn asked: messages with no answer between them were one turn.
    # A fork whose history ends on the user's message (a turn that failed there, answered later
    # by a retry with no new text) asks that question first (None: the fork holds it), with the
    # messages the original sent before answering it.
    store.check_fork_point(thread, at, doing="rerun")  # before `thread_state`, whose replay takes 0 (and named 0..head)
    turns: list[list[Any]] = [[None]] if _ends_on_question(store, thread, at) else []
    prompts: list[tuple[int, Any]] = []
    answered = False  # whether the model answered since the last prompt (or the fork point)
    for event in store.read(thread, at):
        if event.type != "message.appended":
            continue
        if event.data.get("role") == "assistant":
            answered = True
        elif (not any(b.get("type") == "tool_result" for b in event.data.get("content", []))
              and not str(event.meta.get("actor", "")).startswith("subagent:")):  # not a report: the fork launched no sub-agent
            prompts.append((event.offset, event.data["content"]))
            if turns and not answered:
                turns[-1].append(event.data["content"])
            else:
                turns.append([event.data["content"]])
            answered = False
    check_client(client)
    check_tools(tools)
    # The fork's thinking and settings are the thread's; checked as run_turn will check them.
    state = thread_state(store, thread, at)
    check_max_tokens(max_tokens, None if _interleaved(client) else state.thinking, thread)
    _check_tool_choice(state, extra_tools(state.tools, tools), thread)
    for offset, content in prompts:  # checked as run_turn will, before the fork is made
        try:
            prepare({"type": "message.appended", "data": {"role": "user", "content": content}}, "prompt")
        except InvalidEvent as error:  # stored by an earlier release, which checked blocks laxly
            raise InvalidEvent(f"offset {offset}", f"the user message there cannot be sent again as stored: {error}; "
                               "nothing was forked") from None
    try:
        fork = store.fork(thread, at, metadata="inherit")
    except ForkRefused as refused:  # its advice, `unanswered=`, is no parameter of a rerun
        if refused.reason != "unanswered_tool_calls":
            raise
        raise ForkRefused(refused.reason, f"cannot rerun {thread!r} at {at}: tool calls without results there: "
                          f"{', '.join(map(named, refused.tool_use_ids))}; a rerun replays from a point between turns: "
                          "choose an earlier offset, or one after their results", refused.tool_use_ids) from None
    try:
        for asked in turns:
            for content in asked[:-1]:  # the turn's other messages, before its last, as the original sent them
                if content is not None:
                    store.append_message(fork, "user", content)
            turn = run_turn(store, fork, asked[-1], client, model, tools, stream, max_tokens=max_tokens)
            if turn.status != "ok":
                break
    except BaseException as error:  # Ctrl-C mid-replay: the fork is made, and was named nowhere
        error.add_note(f"fork {fork} of thread {thread} keeps what was replayed (threadlog diff {thread} {fork})")
        raise
    return fork
