"""Which tool wrote a file, told cheaply from how it opens: a file given to the importer of
another tool (or to `import events`) is refused naming the command that imports it, where its
first line was refused as no line of that format, or it was taken as a session of nothing."""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from typing import Any

from eventstore.restore import FORMAT as EXPORT_FORMAT

# Keys a Claude Code line carries (one of them) and no pi entry does (pi's are `id` and `parentId`).
_CLAUDE_CODE_KEYS = ("sessionId", "uuid", "leafUuid", "messageId")
# The keys of a SWE-agent trajectory's object, one of which it opens with (`json.dump` with an
# indent puts it on the second line: the first, `{`, is no JSON by itself).
_TRAJECTORY_KEYS = ("history", "trajectory", "environment", "info", "replay_config")
_FIRST_KEY = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"([A-Za-z_]+)"\s*:')

# Each tool's file as a refusal names it, and the command that imports it.
WHAT = {"pi": "a pi session's header", "claude-code": "a Claude Code session's line", "swe-agent": "a SWE-agent trajectory",
        "events": "a threadlog export's header"}
RUN = {"pi": "for a pi session, run `threadlog import pi`",
       "claude-code": "for a Claude Code session, run `threadlog import claude-code`",
       "swe-agent": "for a SWE-agent trajectory, run `threadlog import swe-agent`"}


def elsewhere(tool: str, kind: str) -> str:
    """The refusal of `tool`'s file given to the importer of `kind` (its format, as it names it)."""
    return f"{WHAT[tool]}, so not {kind}: {RUN[tool]}"


def first_line_of(record: Any) -> str | None:
    """The tool (a key of `RUN`) whose file opens with the line `record`, read as JSON; None
    for any other."""
    if not isinstance(record, dict):
        return None
    if record.get("type") == "session":  # pi's header: Claude Code writes no such line
        return "pi"
    if any(key in record for key in _CLAUDE_CODE_KEYS):
        return "claude-code"
    if isinstance(record.get("history"), list):  # a trajectory written on one line
        return "swe-agent"
    return None


def opening_of(head: bytes) -> str | None:
    """The tool whose file opens with `head` (its first bytes), when its first line is no
    JSON by itself: a SWE-agent trajectory, one JSON object written over many lines."""
    key = _FIRST_KEY.match(head)
    return "swe-agent" if key is not None and key.group(1).decode() in _TRAJECTORY_KEYS else None


def command_for(path: str) -> str | None:
    """The import command (a key of `WHAT`) for the regular file at `path`, told from how it
    opens; None for one it cannot read or tell. For a file named without its format
    (`threadlog import session.jsonl`). Opened without waiting and read only when regular: a
    pipe (or a device) would be waited on."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):  # (a NUL in the name)
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        with os.fdopen(handle, "rb", closefd=False) as file:
            first = file.readline(2**20)  # a Claude Code line holds a whole prompt
            head = first + file.read(1024)
    except OSError:
        return None
    finally:
        os.close(handle)
    try:
        record = json.loads(first.removeprefix(codecs.BOM_UTF8))
    except (ValueError, RecursionError):
        return opening_of(head)
    if isinstance(record, dict) and record.get("format") == EXPORT_FORMAT:
        return "events"
    return first_line_of(record)
