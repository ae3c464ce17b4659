"""`transcript`: a bounded, human-readable Markdown export of a thread (agentty's format).

`## user` / `## assistant` sections (`## user (injected by TOOL)` for text a harness wrote
into the conversation, such as an imported session's command output, and a line `injected by
TOOL:` before a block it wrote into a message the user typed, such as an IDE's context);
each tool call collapsed to one line (its name and a short argument summary); tool output is
not written (a message holding only tool results is counted but makes no section, nor does one whose text is only whitespace), but a failed
call is one line, `failed tool call NAME`; thinking is one line; an answer the model refused
says so, `refused (stop_reason refusal)`, with the refusal's category and explanation; one
it did not end whole says what cut it short, `cut off at the token limit (stop_reason
max_tokens)`, or that this release does not know its stop reason (named as a code span). A
compaction is its own section, `## compaction (messages before offset N summarised)`, with the summary the model
reads from there on; so is a run that ended `error` or `cancelled`, `## run error`, with its
error (a model call that failed before it gave anything shows only there), and one that ended
`ok` with an error (a stream that failed after its whole answer came), `## run ok`. Bounds, all in UTF-8 bytes:

- at most `max_bytes` in total, header and markers included: the most recent messages are
  kept and the oldest replaced by one marker saying how many were elided;
- at most `max_message_bytes` per message: head and tail kept around `… N bytes elided …`.

No cut ever splits a multi-byte character. The header states the thread, its parent and
fork offset, the true number of messages in scope (elided ones included), how many of them
are shown (exactly the `## user` / `## assistant` sections written) and the hash of
the last event it was built from, so a reader can tell which history it describes.

Content cannot forge structure (a note fork tells the model to read this file, so it is a
prompt-injection path). Every line of message text is indented by four spaces: in the raw
file a line that starts at column 0 was written by the projection (`## user`, a header
line, a tool-call line, a marker), and rendered as CommonMark the text is an indented code
block, so headings, lists and HTML in it stay literal text. Line breaks in text are
written as `\n` (`\r\n`, `\r`, U+2028 and the other breaks `str.splitlines` knows included);
the other control characters in it but the tab (ESC, BEL, NUL, the C1 controls) are written
as escapes (`\u001b`), so showing the file in a terminal cannot drive it.
Values that sit on a projection's line (thread ids, tool names, tool input, document
titles) have control characters escaped (`\n`, `\u2028`) and, unless they are plain ids,
are written as code spans, so they cannot end the line or carry HTML. A clipped message's
tail that starts mid-line is indented too.

Memory stays within about `max_bytes` plus one message whatever the thread's size: message
bodies are rendered one at a time into a window that drops the oldest as it fills.

For a `context="note"` fork the scope starts at the fork note (the parent's messages live
in the parent's transcript, which the note names); tool calls a fork dropped are left out.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from eventstore import Store
from eventstore.ranges import check_index, segments

from .atomic import write_atomically
from .dropped import Drop, Located, dropped_whole, fork_drops, locate
from .injected import injected_blocks, injected_by
from .stops import PAUSED, cut_by, cut_reason, refusal
from .state import REDACTED, fork_note, shown_as_run

MAX_BYTES = 512 * 1024
MAX_MESSAGE_BYTES = 16 * 1024
MIN_MAX_BYTES = 2048
MIN_MESSAGE_BYTES = 256
# The event types whose payload a transcript can write: messages, compactions, failed runs
# (a run's status is gone once redacted, so every run.finished), and forks (a note fork's
# note, which names its transcript's path). No other event's payload reaches the file.
WRITTEN_TYPES = frozenset({"message.appended", "compaction.recorded", "run.finished", "thread.forked"})

_HEADER_FIELD = 120  # bytes of any one value on a projection's line (header, tool name), so those lines stay short
_ARGS = 100  # characters of a tool call's argument summary
_NAMES = 1024  # tool calls whose names are remembered, to name a failure that answers one (newest kept)


INDENT = "    "  # before every line of message text: CommonMark's indented code block
_INDENT_BYTES = INDENT.encode()
_PLAIN = re.compile(r"[A-Za-z0-9.:/+=-]+")  # a value written as it is: no markup, no HTML
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # line breaks and other controls
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BACKTICKS = re.compile(r"`+")
# What is left of the controls in message text once `_text` broke its lines: those
# `str.splitlines` does not break at, but the tab (`escape_controls`). The sections a
# transcript keeps are searched for them as bytes (a C1 control is \xc2 and a byte after
# it in UTF-8): ~1 ns a byte where a regular expression takes ~4.6 ns a character, and only
# the kept ones (at most max_bytes), not the megabytes rendered on the way.
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0e, 0x1c), 0x1f, 0x7f, 0xc2])


def _clip_bytes(raw: bytes, limit: int) -> bytes:
    """`raw` cut to at most `limit` bytes at a character boundary (no marker)."""
    if len(raw) <= limit:
        return raw
    cut = limit
    while cut > 0 and (raw[cut] & 0xC0) == 0x80:
        cut -= 1
    return raw[:cut]


def clip_middle(raw: bytes, limit: int, indent: bytes = b"") -> bytes:
    """`raw` if it fits in `limit` bytes, else its head and tail around `… N bytes elided …`.

    N is exact (the bytes actually left out) and both cuts fall on character boundaries,
    so the result is valid UTF-8 whenever `raw` is. With `indent` (the transcript's text
    indent) no cut changes what a line is: a tail that starts mid-line is indented, and a
    head that would end inside a line not indented (the projection's own: a tool call), or
    inside a line's indent, ends before that line instead, so it is elided whole.
    """
    if len(raw) <= limit:
        return raw
    reserve = len(f"\n\n… {len(raw)} bytes elided …\n\n".encode()) + len(indent)  # digits of N <= digits of len(raw)
    keep = max(limit - reserve, 0)
    head = keep // 2
    while head > 0 and (raw[head] & 0xC0) == 0x80:
        head -= 1
    start = len(raw) - (keep - keep // 2)
    while start < len(raw) and (raw[start] & 0xC0) == 0x80:
        start += 1
    resume = b""
    if indent:
        line = raw.rfind(b"\n", 0, head) + 1
        if line < head and (head - line <= len(indent) or not raw.startswith(indent, line)):
            head = line  # nothing of the line, or the projection's own line: elide it whole
        if start < len(raw) and raw[start - 1:start] != b"\n":
            resume = indent
    marker = f"\n\n… {start - head} bytes elided …\n\n".encode()
    return raw[:head] + marker + resume + raw[start:]


def _one_line(value: object) -> str:
    """`value` as text with its control characters (line breaks included) escaped."""
    text = str(value)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    """A control character as the transcript writes it: `\\n`, `\\r`, `\\t`, else `\\u001b`."""
    return _ESCAPES.get(match[0]) or f"\\u{ord(match[0]):04x}"


def _code(text: str) -> str:
    """`text` (one line) as a CommonMark code span: literal, whatever backticks or HTML it holds."""
    if not text:
        return "` `"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _value(value: object) -> str:
    """`value` for a projection's line: one line, at most `_HEADER_FIELD` bytes (never a split character)."""
    return _clip_bytes(_one_line(value).encode("utf-8"), _HEADER_FIELD).decode("utf-8")


def _inline(value: object) -> str:
    """`_value(value)` as it is if it is a plain id, else as a code span."""
    text = _value(value)
    return text if _PLAIN.fullmatch(text) else _code(text)


def _text(text: str) -> str:
    """Message text, every line indented (see module doc); blank lines stay empty."""
    return "\n".join(INDENT + line if line else "" for line in text.splitlines())


def escape_controls(text: str) -> str:
    """Rendered text with its control characters but the tab and the line breaks written as
    escapes (`\\u001b`): showing it in a terminal cannot drive the terminal."""
    return _TEXT_CONTROL.sub(_escaped, text)


def _without_controls(raw: bytes, cap: int) -> bytes:
    """A kept section (`transcript`'s window) with `escape_controls`, clipped to `cap` again."""
    if len(raw.translate(None, _CONTROL_BYTES)) == len(raw):
        return raw
    escaped = escape_controls(raw.decode("utf-8")).encode("utf-8")
    return escaped if len(escaped) <= cap else clip_middle(escaped, cap, _INDENT_BYTES)


# The arguments that say which call it was (the file, the command, the pattern, the URL, the
# query): a tool call's summary shows them first, the rest after in key order, so the bound
# cuts what matters least.
_IDENTIFYING = ("file_path", "path", "notebook_path", "command", "pattern", "url", "query", "glob", "skill", "subagent_type",
                "description")


def _summary(value: Any) -> str:
    if isinstance(value, dict):
        first = [key for key in _IDENTIFYING if key in value]
        value = {**{key: value[key] for key in first}, **{key: value[key] for key in sorted(value) if key not in first}}
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= _ARGS else text[: _ARGS - 1] + "…"


def render_message(role: str, content: list[dict[str, Any]], dropped: frozenset[str] = frozenset(),
                   injected: str | None = None, tool_names: Mapping[str, str] | None = None,
                   stopped: Mapping[str, Any] | None = None, injected_blocks: Mapping[int, str] | None = None,
                   last: bool = False) -> str | None:
    """A message's section, or None when nothing of it is written (only tool results that
    succeeded, text that is only whitespace).

    `stopped` is the message's event data: an answer the model refused (`stop_reason:
    refusal`) says so on a line of its own, with the refusal's category and explanation
    (`stop_details`) as text; it often holds no text at all, and had no section. One the model
    did not end whole (`projections.stops.cut_short`) says what cut it short and its stop
    reason on a line of its own, `cut off at the token limit (stop_reason max_tokens)`; `last`:
    no message follows it where the transcript ends (a paused answer is cut short only then).

    `injected` names the tool that wrote a user message's text (`injected_by`): its heading
    says so, `## user (injected by claude-code)`, so it is not read as typed by the user.
    `injected_blocks` names, by index, the tool that wrote a block of a message the user typed
    (`projections.injected.injected_blocks`): the block's text follows a line of its own,
    `injected by claude-code:`.
    A failed tool call (a `tool_result` with `is_error`) is its own line, `failed tool call
    NAME`, the name found in `tool_names` (tool_use id -> name), else the tool_use id.
    """
    parts: list[str] = []
    for index, block in enumerate(content):
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            by = (injected_blocks or {}).get(index)
            if text.strip():
                parts.append(_text(text) if by is None else f"injected by {_inline(by)}:\n{_text(text)}")
        elif kind == "tool_use":
            if block.get("id") not in dropped:
                parts.append(f"tool call {_code(_value(block.get('name')))} {_code(_one_line(_summary(block.get('input', {}))))}")
        elif kind in ("thinking", "redacted_thinking"):
            parts.append("_(thinking omitted)_")
        elif kind == "tool_result":
            if block.get("is_error"):
                call_id = str(block.get("tool_use_id", ""))
                name = (tool_names or {}).get(call_id)
                parts.append(f"failed tool call {_code(_value(name)) if name is not None else _inline(call_id)}")
        elif kind == "document":
            parts.append(f"[document{': ' + _code(_value(block['title'])) if block.get('title') else ''}]")
        else:
            parts.append(f"[{_inline(kind)}]")
    said = refusal(stopped) if stopped is not None else None
    if said is not None:
        parts += ["refused (stop_reason refusal)", *([_text(said)] if said else [])]
    cut = cut_reason(stopped, last) if stopped is not None else None
    if cut is not None:
        parts.append(f"{cut_by(cut)} (stop_reason {_inline(cut)})")
    if not parts:
        return None
    heading = role if role in ("user", "assistant") else _inline(role)
    if injected is not None:
        heading += f" (injected by {_inline(injected)})"
    return f"## {heading}\n\n" + "\n\n".join(part for part in parts if part) + "\n\n"


def _scope(store: Store, thread: str, stop: int) -> tuple[int, Located, str | None]:
    """From the fork events in the ancestry (O(depth)): where the scope starts (the last note
    fork below `stop`), the tool calls dropped by forks (where they are: dropped.py), and that
    note's text."""
    start, note = 0, None
    dropped: list[Drop] = []
    # Each fork the history holds starts its segment with its `thread.forked`, read from the
    # fork's own stream (one row; read through the thread it took a walk up the chain each).
    for stream_id, lo, _ in segments(store.ancestry(thread)):
        if lo == 0 or lo >= stop:
            continue
        data = store.event_at(stream_id, lo).data
        options = data.get("options", {})
        dropped += fork_drops(data, lo)
        if options.get("context") == "note":
            start, dropped, note = lo, [], fork_note(data["parent_id"], data["parent_offset"], options.get("transcript"))
    return start, locate(store, thread, dropped) if dropped else {}, note


def _check(name: str, value: Any, minimum: int) -> None:
    check_index(name, value, minimum, what="an integer")


def transcript(
    store: Store,
    thread: str,
    *,
    max_bytes: int = MAX_BYTES,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    start: int = 0,
    stop: int | None = None,
    last: int | None = None,
) -> str:
    """`thread`'s Markdown transcript over offsets start..stop-1, at most `max_bytes` bytes.

    `last=N` keeps at most the N most recent messages (the rest are elided with the same
    marker). The same events and options always give the same text.
    """
    _check("max_bytes", max_bytes, MIN_MAX_BYTES)
    _check("max_message_bytes", max_message_bytes, MIN_MESSAGE_BYTES)
    _check("start", start, 0)
    if last is not None:
        _check("last", last, 1)
    if stop is not None:
        _check("stop", stop, 0)
    info = store.thread(thread)
    if stop is None or stop > info.head:
        stop = info.head
    scope_start, dropped, note = _scope(store, thread, stop)
    lo = max(start, scope_start)
    cap = min(max_message_bytes, max_bytes - 1024)  # the newest message always fits beside the header
    # (messages before it, offset, section, whether it is a message's: a compaction's is not)
    window: deque[tuple[int, int, bytes, bool]] = deque()
    size = total = shown = 0
    cut = False  # whether a section was elided (not merely never written)
    first: int | None = None
    paused: tuple[int, int, bytes, bool] | None = None  # a paused answer no message follows yet (see `_ended`)
    names: dict[str, str] = {}  # the newest tool calls' names, for `failed tool call NAME`
    if note is not None and lo == scope_start and lo < stop:
        raw = clip_middle(f"## user\n\n{_text(note)}\n\n".encode(), cap, _INDENT_BYTES)
        window.append((0, scope_start, raw, True))
        size, total, shown, first = len(raw), 1, 1, scope_start
    for event in store.read(thread, lo, stop):
        offset, data = event.offset, event.data
        section: str | None
        if event.type == "compaction.recorded" and "through_offset" in data:
            section = _compaction(data["through_offset"], str(data.get("summary", REDACTED)))
        elif event.type == "run.finished" and shown_as_run(data):
            section = _run_ended(str(data["status"]), str(data.get("error") or ""))
        elif event.type == "message.appended":
            content = data.get("content") or []
            _remember_names(names, content)
            try:
                role, gone, by, blocks = data.get("role", "user"), dropped.get(offset, frozenset()), injected_by(event.meta), \
                    injected_blocks(event.meta)
                section = render_message(role, content, gone, by, names, data, blocks)
                # Whether it is the last message is known once the read ends: a paused answer's section as the last waits aside.
                ending = render_message(role, content, gone, by, names, data, blocks, last=True) if data.get(
                    "stop_reason") == PAUSED and cut_reason(data, True) != cut_reason(data) else None
            except RecursionError as error:  # stored by an older release or by hand: appends refuse it
                raise store.unreadable(thread, offset, error) from None
            if not dropped_whole(content, gone):  # one of dropped calls alone is out of the view:
                # not its last message, nor one that goes on from a paused answer
                paused = None if ending is None else (total, offset, clip_middle(ending.encode("utf-8"), cap, _INDENT_BYTES),
                                                      section is None)
            total += 1
            first = offset if first is None else first
        else:
            continue
        if section is None:
            continue
        is_message = event.type == "message.appended"
        raw = clip_middle(section.encode("utf-8"), cap, _INDENT_BYTES)
        window.append((total - is_message, offset, raw, is_message))
        size, shown = size + len(raw), shown + is_message
        if size > max_bytes or (last is not None and shown > last):
            size, shown, cut = _trim(window, size, shown, cut, max_bytes, last)
    if paused is not None:  # no message follows the paused answer: it ends as the last one, marked
        size, shown = _ended(window, paused, size, shown, cut)
        size, shown, cut = _trim(window, size, shown, cut, max_bytes, last)
    window = deque((before, offset, _without_controls(raw, cap), is_message) for before, offset, raw, is_message in window)
    size = sum(len(raw) for _, _, raw, _ in window)
    head_hash = info.head_hash if stop == info.head else store.event_at(thread, stop - 1).hash if stop else "-"
    while True:
        header = _header(info.id, info.parent_id, info.parent_offset, total, shown, lo, stop, head_hash)
        elided = window[0][0] if window else total
        marker = _marker(elided, first, window[0][1] if window else stop) if cut and elided else ""
        prefix = (header + marker).encode("utf-8")
        if len(prefix) + size <= max_bytes or not window:
            break
        _, _, dropped_raw, was_message = window.popleft()
        size, shown, cut = size - len(dropped_raw), shown - was_message, True
    return _clip_bytes(prefix + b"".join(raw for _, _, raw, _ in window), max_bytes).decode("utf-8")


def _trim(window: deque[tuple[int, int, bytes, bool]], size: int, shown: int, cut: bool, max_bytes: int,
          last: int | None) -> tuple[int, int, bool]:
    """Drop the oldest sections of `window` until it holds `max_bytes` and `last` messages at
    most: (its size, the messages it shows, whether a section was elided)."""
    while size > max_bytes or (last is not None and shown > last):
        _, _, dropped_raw, was_message = window.popleft()
        size, shown, cut = size - len(dropped_raw), shown - was_message, True
    return size, shown, cut


def _ended(window: deque[tuple[int, int, bytes, bool]], paused: tuple[int, int, bytes, bool], size: int, shown: int,
           cut: bool) -> tuple[int, int]:
    """Put the section of the paused answer (`paused`: messages before it, its offset, its section
    as the last message, whether it had none before) in place of the one it had in `window`, or
    where it goes when it had none (a blank answer) and was not elided: (the size, the messages
    shown)."""
    before, offset, raw, unwritten = paused
    place = next((i for i, entry in enumerate(window) if entry[1] >= offset), len(window))
    if place < len(window) and window[place][1] == offset and window[place][3]:
        size -= len(window[place][2])
        del window[place]
    elif not unwritten or (cut and place == 0):  # elided with what came before it
        return size, shown
    else:
        shown += 1
    window.insert(place, (before, offset, raw, True))
    return size + len(raw), shown


def _remember_names(names: dict[str, str], content: list[dict[str, Any]]) -> None:
    """Note each tool call's name by its id, keeping only the newest `_NAMES` (bounded memory)."""
    for block in content:
        if block.get("type") == "tool_use" and "id" in block:
            names.pop(str(block["id"]), None)
            names[str(block["id"])] = str(block.get("name", ""))
            if len(names) > _NAMES:
                del names[next(iter(names))]


def _compaction(through: object, summary: str) -> str:
    """A compaction's section: where the model's view restarts, then the summary it reads."""
    heading = f"## compaction (messages before offset {_inline(through)} summarised)\n\n"
    return heading + (_text(summary) + "\n\n" if summary.strip() else "")


def _run_ended(status: str, error: str) -> str:
    """A run that ended `error` or `cancelled`, or `ok` with an error (the answer kept): its status, then its error."""
    return f"## run {status}\n\n" + (_text(error) + "\n\n" if error.strip() else "")


def _header(thread: str, parent: str | None, parent_offset: int | None, total: int, shown: int, lo: int, stop: int,
            head_hash: str) -> str:
    origin = f"fork of {_inline(parent)} at offset {parent_offset}" if parent else "root thread"
    return (
        f"# Transcript of thread {_inline(thread)}\n\n"
        f"- parent: {origin}\n"
        f"- messages: {total} (offsets {lo}..{max(stop - 1, lo)}), {shown} shown "
        "(a message of only tool output or blank text has no section)\n"
        f"- built from: head {_inline(head_hash)} ({stop} events)\n"
        "- tool calls are one line each; tool output is not written; message text is indented four spaces\n\n"
    )


def _marker(elided: int, first: int | None, until: int) -> str:
    noun = "message" if elided == 1 else "messages"
    return (
        f"… {elided} earlier {noun} elided (offsets {first}..{until - 1}); "
        "this transcript keeps the most recent ones …\n\n"
    )


def write_transcript(store: Store, thread: str, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write `transcript(store, thread, **options)` to `path` atomically; returns the path.

    See `atomic.write_atomically`: a crash leaves the old file or the new one; a replaced
    file keeps its mode, a new one gets what the umask allows; a symlink to a file at `path`
    is replaced, not followed; a device or a pipe is written to; the store's own files are
    refused (`InvalidEvent`).
    """
    return write_atomically(path, [transcript(store, thread, **options).encode("utf-8")], "the transcript", keep=store.files)
