"""The importers fed real session files with values replaced by values of other types
(`tests/fuzz_import.py`): every import succeeds, or is refused in one `error:` line naming the
file, with the database as it was; what it imported reads back. A bounded run, of a fixed seed:
`THREADLOG_FUZZ_CASES` and `THREADLOG_FUZZ_SEED` run more, or others."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fuzz_import import run


def test_fuzzed_session_files_import_or_are_refused_cleanly(tmp_path: Path) -> None:
    cases = int(os.environ.get("THREADLOG_FUZZ_CASES", "60"))
    failures = run(cases, int(os.environ.get("THREADLOG_FUZZ_SEED", "20261205")), tmp_path)
    assert not failures, "\n".join(failures[:20])
