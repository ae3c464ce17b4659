"""How LangGraph values are written into threadlog events, and read back.

A channel value (or a pending write) is stored as one JSON record:

- `{"v": version, "json": value}` when the value is plain JSON and reads back equal (exact
  types: a `str` enum's member is not plain) with every dict's keys in sorted order, as an
  event's canonical JSON writes them;
- `{"v": version, "text": json}` for plain JSON whose dicts keep another key order: the JSON
  as text, so the order reads back as it was put;
- `{"v": version, "messages": [...]}` for a list of LangChain messages, each as
  `message_to_dict` gives it with its default fields left out (or, for a message holding
  a value that is not plain JSON, such as a datetime in its `additional_kwargs`, as a
  `{"serde": type, "b64": data}` item); with `"after": version` the list holds only the
  messages appended since the channel's value at that version (the messages channel only
  grows, so a conversation is stored once, not once per step). The key order of the dicts
  inside a message is not kept;
- `{"v": version, "dict": {key: record}}` for a dict holding such values (a node's input),
  with `"order": [key, ...]` when its keys are not in sorted order;
- `{"v": version, "serde": type, "b64": data}` for anything else, through the saver's
  LangGraph serializer (msgpack), base64-encoded.

Messages are also written as `message.appended` events in Anthropic's block format, so
threadlog's transcripts, search and viewer show a LangGraph run; `anthropic_message` says how.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage, message_to_dict, messages_from_dict
from langgraph.checkpoint.serde.base import SerializerProtocol

from eventstore.events import MAX_DEPTH
from projections.stops import source_stop_reason

Json = dict[str, Any]

# An event holds JSON nested at most MAX_DEPTH levels. A record sits at most four levels into
# its event (a write's: data, writes, item, value; a header field's: data, metadata, key,
# `__record__`), so records nested deeper than this go through the serializer. A `tool_use`
# block's input sits three levels into a message event's data.
RECORD_DEPTH = MAX_DEPTH - 8
INPUT_DEPTH = MAX_DEPTH - 3

# Fields `message_to_dict` writes that read back the same when left out (their defaults).
_DEFAULTS: dict[str, Any] = {"additional_kwargs": {}, "response_metadata": {}, "name": None, "tool_calls": [],
                             "invalid_tool_calls": [], "usage_metadata": None, "artifact": None, "status": "success"}


def is_messages(value: Any) -> bool:
    """A non-empty list of LangChain messages (what `add_messages` keeps)."""
    return isinstance(value, list) and bool(value) and all(isinstance(item, BaseMessage) for item in value)


_SCALARS = (str, bool, int, type(None))


def replaced(previous: list[BaseMessage], value: list[BaseMessage]) -> set[str]:
    """The ids of the messages of `previous` that `value` holds with other content as
    threadlog shows it (an edit that kept the id); a message `value` leaves out (removed)
    or adds is none of them, nor one whose metadata alone changed (a model's message
    emitted again with its `response_metadata` or `usage_metadata`): the view would not."""
    now = {m.id: m for m in value if m.id}
    return {m.id for m in previous if m.id and m.id in now and not (now[m.id] is m or now[m.id] == m)
            and _as_shown(now[m.id]) != _as_shown(m)}


def _as_shown(message: BaseMessage) -> Json | None:
    """`anthropic_message` less its stop reason: metadata (`response_metadata`), which an answer
    emitted again may change without being edited; the event keeps the one first recorded."""
    data = anthropic_message(message)
    return None if data is None else {key: value for key, value in data.items() if key != "stop_reason"}


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON that reads back as the same Python value: exact types (no tuples, no NaN, no
    subclass of str or int such as an enum's member), string keys only."""
    if depth > 60:
        return False
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(key) is str and _plain(item, depth + 1) for key, item in value.items())
    return False


