"""The commands that write a conversation: `init`, `new`, `append`, `emit`, `fork`,
`fan-out` and `report`, the `interrupt` group (a question a run puts to a human), and
`demo`, which writes a sample one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from eventstore import FORK_BOILERPLATE, Store
from eventstore.errors import named
from eventstore.store import is_url
from projections import write_transcript

from .. import output
from ..demo import build_demo, demo_lines
from ..names import THREAD
from ..note_fork import fork_with_transcript
from ..render import command_line, counted, safe
from ..settling import cancel_interrupt, resolve_interrupt
from ..subagents import STATUSES, questions, report, settled
from .group import _committed, _named_as_typed, cli
from .opening import _pass_db, with_store
from .options import (FilePath, InputFile, JSONText, Setting, _input_name, _model_name, _parse_json, _read_text, _stated, check_typed,
                      db_option, json_option)
from .printing import _emit_json


@cli.command()
@json_option
@with_store("create")
def init(store: Store, as_json: bool) -> None:
    """Create the database, or migrate it to this release's schema."""
    streams, events = store.counts()
    if as_json:
        _emit_json({"path": store.path, "schema_version": store.schema_version(), "threads": streams, "events": events})
    else:
        output.lines([f"{store.path}: schema {store.schema_version()}, {counted(streams, 'thread')}, {counted(events, 'event')}"])


def _meta_pairs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for value in values:
        check_typed(ctx, param, value)  # the dict made here is no longer what was typed
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        pairs[key] = val
    return pairs


