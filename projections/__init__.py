"""The read side of threadlog: pure, deterministic folds over a thread's logical history.

Projections read the store and never write events; the only thing they may write is the
`snapshots` cache (`save_snapshot`), which changes no answer.
"""

from .lineage import BlameEntry, Diff, DiffSide, LineageEntry, blame, diff, lineage
from .request import RequestCheck, anthropic_request, body_digest, check_request, request_body, validate_request
from .rows import Row, display_rows
from .search import SearchHit, rebuild_index, search, update_index
from .snapshots import drop as drop_snapshots
from .state import Message, ThreadState, save_snapshot, thread_state
from .transcript import transcript, write_transcript
from .usage import Usage, usage

__all__ = [
    "BlameEntry",
    "Diff",
    "DiffSide",
    "LineageEntry",
    "Message",
    "RequestCheck",
    "Row",
    "SearchHit",
    "ThreadState",
    "Usage",
    "anthropic_request",
    "blame",
    "body_digest",
    "check_request",
    "diff",
    "display_rows",
    "drop_snapshots",
    "lineage",
    "rebuild_index",
    "request_body",
    "save_snapshot",
    "search",
    "thread_state",
    "transcript",
    "update_index",
    "usage",
    "validate_request",
    "write_transcript",
]
