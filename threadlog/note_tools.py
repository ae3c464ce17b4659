"""Tools a note fork's model calls to read its parent's history: `read_transcript`, `grep_transcript`.

`transcript_tools(store, fork)` returns handlers for `run_turn(tools=...)`; each carries its
Anthropic tool `definition`, which `run_turn` offers to the model. They read the fork's
logical history below the fork point only (the parent's, and its ancestors', as the fork
inherited it), never the fork's own events, a sibling's or the parent's later ones. Every
answer is at most `max_bytes` UTF-8 bytes and ends with a line saying when it was cut.

`grep_transcript` matches a literal substring, case-insensitively, line by line: a pattern
from the model is data, never a regular expression, so no pattern can make it backtrack
for ever (Python's `re` has no time limit); its cost is linear in the history's size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from eventstore import InvalidEvent, Store

from projections.transcript import INDENT, clip_middle, escape_controls, render_message

MAX_BYTES = 16 * 1024
MESSAGE_BYTES = 4 * 1024  # of one message in read_transcript
_ROOM = 400  # of an answer, kept for a message's heading and the line saying where it was cut
LINE_BYTES = 300  # of one matching line in grep_transcript

Json = dict[str, Any]


class TranscriptTool:
    """A handler `run_turn` can call with the tool's input as keyword arguments."""

    __call__: Callable[..., str]  # each tool's own, with its input's names

    def __init__(self, definition: Json, store: Store, fork: str, stop: int, max_bytes: int) -> None:
        self.definition = definition
        self.store, self.fork, self.stop, self.max_bytes = store, fork, stop, max_bytes

    def lines(self, start: int, stop: int) -> Iterator[tuple[int, str, str]]:
        """(offset, role, rendered message) of each message in start..stop-1 with anything to show."""
        for offset, type_, data in self.store.read_data(self.fork, start, stop):
            if type_ != "message.appended":
                continue
            content = data.get("content") or []
            text = render_message(str(data.get("role")), content, stopped=data) or ""
            results = "\n".join(_result_lines(content))
            if text or results:
                yield offset, str(data.get("role")), escape_controls(text + results)


class ReadTranscript(TranscriptTool):
    def __call__(self, /, start: int = 0, stop: int | None = None, **unknown: Any) -> str:
        if unknown:
            return _unknown("read_transcript", unknown, "start and stop")
        stop = self.stop if stop is None else stop
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= self.stop):
            return f"error: need 0 <= start < stop <= {self.stop} (the fork point), not start={start!r}, stop={stop!r}"
        out: list[str] = []
        used = 0
        # A message clipped to fit one answer whole (with its heading and the cut line): one
        # wider than the answer was never shown, and the cut line named the same call again.
        limit = min(MESSAGE_BYTES, self.max_bytes - _ROOM)
        for offset, _, text in self.lines(start, stop):
            part = f"## offset {offset}\n" + clip_middle(text.encode(), limit, INDENT.encode()).decode() + "\n"
            size = len(part.encode())
            if used + size > self.max_bytes - 200:
                out.append(f"[cut: answer limited to {self.max_bytes} bytes; call read_transcript(start={offset}, stop={stop}) "
                           "for the rest]")
                return "".join(out)
            out.append(part)
            used += size
        out.append(f"[end: offsets {start}..{stop - 1} of {self.stop}]")
        return "".join(out)


class GrepTranscript(TranscriptTool):
    def __call__(self, /, pattern: str = "", **unknown: Any) -> str:
        if unknown:
            return _unknown("grep_transcript", unknown, "pattern")
        if not isinstance(pattern, str) or not pattern.strip():
            return "error: pattern must be non-empty text"
        needle = pattern.casefold()
        out: list[str] = []
        used = found = 0
        for offset, role, text in self.lines(0, self.stop):
            for line in text.splitlines():
                if needle not in line.casefold():
                    continue
                found += 1
                shown = f"{offset} {role}: {_clip(line.strip(), LINE_BYTES)}\n"
                if used + len(shown.encode()) > self.max_bytes - 200:
                    out.append(f"[cut: answer limited to {self.max_bytes} bytes after {found - 1} matching lines; "
                               "grep a longer pattern, or read_transcript around an offset]")
                    return "".join(out)
                out.append(shown)
                used += len(shown.encode())
        out.append(f"[end: {found} matching line(s) below offset {self.stop}]")
        return "".join(out)


