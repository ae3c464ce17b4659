"""Running the viewer under uvicorn, so that Ctrl-C stops it at once, pages open or not.

An open thread page holds a live stream (`live.py`) that ends only when the browser leaves.
uvicorn's shutdown waits for every response to finish and then cancels those left, logging
an error and a traceback for each: Ctrl-C with one page open printed 40 lines. The server
here tells the streams to end first (`Viewer.stopping`); each ends on its next look at the
log, a quarter of a second later, well within the wait.
"""

from __future__ import annotations

import socket
import threading

import uvicorn
from starlette.applications import Starlette

from .viewer import Viewer


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        super().__init__(config)
        self._stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._stopping.set()
        await super().shutdown(sockets)


def run(app: Starlette, listening: socket.socket) -> None:
    """Serve `app` (made by `create_app`) on the bound socket `listening` until Ctrl-C or SIGTERM."""
    view: Viewer = app.state.viewer
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    _Server(config, view.stopping).run(sockets=[listening])
