"""pi coding agent session files into threads.

Version 1 files are linear: every entry follows the one before (pi itself migrates them
the same way, giving each entry the previous one as parent). Later versions carry an
`id`/`parentId` tree (an entry written before its parent is taken after it): the main
thread follows the first root, along the branch that ends
latest in the file (or the one an earlier import stored), and every other branch becomes a
fork at its branch point, or a thread of its own when it leaves before the first message
(pi's `resetLeaf`, to edit the first prompt, starts a new root). Messages map onto
Anthropic blocks as pi's own Anthropic converter does: `toolCall` → `tool_use`, a run of
`toolResult` messages → one user message of `tool_result` blocks, as pi's converter sends
them (one event per result made every event carry the calls still waiting: a message of N
calls cost N²/2 stored ids), `thinking` with its `thinkingSignature` (one marked `redacted` is
the API's `redacted_thinking` as pi keeps it, its data in `thinkingSignature`: that block again),
of an answer Anthropic's API gave (another provider's signature, such as an OpenAI reasoning
item, is left out: its thinking is unsigned, its redacted thinking skipped).
A branch that answers tool calls waiting at its point forks with `unanswered="keep"`. A `compaction` entry becomes `compaction.recorded`
whose `through_offset` is where its first kept entry landed (a first kept entry between tool
calls and their results is refused at the compaction's line, or with `skip_bad` the compaction
left out and named, so the model sees every message). What pi's `buildSessionContext`
sends the model besides messages becomes a user message marked `injected`, as pi's
`convertToLlm` turns it into one: a user `!` command (`bashExecution`; not a `!!` one,
`excludeFromContext`, which pi keeps out), a `branch_summary` (the summary of a branch left
with /tree, in pi's own wording), and an extension's `custom_message` entry or `custom`
message. A `session_info` name becomes `title.set`; model and thinking-level changes become
`metadata.set`. The thinking level (a name: `off`, `minimal` ... `xhigh`; the header's, then
its changes') is that `thinkingLevel` metadata alone, from the entry that set it on: pi writes
the level's name, never the budget a request at that level sent, and a thread's `thinking` is
set once, when it is created (a fork's `config` alone changes it), so it stays unset and the
requests send none, as `off` asks, rather than a budget the file does not name.
A model call pi aborted or that failed before it gave anything (an assistant
message with no content, `stopReason` `aborted` or `error`) is a run that ended `cancelled` or
`error` with pi's `errorMessage`, as a live turn's failure (`_Writer._failed`). The thread's
model is the first Claude model the session names (`models.give_model`): the header's (version
1), else its model changes' (pi writes one as a session starts; later headers name no model),
else its answers'. pi runs on other providers' models too, which the Messages API refuses: a
session that named only those has no model (the first kept as `modelId` metadata).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventstore import Store, ThreadNotFound
from eventstore.events import is_time
from eventstore.recorded import short

from .lines import LIVE_SECONDS, BadLine, Line, NoSession, Seen, is_text, read_lines, source_files
from .models import give_model
from .origin import RUN, first_line_of
from .plan import Plan, PlannedStream, depth_first, import_sources, parents_first, stable_id, stored_sources
from .summary import ImportSummary, on_bad_line

TOOL = "pi"
FORMAT = "a pi session (JSON Lines text)"  # what a file refused as none should have been
PATTERN = "*.jsonl"  # as claude_code.discover
ASKS = "name pi session files (.jsonl) or directories of them"  # what a refusal of a path that names nothing asks for
# How pi's convertToLlm words a branch summary for the model (pi's messages.ts).
_BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
_BRANCH_SUMMARY_SUFFIX = "</summary>"


@dataclass
class _Node:
    index: int  # entry index (the header is not an entry)
    line: Line
    id: str
    parent: str | None
    children: list[_Node] = field(default_factory=list)
    latest: int = 0
    held: frozenset[str] = frozenset()  # the streams an earlier import wrote entries of this subtree into


def _check(record: dict[str, Any]) -> str | None:
    if record.get("type") == "session":  # as an entry it made an empty thread of its own
        return "a session header belongs on the file's first line only (two files joined?)"
    if record.get("id") is not None and not isinstance(record["id"], str):  # it was taken for a version 1 entry's index
        return f"id must be a string, not {type(record['id']).__name__}"
    if record.get("type") == "message":
        message = record.get("message")
        if not isinstance(message, dict):
            return "message must be an object"
        role = message.get("role")
        if role not in ("user", "assistant", "toolResult", "bashExecution", "hookMessage", "custom"):
            return f"unknown message role {short(role)}"
        content = message.get("content")
        if role != "bashExecution" or content is not None:
            problem = _content_problem(content, "message.content")
            if problem is not None:
                return problem
        if role == "toolResult" and not (isinstance(message.get("toolCallId"), str) and message["toolCallId"]):
            return "a toolResult needs a non-empty string toolCallId"
        if role == "toolResult" and not isinstance(message.get("isError"), (bool, type(None))):  # "false" is not false
            return f"isError must be true, false or null, not {type(message['isError']).__name__}"
        if role == "bashExecution" and not (isinstance(message.get("command"), str)
                                            and isinstance(message.get("output", ""), (str, type(None)))):
            return "a bashExecution needs a string command (and a string output, if any)"
    elif record.get("type") in ("compaction", "branch_summary"):
        if not isinstance(record.get("summary"), str):
            return f"a {record['type']} needs a string summary"
    elif record.get("type") == "custom_message":
        return _content_problem(record.get("content"), "content")
    elif record.get("type") == "session_info":
        if not isinstance(record.get("name"), (str, type(None))):
            return "a session_info name must be a string"
    if record.get("timestamp") is not None and not isinstance(record["timestamp"], str):
        return "timestamp must be a string"
    return None


# The text fields of pi's content blocks, and whether each may be null: a value of another
# type is refused (it was written as Python's printed form of it, `None` or `{'a': 1}`).
_TEXT_FIELDS = {"text": (("text", False),), "thinking": (("thinking", False), ("thinkingSignature", True)),
                "image": (("data", False), ("mimeType", True))}


def _content_problem(content: Any, where: str) -> str | None:
    """What is wrong with a message's content (`_check`), or None."""
    if not isinstance(content, (str, list)):
        return f"{where} must be a string or a list"
    if isinstance(content, list) and not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        return "every content block must be an object with a string type"
    for i, block in enumerate(content if isinstance(content, list) else ()):
        problem = _block_problem(block, f"{where}[{i}]")
        if problem is not None:
            return problem
    return None


