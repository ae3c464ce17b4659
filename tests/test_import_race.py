"""Two imports of the same sessions at once (two shells, a cron job and a hand run): both
succeed, and the file holds each session once, as one import would have written it."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from threadlog import Store, import_claude_code, import_swe_agent
from threadlog.importers.summary import ImportSummary

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# A real session whose user rewound it once: a thread and a fork.
SESSION = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
THREADLOG = str(Path(sys.executable).parent / "threadlog")


def heads(db: Path) -> set[tuple[str, str, int]]:
    with Store(db, read_only=True) as store:
        return {(t.id, t.kind, t.head) for t in store.all_threads()}


def _raced(db: Path, command: list[str], run: Callable[[Store], ImportSummary]
           ) -> tuple[ImportSummary, list[subprocess.CompletedProcess[str]]]:
    """`run` on a new `db` while another process runs `command`: `run` has checked what the
    sources hold and waits for the write lock (held here until then), which is released to the
    other process, which writes it all first. What `run` returned, and the other's result."""
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)  # holds the write lock until the importer below waits on it
    holder.execute("BEGIN IMMEDIATE")
    other: list[subprocess.CompletedProcess[str]] = []

    def the_other_import_goes_first() -> None:
        holder.execute("ROLLBACK")
        other.append(subprocess.run(command, capture_output=True, text=True, timeout=120))

    with Store(db, on_wait=the_other_import_goes_first) as store:
        summary = run(store)
        store.verify()
    holder.close()
    assert other and other[0].returncode == 0, other
    return summary, other


def test_an_import_racing_another_of_the_same_session_succeeds(tmp_path: Path) -> None:
    alone = tmp_path / "alone.db"
    with Store(alone) as store:
        import_claude_code(store, [SESSION])
    assert {kind for _, kind, _ in heads(alone)} == {"thread", "fork"}

    db = tmp_path / "raced.db"
    summary, other = _raced(db, [THREADLOG, "--db", str(db), "import", "claude-code", str(SESSION)],
                            lambda store: import_claude_code(store, [SESSION]))
    assert heads(db) == heads(alone)
    # What each import says it added is what it wrote: the other wrote it all.
    assert summary.added == 0 and summary.events == 37
    assert "37 event(s) added of 37" in other[0].stdout


TRAJECTORIES = FIXTURES / "swe-agent"


def events(db: Path) -> list[str]:
    """Every stored event's id, in no particular order (repeats kept: each must be there once)."""
    with Store(db, read_only=True) as store:
        return [event.event_id for thread in store.all_threads() for event in store.read(thread.id)]


def test_two_imports_of_one_directory_of_trajectories_at_once_write_each_event_once(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for n in range(3):
        for path in TRAJECTORIES.glob("*.traj"):
            shutil.copy(path, runs / f"{path.stem}-{n}.traj")
    alone = tmp_path / "alone.db"
    with Store(alone) as store:
        total = import_swe_agent(store, [runs]).events
    assert len(heads(alone)) == 9 and len(events(alone)) == total

    # One import has checked every file and waits to write while the other writes them all.
    db = tmp_path / "raced.db"
    summary, other = _raced(db, [sys.executable, "-m", "threadlog", "--db", str(db), "import", "swe-agent", str(runs)],
                            lambda store: import_swe_agent(store, [runs]))
    assert f"{total} event(s) added of {total}" in other[0].stdout
    assert (summary.added, summary.events) == (0, total)
    assert heads(db) == heads(alone) and sorted(events(db)) == sorted(events(alone))

    # Two processes started at once, into a file neither has made yet: both succeed, and
    # what they say they added is each event once.
    for attempt in range(3):
        db = tmp_path / f"together{attempt}.db"
        command = [sys.executable, "-m", "threadlog", "--db", str(db), "import", "swe-agent", "--json", str(runs)]
        procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [proc.communicate(timeout=120) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], results
        said = [json.loads(out) for out, _ in results]
        assert sum(s["added"] for s in said) == total and all(s["events"] == total for s in said)
        assert heads(db) == heads(alone) and sorted(events(db)) == sorted(events(alone))
