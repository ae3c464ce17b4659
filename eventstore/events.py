"""The event catalogue: one pydantic model per event type, with its schema version.

`type` strings and field names are part of the contract (ARCHITECTURE.md). Validation
happens once, at append time; readers get plain dicts back, upcast to the current version
by the chain in `UPCASTERS`, and never pay for model validation again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from .content import first_error, normalize_content, validate_system, validate_thinking, validate_tools
from .errors import InvalidEvent, key_not_text, shown
from .ids import check_id
from .settings import check_restored_settings, check_settings

# Text in events is `str` and nothing else: pydantic's lax mode decoded bytes given for it (a
# title of b"x" was stored as "x"), where any other value of the wrong kind is refused.
Text = Annotated[str, Strict()]
Json = dict[Text, Any]


def _named(value: str) -> str:
    if not value.strip():
        raise ValueError(f"{value!r} is blank: name a model, or leave it out")
    return value


# The model a thread or a fork names for its requests. A blank one names no model: a fork given
# `config={"model": ""}` lost its parent's, and its requests then named none (the CLI's
# `--model` refused it already).
ModelName = Annotated[str, Strict(), AfterValidator(_named)]


def _thinking(value: Json) -> Json:
    validate_thinking(value, "thinking")
    return value


# The Messages API `thinking` parameter, as the SDK types it (validated against its members).
Thinking = Annotated[Json, AfterValidator(_thinking)]

# The deepest JSON an event may hold, counted in containers: `data` itself is level 1,
# `{"patch": {"a": [1]}}` is 3 levels deep. Anthropic content with tool inputs and JSON
# Schemas stays far below it; far above it (about 1,000) Python's json module and every
# recursive walk over the data raise RecursionError, so deeper events are refused.
MAX_DEPTH = 100


class _Model(BaseModel):
    # Built on first use, not at import: a command that validates no event (`threadlog ls`, a
    # reader) starts ~30 ms sooner. Safe with threads since pydantic 2.14, the first release
    # whose `model_rebuild` holds a lock (pydantic/pydantic#13438), hence the pin; before it,
    # threads validating one type first at once could meet a half-built validator and refuse
    # a valid event (pydantic/pydantic#13419).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class EventData(_Model):
    """Base of every event's `data` model."""

    type: ClassVar[str]
    schema_version: ClassVar[int] = 1


class Source(_Model):
    """Where an imported event came from: the other tool's own identity for it.

    One event may stand for several source lines (an API response Claude Code wrote one
    content block per line): `uuid`, `parentUuid` and `timestamp` are the first line's,
    `uuids` the others'. Field names follow the source format's spelling.
    """

    tool: Literal["claude-code", "pi", "swe-agent"]
    file: Text = Field(description="the session file, as named when it was imported")
    line: int | None = Field(default=None, ge=1, description="1-based line number of the first line")
    uuid: Text | None = None
    parentUuid: Text | None = None  # noqa: N815 - the source format's name
    timestamp: Text | None = None
    uuids: list[Text] | None = Field(default=None, description="the other lines merged into this event")
    flags: dict[Text, Any] | None = Field(
        default=None,
        description="the lines' own flags (isMeta, isCompactSummary, isSidechain, agentId, …) and "
        "`injected`: text the tool put in the user's turn, not typed by the user (`attachment`: "
        "the kind of attachment line it came from); `injected_blocks`: the indexes of the blocks "
        "of a message the user typed that the tool wrote before what was typed",
    )
    tool_use_results: dict[Text, Any] | None = Field(
        default=None, description="the tool-specific result the source kept beside each tool_result, by tool_use_id"
    )


def _whole(what: str) -> Callable[[Any, ValidationInfo], Any]:
    """The check of an integer field naming `what` it holds (an offset, a position): an int and
    nothing else. pydantic's lax mode stored `true`, `"1"` and 1.0 as 1, so one restored from
    an export keeps the lax check it was written under (an earlier release stored the int)."""
    def check(value: Any, info: ValidationInfo) -> Any:
        if (isinstance(value, bool) or not isinstance(value, int)) and not _restoring(info):
            raise PydanticCustomError("int_type", "must be {what} (an integer), not {kind} {value}",
                                      {"what": what, "kind": type(value).__name__, "value": shown(value)})
        return value
    return check


