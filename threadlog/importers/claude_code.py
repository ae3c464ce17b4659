"""Claude Code session files (`~/.claude/projects/<project>/<session>.jsonl`) into threads.

How a file becomes streams (field meanings: FORMATS.md in the project's data notes):

- Lines with a `uuid` form a tree through `parentUuid`; `progress`, `attachment` and
  `system` lines are links in it that carry no conversation (a `compact_boundary` links
  through `logicalParentUuid`), but for the attachments whose text Claude Code puts before
  the model (`_TEXT_ATTACHMENTS`): each is a user message of its own where its line is. A
  line whose parent is not in the file continues from the previous conversation line, so one
  file is one thread; a line written before its parent is taken after it. A uuid repeated by
  a line that says something else is a bad line.
- Conversation lines group into *units*, one event each: an assistant API response is
  every line sharing its `message.id`; the `tool_result` lines answering one response are
  one user message; any other user line is its own unit. Claude Code chains parallel tool
  calls as siblings (response line → {next block's line, a tool result}); grouping by unit
  makes those siblings one turn, so only a unit with two different next units is a real
  branch (the user edited or rewound, or an answer was retried).
- The main thread follows, from the root, the child whose subtree ends latest in the
  file: the branch the file ends on. Every other child of a unit on it becomes a fork at
  the offset after that unit, recursively.
- Sub-agents (`agent-*.jsonl` beside the session, or under `<session>/subagents/`) become
  `subagent` forks after the assistant message holding the `Task`/`Agent` call whose
  result names their `agentId` (in `toolUseResult`, else in its text), a workflow's agents
  (`subagents/workflows/<runId>/`) after the `Workflow` call whose result names that run (a
  teammate an earlier import made a thread of its own stays one); the compaction summariser's file (`agent-acompact-*`)
  forks where its prompt starts (the boundary's `logicalParentUuid`).
- A `summary` line naming a message of the file titles the file's thread (or sub-agent fork)
  where the line is: after the units of the stream that start above it, so the lines a
  growing file adds come after it.
- Runs: a typed prompt starts one; an assistant message without tool calls ends it
  (`ok`); `[Request interrupted by user…]` ends it `cancelled`. What Claude Code itself
  writes as a user line (command output, reminders, a background agent's or a teammate's
  notice) or as an attachment's text is marked injected, and starts or ends none; the blocks
  an IDE writes before a typed prompt are listed as Claude Code's (`injected_blocks`), and
  the prompt starts its run.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventstore import InvalidEvent, Store, StoreError, ThreadNotFound
from eventstore.ids import MAX_ID_CHARS
from eventstore.recorded import short
from eventstore.content import known_block_type, validate_block
from eventstore.events import is_time

from ..returned import RETURNED, returned_fields
from .lines import (LIVE_SECONDS, BadLine, Line, NoSession, Seen, distinct, existing_paths, files_below, is_text, read_lines,
                    real_path, source_paths, usable_name)
from .models import give_model
from .origin import elsewhere, first_line_of
from .plan import Plan, PlannedStream, depth_first, import_sources, parents_first, stable_id, stored_sources
from .summary import ImportSummary, on_bad_line

TOOL = "claude-code"
FORMAT = "a Claude Code session (JSON Lines text)"  # what a file refused as none should have been
_CONVERSATION = ("user", "assistant")
_FLAGS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "isSidechain", "agentId", "isApiErrorMessage",
          "permissionMode", "promptId", "requestId", "sourceToolAssistantUUID")
# The flags that decide where a line goes (a sub-agent's fork, the summary after a compaction,
# text injected by the tool): "no" would read as true.
_STEERING = ("isSidechain", "isCompactSummary", "isMeta")
_INJECTED_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-stderr>",
                      "<local-command-caveat>", "Caveat: The messages below were generated", "<bash-input>",
                      "<bash-stdout>", "<bash-stderr>", "<system-reminder>", "<user-memory-input>")
# What Claude Code writes into the user's turn as a background agent finishes or a teammate writes:
# injected too, but a release before took them as typed prompts (`_Writer._injected`).
_TASK_NOTIFICATION = "<task-notification>"
_NOTICES = (_TASK_NOTIFICATION, "<teammate-message ")
# The attachment lines whose text Claude Code puts before the model in the user's turn: a hook's
# additional context (a list of texts) and the skills it lists for the model (one text). Each
# is its message, marked injected (`_attachment_message`); the other attachments in the sessions
# seen hold no text shown to the model as it is (a hook's run and output, the deferred tools'
# names, the task list as data).
_TEXT_ATTACHMENTS = ("hook_additional_context", "skill_listing")
# What an IDE writes before a prompt typed in it, each a text block of its own: Claude Code's, not the person's.
_IDE_PREFIXES = ("<ide_opened_file>", "<ide_selection>")
_INTERRUPT = "[Request interrupted by user"
_AGENT_TOOLS = ("Task", "Agent")  # the calls that start a sub-agent (`Task` until 2.1.39, then `Agent`)
_WORKFLOW = "Workflow"  # the call that starts a workflow, whose agents its result names by run (`runId`)
_RECORDS = ("sessionId", "cwd", "gitBranch", "version", "slug")  # the thread's metadata, from the first line holding each


@dataclass
class _Entry:
    """One line with a uuid."""

    line: Line
    uuid: str
    parent: str | None
    kind: str  # user | assistant | link
    unit: _Unit | None = None


@dataclass
class _Unit:
    key: tuple[str, str]
    kind: str  # assistant | results | user | compact
    entries: list[_Entry] = field(default_factory=list)
    parent: _Unit | None = None
    children: list[_Unit] = field(default_factory=list)
    latest: int = 0  # the last line number in this unit's subtree

    @property
    def first(self) -> _Entry:
        return self.entries[0]


@dataclass(frozen=True)
class _Title:
    """A `summary` line naming a message of its file: the file's stream is titled where the line is."""

    line: int
    leaf: str  # the uuid of the message it names
    text: str
    again: bool = False  # an earlier summary line names the same message (Claude Code regenerates titles)

    @property
    def suffix(self) -> str:
        """Its event id's: the first title of a message keeps the id earlier releases gave it."""
        return f"title:{self.leaf}:{self.line}" if self.again else f"title:{self.leaf}"


@dataclass
class _File:
    """One parsed session or sub-agent file."""

    path: Path
    key: str  # the event-id namespace: the session's stem, or session/agent
    units: list[_Unit]
    entries: dict[str, _Entry]
    boundaries: dict[str, dict[str, Any]]  # summary-line uuid -> its compact_boundary record
    titles: list[_Title]
    agent_results: dict[str, str]  # agentId -> the tool_use id of the Task/Agent call it answers
    workflow_runs: dict[str, str] = field(default_factory=dict)  # a Workflow call's runId -> its tool_use id
    named_in_text: dict[str, str] = field(default_factory=dict)  # agentId -> the call whose result's text alone names it
    finished: set[str] = field(default_factory=set)  # the agentIds the file shows done (`_finished_agent`)
    records: dict[str, Any] = field(default_factory=dict)  # sessionId, cwd, version, …
    first_parent: str | None = None  # the raw parentUuid of the first conversation line
    agent_id: str | None = None
    sidechain: list[Line] = field(default_factory=list)  # a main file's inline sub-agent lines (1.0.x)
    task_call: str | None = None  # for an inline sub-agent: the tool_use id of the Task call it answers
    held: bool = False  # a last response left for a later import (`_unfinished`)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _attachment_message(record: dict[str, Any]) -> dict[str, Any] | None:
    """The user message an attachment line's text makes (`_TEXT_ATTACHMENTS`: one text block a
    text, as the line holds them), or None: an attachment of another kind, or one with no text
    (content that is no text stays unread, as every attachment line was)."""
    attachment = record.get("attachment")
    if not isinstance(attachment, dict) or attachment.get("type") not in _TEXT_ATTACHMENTS:
        return None
    content = attachment.get("content")
    texts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
    if not all(isinstance(text, str) and is_text(text) for text in texts):
        return None
    blocks = [{"type": "text", "text": text} for text in texts if text]
    return {"role": "user", "content": blocks} if blocks else None


def _attached(entry: _Entry) -> bool:
    """Whether `entry` is a line of no conversation of its own: a link, or an attachment's text."""
    return entry.kind == "link" or entry.line.record.get("type") == "attachment"


