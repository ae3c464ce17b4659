"""A rich store moved from SQLite to PostgreSQL and back: the same file, the same answers.

One history (forks of forks, sub-agents, tool calls and results, interrupts, a compaction, a
redaction, and real Claude Code, pi and SWE-agent sessions imported) is written to SQLite,
exported, restored into PostgreSQL, exported from there, and restored into a second SQLite
file. A restore keeps ids, times and positions, so nothing needs normalizing: the three
exports are the same bytes, the first file's checkpoint holds on each, and every read
command prints the same thing, exits the same way and refuses alike on all three. Search
hits are compared as a set: README's "PostgreSQL" names where its hits differ (order, scores,
snippets, one hit for the pieces of a long text or for two alike documents of one event).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from threadlog import Store
from threadlog.cli import cli
from tests.backends import postgres_cluster

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"  # real sessions and trajectories, kept with the tests (their READMEs say whence)


def _run(db: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [*args, "--db", db])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout.replace(db, "<db>"), result.stderr.replace(db, "<db>")


def _history(store: Store) -> None:
    """Forks of forks, sub-agents, tool calls, interrupts, a compaction and a redaction."""
    t = store.create_thread(title="Trip", system="You plan trips.", metadata={"user": "ana"}, model="claude-sonnet-4-5")
    store.append_message(t, "user", "Find me a train to Lyon ☀")
    store.append(t, [{"type": "run.started", "data": {"run_id": "r1"}}])
    store.append_message(t, "assistant", [{"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "tu1", "name": "trains", "input": {"to": "Lyon"}}])
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu1", "content": "08:00, 09:00"}])
    store.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "ask-1", "question": "Which train?"}},
                     {"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
    early = store.fork(t, 2, title="Marseille", metadata={"keep": ["user"]})
    store.append_message(early, "user", "Marseille instead, é 東京")
    deeper = store.fork(early, 3, title="deeper")
    store.append_message(deeper, "assistant", "Marseille at 10:00; my key is sk-999")
    deepest = store.fork(deeper, 4, title="deepest")
    store.append(deepest, [{"type": "compaction.recorded", "data": {"summary": "They chose a train south.",
                                                                     "through_offset": 3}}])
    store.append_message(deepest, "user", "After the summary: and a hotel?")
    store.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "ask-1", "answer": "08:00"}}])
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "tu2", "name": "Agent", "input": {"prompt": "split"}}])
    kids = store.fan_out(t, ["Find a hotel.", "Check the weather."])
    store.append_message(kids[0], "assistant", "Hotel Part-Dieu, 92 EUR")
    store.append(kids[1], [{"type": "interrupt.raised", "data": {"interrupt_id": "ask-2", "question": "Which day?"}}])
    secret = next(e for e in store.read(deeper) if "sk-999" in json.dumps(e.data))
    store.redact(secret.position, reason="leaked key", actor="ops")


def _sessions(target: Path) -> Path:
    """The real sessions, settled (an hour old: a file changed in the last ten minutes may be
    one still being written, whose last response an import leaves for later)."""
    for name in ("claude-code", "pi", "swe-agent"):
        shutil.copytree(FIXTURES / name, target / name)
    settled = time.time() - 3600
    for path in target.rglob("*"):
        os.utime(path, (settled, settled))
    return target


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """The work folder and the three databases: the SQLite original, its PostgreSQL restore,
    and the SQLite restore of that."""
    work = tmp_path_factory.mktemp("round-trip")
    sessions = _sessions(tmp_path_factory.mktemp("sessions"))
    lite, back = str(work / "a.db"), str(work / "b.db")
    with Store(lite) as store:
        _history(store)
    for kind, where in (("claude-code", "claude-code"), ("pi", "pi"), ("swe-agent", "swe-agent")):
        code, _, err = _run(lite, "import", kind, str(sessions / where))
        assert code == 0, err
    cluster = postgres_cluster()
    cluster.execute("CREATE DATABASE round_trip")
    try:
        pg = cluster.url("round_trip")
        for source, target, name in ((lite, pg, "1.jsonl"), (pg, back, "2.jsonl")):
            assert _run(source, "export", "--all", "-o", str(work / name))[0] == 0
            code, out, err = _run(target, "import", "events", str(work / name))
            assert code == 0 and "0 already present" in out, err
        assert _run(back, "export", "--all", "-o", str(work / "3.jsonl"))[0] == 0
        yield work, [lite, pg, back]
    finally:
        cluster.execute("DROP DATABASE IF EXISTS round_trip WITH (FORCE)")


def test_the_exports_are_the_same_bytes_and_a_checkpoint_holds_on_each(three: tuple[Path, list[str]]) -> None:
    work, dbs = three
    first = (work / "1.jsonl").read_bytes()
    assert (work / "2.jsonl").read_bytes() == first and (work / "3.jsonl").read_bytes() == first
    code, checkpoint, _ = _run(dbs[0], "checkpoint")
    assert code == 0
    reports = [_run(db, "verify", "--checkpoint", checkpoint.strip(), "--json") for db in dbs]
    assert reports[0][0] == 0 and '"redacted": 1' in reports[0][1], reports[0]
    assert reports[1] == reports[0] and reports[2] == reports[0]


def _commands(threads: list[str]) -> Iterator[list[str]]:
    yield from (["ls", "--all", "--json", "-n", "100000"], ["ls"], ["tree"], ["tree", "--json"], ["verify", "--json"],
                ["log", "nosuchthread"], ["show", "nosuchthread"], ["redact", "99999", "--reason", "x", "--actor", "y"])
    for thread in threads:
        yield from (["show", thread], ["show", thread, "--json"], ["rows", thread], ["rows", thread, "--json"],
                    ["log", thread], ["log", thread, "--json"], ["transcript", thread], ["blame", thread, "--json"],
                    ["usage", thread, "--json"], ["request", thread], ["request", thread, "--model", "claude-sonnet-4-5"],
                    ["interrupt", "list", thread, "--json"], ["diff", thread, threads[-1], "--json"],
                    ["export", thread, "--format", "markdown"], ["export", thread, "--format", "events"])


def test_every_read_command_prints_the_same_on_all_three(three: tuple[Path, list[str]]) -> None:
    _, dbs = three
    code, listing, _ = _run(dbs[0], "ls", "--all", "--json", "-n", "100000")
    threads = [thread["id"] for thread in json.loads(listing)]
    assert code == 0 and len(threads) >= 10
    differ = []
    for command in _commands(threads):
        outcomes = [_run(db, *command) for db in dbs]
        if outcomes[1] != outcomes[0] or outcomes[2] != outcomes[0]:
            differ.append((command, outcomes))
    assert not differ, "\n".join(f"{command}: {outcomes}"[:600] for command, outcomes in differ)


@pytest.mark.parametrize("query", ["train", "Lyon", "marshmallow", "error", "def", "summary", "sk-999", "hotel"])
def test_search_finds_the_same_hits_on_all_three(three: tuple[Path, list[str]], query: str) -> None:
    _, dbs = three
    found = []
    for db in dbs:
        code, out, err = _run(db, "search", query, "--json", "-n", "100000")
        assert code == 0, err
        found.append({json.dumps({k: v for k, v in hit.items() if k not in ("score", "snippet")}, sort_keys=True)
                      for hit in json.loads(out)["hits"]})
    assert found[1] == found[0] and found[2] == found[0]