# The largest offset, position or count an argument may name: SQLite stores 64-bit integers,
# and a larger Python int would fail deep in the driver (OverflowError) instead of here.
MAX_INDEX = 2**62


def _in_range(value: int, info: ValidationInfo) -> int:
    """An offset no check beside it bounds (a deleted checkpoint's, which may name another
    stream's): 0..MAX_INDEX, as an argument's. One restored from an export keeps what an
    earlier release let it hold (-1 or 10**30 was stored)."""
    if _restoring(info) or 0 <= value <= MAX_INDEX:
        return value
    if value < 0:
        raise PydanticCustomError("greater_than_equal", "must be an offset >= 0, not {value}", {"value": shown(value)})
    raise PydanticCustomError("less_than_equal", "{value} is too large: an offset is at most {most}",
                              {"value": shown(value), "most": MAX_INDEX})


# An offset in a thread's history (a compaction's cut, a fork point) and a global position.
Offset = Annotated[int, BeforeValidator(_whole("an offset"))]
Position = Annotated[int, BeforeValidator(_whole("a position"))]
# A retrieval passage: the offset of the message it is in, and its part (the bound before the
# check, so the JSON Schema states it as `minimum`).
Passage = tuple[Annotated[int, Field(ge=0), BeforeValidator(_whole("an offset"))],
                Annotated[int, Field(ge=0), BeforeValidator(_whole("a part number"))]]


