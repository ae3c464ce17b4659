"""Histories into threadlog: Claude Code and pi sessions and SWE-agent trajectories (once or followed live), and threadlog's own exports."""

import projections  # noqa: F401  registers the refold `Store.verify` checks cached snapshots with (`register_refold`)

from .claude_code import import_claude_code
from .events import import_event_files, import_events
from .lines import BadLine
from .pi import import_pi
from .plan import ImportConflict
from .summary import ImportSummary
from .swe_agent import import_swe_agent

__all__ = ["BadLine", "ImportConflict", "ImportSummary", "import_claude_code", "import_event_files", "import_events", "import_pi",
           "import_swe_agent"]
