"""The Anthropic side: building a request from a long thread, and recording a live turn.

`anthropic_request` of a 1,000-message thread (text, tool calls and results, with a system
prompt and tools) is compared with `thread_state` of the same thread with its messages
viewed: the request is that view plus the API-validity pass and the breakpoints.

Recording a turn is what `run_turn` writes around one API call without tools: one append of
[run.started, user message] and one of [assistant message with its request digest,
run.finished]. It is compared with one round trip of the real `anthropic` client to a local
server answering a canned message (no network), and judged against its 1 ms budget.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from threadlog import Store, anthropic_request, thread_state

from .timing import Measure, compare, interleave

GROUP = "live"

# (messages in the long thread, rounds, turns recorded per sample) per mode
SIZES = {"smoke": (100, 3, 5), "quick": (1_000, 15, 50), "full": (1_000, 31, 100)}

REPLY = json.dumps({
    "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-bench", "stop_reason": "end_turn",
    "stop_sequence": None, "content": [{"type": "text", "text": "The 08:04 reaches Lyon at 10:02."}],
    "usage": {"input_tokens": 1200, "output_tokens": 12, "cache_read_input_tokens": 1100, "cache_creation_input_tokens": 0},
}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("request-id", "req_bench")
        self.send_header("content-length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)


def long_thread(store: Store, messages: int) -> str:
    """A thread of `messages` messages: user questions, assistant tool calls, results, answers."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools = [{"name": "timetable", "description": "Train times", "input_schema": schema}]
    thread = store.create_thread(system="You plan train trips. " * 20, model="claude-bench", tools=tools)
    batch: list[dict[str, Any]] = []
    for i in range(messages):
        step = i % 4
        if step == 0:
            data: dict[str, Any] = {"role": "user", "content": f"[{i}] Which train reaches Lyon before ten? " * 3}
        elif step == 1:
            call = {"type": "tool_use", "id": f"tu_{i}", "name": "timetable", "input": {"city": "Lyon"}}
            data = {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, call]}
        elif step == 2:
            answer = {"type": "tool_result", "tool_use_id": f"tu_{i - 1}", "content": "08:04, 08:58, 09:30 " * 5}
            data = {"role": "user", "content": [answer]}
        else:
            data = {"role": "assistant", "content": f"[{i}] The 08:04 reaches Lyon Part-Dieu at 10:02. " * 3}
        batch.append({"type": "message.appended", "data": data})
    store.append(thread, batch)
    return thread


def _timer(fn: Callable[[], Any], count: int = 1) -> Callable[[], float]:
    def sample() -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return (time.perf_counter() - start) / count

    return sample


def _record(store: Store, thread: str) -> None:
    """The events `run_turn` appends around one answer without tools."""
    run_id = secrets.token_hex(8)
    store.append(thread, [{"type": "run.started", "data": {"run_id": run_id}},
                          {"type": "message.appended", "data": {"role": "user", "content": "And back?"}}])
    request = {"id": "req_bench", "digest": "sha256:" + "0" * 64, "model": "claude-bench", "max_tokens": 4096, "stream": False}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "The 18:04."}], "message_id": "msg_bench",
              "model": "claude-bench", "stop_reason": "end_turn",
              "usage": {"input_tokens": 1200, "output_tokens": 12, "cache_read_input_tokens": 1100, "cache_creation_input_tokens": 0}}
    store.append(thread, [{"type": "message.appended", "data": answer, "meta": {"request": request}},
                          {"type": "run.finished", "data": {"run_id": run_id, "status": "ok"}}])


def run(mode: str, workdir: Path) -> list[Measure]:
    count, rounds, turns = SIZES[mode]
    store = Store(workdir / "live.db")
    thread = long_thread(store, count)
    samples = interleave({
        "request": _timer(lambda: anthropic_request(store, thread)),
        "state": _timer(lambda: len(thread_state(store, thread, use_snapshots=False).messages)),
    }, rounds)
    out = [compare(GROUP, f"anthropic_request of {count:,} messages", samples, "request", "state",
                   label="thread_state, messages viewed", kind="cost", target="request")]

    import anthropic  # imported here: seconds, and only this group needs it

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.server_port}", api_key="bench", max_retries=0)
        turn = store.create_thread(model="claude-bench")
        kwargs: dict[str, Any] = {"max_tokens": 64, "model": "claude-bench", "messages": [{"role": "user", "content": "Train to Lyon?"}]}
        samples = interleave({
            "record": _timer(lambda: _record(store, turn), turns),
            "round trip": _timer(lambda: client.messages.with_raw_response.create(**kwargs).parse(), turns),
        }, rounds)
        out.append(compare(GROUP, "recording a turn (2 appends)", samples, "record", "round trip",
                           label="local API round trip (anthropic client)", kind="cost"))
        budget = Measure(GROUP, "recording a turn, against its budget", out[-1].value, "s", "1 ms budget", 0.001, "cost",
                         out[-1].samples, {"target": "turn_record"})
        out.append(budget)
    finally:
        server.shutdown()
        server.server_close()
    store.close()
    return out