class SentRequest(_Model):
    """The Messages API request a live turn sent for the assistant message it is attached to.

    `digest` is `sha256:<hex>` of the exact HTTP body; `model`, `max_tokens` and `stream` are
    the settings the thread does not hold, so `anthropic_request(store, thread, at=offset,
    model=..., max_tokens=...)` can rebuild that body from the log and prove it unchanged.
    """

    id: Text | None = Field(default=None, description="the API's request id (`request-id` header)")
    digest: Annotated[Text, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    model: Text
    max_tokens: int = Field(ge=1)
    stream: bool = False
    retrieval: Literal["per_turn", "first_turn", "off"] | None = Field(
        default=None, description="a note fork's retrieval mode, when the turn overrode the recorded one"
    )
    extra_tools: list[dict[Text, Any]] | None = Field(
        default=None, description="tool definitions sent after the thread's own (e.g. the transcript tools)"
    )
    passages: dict[Annotated[Text, Field(pattern=r"^[0-9]{1,15}$")],
                   Annotated[list[Passage], Field(max_length=64)]] | None = Field(
        default=None, description="a note fork's retrieval passages the request searched for: by the offset of the user "
                                  "message whose block they are, the (offset, part) of each (projections/retrieval.py)"
    )


def is_time(value: Any) -> bool:
    """Whether `value` is a time in ISO 8601 (`2026-01-31T12:00:00.123Z`, an offset, or a date alone)."""
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


class Meta(_Model):
    """Who and why: carried beside `data`, covered by the hash chain like the data."""

    event_id: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    actor: Text | None = None
    origin: Literal["live", "primed", "imported"] | None = None
    causation_id: Text | None = None
    correlation_id: Text | None = None
    occurred_at: Text | None = Field(
        default=None, description="when it happened at the source, for imported events"
    )
    source: Source | None = Field(default=None, description="the source line(s) of an imported event")
    request: SentRequest | None = Field(
        default=None, description="on an assistant message from a live turn: the request it answered"
    )

    @field_validator("occurred_at")
    @classmethod
    def _a_time(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Shown as the event's time (blame, search hits, the viewer): a time, or nothing. An
        # event restored from an export keeps what an earlier release let it hold.
        if value is not None and not _restoring(info) and not is_time(value):
            raise ValueError("must be a time in ISO 8601, e.g. 2026-01-31T12:00:00Z")
        return value


def _restoring(info: ValidationInfo) -> bool:
    """Whether the event is read back from an export (`parse(restoring=True)`): a rule added
    since it was written does not refuse it."""
    return bool(info.context and info.context.get("restoring"))


def _new_id(value: str, info: ValidationInfo) -> str:
    """An id an event mints (an interrupt's): 1 to 200 printable characters, as every id
    (`check_id`), since it is printed and shown. One restored from an export keeps what an
    earlier release let it hold."""
    if not _restoring(info):
        check_id(str(info.field_name), value)
    return value


NewId = Annotated[Text, AfterValidator(_new_id)]


def _tools(value: list[Json], info: ValidationInfo) -> list[Json]:
    """A thread's tool definitions, each one the SDK knows (`validate_tools`). One restored
    from an export keeps what an earlier release let it hold."""
    if not _restoring(info):
        validate_tools(value, str(info.field_name))
    return value


def _system_blocks(value: list[Json], info: ValidationInfo) -> list[Json]:
    """A system prompt given as blocks: text blocks only (`validate_system`), but for one
    restored from an export."""
    if not _restoring(info):
        validate_system(value, str(info.field_name))
    return value


def _settings(value: Json, info: ValidationInfo) -> Json:
    """A thread's request settings, each a parameter the SDK takes (`check_settings`), but for
    ones restored from an export, which an SDK since may have dropped (`check_restored_settings`)."""
    check = check_restored_settings if _restoring(info) else check_settings
    check(value, str(info.field_name))
    return value


def _setting_changes(value: dict[Text, Any], info: ValidationInfo) -> dict[Text, Any]:
    """A fork's settings: as a thread's, and a null removes the parent's key."""
    check = check_restored_settings if _restoring(info) else check_settings
    check(value, str(info.field_name), removing=True)
    return value


Tools = Annotated[list[Json], AfterValidator(_tools)]
SystemBlocks = Annotated[list[Json], AfterValidator(_system_blocks)]
Settings = Annotated[Json, AfterValidator(_settings)]
SettingChanges = Annotated[dict[Text, Any], AfterValidator(_setting_changes)]


class Todo(_Model):
    content: Text
    status: Literal["pending", "in_progress", "completed"] | None = None
    id: Text | None = None


class ThreadCreated(EventData):
    type: ClassVar[str] = "thread.created"
    title: Text | None = None
    system: Text | SystemBlocks | None = None
    model: ModelName | None = None
    tools: Tools | None = None
    metadata: Json | None = None
    thinking: Thinking | None = Field(
        default=None, description="the Messages API `thinking` parameter (the SDK's ThinkingConfigParam) every request of the "
        "thread and of its forks sends, e.g. {type: enabled, budget_tokens: 2048}"
    )
    settings: Settings | None = Field(
        default=None, description="the other Messages API parameters every request of the thread and of its forks sends "
        "(those the SDK's MessageCreateParams declares that threadlog does not manage), e.g. {stop_sequences: [END], "
        "tool_choice: {type: any}, metadata: {user_id: u1}}"
    )


class MessageAppended(EventData):
    """A user's or the assistant's message: its Anthropic content blocks, and for an answer
    the model, stop reason, usage and every other top-level field the API returned (a request
    sends none of them back: it takes a message's role and content)."""

    type: ClassVar[str] = "message.appended"
    role: Literal["user", "assistant"]
    content: list[Json] = Field(description="Anthropic content blocks; a string becomes one text block")
    message_id: Text | None = None
    model: Text | None = None
    stop_reason: Text | None = None
    stop_sequence: Text | None = Field(
        default=None, description="the custom stop sequence the answer stopped at (stop_reason `stop_sequence`), as the API returned it"
    )
    stop_details: Json | None = Field(
        default=None, description="why the answer stopped, as the API returned it: for a refusal {type: refusal, category, "
        "explanation}"
    )
    usage: Json | None = None
    container: Json | None = Field(
        default=None, description="the code execution container the answer ran in ({id, expires_at}), as the API returned "
        "it: the request that answers tool calls made from its code names it"
    )
    diagnostics: Json | None = Field(
        default=None, description="the request's diagnostics as the API returned them (why the prompt cache missed)"
    )
    context_management: Json | None = Field(
        default=None, description="the context management the API applied to the request (e.g. {applied_edits: [...]}), as returned"
    )
    input_transformations: list[Json] | None = Field(
        default=None, description="the changes the API made to the request's input before the model saw it, as returned"
    )
    extra_fields: Json | None = Field(
        default=None, description="the answer's other top-level fields, as the API returned them: those no field here names "
        "(added to the API since this release)"
    )
    item: Json | None = Field(
        default=None,
        description="the item this message stands for, verbatim, as an agent framework stores it (an OpenAI Agents SDK "
        "session item); `content` holds its text for transcripts and search. Redaction erases it with the content",
    )

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any, info: ValidationInfo) -> list[Json]:
        return normalize_content(value, strict=not _restoring(info))


class RunStarted(EventData):
    """A turn began: the thread shows running until the `run.finished` with the same `run_id`."""

    type: ClassVar[str] = "run.started"
    run_id: Text


class RunFinished(EventData):
    """The turn `run_id` ended: `ok`, `error` (with the reason) or `cancelled`."""

    type: ClassVar[str] = "run.finished"
    run_id: Text
    status: Literal["ok", "error", "cancelled"]
    error: Text | None = None


class InterruptRaised(EventData):
    """The run waits for a person: a question (and for a tool call, its `tool_use_id`) stays
    pending until an `interrupt.resolved` answers it or an `interrupt.cancelled` withdraws it.
    The `tool_use_id` must be a call waiting for its result, and no other pending interrupt's
    (appends refuse any other): the answer becomes that result when the run resumes."""

    type: ClassVar[str] = "interrupt.raised"
    interrupt_id: NewId
    tool_use_id: Text | None = None
    question: Text | None = None
    payload: Any = None


class InterruptResolved(EventData):
    """The answer to a pending interrupt."""

    type: ClassVar[str] = "interrupt.resolved"
    # A pending interrupt's (the facts refuse any other): not checked as a `NewId`, so one an
    # earlier release raised with an id now refused can still be answered or cancelled.
    interrupt_id: Text
    answer: Any = None


class InterruptCancelled(EventData):
    """A pending interrupt withdrawn, with the reason."""

    type: ClassVar[str] = "interrupt.cancelled"
    interrupt_id: Text  # a pending interrupt's, as `InterruptResolved`'s
    reason: Text


class KeepKeys(_Model):
    keep: list[Text]


class ForkConfig(_Model):
    """The agent configuration a fork gives itself: each key given replaces the parent's, the
    others are inherited (or, with `blank`, start empty)."""

    blank: bool | None = Field(default=None, description="start with no system prompt, model, tools, thinking or settings of "
                                                          "the parent's")
    system: Text | SystemBlocks | None = None
    model: ModelName | None = None
    tools: Tools | None = None
    thinking: Thinking | None = None
    settings: SettingChanges | None = Field(
        default=None, description="request settings replacing the parent's key by key (a null removes the parent's key); "
        "the parent's other keys are inherited"
    )


class ForkOptions(_Model):
    todos: Literal["blank", "inherit"] | list[Todo] = "blank"
    metadata: Literal["blank", "inherit"] | KeepKeys | Json = "blank"
    context: Literal["full", "note"] = "full"
    retrieval: Literal["per_turn", "first_turn", "off"] = "off"
    # Tool calls waiting at the fork point: refused, dropped from the fork's view (named in
    # `dropped_tool_use_ids`), or kept waiting in the fork, whose own events may answer them
    # (an imported branch that ran the tools again).
    unanswered: Literal["refuse", "drop", "keep"] = "refuse"
    kind: Literal["fork", "subagent"] = "fork"
    directive: Text | None = None
    transcript: Text | None = Field(
        default=None, description="where the parent's transcript lives, named by the fork note"
    )
    config: ForkConfig | None = Field(default=None, description="absent: the parent's system prompt, model, tools, thinking "
                                                                "and settings")


class ThreadForked(EventData):
    type: ClassVar[str] = "thread.forked"
    parent_id: Text
    parent_offset: Offset = Field(ge=1)
    options: ForkOptions
    dropped_tool_use_ids: list[Text] | None = None
    demoted_interrupt_ids: list[Text] | None = None


class CompactionRecorded(EventData):
    """A summary that stands, in the model's view, for the messages before `through_offset`;
    the messages themselves stay in the log. `prompt_digest` and the token counts say how it was made."""

    type: ClassVar[str] = "compaction.recorded"
    summary: Text
    through_offset: Offset = Field(ge=0)
    model: Text | None = None
    prompt_digest: Text | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class MetadataSet(EventData):
    """Keys merged into the thread's metadata (a null value deletes its key)."""

    type: ClassVar[str] = "metadata.set"
    patch: Json = Field(description="keys to set; a null value deletes the key")


class TodosSet(EventData):
    """The thread's todo list, whole: it replaces the one before."""

    type: ClassVar[str] = "todos.set"
    todos: list[Todo]


class TitleSet(EventData):
    """The thread's new title."""

    type: ClassVar[str] = "title.set"
    title: Text


class EventRedacted(EventData):
    type: ClassVar[str] = "event.redacted"
    position: Position = Field(ge=1)
    reason: Text = Field(min_length=1)
    actor: Text = Field(min_length=1)
    skeleton_digest: Text | None = Field(
        default=None, description="SHA-256 of what the redaction left in the row (absent in early redactions)"
    )
    pending: dict[Text, list[Text]] | None = Field(
        default=None,
        description="What was pending after the erased event (run, tool_use and interrupt ids), recorded when its "
        "payload was nested too deeply to read them back from the skeleton",
    )


class LangGraphCheckpoint(EventData):
    """A LangGraph checkpoint (threadlog.integrations.langgraph): its header, its metadata and
    the channel values that are new in it (each stored once per version)."""

    type: ClassVar[str] = "langgraph.checkpoint"
    checkpoint_id: Text
    parent_id: Text | None = None
    follows: bool | None = Field(
        default=None, description="instead of parent_id: the parent is the checkpoint of the stream's checkpoint event before"
    )
    checkpoint: Json | None = Field(default=None, description="v, ts, channel_versions, versions_seen, updated_channels")
    changes: Json | None = Field(
        default=None, description="instead of checkpoint: how it differs from the parent's (key, key+, key-, -)"
    )
    delta: Json | None = Field(
        default=None,
        description="instead of checkpoint: changes less what the values say (their versions, updated_channels) "
        "and ts as microseconds from the id's time",
    )
    metadata: Json | None = Field(
        default=None, description="absent: the parent's with step + 1, changed by metadata_delta (key, key+, key-, -)"
    )
    metadata_delta: Json | None = None
    values: Json = Field(
        default_factory=dict,
        description="channel -> {v: version, and json | dict | messages (+ after: the version they extend) | serde + b64 "
        "| w: 0, the parent's only pending write to the channel}",
    )
    absent: list[Text] | None = Field(default=None, description="channels with a version but no value (emptied)")
    restated: bool | None = Field(
        default=None, description="a copy of an earlier checkpoint with all its values, written before what it rested on was erased"
    )


class LangGraphWrites(EventData):
    """A LangGraph task's pending writes against one checkpoint."""

    type: ClassVar[str] = "langgraph.writes"
    checkpoint_id: Text | None = Field(
        default=None, description="absent: the checkpoint of the stream's checkpoint event before"
    )
    task_id: Text
    task_path: Text = ""
    writes: list[Json] = Field(
        description="{idx, channel, value} with value stored as in langgraph.checkpoint, or {input: key}: that key of the "
        "checkpoint's own __start__ value"
    )


class LangGraphDeleted(EventData):
    """LangGraph checkpoints removed (delete_thread, delete_for_runs, prune): hidden from
    then on; their payloads are erased by redaction where no other thread still holds them."""

    type: ClassVar[str] = "langgraph.deleted"
    checkpoint_ids: list[Text]
    reason: Literal["delete_thread", "delete_for_runs", "prune"]
    at: dict[Text, tuple[Text, Annotated[Offset, AfterValidator(_in_range)]]] | None = Field(
        default=None, description="checkpoint id -> the stream and offset of its event, where a checkpoint put on it branches "
        "(its event is erased: no reader can find it there)"
    )


CATALOGUE: dict[str, type[EventData]] = {
    model.type: model
    for model in (
        ThreadCreated,
        MessageAppended,
        RunStarted,
        RunFinished,
        InterruptRaised,
        InterruptResolved,
        InterruptCancelled,
        ThreadForked,
        CompactionRecorded,
        MetadataSet,
        TodosSet,
        TitleSet,
        EventRedacted,
        LangGraphCheckpoint,
        LangGraphWrites,
        LangGraphDeleted,
    )
}

# Upcasters: (type, version) -> a function turning data of that version into version + 1.
# A database written by an older release stores older versions; `upcast` walks the chain
# on read, so projections only ever see the current shape. Add an entry here (and bump the
# model's `schema_version`) whenever a model changes shape.
UPCASTERS: dict[tuple[str, int], Callable[[Json], Json]] = {}


def upcast(type_: str, version: int, data: Json) -> Json:
    model = CATALOGUE.get(type_)
    current = model.schema_version if model else version
    while version < current:
        data = UPCASTERS[(type_, version)](data)
        version += 1
    return data


class Event(_Model):
    """An event to append: its `type`, its `data` and its `meta`."""

    type: Text
    data: Json = Field(default_factory=dict)
    meta: Meta = Field(default_factory=Meta)

    @classmethod
    def of(cls, data: EventData, **meta: Any) -> Event:
        return cls(type=data.type, data=data.model_dump(exclude_none=True), meta=Meta(**meta))


_SCALARS = frozenset((str, int, float, bool, type(None)))


def check_depth(value: Any, field: str) -> None:
    """Refuse JSON nested more than `MAX_DEPTH` containers deep (a cycle counts as too deep).

    The walk uses its own stack, not Python's, so it cannot itself raise RecursionError;
    it stops at the first container past the limit. `field` is where `value` sits; the
    error names the key of `value` that holds the deep part.
    """
    containers = (dict, list, tuple)
    todo: list[tuple[Any, int, str]] = []
    top = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, containers) else ()
    for key, child in top:
        if isinstance(child, containers):
            todo.append((child, 2, _path(field, key)))
    scalars = _SCALARS
    while todo:
        node, depth, where = todo.pop()
        if depth > MAX_DEPTH:
            raise InvalidEvent(where, f"JSON nested more than {MAX_DEPTH} levels deep; an event holds at most {MAX_DEPTH} "
                               "(store deeper structures as text, or flatten them)")
        depth += 1
        for child in node.values() if isinstance(node, dict) else node:
            if type(child) not in scalars and isinstance(child, containers):
                todo.append((child, depth, where))


