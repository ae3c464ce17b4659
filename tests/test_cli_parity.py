"""The README's command-line walkthrough on a fresh SQLite file and on a fresh PostgreSQL
database: every command's exit status, stdout and stderr, and what is stored afterwards
(`export --all`), must be the same on both, once what legitimately differs between two runs is
normalized (generated ids and times, the hashes that cover those times, the database's name).

Real sample data (Claude Code, pi and SWE-agent sessions from the gathered data folder beside
this checkout) is imported on both too. Most commands run in this process through click's runner; a few run as real
processes. Where the backends differ by design (search ranking), the difference is asserted
and README's "PostgreSQL" section says it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventstore.postgres import SCHEMA_VERSION as POSTGRES_SCHEMA
from eventstore.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA
from threadlog.cli import cli
from tests.backends import postgres_cluster

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"  # real sessions and trajectories, kept with the tests (their READMEs say whence)
# Where each format's sessions are, in a copy of FIXTURES (`settled_copy`).
CLAUDE_CODE = Path("claude-code")
PI = Path("pi") / "large-session-head.jsonl"
SWE_AGENT = Path("swe-agent")


def settled_copy(target: Path) -> Path:
    """The real sessions, copied with a modification time an hour old. A file changed in the
    last `LIVE_SECONDS` (ten minutes) may be one still being written, whose last response an
    import leaves for later: in a fresh clone the fixtures are that new, and the two walks,
    seconds apart, once fell either side of the moment they stopped being (one backend's
    import left three responses waiting, the other's imported them)."""
    for source in (CLAUDE_CODE, PI, SWE_AGENT):
        (target / source).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (FIXTURES / source).is_dir() else shutil.copyfile
        copy(FIXTURES / source, target / source)
    settled = time.time() - 3600
    for path in target.rglob("*"):
        os.utime(path, (settled, settled))
    return target


HASH = re.compile(r"\b(?<=tl\d:)[0-9a-f]{8,64}\b|\b[0-9a-f]{64}\b")
LAST_EVENT = re.compile(r"(?<=[0-9a-f]{64}:)[0-9a-f]{16}\b")  # a checkpoint's last part: its last event, which holds a time
EVENT_ID = re.compile(r"\b[0-9a-f]{32}\b")
TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
CHECKPOINT = re.compile(r"\btl[0-9a-z]*[:.][0-9A-Za-z_.:+/=-]{20,}")
SECONDS = re.compile(r"\b\d+(\.\d+)? ?(ms|s)\b")


@dataclass
class Walk:
    """One backend's run of the walkthrough: each command's normalized outcome, in order."""

    db: str
    work: Path
    steps: list[tuple[str, int, str, str]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def normalize(self, text: str) -> str:
        text = text.replace(self.db, "<db>").replace(str(self.work), "<work>")
        for value, as_ in sorted(self.names.items(), key=lambda item: -len(item[0])):
            text = text.replace(value, f"<{as_}>")
        for pattern, kind in ((LAST_EVENT, "hash"), (HASH, "hash"), (EVENT_ID, "id"), (CHECKPOINT, "checkpoint")):
            text = pattern.sub(lambda m, kind=kind: self._token(m.group(), kind), text)  # type: ignore[misc]
        return SECONDS.sub("<duration>", TIME.sub("<time>", text))

    def _token(self, value: str, kind: str) -> str:
        if value not in self.tokens:
            self.tokens[value] = f"<{kind}{sum(t.startswith(f'<{kind}') for t in self.tokens.values()) + 1}>"
        return self.tokens[value]

    def __call__(self, *args: str, input: str | None = None, process: bool = False, names: str = "") -> str:
        """Run `threadlog ARGS --db DB`; record and return its stdout, whose lines are the
        threads `names` (space-separated) when given."""
        command = [*args, "--db", self.db] if "--db" not in args else list(args)
        if process:
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            done = subprocess.run([sys.executable, "-m", "threadlog", *command], input=input, capture_output=True,
                                  text=True, env=env, cwd=self.work)
            code, out, err = done.returncode, done.stdout, done.stderr
        else:
            result = CliRunner().invoke(cli, command, input=input)
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                raise result.exception
            code, out, err = result.exit_code, result.stdout, result.stderr
        for value, as_ in zip(out.split(), names.split()):
            self.names[value] = as_
        self.steps.append((self.normalize(" ".join(args)), code, self.normalize(out), self.normalize(err)))
        return out

    def search(self, *args: str, ranked: bool = False) -> None:
        """`search ARGS --json`, recording the hits as a set: ranking differs by design
        (BM25 against `ts_rank`), and so do scores and where a snippet is cut. With `ranked`
        (a `--limit` below the number of matches) only how many hits there were."""
        out = self("search", *args, "--json")
        step = self.steps.pop()
        report = json.loads(out)
        hits = sorted(json.dumps({k: v for k, v in hit.items() if k not in ("score", "snippet")}, sort_keys=True)
                      for hit in report["hits"])
        shown = f"{len(hits)} hits" if ranked else self.normalize("\n".join(hits))
        self.steps.append((step[0], step[1], shown, step[3]))


def walkthrough(walk: Walk, sessions: Path) -> None:
    """README's "Command line", "Import and export", "Projections" and "Search" in order."""
    w = walk.work
    walk("init")
    walk("init", "--json")
    t = walk("new", "--title", "Trip", "--metadata", "user=ana", "--model", "claude-sonnet-4-5", names="t").strip()
    walk("append", t, "--role", "user", "--text", "Find me a train to Lyon")
    walk("emit", t, "run.started", "--data", '{"run_id": "r1"}', "--event-meta", '{"actor": "ops"}')
    walk("emit", t, "run.finished", "--data", '{"run_id": "r1", "status": "ok"}', "--json")
    walk("append", t, "--role", "assistant", "--text", "The 08:00 TGV; my key is sk-123")
    f = walk("fork", t, "--at", "2", "--metadata", "keep:user", names="f").strip()
    n = walk("fork", t, "--context", "note", "--transcript", str(w / "trip.transcript.md"), names="n").strip()
    calls = [{"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {}}]
    walk("append", t, "--role", "assistant", "--content", "-", input=json.dumps(calls))
    kids = walk("fan-out", t, "find a hotel", "check the weather", names="kid0 kid1").split()
    walk("append", kids[0], "--role", "assistant", "--text", "Hotel Ibis, 80 EUR")
    walk("report", kids[0])
    walk("report", kids[1], "--text", "no forecast", "--status", "failed", "--json")
    walk("interrupt", "raise", t, "q1", "--question", "Which train?")
    walk("interrupt", "raise", f, "q2", "--question", "Which hotel?", "--json")
    walk("interrupt", "list", t)
    walk("interrupt", "list", t, "--json")
    walk("interrupt", "resolve", t, "q1", "--answer", "the 08:00")
    walk("interrupt", "cancel", f, "q2", "--reason", "not needed")
    walk("append", "@last", "--role", "user", "--text", "And back on Sunday?")
    # Listing, with its paging options.
    walk("ls")
    walk("ls", "--all")
    walk("ls", "--json")
    walk("ls", "--all", "--json")
    walk("ls", "-n", "2")
    walk("ls", "--root", t, "--all")
    walk("ls", "--before", "6", "--all")
    walk("tree")
    walk("tree", "--json")
    walk("log", f)
    walk("log", t, "--start", "1", "--stop", "4")
    walk("log", t, "-n", "2")
    walk("log", kids[0], "--json")
    # Projections.
    walk("show", f)
    walk("show", t, "--at", "3", "--json")
    walk("show", t, "--last", "2")
    walk("rows", f)
    walk("rows", kids[0], "--json")
    walk("transcript", t)
    walk("transcript", t, "--last", "2", "--max-bytes", "2000", "-o", str(w / "t.md"))
    walk("transcript", t, "--start", "1", "--stop", "3")
    walk("blame", f)
    walk("blame", f, "--json")
    walk("diff", t, f)
    walk("diff", t, n, "--json")
    walk("snapshot", t)
    walk("show", f, "--json")
    walk("snapshot", t, "--drop")
    walk("snapshot", "--drop")
    walk("usage")
    # Search.
    walk("search", "Lyon")
    walk.search("hotel", "--thread", kids[0], "--role", "user", "-n", "5")
    walk.search("Agent", "--tool", "Agent")
    walk("search", "nothingmatches")
    walk("index", "--rebuild")
    # Verification, checkpoints, redaction.
    walk("verify")
    walk("verify", "--json", process=True)
    c = walk("checkpoint").strip()
    walk("verify", "--checkpoint", c)
    walk("append", t, "--role", "user", "--text", "One more thing")
    walk("verify", "--since", c)
    walk("verify", "--since", c, "--json")
    walk("redact", "5", "--reason", "leaked key", "--actor", "ops")
    walk("purge")
    walk("verify", "--checkpoint", c)
    walk("show", t)
    walk.search("sk-123")
    # Export and import.
    walk("export", t, "--format", "events", "-o", str(w / "t.jsonl"))
    walk("export", t, "--format", "markdown")
    walk("export", t, "--format", "anthropic")
    walk("export", f, "--format", "events")
    walk("export", "--all", "-o", str(w / "backup.jsonl"), process=True)
    walk("import", "events", "--db", str(w / "restored.db"), str(w / "backup.jsonl"))
    walk("verify", "--db", str(w / "restored.db"), "--checkpoint", c)
    walk("import", "events", str(w / "backup.jsonl"))  # into itself: adds nothing
    walk("import", "events", str(w / "t.jsonl"), "--json")
    # Real sessions other tools wrote.
    walk("import", "claude-code", str(sessions / CLAUDE_CODE))
    walk("import", "claude-code", str(sessions / CLAUDE_CODE), "--json")  # again: adds nothing
    walk("import", "pi", str(sessions / PI))
    walk("import", "swe-agent", str(sessions / SWE_AGENT), "--json")
    walk("ls", "-n", "5", process=True)
    walk("tree")
    walk("verify")
    walk.search("marshmallow", "-n", "100")
    walk.search("marshmallow", "-n", "3", ranked=True)
    walk("usage", "--json")


def refusals(walk: Walk) -> None:
    """Commands refused (each an `error:` line, exit 1 or 2) and what a write after them gets."""
    walk("interrupt", "resolve", "@last", "q1", "--answer", "again")
    walk("append", "nosuchthread", "--role", "user", "--text", "x")
    walk("redact", "5", "--reason", "again", "--actor", "ops")
    walk("redact", "99999", "--reason", "none", "--actor", "ops")
    walk("verify", "--checkpoint", "not-a-checkpoint")
    walk("log", "nosuchthread")
    walk("ls", "--before", "0")
    walk("import", "events", str(walk.work / "nothere.jsonl"))
    walk("export", "--all")  # nothing changed
    walk("append", "@last", "--role", "user", "--text", "after the refusals")


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Walk, Walk]]:
    lite_dir, pg_dir = tmp_path_factory.mktemp("sqlite"), tmp_path_factory.mktemp("postgresql")
    sessions = settled_copy(tmp_path_factory.mktemp("sessions"))  # one copy: both walks import the same paths
    cluster = postgres_cluster()
    cluster.execute("CREATE DATABASE cli_parity")
    lite = Walk(str(lite_dir / "threadlog.db"), lite_dir)
    pg = Walk(cluster.url("cli_parity"), pg_dir)
    try:
        for walk in (lite, pg):
            walkthrough(walk, sessions)
            walk("export", "--all")
            refusals(walk)
        yield lite, pg
    finally:
        cluster.execute("DROP DATABASE IF EXISTS cli_parity WITH (FORCE)")


def test_refusals_say_what_was_wrong(walks: tuple[Walk, Walk]) -> None:
    lite, _ = walks
    start = max(i for i, step in enumerate(lite.steps) if step[0] == "export --all") - 8
    for args, code, out, err in lite.steps[start:start + 8]:
        assert code in (1, 2) and out == "" and err.count("\n") >= 1 and "Traceback" not in err, args
        assert err.startswith(("error: ", "Usage: ")), err


def test_every_command_prints_the_same_and_exits_the_same_on_both_backends(walks: tuple[Walk, Walk]) -> None:
    lite, pg = (Walk(w.db, w.work, list(w.steps)) for w in walks)
    assert len(lite.steps) == len(pg.steps)
    # Each backend numbers its own schema (README "PostgreSQL"): the one deliberate difference.
    for walk, version in ((lite, SQLITE_SCHEMA), (pg, POSTGRES_SCHEMA)):
        report = {"path": "<db>", "schema_version": version, "threads": 0, "events": 0}
        assert [step[2] for step in walk.steps[:2]] == [f"<db>: schema {version}, 0 threads, 0 events\n",
                                                         json.dumps(report, indent=2) + "\n"]
    del lite.steps[:2], pg.steps[:2]
    # A refused write leaves the positions it took unused on PostgreSQL (a sequence is not
    # rolled back), where SQLite gives them to the next write (README "PostgreSQL").
    (after, code, lite_out, _), (_, _, pg_out, _) = lite.steps.pop(), pg.steps.pop()
    assert after.startswith("append @last") and code == 0
    lite_offset, lite_position = map(int, re.findall(r"\d+", lite_out))
    pg_offset, pg_position = map(int, re.findall(r"\d+", pg_out))
    assert pg_offset == lite_offset and pg_position > lite_position
    # The refusals changed nothing: `export --all` before them and after them agree.
    exports = [step for step in lite.steps if step[0] == "export --all"]
    assert len(exports) == 2 and exports[0] == exports[1]
    differ = [(a, b) for a, b in zip(lite.steps, pg.steps) if a != b]
    assert not differ, "\n\n".join(_shown(a, b) for a, b in differ)


def _shown(a: tuple[str, int, str, str], b: tuple[str, int, str, str]) -> str:
    lines = [f"$ {a[0]}  (exit {a[1]} / {b[1]})"]
    for name, x, y in (("out", a[2], b[2]), ("err", a[3], b[3])):
        lines += [f"  {name}: {line}" for line in difflib.unified_diff(x.splitlines(), y.splitlines(), "sqlite", "pg", n=0,
                                                                         lineterm="")][2:]
    return "\n".join(line[:300] for line in lines)
