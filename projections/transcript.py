"""`transcript`: a bounded, human-readable Markdown export of a thread (agentty's format).

`## user` / `## assistant` sections; each tool call collapsed to one line (its name and a
short argument summary); tool output is not written (a message holding only tool results
is counted but makes no section); thinking is one line. Bounds, all in UTF-8 bytes:

- at most `max_bytes` in total, header and markers included: the most recent messages are
  kept and the oldest replaced by one marker saying how many were elided;
- at most `max_message_bytes` per message: head and tail kept around `… N bytes elided …`.

No cut ever splits a multi-byte character. The header states the thread, its parent and
fork offset, the true number of messages in scope (elided ones included) and the hash of
the last event it was built from, so a reader can tell which history it describes.

Memory stays within about `max_bytes` plus one message whatever the thread's size: message
bodies are rendered one at a time into a window that drops the oldest as it fills.

For a `context="note"` fork the scope starts at the fork note (the parent's messages live
in the parent's transcript, which the note names); tool calls a fork dropped are left out.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

from eventstore import Store
from eventstore.ranges import check_index
from eventstore.recorded import decode

from .state import fork_note

MAX_BYTES = 512 * 1024
MAX_MESSAGE_BYTES = 16 * 1024
MIN_MAX_BYTES = 2048
MIN_MESSAGE_BYTES = 256
_HEADER_FIELD = 120  # bytes of any one header value, so the header itself stays small
_ARGS = 100  # characters of a tool call's argument summary


def _clip_bytes(raw: bytes, limit: int) -> bytes:
    """`raw` cut to at most `limit` bytes at a character boundary (no marker)."""
    if len(raw) <= limit:
        return raw
    cut = limit
    while cut > 0 and (raw[cut] & 0xC0) == 0x80:
        cut -= 1
    return raw[:cut]


def clip_middle(raw: bytes, limit: int) -> bytes:
    """`raw` if it fits in `limit` bytes, else its head and tail around `… N bytes elided …`.

    N is exact (the bytes actually left out) and both cuts fall on character boundaries,
    so the result is valid UTF-8 whenever `raw` is.
    """
    if len(raw) <= limit:
        return raw
    reserve = len(f"\n\n… {len(raw)} bytes elided …\n\n".encode())  # digits of N <= digits of len(raw)
    keep = max(limit - reserve, 0)
    head = keep // 2
    while head > 0 and (raw[head] & 0xC0) == 0x80:
        head -= 1
    start = len(raw) - (keep - keep // 2)
    while start < len(raw) and (raw[start] & 0xC0) == 0x80:
        start += 1
    marker = f"\n\n… {start - head} bytes elided …\n\n".encode()
    return raw[:head] + marker + raw[start:]


def _summary(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= _ARGS else text[: _ARGS - 1] + "…"


def render_message(role: str, content: list[dict[str, Any]], dropped: frozenset[str] = frozenset()) -> str | None:
    """A message's section, or None when nothing of it is written (only tool results)."""
    parts: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text", ""))
        elif kind == "tool_use":
            if block.get("id") not in dropped:
                parts.append(f"- tool call `{block.get('name')}` {_summary(block.get('input', {}))}")
        elif kind in ("thinking", "redacted_thinking"):
            parts.append("_(thinking omitted)_")
        elif kind == "tool_result":
            continue
        elif kind == "document":
            parts.append(f"[document{': ' + block['title'] if block.get('title') else ''}]")
        else:
            parts.append(f"[{kind}]")
    if not parts:
        return None
    return f"## {role}\n\n" + "\n\n".join(parts) + "\n\n"


