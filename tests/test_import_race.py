"""Two imports of the same sessions at once (two shells, a cron job and a hand run): both
succeed, and the file holds each session once, as one import would have written it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from threadlog import Store, import_claude_code

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# A real session whose user rewound it once: a thread and a fork.
SESSION = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
THREADLOG = str(Path(sys.executable).parent / "threadlog")


def heads(db: Path) -> set[tuple[str, str, int]]:
    with Store(db, read_only=True) as store:
        return {(t.id, t.kind, t.head) for t in store.all_threads()}


def test_an_import_racing_another_of_the_same_session_succeeds(tmp_path: Path) -> None:
    alone = tmp_path / "alone.db"
    with Store(alone) as store:
        import_claude_code(store, [SESSION])
    assert {kind for _, kind, _ in heads(alone)} == {"thread", "fork"}

    db = tmp_path / "raced.db"
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)  # holds the write lock until the importer below waits on it
    holder.execute("BEGIN IMMEDIATE")
    other: list[subprocess.CompletedProcess[str]] = []

    def the_other_import_goes_first() -> None:
        # The importer below has checked what the file holds and waits to write: release the
        # lock to another process importing the same session, which writes all of it first.
        holder.execute("ROLLBACK")
        other.append(subprocess.run([THREADLOG, "--db", str(db), "import", "claude-code", str(SESSION)],
                                    capture_output=True, text=True, timeout=60))

    with Store(db, on_wait=the_other_import_goes_first) as store:
        summary = import_claude_code(store, [SESSION])
        store.verify()
    holder.close()
    assert other and other[0].returncode == 0, other
    assert heads(db) == heads(alone)
    # What each import says it added is what it wrote: the other wrote it all.
    assert summary.added == 0 and summary.events == 37
    assert "37 event(s) added of 37" in other[0].stdout