def extra_tools(defined: list[Json] | None, tools: Mapping[str, Callable[..., Any]] | None) -> list[Json] | None:
    """The definitions carried by `tools`' callables (a `definition`, as these tools have) whose
    names the thread does not define (`defined`): what a live turn offers the model besides the
    thread's tools, with their keys sorted as the log stores JSON, so the request rebuilt from
    meta.request has the same bytes as the one sent."""
    names = {t.get("name") for t in defined or ()}
    extra = [json.loads(json.dumps(getattr(fn, "definition"), sort_keys=True)) for name, fn in sorted((tools or {}).items())
             if name not in names and isinstance(getattr(fn, "definition", None), dict)]
    return extra or None


def transcript_tools(store: Store, fork: str, max_bytes: int = MAX_BYTES) -> dict[str, TranscriptTool]:
    """`read_transcript` and `grep_transcript` over `fork`'s inherited history, for `run_turn(tools=...)`."""
    info = store.thread(fork)
    if info.parent_offset is None:
        raise InvalidEvent("thread", f"thread {fork!r} is not a fork: it has no parent transcript to read")
    if not isinstance(max_bytes, int) or max_bytes < 1024:
        raise InvalidEvent("max_bytes", f"must be a whole number >= 1024, not {max_bytes!r}")
    stop = info.parent_offset
    return {
        "read_transcript": ReadTranscript(_read_definition(stop), store, fork, stop, max_bytes),
        "grep_transcript": GrepTranscript(_GREP, store, fork, stop, max_bytes),
    }


def _read_definition(stop: int) -> Json:
    return {
        "name": "read_transcript",
        "description": "Read the parent conversation this fork came from, as Markdown, by message offset "
        f"(0 to {stop}, the fork point). Long messages are clipped and the answer says where it was cut.",
        "input_schema": {
            "type": "object",
            "properties": {
                "start": {"type": "integer", "description": "first offset to read", "minimum": 0},
                "stop": {"type": "integer", "description": "offset to stop before (default: the fork point)"},
            },
            "required": ["start"],
        },
    }


_GREP: Json = {
    "name": "grep_transcript",
    "description": "Find the lines of the parent conversation that contain a text (a literal substring, "
    "case-insensitive; not a regular expression). Each line comes with its message offset, for read_transcript.",
    "input_schema": {
        "type": "object",
        "properties": {"pattern": {"type": "string", "description": "the text to find"}},
        "required": ["pattern"],
    },
}


def _unknown(tool: str, unknown: Json, takes: str) -> str:
    """The answer to a call whose input has keys the tool does not take: the definitions leave
    other keys allowed (no `additionalProperties: false`), and a call with one raised a
    TypeError, which ended the turn with status `error` where a wrong value is told to the model."""
    names = ", ".join(repr(name)[:60] for name in sorted(unknown)[:5])
    return f"error: {tool} takes {takes} only, not {names}"


def _result_lines(content: list[Json]) -> Iterator[str]:
    for block in content:
        if block.get("type") != "tool_result":
            continue
        value = block.get("content")
        text = value if isinstance(value, str) else "\n".join(
            b.get("text", "") for b in value or () if isinstance(b, dict) and b.get("type") == "text")
        if text.strip():
            yield "tool result:\n" + "\n".join(INDENT + line for line in text.splitlines())


def _clip(text: str, limit: int) -> str:
    raw = text.encode()
    return text if len(raw) <= limit else raw[:limit].decode(errors="ignore") + "…"