def _block_problem(block: dict[str, Any], where: str) -> str | None:
    """What is wrong with one content block (`_check`), or None."""
    kind = block["type"]
    for name, nullable in _TEXT_FIELDS.get(kind, ()):
        if name in block and not (isinstance(block[name], str) or (nullable and block[name] is None)):
            return f"{where}.{name} must be a string"
    if kind == "toolCall":
        for name in ("id", "name"):
            if not (isinstance(block.get(name), str) and block[name]):
                return f"{where}.{name} must be a non-empty string (a toolCall names its call and its tool)"
        if block.get("arguments") is not None and not isinstance(block["arguments"], dict):
            return f"{where}.arguments must be an object"
    return None


def _blocks(content: Any, skipped: Counter[str], signed: bool = True) -> list[dict[str, Any]]:
    """pi's content as Messages API blocks (checked by `_check`); a block of a kind it does not
    know is left out and counted in `skipped`. `signed=False`: the message is another provider's,
    whose `thinkingSignature` (an OpenAI reasoning item, as JSON) no Anthropic check takes: its
    thinking keeps no signature (the request leaves it out) and its redacted thinking is left out."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for block in content:
        kind = block["type"]
        if kind == "text":
            out.append({"type": "text", "text": block.get("text", "")})
        elif kind == "thinking" and block.get("redacted") is True:  # the API's redacted_thinking: its data is the "signature"
            if block.get("thinkingSignature") and signed:
                out.append({"type": "redacted_thinking", "data": block["thinkingSignature"]})
            else:
                skipped["block/thinking redacted" + ("" if signed else " by another provider")] += 1
        elif kind == "thinking":
            signature = (block.get("thinkingSignature") or "") if signed else ""
            out.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": signature})
        elif kind == "toolCall":
            out.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("arguments") or {}})
        elif kind == "image":
            out.append({"type": "image", "source": {"type": "base64", "media_type": block.get("mimeType") or "image/png",
                                                    "data": block.get("data", "")}})
        else:
            skipped[f"block/{kind}"] += 1
    return out


def _anthropic(message: dict[str, Any]) -> bool:
    """Whether an assistant message is Anthropic's Messages API's (its thinking signatures are
    the API's): pi names the API and provider of each; a file that names neither is taken as one."""
    return message.get("api") in (None, "anthropic-messages") and message.get("provider") in (None, "anthropic")


@dataclass
class _Writer:
    plan: Plan
    path: Path  # as the import was given it, as errors name it
    file: str  # as the source meta records it (`Plan.file`)
    session: str
    summary: ImportSummary
    own_thread: Callable[[_Node], PlannedStream]  # a thread of its own for a branch that shares no message
    on_bad: Callable[[BadLine], None]  # a compaction it cannot import: raised, or skipped and reported (`on_bad_line`)
    stored_in: dict[str, str] = field(default_factory=dict)  # entry id -> the entry naming the stored event holding it
    placed: dict[str, tuple[PlannedStream, int]] = field(default_factory=dict)  # entry id -> where its event landed
    # A tool result inside a run stored as one event, not its last: the offset of that event,
    # the run, and how many of its results go up to this one (`_fork_branch`).
    inside: dict[str, tuple[int, list[_Node], int]] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # entry id -> the id an import of the file pi migrated gave it

    def where(self, node: _Node, skippable: bool = False) -> Callable[[str], BadLine]:
        """Names the line of an event the store would refuse: raised, never skipped (pi's plan
        has no way past it, but for a compaction's), so its message does not offer --skip-bad."""
        return lambda why: BadLine(str(self.path), node.line.number, why, skippable=skippable)

    def meta(self, node: _Node, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        record = node.line.record
        source: dict[str, Any] = {"tool": TOOL, "file": self.file, "line": node.line.number, "uuid": node.id}
        if node.parent is not None:
            source["parentUuid"] = node.parent
        if isinstance(record.get("timestamp"), str):
            source["timestamp"] = record["timestamp"]
        if extra:
            source["flags"] = extra
        meta: dict[str, Any] = {"event_id": f"pi:{self.session}:{node.id}", "origin": "imported", "source": source}
        if is_time(record.get("timestamp")):  # anything else stays in `source.timestamp`
            meta["occurred_at"] = record["timestamp"]
        return meta

    def emit(self, stream: PlannedStream, nodes: list[_Node]) -> None:
        """Events for a run of entries on one branch (a run of tool results is one message: see
        `_joins`)."""
        i = 0
        while i < len(nodes):
            node = nodes[i]
            record = node.line.record
            type_ = record.get("type")
            members = [node]  # the entries this event stands for: a group of tool results an earlier import merged has several
            if type_ == "message":
                message = record["message"]
                role = message["role"]
                if role == "toolResult":
                    group = [node]
                    while i + 1 < len(nodes) and self._joins(nodes[i], nodes[i + 1]):
                        i += 1
                        group.append(nodes[i])
                    before = len(stream.events)
                    self._results(stream, group)
                    members = group
                    if len(stream.events) > before:
                        self.inside.update((member.id, (stream.offsets[-1], group, k + 1)) for k, member in enumerate(group[:-1]))
                elif role == "assistant":
                    self._assistant(stream, node, message)
                elif role == "user":
                    blocks = _blocks(message["content"], self.summary.skipped)
                    if blocks:
                        stream.add("message.appended", {"role": "user", "content": blocks}, self.meta(node), self.where(node))
                        self.summary.prompts += 1
                    else:
                        self.summary.skipped["empty message"] += 1
                elif role == "bashExecution" and message.get("excludeFromContext") is True:  # pi's `!!`: kept from the model
                    self.summary.skipped["message/bashExecution excluded from context"] += 1
                elif role == "bashExecution":
                    text = f"!{message['command']}\n{message.get('output') or ''}"
                    self._injected(stream, node, [{"type": "text", "text": text}], {"role": role})
                elif role in ("custom", "hookMessage"):  # hookMessage: its name before version 3
                    self._injected(stream, node, _blocks(message["content"], self.summary.skipped),
                                   {"role": "custom", "customType": message.get("customType")})
                else:
                    self.summary.skipped[f"message/{role}"] += 1
            elif type_ == "branch_summary":
                text = f"{_BRANCH_SUMMARY_PREFIX}{record['summary']}{_BRANCH_SUMMARY_SUFFIX}" if record["summary"] else ""
                self._injected(stream, node, [{"type": "text", "text": text}] if text else [],
                               {"type": type_, "fromId": record.get("fromId")})
            elif type_ == "custom_message":
                self._injected(stream, node, _blocks(record["content"], self.summary.skipped),
                               {"type": type_, "customType": record.get("customType")})
            elif type_ == "session_info" and record.get("name"):
                stream.add("title.set", {"title": record["name"]}, self.meta(node), self.where(node))
            elif type_ == "compaction":
                kept = str(record.get("firstKeptEntryId", record.get("firstKeptEntryIndex")))
                landed = self.placed.get(self.renamed.get(kept, kept))
                through = landed[1] - 1 if landed and landed[0] is stream else stream.offset
                try:
                    stream.add("compaction.recorded", {"summary": record["summary"], "through_offset": min(through, stream.offset)},
                               self.meta(node, {"tokensBefore": record.get("tokensBefore")}), self.where(node, skippable=True))
                except BadLine as error:  # a cut between tool calls and their results: with --skip-bad, the
                    self.on_bad(error)  # compaction is left out, and the model sees every message
                else:
                    self.summary.compactions += 1
            elif type_ in ("model_change", "thinking_level_change"):
                patch = {k: record[k] for k in ("provider", "modelId", "thinkingLevel") if k in record}
                stream.add("metadata.set", {"patch": patch}, self.meta(node), self.where(node))
            else:
                self.summary.skipped[str(type_)] += 1
            for member in members:  # a branch may leave after any of them
                self.placed[member.id] = (stream, stream.offset)
            i += 1

    def _injected(self, stream: PlannedStream, node: _Node, blocks: list[dict[str, Any]], flags: dict[str, Any]) -> None:
        """A user message pi put in the model's context, not typed by the user."""
        if not blocks:
            self.summary.skipped["empty message"] += 1
            return
        stream.add("message.appended", {"role": "user", "content": blocks}, self.meta(node, {"injected": True, **flags}),
                   self.where(node))

    def _joins(self, last: _Node, following: _Node) -> bool:
        """Whether the tool result `following` goes in one message with the results up to `last`:
        as an earlier import stored them (one result a message, or a run), and new results until
        a branch leaves one of them, so a fork starts after a whole message. A result apart
        from the results before it would be an event carrying every call still waiting (the
        pending facts each stored row keeps), and a message of N calls would cost N²/2 ids.
        A branch that leaves a stored run later forks before it (`_fork_branch`)."""
        if _answers(following.line.record) is None:
            return False
        before, after = self.stored_in.get(last.id), self.stored_in.get(following.id)
        if before is not None or after is not None:
            return before == after
        return len(last.children) == 1

    def _assistant(self, stream: PlannedStream, node: _Node, message: dict[str, Any]) -> None:
        blocks = _blocks(message["content"], self.summary.skipped, _anthropic(message))
        extra: dict[str, Any] = {k: message[k] for k in ("api", "provider", "errorMessage") if k in message}
        reason = message.get("stopReason")
        if not blocks and isinstance(reason, str) and reason in _FAILED:  # a list or an object is no stop reason
            self._failed(stream, node, message)
            return
        if not blocks:
            self.summary.skipped["empty message"] += 1
            return
        data: dict[str, Any] = {"role": "assistant", "content": blocks}
        if isinstance(message.get("model"), str):
            data["model"] = message["model"]
        if isinstance(message.get("stopReason"), str):
            data["stop_reason"] = message["stopReason"]
        if isinstance(message.get("usage"), dict):
            data["usage"] = message["usage"]
        stream.add("message.appended", data, self.meta(node, extra or None), self.where(node))
        self.summary.assistant_messages += 1
        self.summary.tool_calls += sum(1 for b in blocks if b["type"] == "tool_use")

    def _failed(self, stream: PlannedStream, node: _Node, message: dict[str, Any]) -> None:
        """A model call pi aborted or that failed before it gave anything (no block to send):
        a run that ended `cancelled` or `error`, with pi's error message, as a live turn's
        failure is recorded. An earlier release left it out: where the store holds what came
        after it, it stays left out (the log cannot take it in between)."""
        if node.id not in self.stored_in and node.held:
            self.summary.skipped["failed turn an earlier import left out"] += 1
            return
        flags: dict[str, Any] = {k: message[k] for k in ("api", "provider", "model", "stopReason", "usage") if k in message}
        started = {**self.meta(node, flags), "event_id": f"pi:{self.session}:{node.id}:run"}
        stream.add("run.started", {"run_id": node.id}, started, self.where(node))
        ended: dict[str, Any] = {"run_id": node.id, "status": _FAILED[message["stopReason"]]}  # a text: `_assistant`
        if isinstance(message.get("errorMessage"), str) and message["errorMessage"]:
            ended["error"] = message["errorMessage"]
        stream.add("run.finished", ended, self.meta(node, flags), self.where(node))
        self.summary.failed_turns += 1

    def _results(self, stream: PlannedStream, group: list[_Node], event_id: str | None = None) -> None:
        """One user message of the `group`'s results (`event_id`: another event's than the
        first result's, for a copy of them a fork writes)."""
        pending = set(stream.facts.tools)
        blocks = []
        for node in group:
            message = node.line.record["message"]
            call = message["toolCallId"]
            if call not in pending:
                self.summary.skipped["tool_result without its call"] += 1
                continue
            pending.discard(call)
            content = [b for b in _blocks(message.get("content") or [], self.summary.skipped) if b["type"] in ("text", "image")]
            blocks.append({"type": "tool_result", "tool_use_id": call, "content": content, "is_error": bool(message.get("isError"))})
        if not blocks:
            return
        meta = self.meta(group[0])
        if len(group) > 1:
            meta["source"]["uuids"] = [n.id for n in group[1:]]
        if event_id is not None:
            meta["event_id"] = event_id
        # pi's `details` (diffs, file contents) are not kept: see the Claude Code importer's `_user`.
        stream.add("message.appended", {"role": "user", "content": blocks}, meta, self.where(group[0]))

    def branch(self, stream: PlannedStream, start: _Node) -> None:
        """Emit `start` and the path below it into `stream`; other children become forks (or
        threads of their own), each written the same way before the next (`depth_first`)."""
        depth_first(self._path(stream, start), self._fork_branch)

    def _path(self, stream: PlannedStream, start: _Node) -> list[tuple[_Node, _Node]]:
        """Emit `start` and the path below it; the branches it leaves, as (entry, child)."""
        path: list[_Node] = []
        node: _Node | None = start
        forks: list[tuple[_Node, _Node]] = []
        while node is not None:
            path.append(node)
            following = _following(stream, node.children)
            forks.extend((node, c) for c in node.children if c is not following)
            node = following
        self.emit(stream, path)
        return forks

    def _fork_branch(self, branch: tuple[_Node, _Node]) -> list[tuple[_Node, _Node]]:
        after, child = branch
        parent, at = self.placed[after.id]
        if not parent.message_before(at):  # a rewind to before the first message: nothing to fork
            return self._path(self.own_thread(child), child)
        meta = {**self.meta(child), "event_id": f"pi:{self.session}:{child.id}:fork"}
        fork_id = stable_id(TOOL, self.session, child.id)
        drops = self.plan.drops_at_fork(fork_id)  # an import made before forks kept calls: go on as stored
        # A branch leaving a run of results an earlier import stored as one message (pi rewound
        # to one of them after that import) forks before that message, keeping its calls
        # waiting, and writes the results up to its point again, as its own first message.
        copied = None if drops else self.inside.get(after.id)
        if copied is not None:
            at = copied[0]
        # A branch that answers calls waiting at its point (pi rewound to the call, or to one
        # of its results, and ran the tools again) keeps them waiting in its fork.
        keep = copied is not None or (_answers(child.line.record) in parent.facts_at(at).tools and not drops)
        options = {"unanswered": "keep"} if keep else {}
        fork = self.plan.attach(parent.fork(fork_id, "fork", meta, at, **options), self.where(child))
        if copied is not None:
            self._results(fork, copied[1][:copied[2]], f"pi:{self.session}:{child.id}:results")
        self.summary.forks += 1
        return self._path(fork, child)


# pi's stop reason for a model call that did not finish -> how its run ended.
_FAILED = {"aborted": "cancelled", "error": "error"}
_CONTEXT = ("message", "branch_summary", "custom_message")  # the entry types that may become a message


# The parent of a version 1 entry: the entry before it.
_FOLLOWS = object()


def _parents_first(written: list[tuple[int, Line, str, Any]]) -> tuple[list[_Node], list[_Node], list[_Node]]:
    """The entries as nodes, each after its parent. A parent not in the file (or the entry
    itself) is taken as the entry before, as a version 1 file's; a null one starts a root (a
    later root is pi's `resetLeaf`). An entry written before its parent was hung on the entry
    before it, leaving out of its branch what led to it; it is placed after its parent now.
    A cycle of parents is cut where it is entered: that entry starts a root. The nodes where a
    cycle was cut come second, in the file's order, and those naming themselves as their
    parents third (a cycle of one, which only an edited file holds: said, as a cut is)."""
    ids = {node_id for _, _, node_id, _ in written}
    parents: dict[str, str | None] = {}
    previous: str | None = None
    selves = [node_id for _, _, node_id, parent in written if parent == node_id]
    for _, _, node_id, parent in written:
        if parent is None:
            parents[node_id] = None
        else:
            parents[node_id] = parent if isinstance(parent, str) and parent in ids and parent != node_id else previous
        previous = node_id
    keys, cut = parents_first([node_id for _, _, node_id, _ in written], parents)
    for key in cut:
        parents[key] = None
    by_id = {entry[2]: entry for entry in written}
    nodes = {key: _Node(by_id[key][0], by_id[key][1], key, parents[key]) for key in keys}
    return ([nodes[key] for key in keys], sorted((nodes[key] for key in cut), key=lambda node: node.index),
            [nodes[key] for key in selves])


def _own_thread_starts(order: list[_Node], roots: list[_Node]) -> list[_Node]:
    """The entries that may start a thread of their own: the later roots, and the children of
    entries before the first message of their branch (a rewind there has nothing to fork)."""
    before_message: set[str] = set()
    for node in order:  # pi writes an entry after its parent
        record = node.line.record
        if record.get("type") not in _CONTEXT and (node.parent is None or node.parent in before_message):
            before_message.add(node.id)
    return [*roots[1:], *(child for node in order if node.id in before_message for child in node.children)]


def _following(stream: PlannedStream, children: list[_Node]) -> _Node | None:
    """The child a stream goes on with: the one an earlier import wrote into it (so a session
    rewound after it was imported keeps its stored events, and the new branch becomes a
    fork), else the one whose subtree ends latest in the file."""
    kept = [c for c in children if stream.id in c.held]
    if kept:
        return kept[0]
    # A child an earlier import wrote only into other streams stays there (a fork's): it can
    # not go on this stream, which holds other events past it (an older copy of a rewound file).
    free = [c for c in children if not c.held]
    return max(free, key=lambda c: c.latest) if free else None


def _version_1_ids(entries: list[Line], stored: dict[str, str]) -> dict[str, str]:
    """pi rewrites a version 1 file it opens as the current version, each entry given a random
    id (and the one before as its parent), where an import of the version 1 file named each by
    its index. When the store holds entries of the session by such ids (an index into the file,
    which the file names no entry by), the entries up to the last of them keep those ids, so the
    rewritten file, grown since or not, goes on along the stored thread: it was refused as a
    rewritten file."""
    named = {line.record["id"] for line in entries if isinstance(line.record.get("id"), str)}  # a line of another is refused (`_check`)
    indexes = [int(uuid) for uuid in stored
               if uuid not in named and uuid.isdecimal() and uuid == str(int(uuid)) and int(uuid) <= len(entries)]
    if not indexes:
        return {}
    return {line.record["id"]: str(index + 1) for index, line in enumerate(entries[:max(indexes)])
            if isinstance(line.record.get("id"), str)}


def _models(header: dict[str, Any], lines: list[Line]) -> list[str]:
    """The models a session names, the one it began with first: its header's (pi's version 2
    and later headers hold none; pi writes a `model_change` entry as the session starts), its
    model changes', then its answers'."""
    records = [line.record for line in lines]
    changes = (r.get("modelId") for r in records if r.get("type") == "model_change")
    answers = (r["message"].get("model") for r in records if r.get("type") == "message" and r["message"].get("role") == "assistant")
    return [m for m in (header.get("modelId"), *changes, *answers) if isinstance(m, str) and m]


def _results_still_to_come(written: list[tuple[int, Line, str, Any]], stored: dict[str, str]) -> int:
    """How many entries at the end of a file still being written are the results of a
    response some of whose tool calls have none yet: pi writes each result as its tool
    finishes, and a run of results is one user message (`_Writer._joins`), so those written
    so far wait for the rest (taken now, they were a message apart from the rest, as a
    one-shot import of the file never has them). Not once an earlier import stored one of
    them: the run goes on as it was stored."""
    start = len(written)
    while start and _answers(written[start - 1][1].record) is not None:
        start -= 1
    if start in (0, len(written)):
        return 0
    message = written[start - 1][1].record.get("message")
    content = message.get("content") if isinstance(message, dict) and message.get("role") == "assistant" else None
    calls = {b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "toolCall"} if isinstance(content, list) else set()
    tail = written[start:]
    chained = all(parent in (_FOLLOWS, before[2]) for before, (_, _, _, parent) in zip(written[start - 1:], tail))
    if not calls or not chained or calls <= {_answers(line.record) for _, line, _, _ in tail} or any(i in stored for _, _, i, _ in tail):
        return 0
    return len(tail)


def _answers(record: dict[str, Any]) -> str | None:
    """The tool call a `toolResult` entry's record answers (its `toolCallId`, a string once
    `_check` passed it); None for any other entry."""
    message = record.get("message")
    if record.get("type") != "message" or not isinstance(message, dict) or message.get("role") != "toolResult":
        return None
    return str(message.get("toolCallId"))


def _holds(store: Store, thread: str) -> bool:
    try:
        store.thread(thread)
    except ThreadNotFound:
        return False
    return True


def _plan_file(path: Path, summary: ImportSummary, skip_bad: bool, seen: Seen | None = None, store: Store | None = None) -> Plan:
    on_bad = on_bad_line(summary, skip_bad)
    # pi appends an entry at a time: a file changed in the last LIVE_SECONDS may be read as its
    # last line is written, which waits for a later import (read as a bad line, it refused the import).
    live = (seen or Seen()).changed_within(path, LIVE_SECONDS)
    lines, end = read_lines(path, on_bad, partial_tail=live, seen=seen, kind=FORMAT)
    # A file still empty is one pi has created and not yet written its header to: it waits too.
    waiting = end < (seen.sizes[path] if seen is not None else path.stat().st_size) or (live and end == 0)
    if waiting:
        summary.wait(str(path))
    plan = Plan(store=store)
    if not lines:  # its header is the line being written, or the file was empty or every line bad (`on_bad` said)
        return plan
    header = lines[0].record
    if header.get("type") != "session":  # not a pi session: another tool's file, or any other JSON lines
        headless = f'no session header, so not {FORMAT}: a pi session file starts with one ({{"type": "session", "id": ...}})'
        if first_line_of(header) == "claude-code":
            headless += f"; this line is Claude Code's: {RUN['claude-code']}"
        on_bad(NoSession(str(path), lines[0].number, headless))
        return plan  # skipped (`skip_bad`): without its header, the file holds no session to import
    if not isinstance(header.get("id"), str):
        on_bad(BadLine(str(path), lines[0].number, "a pi session header needs a string id"))
        return plan
    session = header["id"]
    if not is_text(session):  # every thread and event id is made from it
        on_bad(BadLine(str(path), lines[0].number, "the session id is not UTF-8 text"))
        return plan
    # Where an earlier import wrote each entry: a session rewound since, or an older copy of one,
    # goes on along what the store holds.
    root_id = stable_id(TOOL, session)
    stored_in: dict[str, str] = {}
    stored = stored_sources(store, root_id, stored_in) if store else {}
    renamed = _version_1_ids(lines[1:], stored)
    written: list[tuple[int, Line, str, Any]] = []  # each entry's index, line, id and parent as written
    taken: set[str] = set()
    for index, line in enumerate(lines[1:]):
        why = _check(line.record)
        if why is not None:
            on_bad(BadLine(str(path), line.number, why))
            continue
        record = line.record
        node_id: str = record["id"] if isinstance(record.get("id"), str) else str(index + 1)  # v1: the line index
        node_id = renamed.get(node_id, node_id)
        if node_id in taken:
            on_bad(BadLine(str(path), line.number, f"entry id {short(node_id)} repeats"))
            continue
        taken.add(node_id)
        parent = record.get("parentId") if "id" in record else _FOLLOWS
        written.append((index, line, node_id, renamed.get(parent, parent) if isinstance(parent, str) else parent))
    waiting_results = _results_still_to_come(written, stored) if live else 0
    if waiting_results:
        written = written[:-waiting_results]
        summary.wait(str(path))
    order, cut, selves = _parents_first(written)
    # Named at each import: the cut is the file's.
    summary.cycles_cut.extend((str(path), node.line.number) for node in cut)
    summary.self_parents.extend((str(path), node.line.number) for node in selves)
    nodes: dict[str, _Node] = {}
    for node in order:
        nodes[node.id] = node
        if node.parent is not None:
            nodes[node.parent].children.append(node)
    for node in order:  # in the file's order, as pi lists a node's branches
        node.children.sort(key=lambda child: child.index)
    roots = sorted((n for n in order if n.parent is None), key=lambda root: root.index)
    if store is not None:  # and what the threads of their own hold (`_Writer.own_thread`)
        for start in _own_thread_starts(order, roots):
            for uuid, stream_id in stored_sources(store, stable_id(TOOL, session, start.id), stored_in).items():
                stored.setdefault(uuid, stream_id)
    for node in reversed(order):
        node.latest = max([node.line.number, *(c.latest for c in node.children)])
        if stored:
            own = frozenset((stored[node.id],)) if node.id in stored else frozenset()
            node.held = own.union(*(c.held for c in node.children))
    models = _models(header, [line for _, line, _, _ in written])
    if not models and live and not written and not (store is not None and _holds(store, root_id)):
        # A header alone, which names no model: the model change pi writes next, as a session
        # starts, is still to come. Created now, the thread would keep no model (a thread's is
        # its thread.created's), and every request of it would need --model.
        summary.wait(str(path))
        return plan
    summary.files += 1
    info = {k: header[k] for k in ("cwd", "provider", "modelId", "thinkingLevel", "branchedFrom", "version") if k in header}
    file = plan.file(path)
    created: dict[str, Any] = {"metadata": {"source": TOOL, "sessionId": session, "file": file, **info}}
    # The first Claude model it used: pi runs on many providers, and a thread's model is what
    # its requests send (one that began on `gpt-5.1-codex` sent that, which the API refuses).
    give_model(created, models, "modelId")

    def thread(stream_id: str, event_id: str, line: Line) -> PlannedStream:
        meta = {"event_id": event_id, "origin": "imported", "source": {"tool": TOOL, "file": file, "line": line.number}}
        if is_time(header.get("timestamp")):
            meta["occurred_at"] = header["timestamp"]
        stream = plan.root(stream_id, created, meta, lambda why: BadLine(str(path), line.number, why, skippable=False))
        summary.threads += 1
        summary.thread_ids.append(stream.id)
        return stream

    stream = thread(root_id, f"pi:{session}:created", lines[0])
    # A branch from before the first message (pi's `resetLeaf`, to edit the first prompt, starts
    # a new root) shares nothing a fork could inherit: it becomes a thread of its own.
    writer = _Writer(plan, path, file, session, summary,
                     lambda start: thread(stable_id(TOOL, session, start.id), f"pi:{session}:{start.id}:created", start.line),
                     on_bad, stored_in=stored_in, renamed=renamed)
    # The session's thread follows its first root, which a growing file never changes.
    if roots:
        writer.branch(stream, roots[0])
    for other in roots[1:]:
        writer.branch(writer.own_thread(other), other)
    return plan


def import_pi(
    store: Store,
    paths: Sequence[str | Path],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    finished: bool = False,
) -> ImportSummary:
    """Import pi session files (or directories of them, searched recursively); idempotent,
    as `import_claude_code`. A malformed line raises `BadLine` with nothing written (every
    file is checked before the first is written) or, with `skip_bad=True`, is skipped and reported.
    A file changed in the last `LIVE_SECONDS` may be being written: a half-written last line, or
    a header alone naming no model, waits for a later import, unless `finished` says pi is done
    with every file (copies just made): then each is read as it is."""
    return import_pi_files(store, source_files(paths, PATTERN, ASKS, finished=finished), skip_bad=skip_bad,
                           progress=progress, finished=finished)


def import_pi_files(
    store: Store,
    files: Sequence[Path],
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    summary: ImportSummary | None = None,
    finished: bool = False,
) -> ImportSummary:
    """`import_pi` of session files already found (`source_files`, as a follower finds them
    at each poll), counted into `summary` (`import_sources`: what was added before an error
    stays counted there)."""
    return import_sources(store, files, lambda path, summary, _, seen: _plan_file(path, summary, skip_bad, seen, store),
                          lambda path: path.stat().st_size, strict=not skip_bad, progress=progress, noun="file",
                          summary=summary, finished=finished)
