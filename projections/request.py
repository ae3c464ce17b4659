"""`anthropic_request`: a thread, as of any offset, as `client.messages.create` keyword arguments.

The log keeps what the model produced; the request is the API-valid view of it, built from
`thread_state`'s model view (compaction and fork rules already applied):

- empty or whitespace-only text blocks are dropped, and so is a thinking block without a
  signature (the API checks every one's), and a message left empty;
- consecutive messages of one role are merged into one;
- a request that ends on an answer (a paused turn going on) sends its last text without
  trailing whitespace (the API refuses the model's last words ending in it);
- a `tool_use` without a `tool_result` in the next message is left out, and so is a
  `tool_result` whose `tool_use` is not in the message before it (a redaction or a dropped
  call can leave either); `tool_result` blocks come first in their user message;
- `cache_control` set in the stored blocks is removed: the request places its own;
- a tool call id the API would refuse (it takes `^[a-zA-Z0-9_-]+$`: another provider's
  `functions.bash:0`, an empty id) is sent as `api_tool_id` makes it, in the call and in its
  result alike, so the pair still matches; so is an id a call before it used (the log takes an
  id again once its result is in, and the API refuses repeated ids), a server tool's call
  (`server_tool_use`) too, with the blocks of its message that name it (its result);
- a tool result's own blocks lose their blank texts, and their stored `cache_control` when
  with the request's own breakpoints they would be more than the API allows; a failed one
  (`is_error`) left with nothing to say says `NO_OUTPUT` (the API refuses it empty);
- with `thinking` enabled (a budget), a request that ends inside a tool loop whose assistant
  turn does not open with a thinking block (a fork that turned thinking on inside the loop, a
  redacted message) sends `{"type": "disabled"}` instead: the API takes a change of thinking
  only between turns, and the next turn has the thread's thinking again;
- a request that defines no tools (the thread's and `extra_tools` together) while its messages
  hold tool calls (a session imported from Claude Code, pi or SWE-agent, whose files do not
  record the tools' definitions, or a fork of one) defines a placeholder for each tool those
  calls name (`placeholder_tools`) and sends `tool_choice: {"type": "none"}`: the API refuses
  tool_use and tool_result blocks in a request without tools, and the model, which cannot
  call the placeholders, answers in text. Server tool blocks (`server_tool_use`, a web
  search's result) are no client tool calls: they ask for nothing of the kind.

The thread's request settings (`thread.created`'s `settings`, replaced key by key in forks:
`stop_sequences`, `metadata`, `service_tier`, `output_config`, ...) are sent as they are,
each where the SDK writes it, and a `tool_choice` among them so: with placeholder tools the
request still sends `{"type": "none"}` (they cannot be called); one that forces nothing
(`auto`, `none`) is left out of a request that defines no tool; and a request the API would
refuse for its `tool_choice` is refused here instead (`sent_tool_choice`), naming it.

With `cache=True` there are at most three breakpoints (the API allows 4): the end of the
system prompt (tools and system are the head of every request of the thread), the last block
sibling forks share (a fork's inherited history; for a `fan_out` sub-agent, the placeholder
results just before its directive), and the last block of the request, which the next turn
reads back.

Same thread and offset, same bytes: blocks keep the key order they are stored in, and
`request_body` encodes the arguments the way the SDK does (`openapi_dumps`: compact
separators, UTF-8, keys in insertion order). The top-level keys follow the order in which
the SDK's `create` and `stream` write them, so the digest of a body a live turn sent can be
recomputed from the log (`check_request`); tests/test_live.py holds the two equal on the wire.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from eventstore import InvalidEvent, RecordedEvent, Store, collector
from eventstore.errors import named, shown
from eventstore.prepare import check_flag
from eventstore.content import THINKING_BLOCKS, drain, unsent  # drain: the one walker of lazily validated lists

from .retrieval import check_mode, inherited, with_retrieval
from .state import Message, thread_state

DEFAULT_MAX_TOKENS = 4096
EPHEMERAL = {"type": "ephemeral"}
DIGEST_PREFIX = "sha256:"
# What a failed tool result with no content says (the API refuses an empty one).
NO_OUTPUT = "(no output)"

# The thinking blocks; they cannot carry cache_control, so a breakpoint moves to the block before them.
_THINKING_BLOCKS = _UNCACHEABLE = THINKING_BLOCKS

Json = dict[str, Any]


def anthropic_request(
    store: Store,
    thread: str,
    at: int | None = None,
    cache: bool = True,
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    retrieval: str | None = None,
    extra_tools: list[Json] | None = None,
    passages: Json | None = None,
    searched: Json | None = None,
) -> Json:
    """The keyword arguments for `client.messages.create(**kwargs)` of `thread` after its
    first `at` events (default: all): `max_tokens`, `messages`, `model`, the thread's
    settings, `system`, `thinking`, `tool_choice` (the settings' or, with placeholder tools,
    none: see the module doc), `tools`.

    `model` defaults to the thread's model and `max_tokens` to 4096 (more than the thinking
    budget by 4096 when the thread's `thinking` has one; one given is sent as it is, since only
    the client's betas say whether the API takes it at or below the budget: a live turn checks
    it, `check_max_tokens`); a thread without a model needs `model=`. The result is fresh on
    every call: changing it changes nothing in the store. See the module doc for what is left
    out and where breakpoints go.

    `retrieval` (`per_turn`, `first_turn`, `off`; default: what a note fork recorded) adds
    the fork's retrieval blocks (projections/retrieval.py): the passages its live turns
    recorded, and for a turn message without a record, a search (which may catch the index
    up, writing to the index's tables). `passages` is a record that comes first (as a live
    turn writes it in `meta.request`); a dict given as `searched` receives the passages this
    call searched for, in that form (what a live turn records, so the request rebuilds).
    `extra_tools` are tool definitions sent after the thread's own (e.g. `transcript_tools`).
    """
    asked, thread = thread, _sender(store, thread, at)  # errors name the thread asked for
    if isinstance(at, int) and not isinstance(at, bool) and not 0 <= at <= store.head(asked):
        check_request_point(store, asked, at)  # before `thread_state`, whose replay takes 0..head (and named it)
    state = thread_state(store, thread, at)
    if at is not None and not state.messages:  # before the model: at 0 it said the thread names none
        check_request_point(store, asked, at)
    chosen = model or state.model
    if not chosen:
        raise InvalidEvent("model", f"thread {thread!r} names no model; pass model=... (or create the thread with one)")
    if model is not None and not (isinstance(model, str) and model.isprintable()):  # no control, no lone surrogate
        raise InvalidEvent("model", f"must be a model name (printable text), not {shown(model)}")
    check_max_tokens(max_tokens, None, asked)  # the budget is the client's beta's business (`check_max_tokens`)
    if extra_tools is not None and not (isinstance(extra_tools, (list, tuple)) and all(isinstance(tool, dict) for tool in extra_tools)):
        raise InvalidEvent("extra_tools", f"must be a list of tool definitions (dicts), not {shown(extra_tools)}")
    view = state.messages
    if retrieval is not None:
        check_mode(retrieval)
    mode = retrieval or state.retrieval
    if mode != "off" and state.context == "note" and state.parent_offset is not None:
        view, found = with_retrieval(store, thread, view, mode, state.parent_offset, passages)
        if searched is not None:
            searched.update(found)
    elif retrieval not in (None, "off"):
        raise InvalidEvent("retrieval", f"thread {thread!r} is not a context='note' fork: it has no parent history to retrieve")
    if state.context != "note" and view and view[0].kind == "fork_note":
        view = inherited(store, thread, view)  # a fork holding a note fork's turns: their blocks too
    origins: dict[int, int] = {}  # id of a block the view's cleaning copied -> id of the stored block
    with collector.paused():  # the view makes thousands of small containers and no cycles
        messages = _api_view(view, origins)
    if not messages:  # `at` named only when given: `request T` said `at: ...` of an option never typed
        if at is None:
            raise InvalidEvent("messages", f"thread {asked!r} has no message to send")
        raise InvalidEvent("at", f"thread {asked!r} has no message to send as of its first {at} event(s)")
    system = _system(state.system)
    tools = [_uncached(tool) for tool in [*(state.tools or ()), *(extra_tools or ())]] or None
    tool_choice = sent_tool_choice(state.settings.get("tool_choice"), tools, state.thinking, asked)
    if tools is None and any(b.get("type") in _TOOL_BLOCKS for m in messages for b in m["content"]):
        tools, tool_choice = placeholder_tools(messages), TOOL_CHOICE_NONE  # the API wants tools defined
    if cache:
        if system:
            system[-1] = _mark(system[-1])
        elif tools:
            tools[-1] = _mark(tools[-1])
        marks = [_last_cacheable(messages, None)]
        if _forked(view, state.parent_offset):
            shared = _shared_blocks(view, state.parent_offset or 0, state.kind == "subagent")
            marks.insert(0, _last_cacheable(messages, shared, origins))
        marked = list(dict.fromkeys(w for w in marks if w is not None))
        for index, block in marked:
            content = list(messages[index]["content"])  # the view's own list may be shared: copy, then mark
            content[block] = _mark(content[block])
            messages[index] = {"role": messages[index]["role"], "content": content}
        # Stored marks were removed from every top-level block: the request's own are these.
        placed = bool(system or tools) + len(marked)
        if placed + _nested_marks(messages) > MAX_BREAKPOINTS:
            messages = _without_nested_marks(messages)
    elif _nested_marks(messages):
        messages = _without_nested_marks(messages)  # no breakpoints asked for: none sent
    # Key order: as the SDK's `create` writes its body (max_tokens, messages, model, container, the
    # settings, system, thinking, tool_choice, tools).
    kwargs: Json = {"max_tokens": max_tokens or default_max_tokens(state.thinking), "messages": messages, "model": chosen}
    container = _container(store, thread, view, messages)
    if container is not None:
        kwargs["container"] = container
    for key in sorted(state.settings, key=lambda key: _CREATE_ORDER.get(key, len(_CREATE_ORDER))):
        if key != "tool_choice":  # in its place below, as sent_tool_choice makes it
            kwargs[key] = state.settings[key]
    if system:
        kwargs["system"] = system
    if state.thinking:
        kwargs["thinking"] = THINKING_OFF if _unthought_loop(state.thinking, messages) else state.thinking
    if tool_choice:
        kwargs["tool_choice"] = tool_choice
    if tools:
        kwargs["tools"] = tools
    return kwargs


def sent_tool_choice(choice: Json | None, tools: list[Json] | None, thinking: Json | None, thread: str) -> Json | None:
    """The `tool_choice` a request of `thread` sends for its setting `choice`, given the tools it
    defines (the thread's and the turn's extra ones) and its `thinking`; None for none. Raises
    `InvalidEvent`, naming the setting, for a choice the API would refuse in every request:
    one that forces a tool call (`any`, `tool`) where no tool is defined, or while thinking is
    enabled with a budget (the API: "Thinking may not be enabled when tool_choice forces tool
    use"; with `adaptive` thinking it takes `any`, and answers with the call), and a `tool`
    naming a tool not defined. A choice that forces nothing (`auto`, `none`) is left out when
    no tool is defined: it has nothing to choose from. (With placeholder tools the request
    sends `{"type": "none"}` whatever this says: see the module doc.)"""
    if choice is None:
        return None
    if not isinstance(choice, dict):  # restored from an export, which takes what an older SDK did
        raise InvalidEvent("settings.tool_choice", f"{shown(choice)} is no tool choice (an object with a type: auto, any, "
                                                   f"tool or none): fork thread {thread!r} without the setting "
                                                   "(config={'settings': {'tool_choice': None}}; threadlog fork "
                                                   "--setting tool_choice=null), or with one")
    kind = choice.get("type")
    forces = kind in ("any", "tool")
    if not tools:
        if forces:
            raise InvalidEvent("settings.tool_choice", f"{shown(choice)} forces a tool call, but the requests of thread "
                                                       f"{thread!r} define no tool: fork it with tools, or without the setting "
                                                       "(config={'settings': {'tool_choice': None}}; threadlog fork "
                                                       "--setting tool_choice=null)")
        return None
    if kind == "tool":
        names = [tool.get("name") for tool in tools]
        if choice.get("name") not in names:
            defined = ", ".join(repr(name) for name in names if isinstance(name, str))
            raise InvalidEvent("settings.tool_choice.name", f"names tool {shown(choice.get('name'))}, which the requests "
                                                            f"of thread {thread!r} do not define (they define {defined})")
    if forces and thinking is not None and thinking.get("type") == "enabled":
        raise InvalidEvent("settings.tool_choice", f"{shown(choice)} forces a tool call, which the API refuses while "
                                                   f"thinking is enabled, and thread {thread!r} has thinking "
                                                   f"{shown(thinking)}: fork it with thinking {{'type': 'disabled'}}, or with "
                                                   "a tool_choice that forces nothing ({'type': 'auto'})")
    return choice


def _container(store: Store, thread: str, view: list[Message], messages: list[Json]) -> str | None:
    """The id of the code execution container a request must name: that of the answer whose
    tool calls its last message answers, when one of them was made from the container's code
    (a `caller` other than `direct`); the API runs that code on, and refuses the results
    without it. From the log alone, so a request rebuilt from it names the same."""
    if messages[-1]["role"] != "user" or not _results(messages[-1]["content"]):
        return None
    asked = next((m for m in reversed(view) if m.role == "assistant"), None)
    if asked is None or not any(isinstance(b.get("caller"), dict) and b["caller"].get("type") != "direct"
                                for b in asked.content if b.get("type") == "tool_use"):
        return None
    container = store.event_at(thread, asked.offset).data.get("container")
    found = container.get("id") if isinstance(container, dict) else None
    return found if isinstance(found, str) else None


# What a placeholder tool says, the name of the one that stands for calls whose names the API
# would refuse as a tool's, and the tool choice that goes with placeholders: no tool is called.
UNRECORDED_TOOL = ("Stands for a tool this thread's history used; its definition was not recorded, "
                   "so it cannot be called.")
UNRECORDED_TOOL_NAME = "unrecorded_tool"
TOOL_CHOICE_NONE: Json = {"type": "none"}
_TOOL_NAME = re.compile("[a-zA-Z0-9_-]{1,128}")


def placeholder_tools(messages: list[Json]) -> list[Json]:
    """A tool definition for each distinct tool the `tool_use` blocks of `messages` name, in
    order of first use, saying it was not recorded; the calls whose names the API takes for no
    tool's (`^[a-zA-Z0-9_-]{1,128}$`) share one named `unrecorded_tool`. From the messages
    alone, so a request rebuilt from the log has the same ones.

    A tool a tool result references (a `tool_reference` block: what a tool search answers, as
    Claude Code's does) had its definition deferred: its placeholder has `defer_loading`, and the
    deferred come first, in order of first reference (the last tool, which a cached request marks,
    is then one loaded up front). Without them the API refuses the request
    (`tool_reference_unresolved`)."""
    called = dict.fromkeys(name if isinstance(name, str) and _TOOL_NAME.fullmatch(name) else UNRECORDED_TOOL_NAME
                           for m in messages for b in m["content"] if b.get("type") == "tool_use" for name in [b.get("name")])
    referenced = dict.fromkeys(name for m in messages for b in m["content"]
                               if b.get("type") == "tool_result" and isinstance(b.get("content"), list)
                               for r in b["content"] if r.get("type") == "tool_reference"
                               for name in [r.get("tool_name")] if isinstance(name, str) and _TOOL_NAME.fullmatch(name))
    names = [*referenced, *(name for name in called if name not in referenced)] or [UNRECORDED_TOOL_NAME]
    return [{"name": name, "description": UNRECORDED_TOOL, "input_schema": {"type": "object"},
             **({"defer_loading": True} if name in referenced else {})} for name in names]


def default_max_tokens(thinking: Json | None) -> int:
    """The `max_tokens` of a request that names none: 4096, and 4096 more than the thinking
    budget when `thinking` has one (the API wants max_tokens above the budget)."""
    budget = (thinking or {}).get("budget_tokens")
    return DEFAULT_MAX_TOKENS + budget if isinstance(budget, int) else DEFAULT_MAX_TOKENS


def check_max_tokens(max_tokens: Any, thinking: Json | None, thread: str) -> None:
    """Raise `InvalidEvent` unless `max_tokens` is None (the default) or a whole number >= 1
    that is more than the thinking budget of `thread` (its `thinking`), which the API requires
    ("max_tokens must be greater than thinking.budget_tokens"): refused by a live turn, naming
    both, rather than by the API after the turn has started. `thinking` None checks the number
    alone: under the interleaved-thinking beta the budget spans a turn's every block and may
    exceed `max_tokens`, and a request built for any client (`anthropic_request`) cannot know
    which beta it will be sent with."""
    if max_tokens is None:
        return
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidEvent("max_tokens", f"must be a whole number >= 1, not {shown(max_tokens)}")
    budget = (thinking or {}).get("budget_tokens")
    if isinstance(budget, int) and max_tokens <= budget:
        raise InvalidEvent("max_tokens", f"{max_tokens} is not more than the thinking budget of thread {thread!r} "
                                         f"(budget_tokens {budget}), which the API refuses unless the request is sent "
                                         f"with the interleaved-thinking beta; pass more than {budget}, leave it out for "
                                         f"{default_max_tokens(thinking)}, or send the header "
                                         "anthropic-beta: interleaved-thinking-2025-05-14")


# What a request inside a tool loop that did not start with thinking sends instead of the
# thread's `thinking` (see `_unthought_loop`).
THINKING_OFF: Json = {"type": "disabled"}


def _unthought_loop(thinking: Json, messages: list[Json]) -> bool:
    """Whether `messages` end inside a tool loop (the last message returns tool results) whose
    assistant turn does not open with a thinking block, while `thinking` is enabled with a
    budget. The API refuses that request ("a final assistant message must start with a thinking
    block"): a tool loop is one assistant turn, and thinking changes only between turns. A fork
    that turned thinking on inside a loop, or a redacted message (its skeleton has no thinking
    block), leads there; the request then disables thinking, until the next turn."""
    if thinking.get("type") != "enabled" or not messages or messages[-1]["role"] != "user" or not _results(messages[-1]["content"]):
        return False
    opening: Json | None = None  # the turn's first assistant message: after the last user message with no tool result
    for message in reversed(messages):
        if message["role"] == "assistant":
            opening = message
        elif not _results(message["content"]):
            break
    return opening is not None and opening["content"][0].get("type") not in _THINKING_BLOCKS


def check_request_point(store: Store, thread: str, at: int) -> None:
    """Refuse an `at` no request can be built at: past the thread, or whose first events hold
    no message (the first `at` events: at 0 none, not even the thread.created that names the
    model), saying what `at` counts and the range that holds a message, as a fork names its
    points. A scan to the thread's first message; `anthropic_request` calls it only to refuse."""
    head = store.head(thread)
    first = next((offset for offset, type_, _, _ in store.read_raw(thread) if type_ == "message.appended"), None)
    if first is not None and first < at <= head:
        return  # a message is there: the view is empty for another reason, said where it is built
    points = f"so at must be {first + 1}..{head}" if first is not None else "and no message yet"
    if not 0 <= at <= head:
        raise InvalidEvent("at", f"cannot build a request of {thread!r} at {shown(at)}: it holds offsets 0..{head - 1}, {points}")
    smallest = f"its first message is at offset {first}, {points}" if first is not None else "it holds no message yet"
    raise InvalidEvent("at", f"thread {thread!r} has no message to send as of its first {at} event(s): at counts the "
                             f"events the request is built from, its thread.created first; {smallest}")


def _sender(store: Store, thread: str, at: int | None) -> str:
    """The thread whose request as of `at` this is: a fork's first `at` events, at or below its
    fork point, are its parent's, and so is the request (the one a live turn there sent, with
    that thread's fork point, its breakpoints and its retrieval records)."""
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        return thread  # thread_state refuses it, naming the thread asked for
    info = store.thread(thread)
    while info.parent_id is not None and info.parent_offset is not None and at <= info.parent_offset:
        info = store.thread(info.parent_id)
    return info.id


def api_messages(view: list[Message]) -> list[Json]:
    """The model view as Messages API `messages`: cleaned, merged and paired (module doc)."""
    return _api_view(view, {})


def _api_view(view: list[Message], origins: dict[int, int]) -> list[Json]:
    messages = _merged([(m.role, _cleaned(m.content, origins)) for m in view])
    while True:
        paired, changed = _paired(messages)
        if not changed:
            return _unstripped_end(_unique_ids(paired, origins), origins)
        messages = _merged([(m["role"], m["content"]) for m in paired])


def _unstripped_end(messages: list[Json], origins: dict[int, int]) -> list[Json]:
    """A request ending on an answer (a paused turn going on) has the model carry on from it,
    and the API refuses one whose last text ends in whitespace: that text is sent without it."""
    if not messages or messages[-1]["role"] != "assistant":
        return messages
    content = messages[-1]["content"]
    stored = content[-1]
    if stored.get("type") != "text" or not isinstance(stored.get("text"), str) or stored["text"] == stored["text"].rstrip():
        return messages
    block = {**stored, "text": stored["text"].rstrip()}  # not blank: blank texts were left out
    origins[id(block)] = origins.get(id(stored), id(stored))
    return [*messages[:-1], {"role": "assistant", "content": [*content[:-1], block]}]


def _cleaned(content: list[Json], origins: dict[int, int]) -> list[Json]:
    """The blocks without blank texts and without stored cache_control (a tool result's own
    blocks' too), with tool ids the API takes; the same list when nothing changes (the common
    case: no copy). A block copied is noted in `origins` (the breakpoints find blocks by the
    stored block's identity)."""
    for block in content:
        if _to_clean(block):
            out = []
            for stored in content:
                if not unsent(stored):
                    block = _api_block(stored)
                    if block is not stored:
                        origins[id(block)] = id(stored)
                    out.append(block)
            return out
    return content


def _to_clean(block: Json) -> bool:
    kind = block.get("type")
    if "cache_control" in block or (kind in ("text", "thinking") and unsent(block)) or (kind in _TOOL_ID and _foreign(block, kind)):
        return True
    return _blank_inside(block) or _silent_failure(block)


def _silent_failure(block: Json) -> bool:
    """Whether a block is a failed tool result with nothing to say (no content, blank text, no
    block but blank texts), which the API refuses ("content cannot be empty if is_error")."""
    if block.get("type") != "tool_result" or block.get("is_error") is not True:
        return False
    inner = block.get("content")
    if isinstance(inner, str):
        return not inner.strip()
    return inner is None or (isinstance(inner, list) and all(isinstance(b, dict) and unsent(b) for b in inner))


def _blank_inside(block: Json) -> bool:
    """Whether a tool result's own blocks hold a blank text."""
    inner = block.get("content") if block.get("type") == "tool_result" else None
    return isinstance(inner, list) and any(isinstance(b, dict) and unsent(b) for b in inner)


def _api_block(block: Json) -> Json:
    """A stored block as the request sends it (see `_cleaned`)."""
    block = _api_ids(_uncached(block))
    if _silent_failure(block):
        return {**block, "content": NO_OUTPUT}
    if _blank_inside(block):
        kept = [b for b in block["content"] if not (isinstance(b, dict) and unsent(b))]
        block = {k: v for k, v in block.items() if k != "content"} | ({"content": kept} if kept else {})
    return block


MAX_BREAKPOINTS = 4  # the API's limit on cache_control blocks in one request


def _nested_marks(messages: list[Json]) -> int:
    return sum(1 for m in messages for b in m["content"] if b.get("type") == "tool_result" and isinstance(b.get("content"), list)
               for inner in b["content"] if isinstance(inner, dict) and "cache_control" in inner)


def _without_nested_marks(messages: list[Json]) -> list[Json]:
    """The messages with no `cache_control` inside tool results (a tool's own blocks may carry
    them): kept while the request stays within `MAX_BREAKPOINTS`, as earlier releases sent
    them (a recorded request still rebuilds), removed, all, when they would push it past."""
    out = []
    for message in messages:
        content = [{**b, "content": [_uncached(i) if isinstance(i, dict) else i for i in b["content"]]}
                   if b.get("type") == "tool_result" and isinstance(b.get("content"), list) else b for b in message["content"]]
        out.append({"role": message["role"], "content": content})
    return out


def _unique_ids(messages: list[Json], origins: dict[int, int]) -> list[Json]:
    """`messages` with a tool call id that a call before it already used (the log takes an id
    again once its result is in; another provider's ids, `functions.bash:0`, repeat every turn)
    sent as `api_tool_id` of `<id>#<n>`, in the call and in the result that answers it, in the
    next message: the API refuses a request whose tool_use ids repeat. A server tool's call
    (`server_tool_use`: the log keeps what the API sent, and a server repeating an id is not
    refused) is renamed so too, with the blocks after it in its message that name it: its
    result (`web_search_tool_result`, ...) and a call made from its code (`caller.tool_id`)."""
    seen: set[str] = set()
    uses: dict[str, int] = {}  # an id -> the last n its renaming took (starting there keeps this linear)
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        renamed: dict[str, str] = {}  # a client tool call's id -> the id sent, in this message and its results in the next
        served: dict[str, str] = {}  # a server tool call's id -> the id sent, for the blocks after it in this message
        content = []
        for stored in message["content"]:
            block, kind = stored, stored.get("type")
            if kind in _CALLS and isinstance(block.get("id"), str):
                tool_id = block["id"]
                if tool_id in seen:
                    n = uses.get(tool_id, 1) + 1
                    while (fresh := api_tool_id(f"{tool_id}#{n}")) in seen:
                        n += 1
                    uses[tool_id] = n
                    (renamed if kind == "tool_use" else served)[tool_id] = fresh
                    block = {**block, "id": fresh}
                    tool_id = fresh
                seen.add(tool_id)
            answered = block.get("tool_use_id")
            if served and kind != "tool_result" and isinstance(answered, str) and answered in served:
                block = {**block, "tool_use_id": served[answered]}
            caller = block.get("caller")
            if served and isinstance(caller, dict) and isinstance(caller.get("tool_id"), str) and caller["tool_id"] in served:
                block = {**block, "caller": {**caller, "tool_id": served[caller["tool_id"]]}}
            if block is not stored:
                origins[id(block)] = origins.get(id(stored), id(stored))
            content.append(block)
        if renamed or served:
            messages[index] = {"role": "assistant", "content": content}
        if renamed and index + 1 < len(messages):  # the next message answers every call of this one (they are paired)
            answers = []
            for stored in messages[index + 1]["content"]:
                block = stored
                if block.get("type") == "tool_result" and block["tool_use_id"] in renamed:
                    block = {**block, "tool_use_id": renamed[block["tool_use_id"]]}
                    origins[id(block)] = origins.get(id(stored), id(stored))
                answers.append(block)
            messages[index + 1] = {"role": messages[index + 1]["role"], "content": answers}
    return messages


# The blocks that make a tool call, with an id no other call of a request may have: the
# client's, and a server tool's (which the API runs and answers in the same message).
_CALLS = frozenset(("tool_use", "server_tool_use"))


# The key holding a tool call's id in the blocks that carry one, and the ids the API takes.
_TOOL_ID = {"tool_use": "id", "tool_result": "tool_use_id"}
_API_ID = re.compile("[a-zA-Z0-9_-]+")


def api_tool_id(tool_id: str) -> str:
    """A tool call's id as the Messages API takes it: unchanged when it matches
    `^[a-zA-Z0-9_-]+$`, else its first 40 characters with every other character as `_`,
    then `_` and 16 hex digits of its SHA-256, so different ids stay different."""
    if _API_ID.fullmatch(tool_id):
        return tool_id
    kept = re.sub("[^a-zA-Z0-9_-]", "_", tool_id[:40])
    return f"{kept}_{hashlib.sha256(tool_id.encode()).hexdigest()[:16]}"


def _foreign(block: Json, kind: str) -> bool:
    tool_id = block.get(_TOOL_ID[kind])
    return isinstance(tool_id, str) and not _API_ID.fullmatch(tool_id)


def _api_ids(block: Json) -> Json:
    kind = block.get("type")
    if kind not in _TOOL_ID or not _foreign(block, kind):
        return block
    key = _TOOL_ID[kind]
    return {**block, key: api_tool_id(block[key])}


def _uncached(block: Json) -> Json:
    if "cache_control" not in block:
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def _mark(block: Json) -> Json:
    return {**block, "cache_control": EPHEMERAL}


def _merged(messages: list[tuple[str, list[Json]]]) -> list[Json]:
    out: list[Json] = []
    previous: Json | None = None
    for role, content in messages:
        if not content:
            continue
        if previous is not None and previous["role"] == role:
            previous["content"] = previous["content"] + content
        else:
            previous = {"role": role, "content": content}
            out.append(previous)
    return out


def _uses(content: list[Json]) -> set[str]:
    return {b["id"] for b in content if b.get("type") == "tool_use"}


def _results(content: list[Json]) -> set[str]:
    return {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}


_TOOL_BLOCKS = frozenset(("tool_use", "tool_result"))


def _paired(messages: list[Json]) -> tuple[list[Json], bool]:
    """Drop unanswered tool_use and orphan tool_result blocks; tool_results first in a user
    message; an assistant message left with nothing but thinking is dropped too. Returns the
    messages and whether any block was dropped (then merging may be due again)."""
    out: list[Json] = []
    changed = False
    last = len(messages) - 1
    tools = [any(b.get("type") in _TOOL_BLOCKS for b in m["content"]) for m in messages]
    for i, message in enumerate(messages):
        content = message["content"]
        if message["role"] == "assistant":
            if tools[i]:
                following = messages[i + 1]["content"] if i < last and tools[i + 1] and messages[i + 1]["role"] == "user" else []
                unanswered = _uses(content) - _results(following)
                if unanswered:
                    content = [b for b in content if not (b.get("type") == "tool_use" and b["id"] in unanswered)]
            if content and content[-1].get("type") in _UNCACHEABLE and all(b.get("type") in _UNCACHEABLE for b in content):
                content = []
        elif tools[i]:
            asked = _uses(messages[i - 1]["content"]) if i > 0 and messages[i - 1]["role"] == "assistant" else set()
            kept = [b for b in content if b.get("type") == "tool_result" and b["tool_use_id"] in asked]
            content = kept + [b for b in content if b.get("type") != "tool_result"]
        if content is not message["content"]:
            changed = changed or len(content) != len(message["content"])
            message = {"role": message["role"], "content": content}
        if content:
            out.append(message)
    return out, changed


def _system(system: Any) -> list[Json] | None:
    """The system prompt as text blocks (so a breakpoint can sit on it), blanks dropped."""
    if not system:
        return None
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else [_uncached(b) for b in system]
    blocks = [b for b in blocks if not unsent(b)]
    return blocks or None


def _forked(view: list[Message], parent_offset: int | None) -> bool:
    """Whether the view reaches the thread's own fork point (not only its parent's history)."""
    return parent_offset is not None and bool(view) and view[-1].offset >= parent_offset


def _shared_blocks(view: list[Message], fork_offset: int, subagent: bool) -> set[int]:
    """The ids of the blocks sibling forks share: the inherited history (offsets below the
    fork point) and the fork note (at it); for sub-agents also the placeholder results that
    open their primed message (right after the fork event), and the boilerplate after them
    (`fan_out(boilerplate=)`), not the directive, its last block."""
    shared: set[int] = set()
    for message in view:
        if message.offset <= fork_offset:
            shared.update(id(b) for b in message.content)
        elif subagent and message.offset == fork_offset + 1:
            results = [b for b in message.content if b.get("type") == "tool_result"]
            opened = bool(results) and message.content[:len(results)] == results
            shared.update(id(b) for b in (message.content[:-1] if opened and len(message.content) > len(results) + 1
                                          else results))
    return shared


def _last_cacheable(messages: list[Json], among: set[int] | None, origins: dict[int, int] | None = None) -> tuple[int, int] | None:
    """(message, block) of the last block that can carry a breakpoint (and is `among` these ids
    of stored blocks; a copy's stored block is found through `origins`)."""
    for index in range(len(messages) - 1, -1, -1):
        content = messages[index]["content"]
        for block in range(len(content) - 1, -1, -1):
            value = content[block]
            if value.get("type") not in _UNCACHEABLE and (
                    among is None or id(value) in among or (origins is not None and origins.get(id(value)) in among)):
                return index, block
    return None


# -- bytes and digests -------------------------------------------------------------------------


def request_body(kwargs: Json, stream: bool = False) -> bytes:
    """The HTTP body the SDK sends for `kwargs`: `create` for `stream=False`, the `stream`
    helper (which adds `"stream": true`) for `stream=True`, keys in the order each writes them."""
    if not isinstance(kwargs, dict):  # request_body(5) gave b"5"
        raise InvalidEvent("kwargs", f"must be a request's arguments (a dict, as anthropic_request gives them), not "
                                     f"{type(kwargs).__name__}")
    check_flag("stream", stream)
    body = _in_order({**kwargs, "stream": True}, _STREAM_ORDER) if stream else _in_order(kwargs, _CREATE_ORDER)
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:  # a set, NaN, a lone surrogate
        raise InvalidEvent("kwargs", f"not a body JSON can hold ({error})") from None
    except RecursionError:
        raise InvalidEvent("kwargs", "nested too deeply to be JSON") from None


# The order in which the SDK writes a body's keys (the dict its `create`, and its `stream`
# helper, build): the two differ (the stream helper writes `tools` before `thinking`). Their
# signatures list the keys in another order, so these are written out; tests/test_live.py sends
# every key through the installed SDK and fails when its order is not this.
_CREATE_ORDER = {key: rank for rank, key in enumerate((
    "max_tokens", "messages", "model", "cache_control", "container", "diagnostics", "inference_geo", "metadata",
    "output_config", "service_tier", "speed", "stop_sequences", "stream", "system", "thinking", "tool_choice", "tools"))}
_STREAM_ORDER = {key: rank for rank, key in enumerate((
    "max_tokens", "messages", "model", "cache_control", "diagnostics", "inference_geo", "metadata", "output_config",
    "container", "service_tier", "speed", "stop_sequences", "system", "tools", "thinking", "tool_choice", "stream"))}


def _in_order(body: Json, order: dict[str, int]) -> Json:
    """`body` with its keys in the SDK's `order`; keys it does not name keep theirs, after."""
    if all(key in order for key in body) and list(body) == sorted(body, key=order.__getitem__):
        return body  # the common case: anthropic_request's own order, no copy
    return dict(sorted(body.items(), key=lambda item: order.get(item[0], len(order))))


def body_digest(body: bytes) -> str:
    """`sha256:<hex>` of a request body (the prefix names the hash, so it can change later)."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidEvent("body", f"must be a request body as bytes (request_body gives it), not {type(body).__name__}")
    return DIGEST_PREFIX + hashlib.sha256(body).hexdigest()


@functools.cache
def _params_adapter(beta: bool) -> TypeAdapter[Any]:
    if beta:
        from anthropic.types.beta.message_create_params import MessageCreateParamsNonStreaming as BetaParams

        return TypeAdapter(BetaParams)
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return TypeAdapter(MessageCreateParamsNonStreaming)


def validate_request(kwargs: Json, beta: bool = False) -> None:
    """Raise `InvalidEvent` unless `kwargs` validates against the SDK's `MessageCreateParams`
    (`beta=True`: the beta one, for `client.beta.messages.create`, which knows beta-only
    blocks such as `compaction`) and pairs its tool calls as the API requires, which the
    schema does not say (`check_tool_pairs`).

    The SDK's TypedDicts declare lists as `Iterable`, which pydantic checks lazily; the
    content validator's drain consumes every such iterator, so nested blocks are checked too.
    """
    check_flag("beta", beta)  # a list was no key of the adapters' cache (TypeError), and "no" chose the beta one
    try:
        validated = _params_adapter(beta).validate_python(kwargs)
    except ValidationError as error:
        first = error.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"] if not str(p).endswith("Param"))
        raise InvalidEvent(f"request{loc}", first["msg"]) from None
    drain(validated, "request")
    check_tool_pairs(kwargs.get("messages"))


def check_tool_pairs(messages: Any) -> None:
    """Raise `InvalidEvent`, naming the message and the block by index, for what the API refuses
    in a request's `messages` that the SDK's schema takes: a tool call id (`tool_use`,
    `server_tool_use`) used twice, a `tool_result` answering no `tool_use` of the message
    before it, and a `tool_use` no `tool_result` of the message after it answers (one in the
    last message is answered by the next request). Messages or content not given as lists (the
    schema's iterables, text) hold nothing to check."""
    if not isinstance(messages, (list, tuple)):
        return
    contents = [m.get("content") if isinstance(m, dict) else None for m in messages]
    blocks = [[b for b in c if isinstance(b, dict)] if isinstance(c, (list, tuple)) else [] for c in contents]
    calls: dict[str, str] = {}  # a tool call id -> where its call is
    asked: set[Any] = set()  # the ids of the tool_use blocks of the message before
    for index, content in enumerate(blocks):
        for number, block in enumerate(content):
            kind, where = block.get("type"), f"messages[{index}].content[{number}]"
            if kind in _CALLS and isinstance(block.get("id"), str):
                if block["id"] in calls:
                    raise InvalidEvent(f"request.{where}.id", f"tool call id {named(block['id'])} is used again "
                                                              f"({calls[block['id']]} has it)")
                calls[block["id"]] = where
            elif kind == "tool_result":
                if _pair_key(block.get("tool_use_id")) not in asked:
                    before = f"messages[{index - 1}]" if index else "it is the first message"
                    raise InvalidEvent(f"request.{where}.tool_use_id", f"{named(block.get('tool_use_id'))} answers no "
                                                                       f"tool_use of the message before it ({before})")
        if index + 1 < len(blocks):
            answered = {_pair_key(b.get("tool_use_id")) for b in blocks[index + 1] if b.get("type") == "tool_result"}
            for number, block in enumerate(content):
                if block.get("type") == "tool_use" and _pair_key(block.get("id")) not in answered:
                    raise InvalidEvent(f"request.messages[{index}].content[{number}].id",
                                       f"tool call {named(block.get('id'))} has no tool_result in the message after "
                                       f"it (messages[{index + 1}])")
        asked = {_pair_key(b.get("id")) for b in content if b.get("type") == "tool_use"}


def _pair_key(tool_id: Any) -> Any:
    """A tool call's id (or a result's `tool_use_id`) as the pairing check matches it: itself,
    or, when it is a list or an object (unhashable), a value that matches no other."""
    try:
        hash(tool_id)
    except TypeError:
        return object()
    return tool_id


@dataclass(frozen=True, slots=True)
class RequestCheck:
    """Whether the request rebuilt for the assistant message at `offset` hashes to the digest
    its live turn recorded. `redacted` lists the offsets of the events before it that a
    redaction recorded after the request was built erased, the usual reason for a mismatch
    (one recorded before was in effect when it was built, so it changed nothing sent)."""

    offset: int
    ok: bool
    recorded: str | None
    rebuilt: str | None
    request_id: str | None
    redacted: list[int]
    reason: str

    def to_json(self) -> Json:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return asdict(self)


def check_request(store: Store, thread: str, offset: int) -> RequestCheck:
    """Rebuild the request the assistant message at `offset` answered and compare digests."""
    event = store.event_at(thread, offset)
    request = event.meta.get("request") if event.type == "message.appended" else None
    if not isinstance(request, dict):
        return RequestCheck(offset, False, None, None, None, [], f"offset {offset} holds no message recorded by a live turn")
    erased = [e for e in store.read(thread, 0, offset) if e.redacted]
    redacted = _redacted_since(store, erased, store.event_at(thread, offset - 1).position) if erased else []
    try:
        kwargs = anthropic_request(store, thread, offset, model=request.get("model"), max_tokens=request.get("max_tokens"),
                                   retrieval=request.get("retrieval"), extra_tools=request.get("extra_tools"),
                                   passages=request.get("passages"))
        rebuilt = body_digest(request_body(kwargs, bool(request.get("stream"))))
    except InvalidEvent as error:
        return RequestCheck(offset, False, request.get("digest"), None, request.get("id"), redacted, str(error))
    ok = rebuilt == request.get("digest")
    if ok:
        reason = "the rebuilt request is byte-identical to the one sent"
    elif redacted:
        reason = f"the history changed since it was sent: redacted event(s) at offset {', '.join(map(str, redacted))}"
    else:
        reason = "the rebuilt request differs from the one sent"
    return RequestCheck(offset, ok, request.get("digest"), rebuilt, request.get("id"), redacted, reason)


def _redacted_since(store: Store, erased: list[RecordedEvent], built: int) -> list[int]:
    """The offsets of the `erased` events whose redaction was recorded after position `built`,
    the last event the request was built from. Each `event.redacted` follows the event it
    erased in that event's own stream, so only those streams are read, from there on."""
    wanted = {event.position: event.offset for event in erased}
    first: dict[str, int] = {}
    for event in erased:
        first[event.stream_id] = min(first.get(event.stream_id, event.offset), event.offset)
    since = {wanted[record.data["position"]] for stream_id, start in first.items() for record in store.read(stream_id, start + 1)
             if record.type == "event.redacted" and record.position > built and record.data.get("position") in wanted}
    return sorted(since)


def checkable_offsets(store: Store, thread: str) -> list[int]:
    """The offsets of the thread's messages that carry a recorded request digest."""
    return [e.offset for e in store.read(thread) if e.type == "message.appended" and isinstance(e.meta.get("request"), dict)]
