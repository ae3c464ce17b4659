"""The Anthropic API: the request a thread sends (`request`), live turns (`ask`), a replay
with another model (`rerun`), and the tokens spent (`usage`).

`anthropic` takes seconds to import: it is imported inside the commands that call the API,
so every other command starts without it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from eventstore import InvalidEvent, Store
from projections import anthropic_request, check_request, thread_state, usage
from projections.request import check_request_point, checkable_offsets
from projections.stops import REFUSED, cut_by, cut_reason, stop_details_said
from projections.usage import total as usage_total

from .. import output
from ..interrupt import waking
from ..names import THREAD
from ..render import check_line, command_line, safe_block, usage_left_out, usage_lines
from ..settling import unsettled
from .group import EXIT_UNPRINTED, _committed, _fail, _named_as_typed, _note, _shown_whole, cli
from .opening import with_store
from .options import F, Seconds, _check_range, _model_name, json_option
from .printing import _emit_json, _json

if TYPE_CHECKING:  # `anthropic`, imported by the live turns, only for the commands that call the API
    from ..live import Turn


def api_options(func: F) -> F:
    """`--api-timeout` and `--api-retries`: the anthropic client's own settings (`_client`)."""
    func = click.option("--api-retries", type=click.IntRange(min=0, max=100), default=None,
                        help="How many times the client retries a request that failed to connect, timed out, or was "
                             "answered 408, 409, 429 or 5xx, waiting longer each time [default: the anthropic SDK's, 2].")(func)
    return click.option("--api-timeout", type=Seconds(least=0.01), default=None,
                        help="Seconds to wait for the API, for each response (or, streaming, for each event: keep-alive pings do "
                             "not count) before the try fails [default: the anthropic SDK's, 600].")(func)