def _scope(store: Store, thread: str, stop: int) -> tuple[int, frozenset[str], str | None]:
    """From the fork events in the ancestry (O(depth)): where the scope starts (the last note
    fork below `stop`), the tool calls dropped by forks, and that note's text."""
    start, note = 0, None
    dropped: set[str] = set()
    for info in reversed(store.ancestry(thread)):
        if info.parent_id is None or info.base >= stop:
            continue
        data = store.event_at(thread, info.base).data
        options = data.get("options", {})
        dropped.update(data.get("dropped_tool_use_ids") or [])
        if options.get("context") == "note":
            start, dropped, note = info.base, set(), fork_note(data["parent_id"], data["parent_offset"], options.get("transcript"))
    return start, frozenset(dropped), note


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
    info = store.thread(thread)
    if stop is None or stop > info.head:
        if stop is not None:
            _check("stop", stop, 0)
        stop = info.head
    _check("stop", stop, 0)
    scope_start, dropped, note = _scope(store, thread, stop)
    lo = max(start, scope_start)
    cap = min(max_message_bytes, max_bytes - 1024)  # the newest message always fits beside the header
    window: deque[tuple[int, int, bytes]] = deque()  # (message index, offset, section)
    size = total = 0
    first: int | None = None
    if note is not None and lo == scope_start and lo < stop:
        raw = clip_middle(f"## user\n\n{note}\n\n".encode(), cap)
        window.append((0, scope_start, raw))
        size, total, first = len(raw), 1, scope_start
    for offset, type_, stored, text in store.read_raw(thread, lo, stop):
        if type_ != "message.appended":
            continue
        data = decode(type_, stored, text)
        total += 1
        first = offset if first is None else first
        section = render_message(data.get("role", "user"), data.get("content") or [], dropped)
        if section is None:
            continue
        raw = clip_middle(section.encode("utf-8"), cap)
        window.append((total - 1, offset, raw))
        size += len(raw)
        while size > max_bytes or (last is not None and len(window) > last):
            size -= len(window.popleft()[2])
    head_hash = info.head_hash if stop == info.head else store.event_at(thread, stop - 1).hash if stop else "-"
    header = _header(info.id, info.parent_id, info.parent_offset, total, lo, stop, head_hash)
    while True:
        elided = window[0][0] if window else total
        marker = _marker(elided, first, window[0][1] if window else stop) if elided else ""
        prefix = (header + marker).encode("utf-8")
        if len(prefix) + size <= max_bytes or not window:
            break
        size -= len(window.popleft()[2])
    return _clip_bytes(prefix + b"".join(raw for _, _, raw in window), max_bytes).decode("utf-8")


def _field(value: object) -> str:
    return _clip_bytes(str(value).encode("utf-8"), _HEADER_FIELD).decode("utf-8")


def _header(thread: str, parent: str | None, parent_offset: int | None, total: int, lo: int, stop: int, head_hash: str) -> str:
    origin = f"fork of {_field(parent)} at offset {parent_offset}" if parent else "root thread"
    return (
        f"# Transcript of thread {_field(thread)}\n\n"
        f"- parent: {origin}\n"
        f"- messages: {total} (offsets {lo}..{max(stop - 1, lo)})\n"
        f"- built from: head {_field(head_hash)} ({stop} events)\n"
        "- tool calls are one line each; tool output is not written\n\n"
    )


def _marker(elided: int, first: int | None, until: int) -> str:
    noun = "message" if elided == 1 else "messages"
    return (
        f"… {elided} earlier {noun} elided (offsets {first}..{until - 1}); "
        "this transcript keeps the most recent ones …\n\n"
    )


def write_transcript(store: Store, thread: str, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write `transcript(store, thread, **options)` to `path` atomically; returns the path.

    The text goes to a temporary file in the same directory, is fsynced, then renamed over
    `path`: a crash at any point leaves either the old file or the new one, never a
    truncated mix. The temporary file is removed if anything fails before the rename.
    """
    data = transcript(store, thread, **options).encode("utf-8")
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such directory to write the transcript in", str(directory))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        try:  # keep the mode of the file being replaced; a new one is readable like any file
            mode = os.stat(target).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable; not every platform can open a directory
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return target