def _setting_pairs(_: click.Context, __: click.Parameter, values: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """--setting KEY=JSON (repeatable): request settings by key, each given once."""
    settings: dict[str, Any] = {}
    for key, value in values:
        if key in settings:
            raise click.BadParameter(f"{key} is given twice")
        settings[key] = value
    return settings


def _given(name: str) -> bool:
    """Whether the running command's option `name` was given: a JSON option's value may be
    JSON's null, as a value not given is."""
    return click.get_current_context().get_parameter_source(name) is not click.core.ParameterSource.DEFAULT


def _recorded(event: Any, as_json: bool) -> None:
    """What append, emit and the interrupt commands print: where the event landed."""
    _committed(f"{event.type} recorded on thread {event.stream_id} at offset {event.offset} (position {event.position})",
               command_line("threadlog log", [event.stream_id], f"--start {event.offset}"))
    if as_json:
        _emit_json(event.to_json())
    else:
        output.lines([f"offset {event.offset} position {event.position}"])


@cli.command()
@click.option("--title", help="The thread's title.")
@click.option("--system", help="The system prompt.")
@click.option("--model", callback=_model_name, help="The model the thread talks to.")
@click.option("--metadata", "--meta", "metadata", multiple=True, callback=_meta_pairs, metavar="K=V",
              help="A thread metadata entry (repeatable; --meta is the same).")
@click.option("--thinking-budget", type=click.IntRange(min=1024), metavar="TOKENS",
              help="Extended thinking for every request of the thread, its forks and sub-agents, with this budget.")
@click.option("--setting", "settings", multiple=True, type=Setting(), callback=_setting_pairs, metavar="KEY=JSON",
              help="A Messages API parameter every request of the thread, its forks and sub-agents sends (repeatable), "
                   "its value as JSON: stop_sequences='[\"END\"]', tool_choice='{\"type\": \"any\"}', "
                   "metadata='{\"user_id\": \"u1\"}' (the request's, not --metadata), service_tier='\"auto\"', "
                   "output_config, speed, inference_geo, diagnostics; checked against the installed anthropic SDK.")
@json_option
@with_store("create")
def new(store: Store, title: str | None, system: str | None, model: str | None, metadata: dict[str, str], thinking_budget: int | None,
        settings: dict[str, Any], as_json: bool) -> None:
    """Start a thread; prints its id, alone."""
    thinking = {"type": "enabled", "budget_tokens": thinking_budget} if thinking_budget else None
    thread = store.create_thread(title=title, system=system, model=model, metadata=metadata or None, thinking=thinking,
                                 settings=settings or None)
    _committed(f"created thread {thread}", command_line("threadlog show", [thread]))
    if as_json:
        _emit_json(store.thread(thread).to_json())
    else:
        click.echo(thread)


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--role", type=click.Choice(["user", "assistant"]), required=True, help="Who speaks.")
@click.option("--text", help="The message text.")
@click.option("--content", "content_file", type=InputFile(), metavar="FILE|-",
              help="JSON content blocks (or a JSON string) from a file or stdin.")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@click.option("--actor", help="Who wrote it (recorded in the event's meta).")
@json_option
@with_store("write")
def append(store: Store, thread: str, role: str, text: str | None, content_file: str | None, expect: int | None, actor: str | None,
           as_json: bool) -> None:
    """Append a message to THREAD; prints its offset and position."""
    if (text is None) == (content_file is None):
        raise click.UsageError("give exactly one of --text or --content")
    if text is not None and not text.strip():  # `--text "$MSG"` with MSG unset: a blank message no request sends
        raise click.BadParameter("is empty: give the message text", param_hint="--text")
    content = text if text is not None else _parse_json(_read_text(content_file or "-", "--content"), "--content")
    meta = {"actor": actor} if actor else {}
    given = {"events[0].data.content": "--text" if text is not None else "--content", "events[0].meta.actor": "--actor"}
    with _named_as_typed(given):
        event = store.append_message(thread, role, content, expect="any" if expect is None else expect, **meta)
    _recorded(event, as_json)


@cli.command()
@click.argument("thread", type=THREAD)
@click.argument("type_", metavar="TYPE")
@click.option("--data", type=JSONText(), metavar="JSON", help="The event's data as JSON.")
@click.option("--data-file", type=InputFile(), metavar="FILE|-", help="The event's data as JSON, from a file or stdin.")
@click.option("--event-meta", "meta", type=JSONText(), metavar="JSON", help="The event's meta as JSON (event_id, actor, origin, …).")
@click.option("--expect", type=click.IntRange(min=0), help="Refuse unless the thread holds exactly N events.")
@json_option
@with_store("write")
def emit(store: Store, thread: str, type_: str, data: Any, data_file: str | None, meta: Any, expect: int | None,
         as_json: bool) -> None:
    """Append one event of any TYPE to THREAD; prints its offset and position."""
    if _given("data") == (data_file is not None):  # `--data null` is given, as JSON's null
        raise click.UsageError("give exactly one of --data or --data-file")
    if data_file is not None:
        path = data_file or "-"
        data = _parse_json(_read_text(path, "--data-file"), f"--data-file ({_input_name(path)})")
    if not _given("meta"):
        meta = {}
    event = {"type": type_, "data": data, "meta": meta}
    _recorded(store.append(thread, [event], expect="any" if expect is None else expect)[0], as_json)


def _metadata_choice(ctx: click.Context, param: click.Parameter, value: str) -> Any:
    check_typed(ctx, param, value)
    if value in ("blank", "inherit"):
        return value
    if value.startswith("keep:"):
        # Spaces around a key are the shell's, not the key's: `keep:user, tenant` kept `user` alone.
        keys = [key.strip() for key in value[5:].split(",")]
        if all(keys):
            return {"keep": keys}
        raise click.BadParameter("keep:K1,K2 names metadata keys separated by commas, and one of them is empty")
    raise click.BadParameter("use blank, inherit or keep:K1,K2")


@cli.command()
@click.argument("thread", type=THREAD)
@click.option("--at", type=int, help="How many of the parent's events the fork inherits (default: all).")
@click.option("--todos", type=click.Choice(["blank", "inherit"]), default="blank", show_default=True,
              help="blank: the fork starts with no todos; inherit: it keeps the parent's.")
@click.option("--metadata", default="blank", show_default=True, callback=_metadata_choice, metavar="blank|inherit|keep:K1,K2",
              help="The fork's thread metadata: none, the parent's, or only the keys named.")
@click.option("--context", type=click.Choice(["full", "note"]), default="full", show_default=True,
              help="full: the parent's messages; note: one fork note pointing at the transcript.")
@click.option("--retrieval", type=click.Choice(["per-turn", "first-turn", "off"]), default="off", show_default=True,
              help="With --context note: which requests also carry the passages of the parent's history (below the "
                   "fork point) a search finds most relevant to the turn's user message: every turn's, the first "
                   "turn's only, or none.")
@click.option("--unanswered", type=click.Choice(["refuse", "drop", "keep"]), default="refuse", show_default=True,
              help="Tool calls waiting for a result at the fork point: refuse the fork, drop them from its view, "
                   "or keep them waiting in the fork (its next message may answer them).")
@click.option("--transcript", "transcript_path", metavar="PATH", type=FilePath(),
              help="With --context note: write the parent's transcript, as of the fork point, to PATH (atomically, "
                   "before forking) and name it in the fork note.")
@click.option("--title", help="The fork's own title (default: the parent's).")
@click.option("--system", help="The fork's own system prompt (default: the parent's).")
@click.option("--model", callback=_model_name, help="The fork's own model (default: the parent's).")
@click.option("--thinking-budget", type=click.IntRange(min=1024), metavar="TOKENS",
              help="Extended thinking for every request of the fork (and its own forks), with this budget, in place "
                   "of the parent's thinking (default: the parent's).")
@click.option("--no-thinking", is_flag=True, help="The fork's requests ask for no extended thinking, whatever the parent's.")
@click.option("--blank-config", is_flag=True,
              help="Inherit none of the parent's system prompt, model, tools, thinking and settings (--system, --model, "
                   "--thinking-budget and --setting still apply).")
@click.option("--setting", "settings", multiple=True, type=Setting(), callback=_setting_pairs, metavar="KEY=JSON",
              help="A request setting of the fork's (repeatable), its value as JSON, replacing the parent's for KEY "
                   "(null removes the parent's): e.g. tool_choice='{\"type\": \"auto\"}' or stop_sequences=null. "
                   "The parent's other settings are inherited.")
@json_option
@with_store("write")
def fork(store: Store, thread: str, at: int | None, todos: str, metadata: Any, context: str, retrieval: str, unanswered: str,
         transcript_path: str | None, title: str | None, system: str | None, model: str | None, thinking_budget: int | None,
         no_thinking: bool, blank_config: bool, settings: dict[str, Any], as_json: bool) -> None:
    """Fork THREAD in O(1); prints the fork's id, alone.

    The fork keeps the parent's title, system prompt, model, tools, thinking and request
    settings unless told otherwise: a narrower agent gets its own with --system, --model,
    --thinking-budget (or --no-thinking), --setting or --blank-config."""
    if thinking_budget is not None and no_thinking:
        raise click.UsageError("--thinking-budget turns thinking on, --no-thinking off: give one of them")
    thinking = {"type": "disabled"} if no_thinking else None if thinking_budget is None else {
        "type": "enabled", "budget_tokens": thinking_budget}
    config = {key: value for key, value in (("blank", blank_config or None), ("system", system), ("model", model),
                                            ("thinking", thinking), ("settings", settings or None)) if value is not None}
    if transcript_path == "-":
        raise click.BadParameter("names the file the fork note points the model at: not stdout (-)", param_hint="--transcript")
    options = {"todos": todos, "metadata": metadata, "retrieval": retrieval, "unanswered": unanswered, "config": config or None,
               "title": title}
    if transcript_path and context == "note":  # the note names PATH: it is there when the fork is
        fork_id = fork_with_transcript(store, thread, transcript_path, at, **options)
    else:
        fork_id = store.fork(thread, at, context=context, transcript=transcript_path, empty="refuse", **options)
    _committed(f"created fork {fork_id} of thread {thread}", command_line("threadlog tree", [fork_id]))
    if as_json:
        _emit_json(store.thread(fork_id).to_json())
    else:
        click.echo(fork_id)


@cli.command("fan-out")
@click.argument("thread", type=THREAD)
@click.argument("directives", nargs=-1, required=True)
@click.option("--placeholder", help="The tool_result text every sub-agent fork answers the pending tool calls with.")
@click.option("--boilerplate", is_flag=True,
              help="Put the fork sub-agent design's <fork-boilerplate> (a worker's rules and report form) before each "
                   "directive.")
@json_option
@with_store("write")
def fan_out(store: Store, thread: str, directives: tuple[str, ...], placeholder: str | None, boilerplate: bool,
            as_json: bool) -> None:
    """Launch one sub-agent fork of THREAD per DIRECTIVE, in one transaction; prints their ids.

    THREAD's last message must be an assistant turn whose tool calls await results: each fork
    answers them with the same placeholder, then adds its own directive (after the same
    boilerplate, with --boilerplate). Run one with `threadlog ask KID` (no text: it answers
    its directive), deliver its answer to THREAD with `threadlog report KID`, and list its
    questions with `threadlog interrupt list THREAD`. Refused when those tool calls already
    have sub-agents (a fan-out killed before it printed their ids): the error names them.
    """
    extra = {} if placeholder is None else {"placeholder": placeholder}
    ids = store.fan_out(thread, list(directives), boilerplate=FORK_BOILERPLATE if boilerplate else None, **extra)
    _committed(f"created {len(ids)} sub-agent fork(s) of thread {thread}: {', '.join(ids)}", command_line("threadlog tree", [thread]))
    if as_json:
        _emit_json([store.thread(i).to_json() for i in ids])
    else:
        output.lines(ids)


@cli.command("report")
@click.argument("subagent", type=THREAD)
@click.option("--text", help="Deliver this instead of the sub-agent's final answer (e.g. why it failed).")
@click.option("--status", type=click.Choice(STATUSES), default="completed", show_default=True,
              help="The notification's status.")
@json_option
@with_store("write")
def report_(store: Store, subagent: str, text: str | None, status: str, as_json: bool) -> None:
    """Deliver SUBAGENT's final answer to the thread that launched it (fan-out), as one
    <task-notification> user message; prints its offset in that thread and its position.

    The first report also answers the parent's tool calls the sub-agent was launched from,
    with the placeholder the sub-agent saw, and cancels an interrupt one of them waited on
    (saying so on stderr). Reporting the same answer again writes nothing.
    """
    if text is not None and not text.strip():
        raise click.UsageError("--text is empty; leave it out to deliver the sub-agent's final answer")
    last = store.last_position()
    delivered = report(store, subagent, text, status=status)
    _recorded(delivered, as_json)
    for cancelled in settled(store, delivered) if delivered.position > last else ():  # not again for a report delivered before
        click.echo(safe(f"cancelled interrupt {named(cancelled.data['interrupt_id'])} of thread {delivered.stream_id}: "
                        f"{cancelled.data['reason']}"), err=True)


@cli.group()
@db_option
def interrupt(db: str | None) -> None:
    """Raise, resolve, cancel or list interrupts: the questions a run puts to a human."""
    _pass_db(db)


# The argument every interrupt command takes, as `append` names it and as `resolve_interrupt` and
# `cancel_interrupt` do (their parameter).
_INTERRUPT_ID = {"events[0].data.interrupt_id": "INTERRUPT_ID", "interrupt_id": "INTERRUPT_ID"}


@interrupt.command("raise")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--question", help="What the human is asked.")
@click.option("--tool-use-id", help="The tool call that waits on the answer (one waiting for its result on THREAD); "
              "the answer becomes its result.")
@json_option
@with_store("write")
def interrupt_raise(store: Store, thread: str, interrupt_id: str, question: str | None, tool_use_id: str | None, as_json: bool) -> None:
    """Record that THREAD waits on a human for INTERRUPT_ID."""
    data = {"interrupt_id": interrupt_id, "question": question, "tool_use_id": tool_use_id}
    event = {"type": "interrupt.raised", "data": {k: v for k, v in data.items() if v is not None}}
    with _named_as_typed({**_INTERRUPT_ID, "events[0].data.question": "--question", "events[0].data.tool_use_id": "--tool-use-id"}):
        (recorded,) = store.append(thread, [event])
    _recorded(recorded, as_json)


def _answer_given(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # Not `required`: `--answer null` (no answer) is one, and click took its None for none given.
    if ctx.get_parameter_source(str(param.name)) is click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give the human's answer with --answer TEXT (--answer null records none); "
                               "`threadlog interrupt cancel` withdraws the question instead", ctx)
    return value


@interrupt.command("resolve")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--answer", type=JSONText(or_text=True), metavar="TEXT", callback=_answer_given,
              help="The human's answer (JSON if it parses as JSON, else text; null: none).  [required]")
