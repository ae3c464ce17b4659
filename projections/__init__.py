"""The read side of threadlog: pure, deterministic folds over a thread's logical history.

Projections read the store and never write events; the only thing they may write is the
`snapshots` cache (`save_snapshot`), which changes no answer.
"""

from .lineage import BlameEntry, Diff, DiffSide, LineageEntry, blame, diff, lineage
from .rows import Row, display_rows
from .snapshots import drop as drop_snapshots
from .state import Message, ThreadState, save_snapshot, thread_state
from .transcript import transcript, write_transcript

__all__ = [
    "BlameEntry",
    "Diff",
    "DiffSide",
    "LineageEntry",
    "Message",
    "Row",
    "ThreadState",
    "blame",
    "diff",
    "display_rows",
    "drop_snapshots",
    "lineage",
    "save_snapshot",
    "thread_state",
    "transcript",
    "write_transcript",
]