def _check(record: dict[str, Any]) -> str | None:
    """Why a conversation line cannot be imported, or None."""
    if not isinstance(record.get("uuid"), str) or not record["uuid"]:
        return "a user or assistant line needs a string uuid"
    if record.get("parentUuid") is not None and not isinstance(record["parentUuid"], str):
        return "parentUuid must be a string or null"
    if record.get("timestamp") is not None and not isinstance(record["timestamp"], str):
        return "timestamp must be a string"
    message = record.get("message")
    if not isinstance(message, dict):
        return "message must be an object"
    content = message.get("content")
    if not isinstance(content, (str, list)):
        return "message.content must be a string or a list of blocks"
    for name in _STEERING:
        if record.get(name) is not None and not isinstance(record[name], bool):
            return f"{name} must be true, false or null, not {type(record[name]).__name__}"
    if record["type"] == "assistant" and message.get("id") is not None and not isinstance(message["id"], str):
        return "message.id must be a string"
    if isinstance(content, list):
        for index, block in enumerate(content):
            if _unknown(block):
                continue  # a newer release's: left out (`_leave_out_unknown`)
            try:
                validate_block(_known_inside(block), f"message.content[{index}]")
            except InvalidEvent as error:
                return str(error)
    for name in ("model", "stop_reason"):
        if message.get(name) is not None and not isinstance(message[name], str):
            return f"message.{name} must be a string"
    for name in (*_RECORDS, "agentId"):  # what a thread's first event takes from the line
        if isinstance(record.get(name), str) and not is_text(record[name]):
            return f"{name} is not UTF-8 text (it holds a lone surrogate)"
    if isinstance(message.get("model"), str) and not is_text(message["model"]):
        return "message.model is not UTF-8 text (it holds a lone surrogate)"
    if message.get("usage") is not None and not isinstance(message["usage"], dict):
        return "message.usage must be an object"
    return None


def _unknown(block: Any, in_tool_result: bool = False) -> bool:
    """Whether `block` is a content block of a type the SDK does not know (a newer release's),
    in a message or (`in_tool_result`) in a tool result's content."""
    return isinstance(block, dict) and isinstance(block.get("type"), str) and not known_block_type(block["type"], in_tool_result)


def _known_inside(block: Any) -> Any:
    """`block`, a tool result's without the blocks of its content the SDK does not know (without
    its content, when none is left: a result may say nothing)."""
    inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
    if not isinstance(inner, list) or not any(_unknown(b, True) for b in inner):
        return block
    kept = [b for b in inner if not _unknown(b, True)]
    return {k: v for k, v in block.items() if k != "content"} | ({"content": kept} if kept else {})


def _leave_out_unknown(message: dict[str, Any], skipped: Counter[str]) -> None:
    """Leave out of a checked line's content the blocks of a type the SDK does not know, in it
    and in its tool results, each counted in `skipped` as `block/<type>`, as the pi importer
    does: one such block, which a newer Claude Code may write, refused its line, and with it
    the session. What is left is imported as any line: a response left with no block is no
    message, and a tool result whose call was left out is left out too (`_user_blocks`)."""
    content = message["content"]
    if not isinstance(content, list):
        return
    kept = []
    for block in content:
        if _unknown(block):
            skipped[f"block/{block['type']}"] += 1
            continue
        known = _known_inside(block)
        if known is not block:
            skipped.update(f"block/{b['type']}" for b in block["content"] if _unknown(b, True))
        kept.append(known)
    if len(kept) != len(content) or any(a is not b for a, b in zip(kept, content)):
        message["content"] = kept


def _parse(path: Path, key: str, summary: ImportSummary, skip_bad: bool, partial_tail: bool, seen: Seen | None = None, *,
           session: bool = False, paused: bool = False) -> _File:
    on_bad = on_bad_line(summary, skip_bad)
    lines, end = read_lines(path, on_bad, partial_tail, seen, kind=FORMAT)
    if partial_tail and end == 0:  # just created, its first line still to come: it waits (it was a session of nothing)
        summary.wait(str(path))
    if lines and first_line_of(lines[0].record) == "pi":
        # Taken line by line, a pi session was a session of nothing, lost without a word beside others.
        on_bad(NoSession(str(path), lines[0].number, elsewhere("pi", FORMAT)))
        lines = []
    return _from_lines(path, key, lines, summary, on_bad, partial_tail, session=session, paused=paused)