def same(a: Any, b: Any) -> bool:
    """Whether two JSON values are one value: `==` with every part of the same type, and
    every float of the same sign. `==` takes True, 1 and 1.0 for one value, and 0.0 and
    -0.0, and a shortcut that leaves out what equals the parent's gave the parent's back.
    Dict key order is not compared (an event's canonical JSON does not keep it)."""
    return bool(a == b) and _same_types(a, b)


def _same_types(a: Any, b: Any) -> bool:
    """Whether two values that are equal under `==` have the same type (and a float the same
    sign) in every part."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return all(_same_types(item, b[key]) for key, item in a.items())
    if type(a) is list:
        return all(_same_types(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    return True


def _sorted(value: Any) -> bool:
    """Whether every dict in plain JSON `value` has its keys in sorted order (the order an
    event's canonical JSON gives them back in)."""
    if type(value) is list:
        return all(_sorted(item) for item in value)
    if type(value) is dict:
        keys = list(value)
        return keys == sorted(keys) and all(_sorted(item) for item in value.values())
    return True


def message_record(message: BaseMessage, serde: SerializerProtocol) -> Json:
    """One message as a small dict that `messages_from_dict` turns back into an equal message,
    or, when it holds a value JSON cannot give back (a datetime, bytes, an int key), as
    `{"serde": type, "b64": data}`."""
    full = message_to_dict(message)
    data = {key: value for key, value in full["data"].items() if key != "type" and _DEFAULTS.get(key, ...) != value}
    small = {"type": full["type"], "data": data}
    if _plain(small) and messages_from_dict([small]) == [message]:
        return small
    if _plain(full):
        return full
    return _serialized(message, serde)


def _serialized(value: Any, serde: SerializerProtocol) -> Json:
    """`{"serde": type, "b64": data}`: `value` through the saver's LangGraph serializer."""
    kind, blob = serde.dumps_typed(value)
    return {"serde": kind, "b64": base64.b64encode(blob).decode("ascii")}


def _deserialized(record: Json, serde: SerializerProtocol) -> Any:
    return serde.loads_typed((record["serde"], base64.b64decode(record["b64"])))


def _messages(items: list[Json], serde: SerializerProtocol) -> list[BaseMessage]:
    if all("serde" not in item for item in items):
        return messages_from_dict(items)
    return [_deserialized(item, serde) if "serde" in item
            else messages_from_dict([item])[0] for item in items]


def encode(value: Any, version: Any, serde: SerializerProtocol, previous: Any = None, previous_version: Any = None) -> Json:
    """The stored record of `value` at `version`; a message list that extends `previous`
    (the channel's value at `previous_version`) keeps only what was appended. A record that
    would nest deeper than an event holds goes through the serializer instead."""
    record = _record(value, version, serde, previous, previous_version, 0)
    if "json" in record or "serde" in record or not _deeper_than(record, RECORD_DEPTH):
        return record
    return {"v": version, **_serialized(value, serde)}


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests containers more than `limit` levels (`value` is level 1)."""
    todo = [(value, 1)] if isinstance(value, (dict, list)) else []
    while todo:
        node, depth = todo.pop()
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node)
                    if isinstance(child, (dict, list)))
    return False


def _record(value: Any, version: Any, serde: SerializerProtocol, previous: Any, previous_version: Any, level: int) -> Json:
    if is_messages(value):
        if is_messages(previous) and len(value) >= len(previous) and all(
                a is b or a == b for a, b in zip(previous, value)):
            return {"v": version, "after": previous_version,
                    "messages": [message_record(m, serde) for m in value[len(previous):]]}
        if all(isinstance(m, BaseMessage) for m in value):
            return {"v": version, "messages": [message_record(m, serde) for m in value]}
    if _plain(value):
        if _sorted(value):
            return {"v": version, "json": value}
        return {"v": version, "text": json.dumps(value, ensure_ascii=False, separators=(",", ":"))}
    if type(value) is dict and all(type(key) is str for key in value) and level < RECORD_DEPTH // 2:
        # e.g. a node's input {"messages": [...]}; each level nests two (`dict`, its key)
        record: Json = {"v": version, "dict": {key: _bare(_record(item, None, serde, None, None, level + 1))
                                               for key, item in value.items()}}
        if list(value) != sorted(value):
            record["order"] = list(value)
        return record
    return {"v": version, **_serialized(value, serde)}


def _bare(record: Json) -> Json:
    return {key: value for key, value in record.items() if key != "v"}


def decode(record: Json, serde: SerializerProtocol) -> Any:
    """The value a record holds (for an `after` record: only the appended messages)."""
    if "json" in record:
        return record["json"]
    if "text" in record:
        return json.loads(record["text"])
    if "dict" in record:
        items: Json = record["dict"]
        order: list[str] = record.get("order") or list(items)
        return {key: decode(items[key], serde) for key in order}
    if "messages" in record:
        return _messages(record["messages"], serde)
    return _deserialized(record, serde)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "\n".join(parts)


def paired(messages: list[Json], pending: tuple[str, ...]) -> list[Json]:
    """The `message.appended` data in `messages`, less the tool blocks the store would refuse
    after `pending` (the stream's calls awaiting results): a `tool_result` answering no
    pending call, and a `tool_use` whose id is already pending or repeats one in its message.
    LangGraph keeps such messages (a trimmed history, a model reusing ids); the checkpoint
    holds them as they are, and the view leaves out what cannot pair. A message left with
    no block is left out."""
    waiting = list(pending)
    out = []
    for data in messages:
        blocks = []
        seen: list[str] = []
        for block in data["content"]:
            if block["type"] == "tool_result":
                if block["tool_use_id"] not in waiting:
                    continue
                waiting.remove(block["tool_use_id"])
            elif block["type"] == "tool_use":
                if block["id"] in waiting or block["id"] in seen:
                    continue
                seen.append(block["id"])
            blocks.append(block)
        waiting.extend(seen)
        if blocks:
            out.append({**data, "content": blocks})
    return out


def anthropic_message(message: BaseMessage) -> Json | None:
    """The `message.appended` data for a LangChain message, in Anthropic's blocks, or None
    for a message threadlog's view has no role for (system, function, custom).

    Human text is a user turn; AI text and tool calls an assistant turn (`tool_use`
    blocks); a tool message a user turn with one `tool_result`. Only text is carried over
    (images and other parts stay in the checkpoint, exactly as LangGraph wrote them), and
    a tool call only when its arguments are plain JSON that fits in an event.
    """
    text = _text(message.content).strip() and _text(message.content)
    blocks: list[Json] = []
    if isinstance(message, HumanMessage):
        role = "user"
        if text:
            blocks.append({"type": "text", "text": text})
    elif isinstance(message, AIMessage):
        role = "assistant"
        if text:
            blocks.append({"type": "text", "text": text})
        for call in message.tool_calls:  # a call whose arguments nest deeper than an event holds is left out
            if call.get("id") and _plain(call["args"]) and not _deeper_than(call["args"], INPUT_DEPTH):
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": dict(call["args"])})
    elif isinstance(message, ToolMessage):
        role = "user"
        result: Json = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": text or "(no output)"}
        if message.status == "error":
            result["is_error"] = True
        blocks.append(result)
    else:
        return None
    if not blocks:
        return None
    data: Json = {"role": role, "content": blocks}
    if message.id:
        data["message_id"] = message.id
    stopped = stop_reason(message) if isinstance(message, AIMessage) else None
    if stopped is not None:
        data["stop_reason"] = stopped
    return data


def stop_reason(message: AIMessage) -> str | None:
    """The stop reason an answer's provider gave, in its own words (`projections.stops` says
    what each means): `response_metadata`'s `stop_reason` (Anthropic's) or `finish_reason`
    (OpenAI's); None when it gives none this release knows (`source_stop_reason`)."""
    metadata = message.response_metadata if isinstance(message.response_metadata, dict) else {}
    for key in ("stop_reason", "finish_reason"):
        reason = source_stop_reason(metadata.get(key))
        if reason is not None:
            return reason
    return None