def too_deep(value: Any, field: str) -> InvalidEvent:
    """The error for `value`, known to be nested too deeply (a RecursionError met it)."""
    try:
        check_depth(value, field)
    except InvalidEvent as error:
        return error
    return InvalidEvent(field, f"JSON nested too deeply; an event holds at most {MAX_DEPTH} levels")


def _path(field: str, key: Any) -> str:
    """Where the value at `key` of the container at `field` sits (check_depth's spelling)."""
    return f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}" if field else str(key)


_NO_KEY = object()


def _unwritable_key(node: dict[Any, Any]) -> Any:
    """A key of `node` canonical JSON cannot write (`_NO_KEY` if none): one of a kind JSON has no
    key for, or one that cannot be sorted with the others (2 beside "a")."""
    for key in node:
        if key is not None and not isinstance(key, (str, int, float)):
            return key
    try:
        sorted(node)
    except TypeError:
        return next(key for key in node if not isinstance(key, str))
    return _NO_KEY


def unwritable_key(value: Any, field: str) -> InvalidEvent | None:
    """The refusal of the first object in `value` (at `field`) whose keys canonical JSON cannot
    write, named by its path; None if there is none. Walked only once encoding already failed
    with a TypeError: the path costs nothing on the way of an event that encodes."""
    todo: list[tuple[Any, str]] = [(value, field)]
    seen: set[int] = set()
    while todo:
        node, where = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            key = _unwritable_key(node)
            if key is not _NO_KEY:
                return key_not_text(where, key)
            children: list[tuple[Any, Any]] = list(node.items())
        elif isinstance(node, (list, tuple)):
            children = list(enumerate(node))
        else:
            continue
        for key, child in reversed(children):  # the first in order is taken first
            if isinstance(child, (dict, list, tuple)):
                todo.append((child, _path(where, key)))
    return None


