"""Other tools' session histories into threadlog: Claude Code and pi, once or followed live."""

from .claude_code import import_claude_code
from .lines import BadLine
from .pi import import_pi
from .plan import ImportConflict
from .summary import ImportSummary

__all__ = ["BadLine", "ImportConflict", "ImportSummary", "import_claude_code", "import_pi"]
