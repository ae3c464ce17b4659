"""SWE-agent trajectory files (`.traj`) into threads.

A trajectory is one JSON object, which SWE-agent writes again, whole, after each step. Its
`history` is the conversation the model was sent, as OpenAI chat messages with SWE-agent's
own keys beside them (`agent`, `message_type`, and `thought` and `action`, which restate the
content). One thread per file, titled by the file's name (SWE-agent's, for the instance it
ran on): a first system message is the thread's `system`; a user message (an observation)
is a user message; an assistant message is its text and a `tool_use` block for each of its
`tool_calls`, whose JSON `arguments` are the `input` (text that is no JSON object, or holds a
number no event can store, `1e400` or `NaN`, is kept whole, as `{"arguments": text}`, and the
call named in `meta.source.flags.arguments_kept_as_text`);
a run of `tool` messages is one user message of `tool_result` blocks, one for each id of
their `tool_call_ids`, as the Messages API takes them. An observation's `image_url` parts are image
blocks (a screenshot a tool returned). A plain-text action (no tool calls: SWE-agent's CTF and older runs) stays text, and a
later system message is a user message marked injected, as the API has one system prompt.
The thread's model is the one `replay_config` names (`agent.model.name`) when it is a Claude
model (`claude-...`, or LiteLLM's `anthropic/claude-...`, sent as `claude-...`); another
provider's (`gpt-4o`), which the Messages API refuses, is kept as the thread's `model` metadata,
and the thread, like a trajectory that names none, has no model (a request then needs `model=`).

Event ids are made from the file's absolute path and each entry's index in `history`: the
same file imported again adds nothing, a trajectory a later step grew adds its new entries,
and a copy of the file elsewhere is a thread of its own. The `trajectory` list (each step's
action and observation again, with its time and state) and `info` beyond `exit_status` are
not imported. `exit_status`, which SWE-agent writes when the run ends, is set in the thread's
metadata by a `metadata.set` after the history, so a run imported while it went on gets it
when imported again. A replay demo (`.yaml`) holds no trajectory.

SWE-agent writes the file in place, not atomically: read as it is written, it is empty or cut
short. One changed in the last `LIVE_SECONDS` (as pi's and Claude Code's importers judge a
file still being written) is left for a later import (`summary.waiting`); an older one is
refused (a run killed while it wrote).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eventstore import InvalidEvent, Store
from eventstore.content import image_media_types
from eventstore.events import MAX_DEPTH
from eventstore.prepare import storable_json
from eventstore.recorded import short

from .lines import LIVE_SECONDS, NoSession, Seen, WholeFile, not_json, nothing_in, source_files, text_name
from .models import give_model
from .origin import elsewhere, first_line_of
from .plan import Plan, PlannedStream, import_sources, stable_id
from .summary import ImportSummary

TOOL = "swe-agent"
PATTERN = "*.traj"
NOUN = "trajectories"  # SWE-agent's word for its files, where the other importers say sessions
ASKS = "name SWE-agent trajectory files (.traj) or directories of them"  # what a refusal of a path that names nothing asks for
FORMAT = "a SWE-agent trajectory (JSON text)"  # what a file refused as none should have been
_ROLES = ("system", "user", "assistant", "tool")


# What a value cut off at the end of the text leaves the decoder on: a word, a number or a
# `\u` escape begun (`tr`, `-`, `1e`, `ud83d`), never a space, a quote or a bracket.
_CUT_TOKEN = re.compile(r'[^\s,:\[\]{}"]{0,12}')


def _cut_short(text: str, error: json.JSONDecodeError) -> bool:
    """Whether the decoder failed because `text` ended inside the JSON (empty, or cut off
    within or between its values), not at something no writer still going would write."""
    if error.msg == "Extra data":
        return False
    return error.msg.startswith("Unterminated string") or _CUT_TOKEN.fullmatch(text[error.pos:].rstrip()) is not None


def _read(path: Path, seen: Seen) -> tuple[dict[str, Any], list[int]] | None:
    """The trajectory in `path` and the line each `history` entry starts on; a file that is
    not one is refused by name. None for a file empty or cut short that changed in the last
    `LIVE_SECONDS`: SWE-agent may be writing it again."""
    raw = seen.read(path, FORMAT)
    empty = nothing_in(raw, FORMAT)
    if empty is not None:
        if seen.changed_within(path, LIVE_SECONDS):
            return None  # as SWE-agent begins to write it again
        raise WholeFile(path, empty, NoSession.advice)  # was "not JSON (Expecting value: line 1 column 1 (char 0))"
    mark = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # a Windows editor's byte order mark
    try:
        text = raw[mark:].decode("utf-8")
        trajectory = json.loads(text)
    except UnicodeDecodeError as error:
        if mark + error.end == len(raw) and error.reason == "unexpected end of data" and seen.changed_within(path, LIVE_SECONDS):
            return None  # cut inside a character
        at = mark + error.start
        line = raw.count(b"\n", 0, at) + 1
        raise InvalidEvent(f"{path}:{line}", f"not UTF-8 text ({error.reason} at byte {at})") from None
    except ValueError as error:
        if isinstance(error, json.JSONDecodeError) and _cut_short(text, error) and seen.changed_within(path, LIVE_SECONDS):
            return None
        if isinstance(error, json.JSONDecodeError) and error.msg == "Extra data":  # JSON Lines: another tool's session?
            with contextlib.suppress(ValueError, RecursionError):
                _refuse_another_tools(path, json.loads(text.partition("\n")[0]))
        demo = " (a replay demo is YAML, and holds no trajectory: import the .traj it was made from)" \
            if path.suffix in (".yaml", ".yml") else ""
        line = error.lineno if isinstance(error, json.JSONDecodeError) else _long_number(text)
        raise InvalidEvent(f"{path}:{line}", f"{not_json(error)}; a SWE-agent trajectory is one JSON object{demo}") from None
    except RecursionError:
        raise InvalidEvent(f"{path}:{_too_deep(text)}",
                           f"JSON nested too deeply to read (an event holds at most {MAX_DEPTH} levels)") from None
    if not isinstance(trajectory, dict) or not isinstance(trajectory.get("history"), list):
        _refuse_another_tools(path, trajectory)
        raise InvalidEvent(str(path), "not a SWE-agent trajectory: a .traj file is a JSON object holding a `history` list")
    return trajectory, _history_lines(text)


# What the nesting of JSON text turns on: a string (passed over whole), a bracket, a line's end.
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}\n]')


def _too_deep(text: str) -> int:
    """The line of `text` (JSON too deeply nested to read) on which its nesting first passes
    `MAX_DEPTH` levels: where the value no event could hold is."""
    depth, line = 0, 1
    for match in _NESTING.finditer(text):
        token = match.group()
        if token == "\n":
            line += 1
        elif token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line
        elif token in "]}":
            depth -= 1
    return 1  # not reached: Python reads JSON far deeper than an event may be


def _long_number(text: str) -> int:
    """The line of `text` (JSON refused for a number too long to read) holding that number."""
    longer = re.compile(r'"(?:[^"\\]|\\.)*"|\n|\d{%d,}' % (sys.get_int_max_str_digits() + 1))
    line = 1
    for match in longer.finditer(text):
        if match.group() == "\n":
            line += 1
        elif not match.group().startswith('"'):
            return line
    return 1


def _refuse_another_tools(path: Path, record: Any) -> None:
    """Refuse a Claude Code or pi session, whose first line (`record`) tells which it is, naming
    the command that imports it: it was "not JSON (Extra data ...)" of a trajectory."""
    tool = first_line_of(record)
    if tool is not None and tool != "swe-agent":
        raise WholeFile(path, elsewhere(tool, FORMAT), NoSession.advice)


def _history_lines(text: str) -> list[int]:
    """The line each entry of the top-level `history` list starts on, in `text` (JSON already
    read whole: each value is decoded again, only to find where it ends)."""
    decode = json.JSONDecoder().raw_decode

    def skip(at: int, separator: str = "") -> int:
        """`at` past whitespace, then past `separator` and whitespace again, if it is there."""
        while at < len(text) and text[at] in " \t\n\r":  # JSON's own whitespace
            at += 1
        return skip(at + 1) if separator and text.startswith(separator, at) else at

    starts: list[int] = []
    at = skip(skip(0) + 1)  # past the object's "{"
    while text[at] != "}":
        key, at = decode(text, at)
        at = skip(at, ":")
        if key == "history":  # (the last one, if repeated, as json.loads takes it)
            starts, at = [], skip(at + 1)  # past "["
            while text[at] != "]":
                starts.append(at)
                at = skip(decode(text, at)[1], ",")
            at += 1
        else:
            at = decode(text, at)[1]
        at = skip(at, ",")
    lines, line, counted = [], 1, 0
    for start in starts:
        line += text.count("\n", counted, start)
        lines.append(line)
        counted = start
    return lines


def _check(entry: Any) -> str | None:
    """What keeps one `history` entry from being imported, or None."""
    if not isinstance(entry, dict):
        return f"must be an object, not {type(entry).__name__}"
    if entry.get("role") not in _ROLES:
        return f"role must be one of {', '.join(_ROLES)}, not {short(entry.get('role'))}"
    content = entry.get("content")
    if not (content is None or isinstance(content, str) or (isinstance(content, list) and all(
            isinstance(p, dict) and isinstance(p.get("type"), str) and isinstance(p.get("text", ""), str) for p in content))):
        return "content must be text, null, or a list of parts each with a string type (and a text part's text a string)"
    calls = entry.get("tool_calls")
    if entry["role"] == "assistant" and calls is not None:
        if not isinstance(calls, list):
            return "tool_calls must be a list"
        for n, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not (isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"] and isinstance(function, dict)
                    and isinstance(function.get("name"), str) and function["name"]):
                return f"tool_calls[{n}] needs a non-empty string id and a function with a non-empty string name"
            if not isinstance(function.get("arguments"), (str, dict, type(None))):
                return f"tool_calls[{n}].function.arguments must be JSON text"
    answers = _answers(entry)
    if answers is not None and not (answers and all(isinstance(i, str) and i for i in answers)):
        return "a tool message needs tool_call_ids, a list of the non-empty string ids of the calls it answers"
    return None


def _answers(entry: dict[str, Any]) -> list[Any] | None:
    """The call ids a tool message answers (SWE-agent's `tool_call_ids`, or OpenAI's one
    `tool_call_id`); None for a message of another role."""
    if entry["role"] != "tool":
        return None
    ids = entry.get("tool_call_ids", [entry["tool_call_id"]] if "tool_call_id" in entry else [])
    return ids if isinstance(ids, list) else [ids]


def _blocks(content: Any, skipped: Counter[str], images: bool = True) -> list[dict[str, Any]]:
    """A message's content as Messages API blocks: its text, and (with `images`: an observation)
    the images its `image_url` parts hold or name. A part of another kind, or an image that is
    neither data of a type the API takes nor an http(s) address, is left out and counted in
    `skipped` as `block/<type>`, as the pi importer counts what it leaves out."""
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    out = []
    for part in parts:
        image = _image(part) if images and part["type"] == "image_url" else None
        if image is not None:
            out.append(image)
        elif part["type"] != "text":
            skipped[f"block/{part['type']}"] += 1
        elif part.get("text"):
            out.append({"type": "text", "text": part["text"]})
    return out


def _image(part: dict[str, Any]) -> dict[str, Any] | None:
    """An OpenAI `image_url` part as an image block: a `data:` URL of one of the API's four image
    types is the image's data, an http(s) address a URL source; None for anything else."""
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str):
        return None
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    header, comma, data = url.partition(",")
    media_type = header[len("data:"):-len(";base64")].lower()
    if not (comma and header[:5].lower() == "data:" and header.lower().endswith(";base64") and media_type in image_media_types()):
        return None
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _tool_use(call: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A `tool_calls` entry as a `tool_use` block, and whether its arguments were kept as text."""
    arguments = call["function"].get("arguments")
    parsed: Any = arguments
    if isinstance(arguments, str):
        try:
            parsed = storable_json(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            parsed = None
    kept = not isinstance(parsed, dict) and arguments is not None
    return {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
            "input": {"arguments": arguments} if kept else parsed or {}}, kept


def _model(trajectory: dict[str, Any]) -> str | None:
    """The model `replay_config` names (`agent.model.name`; SWE-agent writes the config as JSON
    text, its demonstrations as an object), or None."""
    config = trajectory.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return None
    for key in ("agent", "model", "name"):
        config = config.get(key) if isinstance(config, dict) else None
    return config if isinstance(config, str) and config and config.isprintable() else None


def _plan_file(path: Path, summary: ImportSummary, seen: Seen, store: Store) -> Plan:
    read = _read(path, seen)
    if read is None:
        summary.wait(str(path))
        return Plan(store=store)
    trajectory, lines = read
    history: list[Any] = trajectory["history"]
    for index, entry in enumerate(history):
        why = _check(entry)
        if why is not None:
            raise InvalidEvent(f"{path}:{lines[index]}", f"history[{index}]: {why}")
    plan = Plan(store=store)
    file = plan.file(text_name(path))  # its real path, which the thread's id is made from too
    thread = stable_id(TOOL, file)

    def meta(index: int, flags: dict[str, Any] | None = None) -> dict[str, Any]:
        source = {"tool": TOOL, "file": file, "line": lines[index], **({"flags": flags} if flags else {})}
        return {"event_id": f"{TOOL}:{thread}:{index}", "origin": "imported", "source": source}

    def where(index: int) -> Callable[[str], InvalidEvent]:
        return lambda why: InvalidEvent(f"{path}:{lines[index]}", f"history[{index}]: {why}")

    environment = trajectory.get("environment")
    metadata = {"source": TOOL, "file": file, **({"environment": environment} if isinstance(environment, str) else {})}
    created: dict[str, Any] = {"title": path.stem, "metadata": metadata}  # SWE-agent names it for its instance
    first = 1 if history and history[0]["role"] == "system" else 0
    system = _blocks(history[0].get("content"), summary.skipped, images=False) if first else []
    if system:
        created["system"] = "\n\n".join(block["text"] for block in system)
    give_model(created, [_model(trajectory)])
    stream = plan.root(thread, created, {"event_id": f"{TOOL}:{thread}:created", "origin": "imported",
                                         "source": {"tool": TOOL, "file": file}},
                       lambda why: InvalidEvent(str(path), why))
    summary.files += 1
    summary.threads += 1
    summary.thread_ids.append(thread)
    index = first
    while index < len(history):
        entry = history[index]
        if entry["role"] == "tool":  # a run of them: one user message
            run = index
            while index + 1 < len(history) and history[index + 1]["role"] == "tool":
                index += 1
            _results(stream, history, run, index, summary, meta(run), where(run))
        elif entry["role"] == "assistant":
            blocks = _blocks(entry.get("content"), summary.skipped, images=False)
            uses = [_tool_use(call) for call in entry.get("tool_calls") or []]
            kept = [block["id"] for block, as_text in uses if as_text]
            blocks.extend(block for block, _ in uses)
            if blocks:
                stream.add("message.appended", {"role": "assistant", "content": blocks},
                           meta(index, {"arguments_kept_as_text": kept} if kept else None), where(index))
                summary.assistant_messages += 1
                summary.tool_calls += len(uses)
            else:
                summary.skipped["empty message"] += 1
        else:  # a user message, or a system message after the first message
            blocks = _blocks(entry.get("content"), summary.skipped)
            injected = entry["role"] == "system"
            if blocks:
                stream.add("message.appended", {"role": "user", "content": blocks},
                           meta(index, {"injected": True, "role": "system"} if injected else None), where(index))
                summary.prompts += 0 if injected else 1
            else:
                summary.skipped["empty message"] += 1
        index += 1
    info = trajectory.get("info")
    status = info.get("exit_status") if isinstance(info, dict) else None
    if isinstance(status, str):  # written when the run ends: after the history, so a run imported while it went on gets it
        stream.add("metadata.set", {"patch": {"exit_status": status}},
                   {"event_id": f"{TOOL}:{thread}:exit_status:{stable_id(status)}", "origin": "imported",
                    "source": {"tool": TOOL, "file": file}}, lambda why: InvalidEvent(str(path), f"info.exit_status: {why}"))
    return plan


def _results(stream: PlannedStream, history: list[Any], start: int, end: int, summary: ImportSummary,
             meta: dict[str, Any], where: Callable[[str], InvalidEvent]) -> None:
    """The tool messages `history[start:end + 1]` as one user message of `tool_result` blocks;
    a result for no call waiting is counted in `summary.skipped`, as pi's importer counts it."""
    pending = set(stream.facts.tools)
    blocks = []
    for entry in history[start:end + 1]:
        content = _blocks(entry.get("content"), summary.skipped)
        for call in _answers(entry) or ():
            if call not in pending:
                summary.skipped["tool_result without its call"] += 1
                continue
            pending.discard(call)
            blocks.append({"type": "tool_result", "tool_use_id": call, "content": content})
    if blocks:
        stream.add("message.appended", {"role": "user", "content": blocks}, meta, where)


def import_swe_agent(
    store: Store,
    paths: Sequence[str | Path],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    finished: bool = False,
) -> ImportSummary:
    """Import SWE-agent trajectory files (or directories of them, searched recursively for
    `*.traj`); idempotent, as `import_pi`. A file that cannot be read or is not a trajectory, or an entry of its
    `history` that cannot be imported, raises `InvalidEvent` naming it, with nothing written
    (every file is checked before the first is written); with `skip_bad` that file is left out
    whole, counted as `malformed` and named in `bad`, and the others are imported (a run killed
    while SWE-agent rewrote its file leaves it cut short). A file empty or cut short that changed
    in the last `LIVE_SECONDS` is being written again: it is left for a later import, counted in
    `waiting` and named in `waiting_files`; unless `finished` says SWE-agent is done with every
    file (copies just made): such a file is then refused as any other cut short."""
    return import_swe_agent_files(store, source_files(paths, PATTERN, ASKS, noun=NOUN, finished=finished), skip_bad=skip_bad,
                                  progress=progress, finished=finished)


def import_swe_agent_files(
    store: Store,
    files: Sequence[Path],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    summary: ImportSummary | None = None,
    finished: bool = False,
) -> ImportSummary:
    """`import_swe_agent` of trajectory files already found (`source_files`, as a follower
    finds them at each poll), counted into `summary` (`import_sources`: what was added before
    an error stays counted there)."""

    def plan(path: Path, summary: ImportSummary, _: Any, seen: Seen) -> Plan:
        own = ImportSummary()
        try:
            planned = _plan_file(path, own, seen, store)
        except InvalidEvent as error:
            if not skip_bad:
                advice = error.advice if isinstance(error, WholeFile) else "fix or delete that file, or skip bad files (--skip-bad)"
                raise InvalidEvent(error.field, f"{error.why}; {advice}") from None
            at = error.field.removeprefix(f"{path}:")  # the line its entry starts on, when one was named
            summary.skipped["malformed"] += 1
            summary.bad.append((str(path), int(at) if at.isdigit() else 1, error.why))
            return Plan(store=store)
        summary.merge(own)
        return planned

    return import_sources(store, files, plan, lambda path: path.stat().st_size, strict=not skip_bad, progress=progress,
                          noun="file", summary=summary, finished=finished)
