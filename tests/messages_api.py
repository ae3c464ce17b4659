"""A small Messages API server for tests: canned replies on 127.0.0.1, every request kept.

Tests queue replies (`reply_json`, `reply_sse`, `reply_error`, `drop_mid_stream`,
`hold_mid_stream`, `stall`) and drive it with the real `anthropic.Anthropic(base_url=server.url,
...)`; `requests` holds the exact bytes the SDK sent. Nothing of the SDK or of threadlog is replaced.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    drop_after: int | None = None  # close the connection after this many bytes of the body
    hold_after: int | None = None  # send this many bytes of the body, then wait until the server closes
    delay: float = 0.0
    # Sent chunk by chunk (chunked transfer), `pause` seconds apart, keep-alive pings every
    # `ping_every` seconds meanwhile; `endless`: pings after the last chunk, for 20 s (a client that
    # waits for ever fails its test then, instead of hanging it), or until the server closes.
    chunks: list[bytes] | None = None
    pause: float = 0.0
    ping_every: float = 0.05
    endless: bool = False


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", *, usage: dict[str, Any] | None = None,
            model: str = "claude-test-1", id: str = "msg_test") -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason, "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
    }


def sse_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events that stream `body`: text, thinking and (server) tool calls in deltas,
    any other block (a server tool's result) whole in its `content_block_start`; the stop reason,
    sequence and details in the `message_delta`, with a beta's `context_management` and
    `input_transformations` beside its delta, as the API streams them."""
    late = {k: body[k] for k in ("context_management", "input_transformations") if k in body}
    start = {**{k: v for k, v in body.items() if k not in late and k != "stop_details"},
             "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**body["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        if kind == "text":  # its citations first, each in a delta of its own, as the API streams them
            empty: dict[str, Any] = {"type": "text", "text": "", **({"citations": []} if "citations" in block else {})}
            deltas = [*({"type": "citations_delta", "citation": c} for c in block.get("citations") or []),
                      *({"type": "text_delta", "text": piece} for piece in _pieces(block["text"]))]
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        elif kind in ("tool_use", "server_tool_use"):  # its other fields (a `caller`) start it
            empty = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        else:  # a server tool's result, and any other block the API sends whole
            empty, deltas = block, []
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}))
        events.extend(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body.get("stop_sequence"),
             **({"stop_details": body["stop_details"]} if "stop_details" in body else {})}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, **late,
                                     "usage": {"output_tokens": body["usage"]["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _pieces(text: str) -> Iterator[str]:
    step = max(1, len(text) // 3)
    for i in range(0, len(text), step):
        yield text[i:i + step]


def encode_sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


PING = encode_sse([("ping", {"type": "ping"})])
ENDLESS = 20.0  # seconds of pings after an `endless` reply's last chunk


def _paced(out: Any, reply: Reply, released: threading.Event) -> None:
    """Write `reply`'s chunks as HTTP chunks, with pings between them (and after them, while
    `endless`, until `released`)."""
    def chunk(data: bytes) -> None:
        out.write(b"%x\r\n%s\r\n" % (len(data), data))
        out.flush()

    def ping_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not released.is_set() and time.monotonic() < end:
            chunk(PING)
            released.wait(min(reply.ping_every, max(0.0, end - time.monotonic())))

    assert reply.chunks is not None
    try:
        for number, data in enumerate(reply.chunks):
            if number:
                ping_for(reply.pause)
            if data:
                chunk(data)
        if reply.endless:
            ping_for(ENDLESS)
        chunk(b"")
    except (BrokenPipeError, ConnectionResetError):  # the client closed the stream
        pass


class MessagesAPI:
    """The server: `url` for the client's base_url; `requests` in arrival order."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Captured] = []
        self.counter = 0
        self.on_request: Callable[[], None] | None = None  # runs while the client waits
        self.clients: list[Any] = []  # closed with the server, so no socket outlives a test
        self.released = threading.Event()  # set when the server closes: held replies give up
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                server.requests.append(Captured(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                reply = server.replies.popleft() if server.replies else Reply(500, b'{"type":"error","error":{"type":"api_error","message":"no reply queued"}}')
                server.counter += 1
                if server.on_request is not None:
                    server.on_request()
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("request-id", f"req_test_{server.counter:03d}")
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    if reply.chunks is not None:
                        self.send_header("transfer-encoding", "chunked")
                        self.end_headers()
                        _paced(self.wfile, reply, server.released)
                        return
                    if reply.drop_after is not None:  # one chunk, then the socket closes mid-body
                        self.send_header("transfer-encoding", "chunked")
                        self.end_headers()
                        part = reply.body[:reply.drop_after]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    if reply.hold_after is not None:  # part of the body, then nothing more for now
                        self.wfile.write(reply.body[:reply.hold_after])
                        self.wfile.flush()
                        server.released.wait(60)
                        self.close_connection = True
                        return
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # Polled every 10 ms for `shutdown` (the default, 0.5 s, was half a second of every test's end).
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> MessagesAPI:
        self.thread.start()
        return self

    def client(self, retries: int = 0, timeout: float = 10.0) -> Any:
        """A real `anthropic.Anthropic` client for this server."""
        import anthropic

        made = anthropic.Anthropic(base_url=self.url, api_key="test", max_retries=retries, timeout=timeout)
        self.clients.append(made)
        return made

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        for made in self.clients:
            made.close()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- queueing replies ---------------------------------------------------------------------

    def reply_json(self, body: dict[str, Any], status: int = 200, **headers: str) -> None:
        self.replies.append(Reply(status, json.dumps(body).encode(), headers=headers))

    def reply_sse(self, body: dict[str, Any]) -> None:
        self.replies.append(Reply(200, encode_sse(sse_events(body)), "text/event-stream"))

    def reply_stream(self, raw: bytes) -> None:
        """Serve `raw`, the bytes of a recorded stream, as they are."""
        self.replies.append(Reply(200, raw, "text/event-stream"))

    def reply_error(self, status: int, kind: str, text: str, **headers: str) -> None:
        self.reply_json({"type": "error", "error": {"type": kind, "message": text}}, status, **headers)

    def drop_mid_stream(self, body: dict[str, Any]) -> None:
        """Stream `body` but close the connection halfway through its events."""
        events = sse_events(body)
        data = encode_sse(events)
        cut = len(encode_sse(events[: len(events) // 2])) + 5
        self.replies.append(Reply(200, data, "text/event-stream", drop_after=cut))

    def end_early(self, body: dict[str, Any]) -> None:
        """Stream half of `body`'s events as a complete HTTP response: no `message_stop`."""
        events = sse_events(body)
        self.replies.append(Reply(200, encode_sse(events[: len(events) // 2]), "text/event-stream"))

    def hold_mid_stream(self, body: dict[str, Any]) -> None:
        """Stream half of `body`'s events, then send nothing more until the server closes."""
        events = sse_events(body)
        data = encode_sse(events)
        self.replies.append(Reply(200, data, "text/event-stream", hold_after=len(encode_sse(events[: len(events) // 2]))))

    def ping_only(self, body: dict[str, Any], events: int = 0) -> None:
        """Stream `body`'s first `events` events, then keep-alive pings and nothing else."""
        chunks = [encode_sse([event]) for event in sse_events(body)[:events]] or [b""]
        self.replies.append(Reply(200, b"", "text/event-stream", chunks=chunks, endless=True))

    def paced(self, body: dict[str, Any], pause: float) -> None:
        """Stream `body`'s events `pause` seconds apart, keep-alive pings between them."""
        chunks = [encode_sse([event]) for event in sse_events(body)]
        self.replies.append(Reply(200, b"", "text/event-stream", chunks=chunks, pause=pause))

    def stall(self, seconds: float, body: dict[str, Any]) -> None:
        self.replies.append(Reply(200, json.dumps(body).encode(), delay=seconds))