@json_option
@with_store("write")
def interrupt_resolve(store: Store, thread: str, interrupt_id: str, answer: Any, as_json: bool) -> None:
    """Record the human's answer to INTERRUPT_ID on THREAD (`threadlog ask` then resumes)."""
    with _named_as_typed({**_INTERRUPT_ID, "answer": "--answer"}):
        event = resolve_interrupt(store, thread, interrupt_id, answer)
    _recorded(event, as_json)


@interrupt.command("cancel")
@click.argument("thread", type=THREAD)
@click.argument("interrupt_id")
@click.option("--reason", default="cancelled", show_default=True, callback=_stated("say why it no longer needs an answer"),
              help="Why it no longer needs an answer.")
@json_option
@with_store("write")
def interrupt_cancel(store: Store, thread: str, interrupt_id: str, reason: str, as_json: bool) -> None:
    """Record that INTERRUPT_ID on THREAD no longer needs an answer."""
    with _named_as_typed({**_INTERRUPT_ID, "reason": "--reason"}):
        event = cancel_interrupt(store, thread, interrupt_id, reason)
    _recorded(event, as_json)


@interrupt.command("list")
@click.argument("thread", type=THREAD)
@json_option
@with_store("read")
def interrupt_list(store: Store, thread: str, as_json: bool) -> None:
    """The questions waiting for a human on THREAD and on the sub-agent forks it launched, one a line:
    the thread asking, the interrupt id, the question. Answer one with
    `threadlog interrupt resolve ASKING_THREAD ID --answer A`, or withdraw it with
    `threadlog interrupt cancel ASKING_THREAD ID`."""
    asked = questions(store, thread)
    if as_json:
        _emit_json([question.to_json() for question in asked])
    else:
        output.lines(f"{q.thread}  {q.interrupt_id}  {q.question or '-'}" for q in asked)
        if not asked:  # as `search` says `no match`: on stderr, stdout left empty for a script
            click.echo("no question waiting", err=True)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the demo's thread ids as JSON.")
@with_store("create")
def demo(store: Store, as_json: bool) -> None:
    """Build a sample conversation (tool call, interrupt, fork, sub-agents) and explain it."""
    ids, built = build_demo(store)
    if built:
        _committed(f"built the demo: thread {ids['thread']} and its forks", command_line("threadlog tree", [str(ids["thread"])]))
    if as_json:
        _emit_json({**ids, "created": built})
        return
    output.lines(demo_lines(store, ids, built))
    parent = str(ids["thread"])
    name = f"{parent}.transcript.md"  # beside the database file; a server's database: here
    path = Path.cwd() / name if is_url(store.path) else Path(store.path).resolve().with_name(name)
    write_transcript(store, parent, path)
    output.lines([f"The whole conversation as bounded Markdown (what a model can be pointed at): {path}"])
