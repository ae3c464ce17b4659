"""The store the web viewer's tests serve: a conversation with a fork, a fork of the fork,
a long thread for paging, and a thread whose every stored string is hostile."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

from threadlog import Store, update_index

# Each payload sets this global if it ever runs.
FLAG = "__pwned"
SCRIPT = f"<script>window.{FLAG}=1</script>"
IMG = f'<img src=x onerror="window.{FLAG}=1">'
HOSTILE_ID = f'"><img src=x onerror=window.{FLAG}=1>/?&x=<b>'
HOSTILE_MESSAGES = [
    f"plain {SCRIPT} and {IMG}",
    f"[click me](javascript:window.{FLAG}=1) and <a href=\"javascript:window.{FLAG}=1\">raw link</a>",
    f'![pic](x" onerror="window.{FLAG}=1) and <svg onload="window.{FLAG}=1"></svg>',
    f"```html\n{SCRIPT}\n```\n**bold** <iframe src=\"javascript:window.{FLAG}=1\"></iframe>",
]
LONG = 250  # messages in the long thread: more than two pages


def png(width: int, height: int) -> bytes:
    """A real PNG file: a grey image of that size."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    """An image content block holding `data`."""
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}}


def build(path: Path) -> dict[str, str]:
    """Write the store at `path`; returns the ids the tests use."""
    with Store(path) as s:
        trip = s.create_thread(title="Trip to Lyon", thread_id="trip")
        s.append_message(trip, "user", "Find me a **train** to Lyon")
        s.append_message(trip, "assistant", "Two trains fit: 08:04 and 08:58.")
        s.append_message(trip, "user", "Book the first one")
        fork = s.fork(trip, at=2)
        s.append_message(fork, "user", "Actually, what about a bus?")
        deeper = s.fork(fork)
        s.append_message(deeper, "user", "Or a plane?")

        long = s.create_thread(title="Long thread", thread_id="long")
        s.append(long, [{"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}}
                        for i in range(LONG)])

        bad = s.create_thread(title=SCRIPT, thread_id=HOSTILE_ID)
        for text in HOSTILE_MESSAGES:
            s.append(bad, [{"type": "message.appended", "data": {"role": "user", "content": text}, "meta": {"actor": SCRIPT}}])
        s.append_message(bad, "assistant", [{"type": "tool_use", "id": "toolu_x", "name": IMG, "input": {"q": SCRIPT}}])
        s.append_message(bad, "user", [{"type": "tool_result", "tool_use_id": "toolu_x", "content": SCRIPT}])
        s.append_message(bad, "assistant", [{"type": "thinking", "thinking": f"thinking {SCRIPT}", "signature": "sig"},
                                            {"type": "text", "text": "thought"}])
        s.append(bad, [{"type": "interrupt.raised", "data": {"interrupt_id": "ask-1", "question": f"question {SCRIPT}"}}])
        s.append(bad, [{"type": "interrupt.resolved", "data": {"interrupt_id": "ask-1", "answer": IMG}}])
        s.append(bad, [{"type": "compaction.recorded", "data": {"summary": f"summary {IMG}", "through_offset": s.head(bad)}}])
        secret = s.append_message(bad, "user", "my password is hunter2")
        s.redact(secret.position, reason=IMG, actor=SCRIPT)
        s.append_message(bad, "assistant", "after the redaction")
        s.fork(bad, fork_id=HOSTILE_ID + "/fork")
        update_index(s)  # the list page shows a search box when the file has an index
    return {"trip": trip, "fork": fork, "deeper": deeper, "long": long, "bad": bad}