def _client(timeout: float | None = None, retries: int | None = None) -> Any:
    """An `anthropic.Anthropic` client from ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL when set),
    with the SDK's timeout and retries unless `api_options` gave others."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        _fail("ANTHROPIC_API_KEY is not set; export your API key (https://console.anthropic.com) and try again")
    import anthropic  # seconds to import: only the commands that talk to the API pay for it
    import httpx2  # the SDK's HTTP client

    from ..retry_wait import refuse_long_waits

    base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
    try:
        settings: dict[str, Any] = {}
        if timeout is not None:
            settings["timeout"] = timeout
        if retries is not None:
            settings["max_retries"] = retries
        # A server's retry-after over a minute is not waited for, silent, as the SDK would: the try fails, naming it.
        http_client = anthropic.DefaultHttpxClient(event_hooks={"response": [refuse_long_waits]})
        return anthropic.Anthropic(api_key=key, base_url=base_url, http_client=http_client, **settings)
    except httpx2.InvalidURL as error:
        _fail(f"ANTHROPIC_BASE_URL {base_url!r} is not a URL the client can use: {error}")


@cli.command("request")
@click.argument("thread", type=THREAD)
@click.option("--at", type=click.IntRange(min=0),
              help="The request as of the first N events, thread.created being the first; they must hold a message "
                   "(default: all).")
@click.option("--check", is_flag=True,
              help="Prove the recorded request digest(s): of the message at offset N with --at, else of every live message.")
@click.option("--model", callback=_model_name, help="The model to name (default: the thread's).")
@click.option("--no-cache", is_flag=True, help="Leave out the cache_control breakpoints.")
@json_option
@with_store("search")  # a note fork's retrieval reads the search index, brought up to date when the file may be written
def request_command(store: Store, thread: str, at: int | None, check: bool, model: str | None, no_cache: bool, as_json: bool) -> None:
    """THREAD as the keyword arguments of client.messages.create, as JSON; --check says whether
    each recorded request still rebuilds byte for byte (exit 1 when one does not)."""
    if check:  # an offset of a message: 0..head - 1 (without --check, the library names the points a request takes)
        _check_range(store, thread, "--at", at, offset=True)
    else:
        from ..note_fork import is_note_fork
        from ..note_tools import extra_tools, transcript_tools

        with _named_as_typed({"at": "--at"}):
            if at is not None:  # before the state as of `at` is read, which names the range a replay takes
                check_request_point(store, thread, at)
            # A note fork's requests offer the tools that read its parent's transcript, as `ask` sends them.
            tools = extra_tools(thread_state(store, thread, at).tools, transcript_tools(store, thread)) \
                if is_note_fork(store, thread) else None
            kwargs = anthropic_request(store, thread, at, cache=not no_cache, model=model, extra_tools=tools)
        click.echo(_json(kwargs, indent=None if as_json else 2))
        return
    offsets = [at] if at is not None else checkable_offsets(store, thread)
    if not offsets:
        _fail(f"no message of {thread} was recorded by a live turn; there is no request digest to check")
    checks = [check_request(store, thread, offset) for offset in offsets]
    if as_json:
        _emit_json([c.to_json() for c in checks])
    else:
        output.lines(check_line(c) for c in checks)
    if not all(c.ok for c in checks):
        sys.exit(1)


class _Echo:
    """`ask --stream`'s printer: a stdout that fails mid-answer (a full disk, a closed pipe)
    stops the printing, not the turn, whose answer is recorded; the failure is raised then."""

    def __init__(self) -> None:
        self.failed: OSError | None = None

    def __call__(self, piece: str) -> None:
        if self.failed is None:
            try:
                # A lone surrogate (no UTF-8 can write it) shown as its escape: its UnicodeEncodeError
                # ended the turn, reported as a stored event of the wrong shape.
                click.echo(safe_block(piece).encode("utf-8", "backslashreplace").decode("utf-8"), nl=False)
            except OSError as error:
                self.failed = error


@cli.command()
@click.argument("thread", type=THREAD)
@click.argument("text", required=False)
@click.option("--model", callback=_model_name, help="The model to ask (default: the thread's).")
@click.option("--stream", is_flag=True, help="Stream the answer as it is written.")
@click.option("--max-tokens", type=click.IntRange(min=1),
              help="The answer's token limit, more than the thread's thinking budget if it has one, unless "
                   "ANTHROPIC_CUSTOM_HEADERS sends the interleaved-thinking beta [default: 4096, plus the budget].")
@api_options
@json_option
@with_store("write")
def ask(store: Store, thread: str, text: str | None, model: str | None, stream: bool, max_tokens: int | None,
        api_timeout: float | None, api_retries: int | None, as_json: bool) -> None:
    """Send TEXT on THREAD to the Anthropic API and record the turn (ANTHROPIC_API_KEY;
    ANTHROPIC_BASE_URL and ANTHROPIC_CUSTOM_HEADERS as the anthropic SDK reads them).

    Without TEXT, ask again: a failed turn keeps the question (exit 3), so a retry sends no
    second copy. An answer with no text, or one cut short (refused part-way, cut off at the token
    limit or the context window), is recorded, and stderr names its stop reason: exit 3, so a
    script does not take the output for the answer. On a note
    fork the model is offered `read_transcript` and `grep_transcript`, which read the parent's
    history below the fork point, as its note tells it to."""
    from ..live import run_turn
    from ..note_fork import is_note_fork
    from ..note_tools import transcript_tools

    if text is not None and not text.strip():
        raise click.BadParameter("is empty: give the question, or leave TEXT out to ask again", param_hint="TEXT")
    echo = _Echo() if stream and not as_json else None
    # A note fork's model is told to read its parent's transcript: with no tool it could not.
    tools = transcript_tools(store, thread) if is_note_fork(store, thread) else None
    # The client closed: its socket is not left to the collector.
    with _client(api_timeout, api_retries) as client, waking(), _answer_named(store, thread):
        turn = run_turn(store, thread, text, client, model=model, tools=tools, stream=stream, max_tokens=max_tokens,
                        on_text=echo)
    _committed(f"the turn on thread {thread} (run {turn.run_id}, {turn.status})", command_line("threadlog show", [thread], "--last 2"))
    if echo is not None and echo.failed is not None:
        raise echo.failed
    if as_json:
        _emit_json(turn.to_json())
    elif echo is None and turn.text:
        output.text(turn.text)
    elif echo is not None:
        click.echo()
    if turn.status != "error" and turn.error:  # an error the API sent after the whole answer, which is kept
        _note(turn.error)
    if turn.status == "error":  # committed (the question, the run): exit 3, not 1, or a script's retry asks twice
        again = command_line("threadlog ask", [thread])
        _fail(f"{turn.error or 'the turn failed'} (the question is kept: `{again}` with no TEXT asks again)", EXIT_UNPRINTED)
    # Exit 0 here made a script take a partial answer, or none, for the whole one.
    if turn.status == "ok" and (not turn.text.strip() or turn.cut_short or turn.stop_reason == REFUSED):
        _fail(_no_text(turn), EXIT_UNPRINTED)


# What a stop reason that cut the answer short means, and the way on.
_CUT_SHORT = {
    "tool_use": "the answer stopped to call a tool, and holds no tool call",
    "max_tokens": "the answer's token limit was reached (--max-tokens sets it)",
    "model_context_window_exceeded": "the thread's history and the answer filled the model's context window: redact its "
                                     "largest events (threadlog redact) or fork it before them (threadlog fork --at), "
                                     "and ask there",
}


@contextlib.contextmanager
def _answer_named(store: Store, thread: str) -> Iterator[None]:
    """`ask` on a thread that waits on an interrupt is refused naming the commands that settle
    it, whole: the library names its functions, and `threadlog interrupt resolve` alone left the
    thread, the interrupt id and --answer to be found."""
    try:
        yield
    except InvalidEvent as error:
        if error.field != "thread":
            raise
        pending = store.pending_interrupts(thread)  # the thread's row alone: the state was just folded to refuse the turn
        interrupt_id = pending[0] if pending else None
        if interrupt_id is not None and error.why == unsettled(thread, interrupt_id):
            answer = command_line("threadlog interrupt resolve", [thread, interrupt_id], "--answer TEXT")
            cancel = command_line("threadlog interrupt cancel", [thread, interrupt_id])
            error.why = unsettled(thread, interrupt_id, f"`{answer}`", f"`{cancel}`")
            error.args = (f"{error.field}: {error.why}",)
            _shown_whole(answer, cancel)
        elif open_runs := thread_state(store, thread).open_runs:  # the command that closes a run a killed process left open
            from ..live import closing_command  # loaded already: the turn was refused by it

            _shown_whole(closing_command(thread, open_runs[-1]))
        raise


def _no_text(turn: Turn) -> str:
    """Why `ask` printed no answer, or one cut short (refused part-way, cut off, stopped for a reason
    it does not know): the last answer's stop reason and what it means (`_stop_said`)."""
    answer = turn.messages[-1].data if turn.messages else {}
    said = _stop_said(answer)
    why = f" ({said})" if said else ""
    what = "has no text" if not turn.text.strip() else "is cut short"
    return (f"the answer {what}: the model stopped with stop_reason {answer.get('stop_reason')!r}{why}; "
            f"the turn is recorded (`threadlog show {turn.thread} --last 2` shows it)")


