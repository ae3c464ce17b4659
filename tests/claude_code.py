"""Build a threadlog thread from a real Claude Code session file (JSONL), for tests.

A stand-in until the importer lands: it keeps the main chain's user and assistant lines in
file order, merges the lines one API response is split over (same `message.id`), keeps only
`tool_result`s that answer a call still waiting, and marks everything `origin="imported"`
with the line's timestamp. Enough to feed real text, tool calls and thinking to projections.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eventstore import Store

DATA = Path(__file__).resolve().parent / "fixtures" / "claude-code"  # copied, with licence: see its README

SESSIONS = [
    "-Users-dain-workspace-claude-code-log-sample/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl",
    "-src-deep-manifest/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl",
    "-Users-dain-workspace-coderabbit-review-helper/cb2e607c-c758-415a-8b45-c49e4631906a.jsonl",
    "-Users-dain-workspace-JSSoundRecorder/7acd37a8-2745-4b58-a8a9-46164b22ad9e.jsonl",
]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content if isinstance(b, dict)]


def events_from(path: Path) -> list[dict[str, Any]]:
    """The session's messages as `message.appended` event dicts."""
    messages: list[tuple[str, list[dict[str, Any]], str, str | None]] = []  # role, blocks, time, message id
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") not in ("user", "assistant") or record.get("isSidechain"):
            continue
        message = record.get("message") or {}
        blocks = _blocks(message.get("content"))
        if not blocks:
            continue
        role, msg_id = message.get("role", record["type"]), message.get("id")
        if role == "assistant" and messages and messages[-1][0] == "assistant" and msg_id and messages[-1][3] == msg_id:
            messages[-1][1].extend(blocks)
        else:
            messages.append((role, blocks, record.get("timestamp", ""), msg_id))
    events, pending = [], set()
    for role, blocks, time, _ in messages:
        kept = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use" and role == "assistant":
                pending.add(block["id"])
                kept.append(block)
            elif kind == "tool_result":
                if role == "user" and block.get("tool_use_id") in pending:
                    pending.discard(block["tool_use_id"])
                    kept.append({k: v for k, v in block.items() if k in ("type", "tool_use_id", "content", "is_error")})
            elif kind == "thinking":
                kept.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": block.get("signature") or "-"})
            elif kind in ("text", "image"):
                if kind == "text" and not block.get("text"):
                    continue
                kept.append({k: v for k, v in block.items() if k in ("type", "text", "source")})
        if kept:
            meta = {"origin": "imported", "occurred_at": time} if time else {"origin": "imported"}
            events.append({"type": "message.appended", "data": {"role": role, "content": kept}, "meta": meta})
    return events


def import_session(store: Store, path: Path) -> str:
    """A new thread holding the session's messages; returns its id."""
    thread = store.create_thread(title=path.stem)
    events = events_from(path)
    for i in range(0, len(events), 500):
        store.append(thread, events[i : i + 500])
    return thread