def parse(event: Any, field: str = "event", restoring: bool = False) -> tuple[str, Json, Json]:
    """Validate one event (a model, an `Event` or a plain dict) into (type, data, meta).

    The returned data and meta are JSON-ready dicts with unset optional fields left out.
    `restoring`: the event was written before (an export read back), so a rule added to meta
    since (`Meta._a_time`) does not refuse it.
    """
    type_: Any
    data: Any
    meta_in: Any
    if isinstance(event, EventData):
        return event.type, event.model_dump(exclude_none=True), {}
    if isinstance(event, Event):
        type_, data, meta_in = event.type, event.data, event.meta
    elif isinstance(event, dict):
        unknown = set(event) - {"type", "data", "meta"}
        if unknown:
            raise InvalidEvent(f"{field}.{sorted(unknown)[0]}", "unknown key; an event has type, data and meta")
        type_, data, meta_in = event.get("type"), event.get("data", {}), event.get("meta")
        if meta_in is None:
            meta_in = {}
        elif not isinstance(meta_in, (dict, Meta)):  # `[]`, `0` or `""` was taken as no meta (`or {}`)
            raise InvalidEvent(f"{field}.meta", f"must be an object, not {type(meta_in).__name__}")
    else:
        raise InvalidEvent(field, f"expected an event model or a dict, not {type(event).__name__}")
    model = CATALOGUE.get(type_) if isinstance(type_, str) else None
    if model is None:
        raise InvalidEvent(f"{field}.type", f"unknown event type {type_!r}; expected one of {', '.join(CATALOGUE)}")
    if not isinstance(data, dict):
        raise InvalidEvent(f"{field}.data", f"must be an object, not {type(data).__name__}")
    if not isinstance(meta_in, Meta):  # small: checked here; data's depth is checked once serialized
        check_depth(meta_in, f"{field}.meta")
    validated = validate_data(model, data, f"{field}.data", restoring)
    try:
        meta = meta_in if isinstance(meta_in, Meta) else Meta.model_validate(meta_in, context={"restoring": restoring})
    except ValidationError as error:
        raise first_error(error, f"{field}.meta") from None
    return type_, validated, meta.model_dump(exclude_none=True)


def validate_data(model: type[EventData], data: Json, field: str = "data", restoring: bool = False) -> Json:
    """An event's data validated by its type's model (`CATALOGUE`), JSON-ready, unset optional
    fields left out; a refusal (`InvalidEvent`) names the field below `field`. `parse` without
    the envelope and meta: `verify` checks each stored event's data with it."""
    try:
        return model.model_validate(data, context={"restoring": restoring}).model_dump(exclude_none=True)
    except ValidationError as error:
        raise first_error(error, field) from None
    except RecursionError:  # content validation walks the blocks recursively
        raise too_deep(data, field) from None
    except InvalidEvent as error:  # raised by a field validator (content blocks)
        raise InvalidEvent(f"{field}.{error.field}", error.why) from None