def _stop_said(answer: dict[str, Any]) -> str:
    """What the answer's stop reason means, when `ask` names it: a refusal's category and
    explanation, what cut the answer short, or that the reason is none this release knows."""
    reason = answer.get("stop_reason")
    if reason in _CUT_SHORT:
        return _CUT_SHORT[reason]
    if reason == REFUSED or cut_reason(answer, last=True) is None:  # the turn's last answer
        return stop_details_said(answer)
    return cut_by(str(reason))  # as rows and `show` say it


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=int, required=True,
              help="Fork point: the first N events are kept (they must hold a message; thread.created is event 1); "
                   "the user messages after them are replayed.")
@click.option("--model", callback=_model_name, required=True, help="The model to replay the later user messages with.")
@click.option("--stream", is_flag=True, help="Use the streaming API.")
@api_options
@json_option
@with_store("write")
def rerun(store: Store, thread: str, at: int, model: str, stream: bool, api_timeout: float | None, api_retries: int | None,
          as_json: bool) -> None:
    """Fork THREAD at N and replay its later user messages with MODEL; prints the fork's id,
    alone (then: threadlog diff THREAD FORK)."""
    from ..live import rerun as replay

    store.check_fork_point(thread, at, doing="rerun")  # what the store can say, before the key only the API needs
    with _client(api_timeout, api_retries) as client, waking():
        fork_id = replay(store, thread, at, client, model=model, stream=stream)
    _committed(f"created fork {fork_id} of thread {thread}, replayed with {model}", command_line("threadlog diff", [thread, fork_id]))
    if as_json:
        _emit_json(store.thread(fork_id).to_json())
    else:
        click.echo(fork_id)
    info = store.thread(fork_id)
    runs = [e.data for e in store.read(fork_id, start=info.base) if e.type == "run.finished"]
    for run in runs:  # an error the API sent after a whole answer, which is kept: said as `ask` says it
        if run.get("status") == "ok" and run.get("error"):
            _note(str(run['error']))
    if runs and runs[-1].get("status") != "ok":  # a replayed turn failed: the replay stopped there (it said 0 and nothing)
        _fail(f"the replay stopped: a turn ended {runs[-1].get('status')}: {runs[-1].get('error') or 'no reason given'}; "
              f"fork {fork_id} keeps what was replayed", EXIT_UNPRINTED)  # committed: a retry would fork again


@cli.command("usage")
@click.argument("thread", type=THREAD)
@json_option
@with_store()
def usage_command(store: Store, thread: str, as_json: bool) -> None:
    """Tokens spent by THREAD and by each fork below it, and the input read from the prompt cache.

    answers: each thread's own assistant messages that carry usage (`messages` in --json), a
    fork's inherited ones counted once, in its parent's row; `ls` counts every message. A token
    count no response could hold (negative, not a whole number) is not counted: stderr names the
    threads whose answers held one (`left_out` in --json), which keep it as recorded."""
    rows = usage(store, thread)
    if as_json:
        _emit_json({"threads": [r.to_json() for r in rows], "total": usage_total(rows, thread).to_json()})
    else:
        output.lines(usage_lines(rows, usage_total(rows, thread)))
        for line in usage_left_out(rows):
            click.echo(line, err=True)