def _from_lines(path: Path, key: str, lines: list[Line], summary: ImportSummary, on_bad: Callable[[BadLine], None],
                partial_tail: bool, *, session: bool = False, paused: bool = False) -> _File:
    """Parse a file's lines; a `session` file's sidechain lines are its inline sub-agents (1.0.x),
    while every line of a sub-agent's own file is one (its file is its own, session or none).
    With `partial_tail`, what the file does not show complete is left for a later read
    (`_unfinished`); with `paused`, only a last response still waiting on a tool call."""
    entries: dict[str, _Entry] = {}
    order: list[_Entry] = []
    boundaries: dict[str, dict[str, Any]] = {}
    boundary_by_uuid: dict[str, dict[str, Any]] = {}
    titles: list[_Title] = []
    titled: set[str] = set()  # the messages a summary line names
    agent_results: dict[str, str] = {}
    parsed = _File(path, key, [], entries, boundaries, titles, agent_results)
    for line in lines:
        record = line.record
        type_ = record.get("type")
        if not isinstance(type_, str):
            on_bad(BadLine(str(path), line.number, "a line needs a string type"))
            continue
        if type_ in _CONVERSATION:
            why = _check(record)
            if why is not None:
                on_bad(BadLine(str(path), line.number, why))
                continue
            _leave_out_unknown(record["message"], summary.skipped)
            if record.get("isSidechain") and session:
                parsed.sidechain.append(line)  # planned as sub-agent forks (`_inline_agents`)
                continue
            entry = _Entry(line, record["uuid"], record.get("parentUuid"), type_)
            if parsed.first_parent is None and not order:
                parsed.first_parent = entry.parent
            if parsed.agent_id is None and isinstance(record.get("agentId"), str):
                parsed.agent_id = record["agentId"]
            result = record.get("toolUseResult")
            content = record["message"]["content"]
            ids: list[str] = [b["tool_use_id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                              and isinstance(b.get("tool_use_id"), str)] if isinstance(content, list) else []
            if isinstance(result, dict) and ids:
                if isinstance(result.get("agentId"), str):
                    agent_results[result["agentId"]] = ids[0]
                if isinstance(result.get("runId"), str):  # a Workflow's: its agents are in subagents/workflows/<runId>/
                    # The first call naming a run started it: where an import that read no further put its agents.
                    parsed.workflow_runs.setdefault(result["runId"], ids[0])
            done = _finished_agent(record)
            if done is not None:
                parsed.finished.add(done)
            for name in _RECORDS:
                if name not in parsed.records and isinstance(record.get(name), str):
                    parsed.records[name] = record[name]
        elif isinstance(record.get("uuid"), str):
            parent = record.get("parentUuid")
            if type_ == "system" and record.get("subtype") == "compact_boundary":
                parent = _boundary_parent(record, entries) or parent
                boundary_by_uuid[record["uuid"]] = record
            added = _attachment_message(record) if type_ == "attachment" else None
            if added is not None:  # a user message of Claude Code's, where the line is in the tree
                line = Line(line.number, {**record, "message": added})
            entry = _Entry(line, record["uuid"], parent if isinstance(parent, str) else None, "link" if added is None else "user")
            subtype = record.get("subtype")
            if added is None:
                summary.skipped[f"{type_}/{subtype}" if isinstance(subtype, str) else type_] += 1
        else:
            if type_ == "summary" and isinstance(record.get("leafUuid"), str) and isinstance(record.get("summary"), str):
                titles.append(_Title(line.number, record["leafUuid"], record["summary"], record["leafUuid"] in titled))
                titled.add(record["leafUuid"])
            summary.skipped[type_] += 1
            continue
        if entry.uuid in entries:
            earlier = entries[entry.uuid].line
            # A conversation line dropped as a repeat lost what only it said; a link line carries
            # nothing imported, and of a hook's attachment lines, which Claude Code 2.1.27 writes
            # under one uuid, the first is taken.
            if earlier.record != line.record and not _attached(entry) and not _attached(entries[entry.uuid]):
                on_bad(BadLine(str(path), line.number, f"uuid {short(entry.uuid)} is line {earlier.number}'s, "
                                                       "which says something else"))
            else:
                summary.skipped["duplicate uuid"] += 1
            continue
        entries[entry.uuid] = entry
        order.append(entry)
    for agent_id, call in _agents_named_in_results(order, set(agent_results.values())).items():
        if agent_id not in agent_results:  # `toolUseResult.agentId` first, where a line has one
            parsed.named_in_text[agent_id] = call
    # Boundaries by the summary line that follows them.
    for entry in order:
        if entry.kind == "user" and entry.parent in boundary_by_uuid and entry.line.record.get("isCompactSummary"):
            boundaries[entry.uuid] = boundary_by_uuid[entry.parent]
    parsed.units, cycles = _units(order, entries, boundaries)
    if (partial_tail or paused) and parsed.units:
        held = _unfinished(parsed.units, lines, paused_only=not partial_tail)
        if held:  # leave them for a later read; their event ids are the same then
            summary.wait(str(path))
            parsed.held = True
            # A title written after a held response's first line comes after that response: it waits too.
            cut = min((u.first.line.number for u in parsed.units if u.key in held), default=None)
            titles[:] = [t for t in titles if cut is None or t.line < cut]
            kept = [e for e in order if e.unit is None or e.unit.key not in held]
            for entry in kept:
                entry.unit = None
            parsed.units, cycles = _units(kept, {e.uuid: e for e in kept}, boundaries)
    # Named at each import: the cut is the file's (of the lines imported now: a held one waits).
    summary.cycles_cut.extend((str(path), entry.line.number) for entry in cycles)
    titles[:] = [t for t in titles if t.leaf in entries]
    return parsed


_NAMED_AGENT = re.compile(r"^agentId: ([\w-]+)", re.MULTILINE)


def _agents_named_in_results(order: list[_Entry], answered: set[str]) -> dict[str, str]:
    """agentId -> the `Task`/`Agent` call whose result's text names it (`agentId: …`, the line
    Claude Code adds for the model, to continue the agent with): a teammate's result may name
    its agent there alone, with no `toolUseResult.agentId`, and its file was a thread of its own.
    The calls `answered` have their agent from `toolUseResult.agentId`: what their text names
    is the answer's own words (an id it quotes), no agent of theirs."""
    calls = {b.get("id") for e in order if e.kind == "assistant" for b in _blocks_of(e)
             if b.get("type") == "tool_use" and b.get("name") in _AGENT_TOOLS} - answered
    named: dict[str, str] = {}
    for entry in order:
        for block in _blocks_of(entry) if entry.kind == "user" else ():
            if block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                content = block.get("content")
                texts = [_text_of([b]) for b in content] if isinstance(content, list) else [_text_of(content)]
                # Claude Code adds its line after the agent's answer, which may quote another's: the last.
                found = _NAMED_AGENT.findall("\n".join(texts))  # each text block its own lines
                if found:
                    named.setdefault(found[-1], block["tool_use_id"])
    return named


# A notice's first task id, then the first status after it: two searches, each once through the
# notice (one pattern `<task-id>…</task-id>.*?<status>` scanned the rest of it again from each
# `<task-id>`, and a notice of megabytes of them and no status took hours).
_NOTIFIED_ID = re.compile(r"<task-id>([^<]*)</task-id>")
_NOTIFIED_STATUS = re.compile(r"<status>([^<]*)</status>")
_STILL_RUNNING = ("async_launched", "running", "in_progress", "pending")


def _finished_agent(record: dict[str, Any]) -> str | None:
    """The agentId a session line shows done: a sub-agent's result (`toolUseResult.agentId`),
    unless it is a background one's launch (`isAsync`, status `async_launched`: its file is
    still being written), or a background one's `<task-notification>` with a final status."""
    result = record.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("agentId"), str):
        return None if result.get("isAsync") is True or result.get("status") in _STILL_RUNNING else result["agentId"]
    content = record["message"]["content"] if record["type"] == "user" else None
    if isinstance(content, list):  # validated blocks: a text block's text is a string
        content = content[0].get("text") if content and content[0].get("type") == "text" else None
    if not isinstance(content, str) or not content.lstrip().startswith(_TASK_NOTIFICATION):
        return None
    task = _NOTIFIED_ID.search(content)
    status = _NOTIFIED_STATUS.search(content, task.end()) if task is not None else None
    if task is None or status is None or status.group(1).strip() in _STILL_RUNNING:
        return None
    return task.group(1).strip()


_TURN_ENDS = ("turn_duration", "stop_hook_summary")  # system lines Claude Code writes once a turn is over


def _unfinished(units: list[_Unit], lines: list[Line], paused_only: bool = False) -> set[tuple[str, str]]:
    """The keys of the units a tool still writing may add lines to: the last response and
    its tool results, until the file shows them complete.

    `paused_only` (a file quiet for long): only a last response no line after it ends or
    follows (the turn's end, the next message) that is surely not whole: a tool call of it
    has no result, its last block is thinking, or it says `stop_reason: tool_use` with no call
    yet. Claude Code waiting at a permission prompt leaves its file so, however long: the
    response it then goes on writing (2.1.x writes parallel calls each after the result of the
    one before) would differ from the one taken now, which an event, once written, cannot follow.

    Claude Code writes a response as one line per content block, and every one of them may
    already carry the response's final `stop_reason` (2.0.x does), so a `stop_reason` alone
    does not show the last block written. A response is complete once a later message
    follows it (the next response, the next prompt: other lines, such as a file-history
    snapshot, come between a response's blocks; and its own tool results do not count, since
    2.1.x writes a response's parallel tool calls each after the result of the one before),
    or a line ending the turn, or when its
    last line ends it: a `stop_reason` other than `tool_use` (whose results always follow)
    on a block that is neither thinking nor a tool call. Its results are complete once
    every call of it has its result, or the turn is over. A unit written before a line of
    another unit is complete whatever the time between its lines, so a slow response is
    imported once, whole: its event id comes from its first line, and an event, once
    written, is never rewritten.
    """
    last = max(units, key=lambda u: u.entries[-1].line.number)
    if last.kind not in ("assistant", "results"):
        return set()
    key = last.key[1]
    response = next((u for u in units if u.key == ("a", key)), None)
    results = next((u for u in units if u.key == ("r", key)), None)
    if response is None:
        return set()
    end = max(u.entries[-1].line.number for u in (response, results) if u is not None)
    turn_over = any(line.number > end and line.record.get("type") == "system" and line.record.get("subtype") in _TURN_ENDS
                    for line in lines)
    final = response.entries[-1]
    followed = any(line.number > final.line.number and line.record.get("type") in ("user", "assistant")
                   and not _only_results(line.record) for line in lines)
    blocks = _blocks_of(final)
    stop_reason = final.line.record["message"].get("stop_reason")
    ends = (stop_reason not in (None, "tool_use") and bool(blocks)
            and blocks[-1].get("type") not in ("thinking", "redacted_thinking", "tool_use"))
    calls = {b.get("id") for e in response.entries for b in _blocks_of(e) if b.get("type") == "tool_use"}
    answered = {b.get("tool_use_id") for e in (results.entries if results else []) for b in _blocks_of(e) if b.get("type") == "tool_result"}
    if paused_only:
        cut = (not calls <= answered or (bool(blocks) and blocks[-1].get("type") in ("thinking", "redacted_thinking"))
               or (stop_reason == "tool_use" and not calls))  # no response ends so
        return set() if turn_over or followed or not cut else {("a", key), ("r", key)}
    if not (turn_over or followed or ends):
        return {("a", key), ("r", key)}
    return set() if turn_over or calls <= answered else {("r", key)}


def _only_results(record: dict[str, Any]) -> bool:
    """Whether a user line holds tool results and nothing else."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return (record.get("type") == "user" and isinstance(content, list) and bool(content)
            and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _blocks_of(entry: _Entry) -> list[dict[str, Any]]:
    content = entry.line.record["message"]["content"]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _preserved(boundary: dict[str, Any]) -> dict[str, Any]:
    """A boundary's `compactMetadata.preservedSegment` ({headUuid, anchorUuid, tailUuid}), or {}."""
    metadata = boundary.get("compactMetadata")
    segment = metadata.get("preservedSegment") if isinstance(metadata, dict) else None
    return segment if isinstance(segment, dict) else {}


def _boundary_parent(boundary: dict[str, Any], seen: dict[str, _Entry]) -> str | None:
    """Where a compaction continues from: its `logicalParentUuid` when that line came before it.

    With a preserved segment (messages kept verbatim after the summary) the logical parent
    may be the segment's tail, written again after the summary: then the compaction follows
    the last line of the segment already in the file (`preservedMessages.uuids`, else its head).
    """
    logical = boundary.get("logicalParentUuid")
    if not isinstance(logical, str) or logical in seen or not _preserved(boundary):
        return logical if isinstance(logical, str) else None
    metadata = boundary["compactMetadata"]
    kept = metadata.get("preservedMessages")
    uuids = kept.get("uuids") if isinstance(kept, dict) else None
    candidates = [str(_preserved(boundary).get("headUuid"))]
    if isinstance(uuids, list):
        candidates.extend(u for u in uuids if isinstance(u, str))
    return next((u for u in reversed(candidates) if u in seen), logical)


def _units(order: list[_Entry], entries: dict[str, _Entry],
           boundaries: dict[str, dict[str, Any]]) -> tuple[list[_Unit], list[_Entry]]:
    """Group conversation lines into units and link the units into a tree (see module doc);
    with the lines where a cycle of parents was cut (`_parents_first`), in the file's order."""
    tool_owner: dict[str, _Unit] = {}
    units: dict[tuple[str, str], _Unit] = {}
    ordered: list[_Unit] = []
    effective: dict[str, _Entry | None] = {}

    def conversation_parent(entry: _Entry) -> _Entry | None:
        seen: list[str] = []
        uuid = entry.parent
        found: _Entry | None = None
        while uuid is not None and uuid in entries:
            if uuid in effective:
                found = effective[uuid]
                break
            seen.append(uuid)
            candidate = entries[uuid]
            if candidate.kind != "link":
                found = candidate
                break
            if len(seen) > len(entries):
                break  # a cycle of link lines
            uuid = candidate.parent
        for item in seen:
            effective[item] = found
        return found

    previous: _Entry | None = None
    responses: dict[str, tuple[str, str]] = {}  # a response's message.id -> the key of its unit, when not ("a", id)
    placed, cut = _parents_first(order, entries)
    for entry in placed:
        if entry.kind == "link":
            continue
        record = entry.line.record
        message = record["message"]
        content = message["content"]
        if entry.kind == "assistant":
            response = message.get("id") or entry.uuid
            key = responses.get(response, ("a", response))
            joined = units.get(key)
            if joined is not None and not _continues(joined, conversation_parent(entry) if entry.parent in entries else previous):
                # Its id again in another turn (an edited file, a response repeated): a response of
                # its own, which the lines continuing it join.
                key = responses[response] = ("a", f"{response} {entry.uuid}")
            kind = "assistant"
        elif entry.uuid in boundaries:
            key, kind = ("c", entry.uuid), "compact"
        else:
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(content, list) else []
            owner = tool_owner.get(results[0].get("tool_use_id", "")) if results else None
            key, kind = (("r", owner.key[1]), "results") if owner else (("u", entry.uuid), "user")
        unit = units.get(key)
        if unit is None:
            unit = units[key] = _Unit(key, kind)
            parent_entry = conversation_parent(entry) if entry.parent in entries else previous
            parent = parent_entry.unit if parent_entry is not None else None
            if parent is not None and parent is not unit:
                unit.parent = parent
                parent.children.append(unit)
            ordered.append(unit)
        unit.entries.append(entry)
        entry.unit = unit
        if kind == "assistant" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    tool_owner[block["id"]] = unit
        previous = entry
    for unit in reversed(ordered):
        unit.latest = max([unit.entries[-1].line.number, *(c.latest for c in unit.children)])
    return ordered, _cut_messages(cut, ordered, entries)


def _cut_messages(cut: list[_Entry], units: list[_Unit], entries: dict[str, _Entry]) -> list[_Entry]:
    """The lines to name for the cycles of parents `_parents_first` cut (`cut`), in the file's
    order: a message cut is itself the start of a thread. A link line cut (a `progress` or
    `system` line, on a cycle through lines without conversation) starts nothing: the messages
    whose chain of parents runs into it each start a thread, and those are what a reader of the
    file looks for; a cycle no message runs into changes nothing imported, and is not named."""
    links = {entry.uuid for entry in cut if entry.kind == "link"}
    named = {entry.uuid: entry for entry in cut if entry.kind != "link"}
    for unit in units if links else ():
        first = unit.entries[0]
        if unit.parent is not None or first.parent not in entries:
            continue
        walked: set[str] = set()
        uuid: str | None = first.parent
        while uuid is not None and uuid in entries and uuid not in walked and entries[uuid].kind == "link":
            if uuid in links:
                named[first.uuid] = first
                break
            walked.add(uuid)
            uuid = entries[uuid].parent
    return sorted(named.values(), key=lambda entry: entry.line.number)


def _parents_first(order: list[_Entry], entries: dict[str, _Entry]) -> tuple[list[_Entry], list[_Entry]]:
    """`order` (the file's) with every line after the line it names as its parent: a line
    written before its parent (lines swapped in an edited or merged file) began a root of its
    own, and the file's one conversation came in as two threads, the second starting mid-way.
    A cycle of parents is cut where it is entered (`_units` takes that line as a root): those
    lines come second, in the file's order."""
    keys, cut = parents_first([entry.uuid for entry in order], {entry.uuid: entry.parent for entry in order})
    return [entries[key] for key in keys], sorted((entries[key] for key in cut), key=lambda entry: entry.line.number)


def _continues(unit: _Unit, parent: _Entry | None) -> bool:
    """Whether a line whose conversation parent is `parent` goes on with the response `unit`:
    its parent is one of the response's lines, or of the tool results answering it."""
    owner = parent.unit if parent is not None else None
    return owner is unit or (owner is not None and owner.kind == "results" and owner.key == ("r", unit.key[1]))


# -- from units to events ---------------------------------------------------------------------


def _added_text(unit: _Unit) -> list[_Unit]:
    """The children of `unit` that are an attachment's text and end there, where it has others:
    what Claude Code added to the turn beside the line the turn goes on from (claude-code-log's
    hook session names the prompt as the parent of both its hook's context and the answer). In
    the turn after `unit`, not a branch of their own: a follower that read the text before the
    answer kept it in the thread. After a response (whose results come first) they stay children
    as any other: no session shows one there."""
    if unit.kind == "assistant" or len(unit.children) < 2:
        return []
    return [c for c in unit.children if not c.children and c.first.line.record.get("type") == "attachment"]


def _response(entries: list[_Entry], refused: list[str] | None = None) -> dict[str, Any] | None:
    """The `message.appended` data of an API response written over `entries` (None: no block),
    with its other top-level fields as a live turn records them (`returned.py`), each taking
    its value from the last line holding it, as the model and stop reason do; the names of
    those the log cannot store go in `refused`."""
    blocks: list[dict[str, Any]] = []
    model = stop = None
    usage: dict[str, Any] | None = None
    others: dict[str, Any] = {}
    for entry in entries:
        message = entry.line.record["message"]
        content = message["content"]
        blocks.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
        model = message.get("model") or model
        stop = message.get("stop_reason") or stop
        usage = message.get("usage") or usage
        others.update((name, value) for name, value in message.items() if value is not None)
    blocks = [b for b in blocks if not (b.get("type") == "text" and not b.get("text"))] or blocks
    if not blocks:
        return None
    data: dict[str, Any] = {"role": "assistant", "content": blocks}
    message_id = entries[0].line.record["message"].get("id")
    for name, value in (("message_id", message_id), ("model", model), ("stop_reason", stop), ("usage", usage)):
        if value is not None:
            data[name] = value
    kept, left_out = returned_fields(others)
    data.update(kept)
    if refused is not None:
        refused += left_out
    return data


def _ide_blocks(blocks: list[dict[str, Any]]) -> list[int]:
    """The indexes of the blocks leading a typed prompt that its IDE wrote (`_IDE_PREFIXES`), each
    a text block of its own before what the person typed. The last block is what was typed
    (a prompt given as a string is one block), however it starts: a person may type or paste
    `<ide_selection>` too, and their text is not shown as Claude Code's."""
    leading = []
    for index, block in enumerate(blocks[:-1]):
        if block.get("type") != "text" or not str(block.get("text", "")).lstrip().startswith(_IDE_PREFIXES):
            break
        leading.append(index)
    return leading


def _user_blocks(entries: list[_Entry], pending: frozenset[str]) -> tuple[list[dict[str, Any]], int]:
    """A user message's blocks from its lines, with the tool results answering a call `pending`
    only (each once), and how many results were left out for answering none."""
    blocks: list[dict[str, Any]] = []
    waiting = set(pending)
    left_out = 0
    for entry in entries:
        content = entry.line.record["message"]["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if block.get("type") == "tool_result":
                if block.get("tool_use_id") not in waiting:
                    left_out += 1
                    continue
                waiting.discard(block["tool_use_id"])
            blocks.append(block)
    return [b for b in blocks if not (b.get("type") == "text" and not b.get("text"))], left_out


@dataclass
class _Writer:
    """Turns one file's units into planned streams."""

    plan: Plan
    file: _File
    summary: ImportSummary
    name: str  # the file as the source meta and metadata name it (`Plan.file`)
    compaction_causes: dict[str, str]  # logicalParentUuid -> the summariser's fork id
    on_bad: Callable[[BadLine], None]  # a line it cannot import: raised, or skipped and reported (`on_bad_line`)
    stored: dict[str, str] = field(default_factory=dict)  # source uuid -> the stream an earlier import put it in
    # where each tool call and each unit (by its first uuid) landed: (stream, offset after it)
    placed: dict[str, tuple[PlannedStream, int]] = field(default_factory=dict)
    started: dict[str, tuple[PlannedStream, int]] = field(default_factory=dict)  # unit's first uuid -> (stream, its first offset)
    titled: PlannedStream | None = None  # the stream the file's titles go into (`place_titles`)
    titles: list[tuple[_Title, int | None]] = field(default_factory=list)  # still to place, with the offset stored at
    stored_end: int = 0  # the offset after the titled stream's stored events: no new title goes before it

    def _id(self, suffix: str) -> str:
        return f"cc:{self.file.key}:{suffix}"

    def _where(self, entry: _Entry, skippable: bool = True) -> Callable[[str], BadLine]:
        return lambda why: BadLine(str(self.file.path), entry.line.number, why, skippable=skippable)

    def _meta(self, unit: _Unit, suffix: str = "", **extra: Any) -> dict[str, Any]:
        first = unit.first
        record = first.line.record
        source: dict[str, Any] = {"tool": TOOL, "file": self.name, "line": first.line.number, "uuid": first.uuid}
        if first.parent is not None:
            source["parentUuid"] = first.parent
        if isinstance(record.get("timestamp"), str):
            source["timestamp"] = record["timestamp"]
        if len(unit.entries) > 1:
            source["uuids"] = [e.uuid for e in unit.entries[1:]]
        flags: dict[str, Any] = {}
        for entry in unit.entries:
            for name in _FLAGS:
                value = entry.line.record.get(name)
                if value not in (None, False, "") and name not in flags:
                    flags[name] = value
        flags.update(extra)
        if flags:
            source["flags"] = flags
        meta: dict[str, Any] = {"event_id": self._id(first.uuid + suffix), "origin": "imported", "source": source}
        if is_time(record.get("timestamp")):  # anything else stays unread in the source line
            meta["occurred_at"] = record["timestamp"]
        return meta

    def _run_meta(self, unit: _Unit, suffix: str) -> dict[str, Any]:
        meta = self._meta(unit, suffix)
        meta["source"].pop("uuids", None)
        return meta

    def _add(self, stream: PlannedStream, type_: str, data: dict[str, Any], meta: dict[str, Any], unit: _Unit,
             build: Callable[[list[_Entry]], dict[str, Any] | None] | None = None) -> bool:
        """`stream.add`; an event the store would refuse goes to `on_bad` (raised, or with
        skip_bad skipped and reported: False), naming the line that makes it so. `build` makes
        the event's data from some of the unit's lines, to find that line in a unit of several."""
        try:
            stream.add(type_, data, meta, self._where(unit.first))
        except BadLine as error:
            if build is not None and len(unit.entries) > 1:
                error = BadLine(error.file, self._refused_line(stream, type_, meta, unit, build), error.why)
            self.on_bad(error)
            return False
        return True

    @staticmethod
    def _refused_line(stream: PlannedStream, type_: str, meta: dict[str, Any], unit: _Unit,
                      build: Callable[[list[_Entry]], dict[str, Any] | None]) -> int:
        """The line of `unit` whose content makes its event refused: the first its lines up to
        which already make one the store refuses (the unit's first when its data is not why: its id)."""
        for count in range(1, len(unit.entries) + 1):
            data = build(unit.entries[:count])
            if data is None:
                continue
            try:
                stream.check(type_, data, meta)
            except InvalidEvent:
                return unit.entries[count - 1].line.number
        return unit.first.line.number

    def _close_run(self, stream: PlannedStream, unit: _Unit, status: str) -> None:
        if stream.open_run is not None:
            self._add(stream, "run.finished", {"run_id": stream.open_run, "status": status}, self._run_meta(unit, ":end"), unit)

    def _open_run(self, stream: PlannedStream, unit: _Unit) -> None:
        self._add(stream, "run.started", {"run_id": unit.first.uuid}, self._run_meta(unit, ":run"), unit)

    def emit(self, stream: PlannedStream, unit: _Unit) -> None:
        if self.titles and stream is self.titled:
            self.flush_titles(stream, unit.first.line.number)
        self.started[unit.first.uuid] = (stream, stream.offset)
        self._emit(stream, unit)
        self.placed["unit:" + unit.first.uuid] = (stream, stream.offset)

    def _emit(self, stream: PlannedStream, unit: _Unit) -> None:
        if unit.kind == "assistant":
            self._assistant(stream, unit)
        elif unit.kind == "compact":
            record = unit.first.line.record
            boundary = self.file.boundaries[unit.first.uuid]
            meta = self._meta(unit, compactMetadata=boundary.get("compactMetadata"), boundaryUuid=boundary.get("uuid"))
            cause = self.compaction_causes.get(str(boundary.get("logicalParentUuid")))
            if cause:
                meta["causation_id"] = cause
            text = _text_of(record["message"]["content"])
            through = stream.offset
            head = self.file.entries.get(str(_preserved(boundary).get("headUuid")))
            start = self.started.get(head.unit.first.uuid) if head is not None and head.unit is not None else None
            if start is not None and start[0] is stream:
                through = start[1]  # the preserved segment stays in the model view after the summary
            if self._add(stream, "compaction.recorded", {"summary": text, "through_offset": through}, meta, unit):
                self.summary.compactions += 1
        else:
            self._user(stream, unit)

    def _assistant(self, stream: PlannedStream, unit: _Unit) -> None:
        # Fields the log refuses (a stop_sequence that is no text), which an earlier release passed
        # over, are left out, and counted, rather than refusing a session that imported before.
        refused: list[str] = []
        data = _response(unit.entries, refused=refused)
        if data is None:
            self.summary.skipped["empty message"] += 1
            return
        if stream.open_run is None:
            self._open_run(stream, unit)
        meta = self._meta(unit)
        before = {name: value for name, value in data.items() if name not in RETURNED}  # as releases before these fields
        if before != data:
            # A session an earlier release imported holds the response without these fields: that
            # is no change of the source (`Plan.formerly`).
            self.plan.formerly[meta["event_id"]] = before
        if not self._add(stream, "message.appended", data, meta, unit, _response):
            return
        if refused:
            self.summary.skipped["response fields refused"] += 1
        self.summary.assistant_messages += 1
        calls = [b for b in data["content"] if b.get("type") == "tool_use"]
        self.summary.tool_calls += len(calls)
        for call in calls:
            self.placed[str(call.get("id"))] = (stream, stream.offset)
        if not calls:
            self._close_run(stream, unit, "ok")

    def _user(self, stream: PlannedStream, unit: _Unit) -> None:
        record = unit.first.line.record
        attachment = record["attachment"]["type"] if record.get("type") == "attachment" else None
        if attachment is not None and self._stored_past(stream, unit):
            self.summary.skipped["attachment"] += 1  # as the release that stored the session counted it
            return
        pending = frozenset(stream.facts.tools)
        blocks, unanswering = _user_blocks(unit.entries, pending)
        self.summary.skipped["tool_result without its call"] += unanswering
        if not blocks:
            self.summary.skipped["empty message"] += 1
            return
        text = _text_of(blocks)
        interrupted = any(b.get("type") == "text" and str(b.get("text", "")).startswith(_INTERRUPT) for b in blocks)
        answers = any(b.get("type") == "tool_result" for b in blocks)
        injected = attachment is not None or self._injected(unit, text)
        extra: dict[str, Any] = {}
        if injected:
            extra["injected"] = True
        if attachment is not None:
            extra["attachment"] = attachment
        if interrupted:
            extra["interrupted"] = True
        ide = _ide_blocks(blocks) if not (answers or injected or interrupted) else []
        if ide:
            extra["injected_blocks"] = ide
        # Claude Code's `toolUseResult` (the tool's structured output: a command's stdout, a file
        # read, an edit's original file) is not kept: it would go in meta, which `redact` cannot
        # erase (it is chained as it is), and the tool_result block holds what the model saw.
        meta = self._meta(unit, **extra)
        typed = not (answers or injected or interrupted)
        if typed:
            self._close_run(stream, unit, "cancelled")
            self._open_run(stream, unit)
            self.summary.prompts += 1
        if not self._add(stream, "message.appended", {"role": "user", "content": blocks}, meta, unit,
                         lambda entries: {"role": "user", "content": _user_blocks(entries, pending)[0]}):
            return
        if interrupted:
            self._close_run(stream, unit, "cancelled")

    def _stored_past(self, stream: PlannedStream, unit: _Unit) -> bool:
        """Whether the store holds events of `stream` where `unit`'s would go, and not `unit`'s
        own: a release before this one, which left out every attachment line, imported the
        session, and what it stored after the attachment's place stays where it is."""
        store = self.plan.store
        return (store is not None and stream.next_offset < self._stored_head(stream)
                and store.event(self._id(unit.first.uuid)) is None)

    def _injected(self, unit: _Unit, text: str) -> bool:
        """Whether Claude Code wrote the user message `unit` (`text`), not a person: it starts no
        run and ends none. A notice (`_NOTICES`) that opens a sub-agent's file is its task, the
        prompt its run starts at; one the store holds as a typed prompt, its run started (an import
        by a release before), stays one: the events after it are stored so."""
        if unit.first.line.record.get("isMeta") or text.lstrip().startswith(_INJECTED_PREFIXES):
            return True
        if not text.lstrip().startswith(_NOTICES):
            return False
        if self.file.agent_id is not None and unit.parent is None:
            return False  # a teammate's task as its lead sent it, opening its file: its prompt, as any sub-agent's
        return self.plan.store is None or self.plan.store.event(self._id(unit.first.uuid + ":run")) is None

    def place_titles(self, stream: PlannedStream, titles: list[_Title]) -> None:
        """Have `emit` put each title into `stream` where its summary line is among the
        stream's lines (`branch` then puts those after the last line): the lines written
        after it, when the file grows, come after it. A title the store holds stays where it
        is: the release before this one put every title after all of the messages."""
        self.titled = stream
        self.titles = [(title, self._stored_offset(stream, self._id(title.suffix))) for title in titles]
        self.stored_end = self._stored_head(stream)

    def _stored_head(self, stream: PlannedStream) -> int:
        """The offset after `stream`'s stored events (0: not stored)."""
        try:
            return self.plan.store.head(stream.id) if self.plan.store is not None else 0
        except ThreadNotFound:
            return 0

    def _stored_offset(self, stream: PlannedStream, event_id: str) -> int | None:
        """The offset of `stream`'s stored event `event_id` (an index lookup), or None."""
        stored = self.plan.store.event(event_id) if self.plan.store is not None else None
        return stored.offset if stored is not None and stored.stream_id == stream.id else None

    def flush_titles(self, stream: PlannedStream, before: int | None = None) -> None:
        """Add the titles due before a unit starting at line `before` (None: all of them). One
        not stored yet never goes before what an earlier import stored (a summary line written
        before the message it names: an import that did not see the message dropped it)."""
        due = True
        while due:
            upcoming = stream.next_offset
            due = False
            for index, (title, stored) in enumerate(self.titles):
                if before is None or (upcoming >= stored if stored is not None else
                                      title.line < before and upcoming >= self.stored_end):
                    del self.titles[index]
                    self._add_title(stream, title)
                    due = True
                    break

    def _add_title(self, stream: PlannedStream, title: _Title) -> None:
        self.summary.skipped["summary"] -= 1
        meta: dict[str, Any] = {"event_id": self._id(title.suffix), "origin": "imported",
                                "source": {"tool": TOOL, "file": self.name, "line": title.line, "uuid": title.leaf}}
        when = self.file.entries[title.leaf].line.record.get("timestamp")  # the summary line has no time: its message's
        if is_time(when):
            meta["occurred_at"] = when
        try:
            stream.add("title.set", {"title": title.text}, meta, functools.partial(BadLine, self.name, title.line))
        except BadLine as error:
            self.on_bad(error)

    def branch(self, stream: PlannedStream, start: _Unit) -> None:
        """Emit `start` and the latest path below it into `stream`; other children become forks,
        each written the same way before the next (`depth_first`)."""
        depth_first(self._path(stream, start), self._fork_branch)

    def _path(self, stream: PlannedStream, start: _Unit) -> list[tuple[PlannedStream, int, _Unit]]:
        """Emit `start` and the latest path below it; the forks it leaves, as (stream, at, child)."""
        forks: list[tuple[PlannedStream, int, _Unit]] = []
        unit: _Unit | None = start
        while unit is not None:
            self.emit(stream, unit)
            added = _added_text(unit)
            children = [c for c in unit.children if c not in added]
            results = next((c for c in children if c.kind == "results"), None) if unit.kind == "assistant" else None
            following = self._following(stream, children, results)
            after = stream.offset
            marks: list[tuple[int, _Unit]] = [(after, c) for c in children if c is not following and c is not results]
            if results is not None and results is not following:
                self.emit(stream, results)
                marks.extend((stream.offset, c) for c in results.children)
            for child in added:
                self.emit(stream, child)
            forks.extend((stream, at, child) for at, child in marks)
            unit = following
        return forks

    def _fork_branch(self, branch: tuple[PlannedStream, int, _Unit]) -> list[tuple[PlannedStream, int, _Unit]]:
        parent, at, child = branch
        if not parent.message_before(at):  # it leaves before the first message (whose line made none): nothing to fork
            return self._path(self.own_thread(child), child)
        return self._path(self._fork_at(parent, at, child), child)

    def own_thread(self, start: _Unit) -> PlannedStream:
        """A thread of its own for a branch that shares no message with the file's thread: a
        second root (its first line's parent is unknown), or a branch leaving before the first
        message. Its id comes from its first line, as a fork's would."""
        meta = {"event_id": self._id(f"{start.first.uuid}:created"), "origin": "imported", "source": {"tool": TOOL, "file": self.name}}
        stream = self.plan.root(stable_id(TOOL, self.file.key, start.first.uuid), {"metadata": {"source": TOOL, **self.file.records}},
                                meta, self._where(start.first, skippable=False))
        self.summary.threads += 1
        self.summary.thread_ids.append(stream.id)
        return stream

    def _following(self, stream: PlannedStream, children: list[_Unit], results: _Unit | None) -> _Unit | None:
        """The child a stream goes on with: the one an earlier import already wrote into it (so a
        session rewound after it was imported keeps its stored events, and the new branch
        becomes a fork), else the one whose subtree ends latest in the file. The `results`
        answering the response are written into the stream whichever child it goes on with:
        it went on with them only if what follows them is there too."""
        kept = [c for c in children if self.stored.get(c.first.uuid) == stream.id
                and (c is not results or any(self.stored.get(g.first.uuid) == stream.id for g in c.children))]
        if kept:
            return kept[0]
        return max(children, key=lambda c: c.latest) if children else None

    def _fork_at(self, parent: PlannedStream, at: int, child: _Unit) -> PlannedStream:
        stream_id = stable_id(TOOL, self.file.key, child.first.uuid)
        fork = self.plan.attach(parent.fork(stream_id, "fork", self._meta(child, ":fork"), at), self._where(child.first, skippable=False))
        self.summary.forks += 1
        return fork


# -- sessions -----------------------------------------------------------------------------------


@dataclass
class Session:
    """A main session file (None for sub-agent files whose session is not found) and its sub-agents' files."""

    main: Path | None
    agents: list[Path] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        """The main file (if found), then the sub-agents' files."""
        return ([self.main] if self.main else []) + self.agents

    def key(self, path: Path) -> str:
        """The event-id namespace of one of its files: the session's stem, or session/agent."""
        return path.stem if self.main is None or path == self.main else f"{self.main.stem}/{path.stem}"


# The characters an event id leaves for its file's key: the longest id a line of Claude Code's
# (a uuid of 36 characters) makes is a regenerated title's, `cc:KEY:title:UUID:LINE`, 56 besides
# KEY with a line number of up to 9 digits. A longer key (a session file renamed at length) had
# every line refused as one to fix or delete, or imported and then refused the day Claude Code
# wrote a title again.
_KEY_CHARS = MAX_ID_CHARS - len("cc::title::") - 36 - 9


def _key_fits(session: Session, path: Path, unusable: Callable[[StoreError], None] | None) -> bool:
    """Whether the ids of `session`'s file `path` fit; refused by name, or passed to `unusable`."""
    key = session.key(path)
    if len(key) <= _KEY_CHARS:
        return True
    whose = "" if key == path.stem else ", its session's name included"
    refusal = StoreError(f"{path}: its name is too long to make ids of ({len(key)} characters{whose}, where {_KEY_CHARS} "
                         f"fit before a line's own part of an id of at most {MAX_ID_CHARS}); rename it to import it")
    if unusable is None:
        raise refusal
    unusable(refusal)
    return False


def _workflow_run(path: Path) -> str | None:
    """The runId of the workflow whose agent's file `path` is (`<session>/subagents/workflows/<runId>/agent-*.jsonl`)."""
    folder = path.parent
    return folder.name if folder.parent.name == "workflows" and folder.parent.parent.name == "subagents" else None


def _is_agent(path: Path) -> bool:
    return path.name.startswith("agent-")


def _in_session_folder(path: Path) -> bool:
    """Whether `path` lies in a session's own folder (`<session>/subagents/…` beside
    `<session>.jsonl`), where only sub-agents' files are sessions' lines: a workflow keeps its
    journal there (`journal.jsonl`, the runner's own record, no conversation), which a directory's
    import read as a session of nothing."""
    return any(folder.name == "subagents" and folder.parent.with_suffix(".jsonl").is_file() for folder in path.parents)


def _first_record(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    record = json.loads(raw)
                    return record if isinstance(record, dict) else {}
    except (OSError, ValueError, RecursionError):  # unreadable: the file's own import names the line
        pass
    return {}


# What a refusal of a path that names nothing asks for instead.
ASKS = "name Claude Code session files (.jsonl) or directories of them"


def discover(paths: Iterable[str | Path], unusable: Callable[[StoreError], None] | None = None, *,
             finished: bool = False) -> list[Session]:
    """Session files under `paths` (files, or directories searched recursively), with the
    sub-agent files that belong to each.

    A path that names nothing, a directory that cannot be read and a file whose name makes
    no id are refused; with `unusable` (a follower, which must go on), each refusal is
    passed to it instead and what it names is left out, and a path gone meanwhile is passed over.
    An empty file in a directory is left out, unless it changed in the last `LIVE_SECONDS` and
    not `finished` (`files_below`): its first line may be still to come."""
    files: list[Path] = []
    named: set[str] = set()  # files named themselves (real paths): read as sessions wherever they are
    given = source_paths(paths) if unusable is not None else existing_paths(paths, ASKS)
    for path in given:
        if path.is_dir():
            files.extend(files_below(path, "*.jsonl", unusable, finished=finished))
        elif path.exists():
            files.append(path)
            named.add(real_path(path))
            subagents = path.with_suffix("") / "subagents"  # 2.1.x: the session's sub-agents
            if not _is_agent(path) and subagents.is_dir():
                files.extend(files_below(subagents, "agent-*.jsonl", unusable, finished=finished))
            if not _is_agent(path):  # ≤ 2.0.x: beside it, naming it by the lines' sessionId
                files.extend(sorted(p for p in path.parent.glob("agent-*.jsonl")
                                    if p.is_file() and _first_record(p).get("sessionId") == path.stem))
    files = [path for path in distinct(files) if usable_name(path, unusable, ids=True)]
    sessions: dict[Path, Session] = {}
    loose: list[Path] = []
    for path in files:
        if not _is_agent(path) and (not _in_session_folder(path) or real_path(path) in named):
            sessions.setdefault(path, Session(path)).main = path
    for path in files:
        if not _is_agent(path):
            continue  # a session, or a file of a session's own folder that is none (a workflow's journal.jsonl)
        owner = None
        for ancestor in path.parents:  # 2.1.x: <session>/subagents/…/agent-*.jsonl
            candidate = ancestor.with_suffix(".jsonl") if ancestor.name else None
            if candidate is not None and candidate in sessions:
                owner = candidate
                break
        if owner is None:  # ≤ 2.0.x: beside the session, named by the lines' sessionId
            session_id = _first_record(path).get("sessionId")
            candidate = path.with_name(f"{session_id}.jsonl") if isinstance(session_id, str) else None
            owner = candidate if candidate in sessions else None
        if owner is None:
            loose.append(path)
        else:
            sessions[owner].agents.append(path)
    found = []
    for session in [*sessions.values(), *(Session(None, [path]) for path in loose)]:
        if session.main is None or _key_fits(session, session.main, unusable):  # else its agents are left out with it
            session.agents = [path for path in session.agents if _key_fits(session, path, unusable)]
            found.append(session)
    return found


def _stored_sources(store: Store, session: Session) -> dict[str, str]:
    """Source uuid -> stream, over what earlier imports of this session wrote (empty if none)."""
    return {} if session.main is None else stored_sources(store, stable_id(TOOL, session.main.stem), titles=False)


def _plan_session(session: Session, summary: ImportSummary, skip_bad: bool, partial_tail: bool,
                  stored: dict[str, str] | None = None, seen: Seen | None = None, store: Store | None = None,
                  paused: bool = False) -> Plan:
    plan = Plan(store=store)
    main_file = None
    if session.main is not None:
        main_file = _parse(session.main, session.main.stem, summary, skip_bad, partial_tail, seen, session=True, paused=paused)
        summary.files += 1
    # A live session that has not answered yet waits: the thread's model comes from its first
    # response (`_model`), and `thread.created`, once written, is never rewritten (taken before,
    # it had none for good). It is planned all the same, into counts of its own, so a bad line
    # is refused now.
    unanswered = partial_tail and not stored and main_file is not None and bool(main_file.units) and _model(main_file) is None
    outer, summary = summary, ImportSummary() if unanswered else summary
    agents = []
    for path in session.agents:
        key = session.key(path)
        # A sub-agent the session shows done has written its last line.
        done = main_file is not None and _first_record(path).get("agentId") in main_file.finished
        # Paused with the session (its Task call waiting too): an agent whose Task call was
        # interrupted ends on calls that never get a result, and would wait forever.
        waiting = paused and not done and main_file is not None and main_file.held
        agents.append(_parse(path, key, summary, skip_bad, partial_tail and not done, seen, paused=waiting))
        summary.files += 1
    if main_file is not None and main_file.sidechain:
        agents.extend(_inline_agents(main_file, summary, skip_bad, partial_tail))
    # Whether a sub-agent may still be running (once a session, not once an agent file).
    running = partial_tail and main_file is not None and bool(agents) and _agent_call_waiting(main_file)
    causes: dict[str, str] = {}
    for agent in agents:
        if agent.agent_id and agent.agent_id.startswith("acompact") and agent.first_parent:
            causes[agent.first_parent] = stable_id(TOOL, agent.key)
    writer: _Writer | None = None
    if main_file is not None:
        writer = _Writer(plan, main_file, summary, plan.file(main_file.path), causes, on_bad_line(summary, skip_bad), stored=stored or {})
        _plan_file(writer, main_file, None)
    for agent in agents:
        link: tuple[PlannedStream, int] | None = None
        call: str | None = agent.task_call  # the tool call that started it, where it is forked after one
        if writer is not None and call is not None:
            link = writer.placed.get(call)
        elif writer is not None and agent.agent_id:
            call = main_file.agent_results.get(agent.agent_id) if main_file else None
            if call is None and main_file is not None:
                run = _workflow_run(agent.path)  # None outside a workflow's folder: no run, not the run named ""
                call = main_file.named_in_text.get(agent.agent_id) or (main_file.workflow_runs.get(run) if run else None)
            if call is not None and main_file is not None and agent.agent_id not in main_file.agent_results and \
                    store is not None and store.event(f"cc:{agent.key}:created") is not None:
                call = None  # an earlier release, which placed it by neither, made it a thread: it stays one
            if call is not None:
                link = writer.placed.get(call)
            elif agent.agent_id.startswith("acompact") and agent.first_parent in main_file.entries:  # type: ignore[union-attr]
                link = _after_entry(writer, main_file, agent.first_parent)  # type: ignore[arg-type]
        if link is None and partial_tail and main_file is not None and _not_linked_yet(agent, main_file, running):
            summary.wait(str(agent.path))
            continue  # a sub-agent still running: a thread of its own now could never become its fork
        if link is None and partial_tail and agent.units and _model(agent) is None:
            summary.wait(str(agent.path))
            continue  # a thread of its own, which takes its model from its first response (`unanswered`)
        _plan_file(_Writer(plan, agent, summary, plan.file(agent.path), {}, on_bad_line(summary, skip_bad)), agent, link,
                   call if link is not None else None)
    if unanswered:
        outer.files += summary.files
        outer.skipped.update(summary.skipped)
        outer.bad.extend(summary.bad)
        outer.cycles_cut.extend(summary.cycles_cut)
        if main_file is not None and not main_file.held:  # a held last response counted it
            outer.wait(str(main_file.path))
        return Plan(store=store)
    return plan


def _not_linked_yet(agent: _File, main: _File, running: bool) -> bool:
    """Whether a sub-agent file the session cannot place yet may be placed on a later read: the
    session names it in a result whose call is not written yet, or a sub-agent is `running`
    (`_agent_call_waiting`: a sub-agent file starts as its call is made, and the result naming
    its `agentId` comes when it is done, or for a background one or a workflow's as it is
    launched)."""
    if not agent.agent_id or agent.agent_id.startswith("acompact") or agent.task_call is not None:
        return False
    return agent.agent_id in main.agent_results or running


def _agent_call_waiting(main: _File) -> bool:
    """Whether a `Task`/`Agent` or `Workflow` call of the session still waits for its result:
    a workflow's agents write their files before the result naming its run is written."""
    calls: set[Any] = set()
    answered: set[Any] = set()
    for entry in main.entries.values():
        for block in _blocks_of(entry) if entry.kind != "link" else ():  # a link line holds no message
            if block.get("type") == "tool_use" and block.get("name") in (*_AGENT_TOOLS, _WORKFLOW):
                calls.add(block.get("id"))
            elif block.get("type") == "tool_result":
                answered.add(block.get("tool_use_id"))
    return bool(calls - answered)


def _inline_agents(main: _File, summary: ImportSummary, skip_bad: bool, partial_tail: bool) -> list[_File]:
    """A main file's inline sidechain lines (Claude Code 1.0.x) as one sub-agent file per run.

    A line starting a run (no parent, or a parent outside the sidechain lines) opens one, a
    line whose parent is in a run joins it, and a line whose parent is unknown continues the
    run of the line before it. Each run answers the latest `Task`/`Agent` call above its
    first line whose prompt is that first line's text (else the latest such call not yet
    taken), and is keyed by its first line's uuid.
    """
    on_bad = on_bad_line(summary, skip_bad)
    runs: list[list[Line]] = []
    run_of: dict[str, list[Line]] = {}
    for line in main.sidechain:
        parent = line.record.get("parentUuid")
        run = run_of.get(parent) if isinstance(parent, str) else None
        if run is None:
            run = runs[-1] if runs and isinstance(parent, str) and parent not in main.entries else []
            if not run:
                runs.append(run)
        run.append(line)
        run_of[line.record["uuid"]] = run
    calls = [(entry.line.number, block["id"], (block.get("input") or {}).get("prompt"))
             for entry in main.entries.values() if entry.kind == "assistant"
             for block in entry.line.record["message"]["content"] if isinstance(entry.line.record["message"]["content"], list)
             and isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in _AGENT_TOOLS]
    taken: set[str] = set()
    out = []
    for run in runs:
        first = run[0]
        text = _text_of(first.record["message"]["content"])
        above = [c for c in calls if c[0] < first.number and c[1] not in taken]
        call = next((c for c in reversed(above) if c[2] == text), above[-1] if above else None)
        agent = _from_lines(main.path, f"{main.key}/sidechain-{first.record['uuid']}", run, summary, on_bad, partial_tail)
        if call is not None:
            taken.add(call[1])
            agent.task_call = call[1]
        out.append(agent)
    return out


def _after_entry(writer: _Writer, file: _File, uuid: str) -> tuple[PlannedStream, int] | None:
    entry = file.entries.get(uuid)
    while entry is not None and entry.unit is None:
        entry = file.entries.get(entry.parent) if entry.parent else None
    if entry is None or entry.unit is None:
        return None
    return writer.placed.get("unit:" + entry.unit.first.uuid)


def _model(file: _File) -> str | None:
    """The model of the file's first response that names one (`<synthetic>`, Claude Code's
    own error message, names none): its thread's."""
    models = [u.first.line.record["message"].get("model") for u in file.units if u.kind == "assistant"]
    return next((m for m in models if m and not m.startswith("<")), None)


def _plan_file(writer: _Writer, file: _File, link: tuple[PlannedStream, int] | None, call: str | None = None) -> None:
    """Plan one file's streams: a root thread, or a sub-agent fork at `link`, after the tool
    call `call` that started it (its metadata's `parentToolUseID`, as Claude Code names it:
    the parallel calls of one response put their sub-agents at one offset)."""
    if not file.units:
        return
    roots = [u for u in file.units if u.parent is None]
    main_root = max(roots, key=lambda u: u.latest)
    info = {k: v for k, v in file.records.items()}
    source = {"tool": TOOL, "file": writer.name}
    if link is None:
        stream_id = stable_id(TOOL, file.key)
        created: dict[str, Any] = {"metadata": {"source": TOOL, **info, "file": writer.name}}
        give_model(created, [_model(file)])  # Claude Code run through a proxy to another provider's model names that model
        meta = {"event_id": f"cc:{file.key}:created", "origin": "imported", "source": source}
        stream = writer.plan.root(stream_id, created, meta, writer._where(main_root.first, skippable=False))
        writer.summary.threads += 1
        writer.summary.thread_ids.append(stream_id)
    else:
        parent, at = link
        meta = {"event_id": f"cc:{file.key}:fork", "origin": "imported", "source": {**source, "flags": {"agentId": file.agent_id}}}
        metadata = {"agentId": file.agent_id, "file": writer.name}
        if call is not None:
            metadata["parentToolUseID"] = call
        stream = writer.plan.attach(parent.fork(stable_id(TOOL, file.key), "subagent", meta, at, metadata=metadata),
                                    writer._where(main_root.first, skippable=False))
        writer.summary.subagents += 1
    writer.place_titles(stream, file.titles)
    writer.branch(stream, main_root)
    writer.flush_titles(stream)  # the titles after its last line
    for root in roots:  # a second conversation in one file (its first line's parent is unknown)
        if root is not main_root:
            writer.branch(writer.own_thread(root), root)


# How long a session whose last response waits on a tool call (Claude Code at a permission
# prompt) may have been quiet and still be waited for: one quiet for longer was left so.
PAUSED_SECONDS = 7 * 24 * 3600.0


def import_claude_code(
    store: Store,
    paths: Sequence[str | Path],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    partial_tail: bool = False,
    live_within: float | None = None,
) -> ImportSummary:
    """Import Claude Code session files (or directories of them, searched recursively).

    One thread per session, forks where the conversation branched, sub-agent forks where
    a `Task`/`Agent` call started one. Idempotent: importing again adds nothing; a file
    that has grown adds only its new lines. A malformed line raises `BadLine` naming the
    file and line, with nothing written (every session is checked before the first is
    written: `plan.import_sources`), or with `skip_bad=True` is skipped and reported in the
    summary. `progress(done, total)` is called after each session, in bytes of JSONL read.

    A file is taken as it is, unless `partial_tail` (see `import_sessions`), or `live_within`
    seconds says its session is still being written: a file of it changed that recently.
    Such a session is read as a follower reads it, and what it does not show complete yet
    (`summary.waiting`) is left for a later import, which adds it whole: taken now, it could
    never be completed. With `live_within`, a session quiet longer, but for less than
    `PAUSED_SECONDS` (a week), still leaves a last response waiting on a tool call (a
    permission prompt) for a later import: taken before its calls ran, it lost the calls
    written after them (and the import of them was refused). One quiet for longer was left
    so (Claude Code closed at the prompt), and is taken as it is.
    """
    finished = live_within is None and not partial_tail  # taken as it is: an empty file holds no session
    return import_sessions(store, discover(paths, finished=finished), skip_bad=skip_bad, progress=progress,
                           partial_tail=partial_tail, live_within=live_within)


def import_sessions(
    store: Store,
    sessions: Sequence[Session],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    partial_tail: bool = False,
    live_within: float | None = None,
    summary: ImportSummary | None = None,
) -> ImportSummary:
    """`import_claude_code` of sessions already found (`discover`); `partial_tail=True`
    leaves a half-written last line, and a last response the file does not show complete
    yet, for a later import (what following a live session needs); `live_within` does so
    for the sessions with a file changed in the last that many seconds. Counted into
    `summary` (`import_sources`: what was added before an error stays counted there)."""
    # (live, paused), decided once a session: its check and its write must plan alike.
    modes: dict[int, tuple[bool, bool]] = {}

    def plan_one(session: Session, summary: ImportSummary, earlier: dict[str, dict[str, str]], seen: Seen) -> Plan:
        # What the store holds, then what the sessions checked before it would write (two copies of one session).
        before = earlier.get(stable_id(TOOL, session.main.stem), {}) if session.main is not None else {}
        if id(session) not in modes:
            quiet = _quiet_for(session) if live_within is not None else 0.0
            modes[id(session)] = (partial_tail or (live_within is not None and quiet < live_within),
                                  live_within is not None and quiet < PAUSED_SECONDS)
        live, paused = modes[id(session)]
        return _plan_session(session, summary, skip_bad, live, {**before, **_stored_sources(store, session)}, seen,
                             store, paused=paused)

    return import_sources(store, sessions, plan_one, _size, strict=not skip_bad, progress=progress, noun="session",
                          name=lambda session: ", ".join(map(str, session.files)), summary=summary)


def _quiet_for(session: Session) -> float:
    """Seconds since a file of the session was last written (by its mtime); a time ahead of
    the clock counts as far (a copy made where the clock ran ahead, `touch -d`: no sign of a
    writer now, as `Seen.changed_within` judges it), or the session would wait until then."""
    return abs(time.time() - max(path.stat().st_mtime for path in session.files))


def _size(session: Session) -> int:
    """The session's bytes of JSONL: its main file and its sub-agents' files."""
    return sum(p.stat().st_size for p in session.files)
