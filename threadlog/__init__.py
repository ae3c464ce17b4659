"""threadlog: an event-sourced conversation store for LLM agents.

Import everything from here: `from threadlog import Store, ...`.

The live-turn names (`run_turn`, `rerun`, `resolve_interrupt`, `Interrupt`, `Turn`) are
loaded on first use: they import the `anthropic` SDK, which takes seconds to import and
which nothing else (the CLI's other commands included) needs.
"""

from typing import TYPE_CHECKING, Any

from eventstore import (
    FORK_BOILERPLATE,
    Claimed,
    ConcurrencyError,
    Event,
    ForkRefused,
    IntegrityError,
    InvalidEvent,
    Locked,
    OldPagesKept,
    RecordedEvent,
    ReportRefused,
    SchemaError,
    Store,
    StoreError,
    ThreadInfo,
    ThreadNotFound,
)
from eventstore.events import (
    CompactionRecorded,
    InterruptCancelled,
    InterruptRaised,
    InterruptResolved,
    MessageAppended,
    MetadataSet,
    RunFinished,
    RunStarted,
    TitleSet,
    TodosSet,
)
from .export import export_all, export_events, export_markdown
from .importers import (BadLine, ImportConflict, ImportSummary, import_claude_code, import_event_files, import_events, import_pi,
                        import_swe_agent)
from .note_fork import NoteTranscript, fork_with_transcript, transcripts_holding
from .subagents import Question, questions, report
from .note_tools import transcript_tools

from projections import (
    BlameEntry,
    Diff,
    DiffSide,
    LineageEntry,
    Message,
    Row,
    SearchHit,
    ThreadState,
    Usage,
    anthropic_request,
    blame,
    check_request,
    diff,
    display_rows,
    drop_snapshots,
    lineage,
    rebuild_index,
    save_snapshot,
    search,
    thread_state,
    transcript,
    update_index,
    usage,
    write_transcript,
)

if TYPE_CHECKING:
    from .live import Interrupt, Turn, rerun, resolve_interrupt, run_turn

_LIVE = ("Interrupt", "Turn", "rerun", "resolve_interrupt", "run_turn")


def __getattr__(name: str) -> Any:
    if name in _LIVE:
        from . import live

        return getattr(live, name)
    raise AttributeError(f"module 'threadlog' has no attribute {name!r}")


__all__ = [
    "BadLine",
    "ImportConflict",
    "ImportSummary",
    "BlameEntry",
    "Claimed",
    "CompactionRecorded",
    "ConcurrencyError",
    "Diff",
    "DiffSide",
    "Event",
    "FORK_BOILERPLATE",
    "fork_with_transcript",
    "transcripts_holding",
    "NoteTranscript",
    "ForkRefused",
    "IntegrityError",
    "Interrupt",
    "InterruptCancelled",
    "InterruptRaised",
    "InterruptResolved",
    "InvalidEvent",
    "Locked",
    "LineageEntry",
    "Message",
    "MessageAppended",
    "MetadataSet",
    "OldPagesKept",
    "Question",
    "questions",
    "RecordedEvent",
    "report",
    "ReportRefused",
    "Row",
    "SearchHit",
    "RunFinished",
    "RunStarted",
    "SchemaError",
    "Store",
    "StoreError",
    "ThreadInfo",
    "ThreadNotFound",
    "ThreadState",
    "TitleSet",
    "TodosSet",
    "Turn",
    "Usage",
    "anthropic_request",
    "blame",
    "check_request",
    "diff",
    "display_rows",
    "drop_snapshots",
    "export_all",
    "export_events",
    "export_markdown",
    "import_claude_code",
    "import_event_files",
    "import_events",
    "import_pi",
    "import_swe_agent",
    "lineage",
    "rebuild_index",
    "rerun",
    "resolve_interrupt",
    "run_turn",
    "save_snapshot",
    "search",
    "thread_state",
    "transcript",
    "transcript_tools",
    "update_index",
    "usage",
    "write_transcript",
]
