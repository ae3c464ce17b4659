"""threadlog: an event-sourced conversation store for LLM agents.

Import everything from here: `from threadlog import Store, ...`.

Each name is loaded from its module on first use, so `import threadlog` itself loads
nothing: the `threadlog` command starts in this package (`threadlog.__main__`), and a
Ctrl-C while the store, pydantic and click load (most of a second) must land where the
command catches it. The live-turn names (`run_turn`, `rerun`, `Interrupt`, `Turn`) import
the `anthropic` SDK, which takes seconds to import and which nothing else (the CLI's other
commands, and settling an interrupt with `resolve_interrupt` or `cancel_interrupt`, included)
needs.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (10 ms) before the command can catch Ctrl-C
if TYPE_CHECKING:  # the names as a type checker sees them; run, `__getattr__` loads each from `_HOMES`
    from typing import Any

    from eventstore import (
        FORK_BOILERPLATE,
        Claimed,
        ConcurrencyError,
        Disconnected,
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
    from .importers.follow import follow_claude_code, follow_files
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
    from .live import Interrupt, Turn, rerun, run_turn
    from .retry_wait import refuse_long_waits
    from .settling import cancel_interrupt, resolve_interrupt


# The module each public name lives in (".name": a module of this package).
_HOMES = {name: module for module, names in [
    ("eventstore", ("FORK_BOILERPLATE", "Claimed", "ConcurrencyError", "Disconnected", "Event", "ForkRefused", "IntegrityError",
                    "InvalidEvent", "Locked", "OldPagesKept", "RecordedEvent", "ReportRefused", "SchemaError", "Store", "StoreError",
                    "ThreadInfo", "ThreadNotFound")),
    ("eventstore.events", ("CompactionRecorded", "InterruptCancelled", "InterruptRaised", "InterruptResolved", "MessageAppended",
                           "MetadataSet", "RunFinished", "RunStarted", "TitleSet", "TodosSet")),
    (".export", ("export_all", "export_events", "export_markdown")),
    (".importers.follow", ("follow_claude_code", "follow_files")),
    (".importers", ("BadLine", "ImportConflict", "ImportSummary", "import_claude_code", "import_event_files", "import_events",
                    "import_pi", "import_swe_agent")),
    (".note_fork", ("NoteTranscript", "fork_with_transcript", "transcripts_holding")),
    (".subagents", ("Question", "questions", "report")),
    (".note_tools", ("transcript_tools",)),
    ("projections", ("BlameEntry", "Diff", "DiffSide", "LineageEntry", "Message", "Row", "SearchHit", "ThreadState", "Usage",
                     "anthropic_request", "blame", "check_request", "diff", "display_rows", "drop_snapshots", "lineage",
                     "rebuild_index", "save_snapshot", "search", "thread_state", "transcript", "update_index", "usage",
                     "write_transcript")),
    (".live", ("Interrupt", "Turn", "rerun", "run_turn")),
    (".retry_wait", ("refuse_long_waits",)),
    (".settling", ("cancel_interrupt", "resolve_interrupt")),
] for name in names}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'threadlog' has no attribute {name!r}")
    import importlib

    # The projections first, whatever the name: `projections.state` registers the refold that
    # `Store.verify` checks every cached snapshot with (`register_refold`), and a program that
    # took only `Store` from here skipped that check.
    importlib.import_module("projections")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    globals()[name] = value  # found here from now on, as an import at the top would have put it
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
    "Disconnected",
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
    "cancel_interrupt",
    "check_request",
    "diff",
    "display_rows",
    "drop_snapshots",
    "export_all",
    "export_events",
    "export_markdown",
    "follow_claude_code",
    "follow_files",
    "import_claude_code",
    "import_event_files",
    "import_events",
    "import_pi",
    "import_swe_agent",
    "lineage",
    "rebuild_index",
    "refuse_long_waits",
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
