"""Following pi sessions and SWE-agent trajectories while they are written (`import pi --follow`,
`import swe-agent --follow`): a real follower process, real session files (tests/fixtures)
written over time, and the database compared with a one-shot import of what the file held."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import ImportSummary, Store, StoreError, follow_files, import_pi, import_swe_agent
from threadlog.cli import cli
from threadlog.importers.follow import RACES
from tests.backends import file_dump, postgres_url
from tests.procs import bound_by_file_modes, ctrl_c, interruptible

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # real sessions and trajectories (their READMEs say whence)
PI_SESSION = FIXTURES / "pi" / "large-session-head.jsonl"
TRAJECTORY = FIXTURES / "swe-agent" / "marshmallow-code__marshmallow-1867.traj"

Held = list[tuple[str, int, str, str, str]]


def _events(store: Store) -> Held:
    """Every event `store` holds, by thread and offset (a follower writes the threads of a
    session in another order than one import does), with its data and meta."""
    return sorted((e.stream_id, e.offset, e.event_id, e.type, json.dumps([e.data, e.meta], sort_keys=True))
                  for e in store.read_all())


def _held(db: str | Path) -> Held:
    """What the follower's database holds (nothing while it has yet to make the file one)."""
    try:
        with Store(db, read_only=True) as store:
            return _events(store)
    except StoreError:
        return []


def _one_shot(importer: Callable[..., Any], path: Path) -> Held:
    """What a one-shot import of `path` as it is now holds."""
    store = Store(":memory:")
    importer(store, [path])
    return _events(store)


def _caught_up(db: str | Path, expected: Held, timeout: float = 30.0) -> Held:
    """What the follower holds once it holds `expected`, or when `timeout` runs out."""
    deadline = time.monotonic() + timeout
    held = _held(db)
    while held != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        held = _held(db)
    return held


@contextmanager
def _follower(tool: str, db: str | Path, directory: Path, out: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """`threadlog import TOOL --follow --interval 0.05 DIRECTORY`, stopped with Ctrl-C on the
    way out; what it printed is left in `out`."""
    proc = interruptible([sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, "--follow", "--interval", "0.05",
                          str(directory)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        out["stdout"], out["stderr"] = ctrl_c(proc)
        out["returncode"] = str(proc.returncode)


def _stopped_cleanly(out: dict[str, str], total: int) -> None:
    """The follower stopped at Ctrl-C as `import claude-code --follow` does (exit 0, `stopped`),
    refused nothing, and reported each poll that added events: `total` in all."""
    assert out["returncode"] == "0" and out["stderr"].splitlines()[-1:] == [f"stopped: {total} event(s) imported in all"], out["stderr"]
    assert "refused" not in out["stderr"] and "Traceback" not in out["stderr"], out["stderr"]
    reported = [line for line in out["stdout"].splitlines() if line.startswith("+")]
    assert reported and sum(int(line[1:].split(" ", 1)[0]) for line in reported) == total, out["stdout"]


def test_following_a_pi_session_as_pi_appends_to_it_ends_as_one_import(tmp_path: Path) -> None:
    """pi appends an entry a line at a time: each poll adds what the new lines hold, a
    half-written last line (here left half-written for a dozen polls) is never imported in
    part nor refused, and the database ends holding what one import of the finished file holds.
    The directory holds no session when the follower starts: it is waited on, not refused."""
    lines = PI_SESSION.read_bytes().splitlines(keepends=True)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    live, db, out = sessions / PI_SESSION.name, tmp_path / "f.db", {}
    with _follower("pi", db, sessions, out) as proc:
        time.sleep(0.5)  # ten polls of an empty directory
        assert proc.poll() is None
        done = 0
        with live.open("ab") as writer:
            for cut in [1, 2, 9, len(lines) // 4, len(lines) // 2, len(lines) * 3 // 4, len(lines) - 1]:
                half = lines[cut][:len(lines[cut]) // 2]
                writer.write(b"".join(lines[done:cut]) + half)
                writer.flush()
                expected = _one_shot(import_pi, live)  # the half-written line is left out of it too
                assert _caught_up(db, expected) == expected, f"after line {cut}"
                time.sleep(0.6)  # a dozen polls with the half line there
                assert _held(db) == expected, f"line {cut + 1} half-written"
                writer.write(lines[cut][len(half):])
                done = cut + 1
            writer.write(b"".join(lines[done:]))
        final = _one_shot(import_pi, live)
        assert _caught_up(db, final) == final
    assert len(final) > 70  # the whole session, its forks and failed turn
    _stopped_cleanly(out, len(final))


def _rewrite(path: Path, text: bytes, pause: float, then: Callable[[], None]) -> None:
    """Write `text` over `path` in place as SWE-agent does (truncate, then write), stopping
    half-way for `pause` seconds, during which `then()` runs."""
    with path.open("wb") as writer:
        writer.write(text[:len(text) // 2])
        writer.flush()
        time.sleep(pause)
        then()
        writer.write(text[len(text) // 2:])


def test_following_a_swe_agent_trajectory_as_swe_agent_rewrites_it_ends_as_one_import(tmp_path: Path) -> None:
    """SWE-agent writes the whole trajectory again after each step, in place: each poll adds
    the new entries of its `history`, a file cut short as it is rewritten (here for a dozen
    polls) is never imported in part nor refused, and the database ends holding what one import
    of the finished trajectory holds, its `exit_status` (written as the run ends) included."""
    trajectory = json.loads(TRAJECTORY.read_text(encoding="utf-8"))
    history, info = trajectory["history"], trajectory["info"]
    runs = tmp_path / "runs"
    runs.mkdir()
    live, db, out = runs / TRAJECTORY.name, tmp_path / "f.db", {}
    steps = [*range(2, len(history), 5), len(history)]
    with _follower("swe-agent", db, runs, out) as proc:
        time.sleep(0.5)
        assert proc.poll() is None
        expected: Held = []
        for step in steps:
            last = step == len(history)
            text = json.dumps({**trajectory, "history": history[:step], "info": info if last else {}}, indent=2).encode()

            def cut_short(before: Held = expected, step: int = step) -> None:
                assert _held(db) == before, f"step {step}: the trajectory cut short was imported"

            _rewrite(live, text, 0.6, cut_short)
            expected = _one_shot(import_swe_agent, live)
            assert _caught_up(db, expected) == expected, f"step {step}"
        assert any(event[3] == "metadata.set" and '"exit_status": "submitted"' in event[4] for event in expected)
    _stopped_cleanly(out, len(expected))


def test_a_refused_trajectory_is_reported_once_and_read_again_when_it_changes(tmp_path: Path) -> None:
    """A trajectory the follower cannot import (not JSON, and quiet too long to be one being
    written) is passed to `on_refused` once, however many polls find it so, while the one beside
    it is imported; fixed, it is imported at the next poll."""
    runs = tmp_path / "runs"
    runs.mkdir()
    good, bad = runs / "good.traj", runs / "bad.traj"
    good.write_text(json.dumps({"history": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]}))
    bad.write_text('{"history": [nope')
    os.utime(bad, (time.time() - 3600, time.time() - 3600))  # an hour old: a run killed while it wrote
    refused: list[tuple[Any, str]] = []
    polls = iter(range(12))

    def stop() -> bool:
        n = next(polls, None)
        if n == 6:
            bad.write_text(json.dumps({"history": [{"role": "user", "content": "fixed"}]}))
        return n is None

    store = Store(":memory:")
    follow_files(store, "swe-agent", [runs], interval=0.01, settle=3600, stop=stop,
                     on_refused=lambda path, error: refused.append((path, str(error))))
    assert [(path, why.split(": ", 1)[0]) for path, why in refused] == [(bad, f"{bad}:1")], refused  # named at its line
    expected = Store(":memory:")
    import_swe_agent(expected, [good, bad])
    assert _events(store) == _events(expected)


@pytest.mark.parametrize("tool", ["pi", "swe-agent"])
def test_follow_and_interval_are_offered_and_checked(tmp_path: Path, tool: str) -> None:
    """`--follow` and `--interval` are in the command's help, as for claude-code; an interval
    under 0.05 seconds (or not a number) is a usage error naming it, with no database made."""
    shown = CliRunner().invoke(cli, ["import", tool, "--help"])
    assert shown.exit_code == 0 and "--follow" in shown.output and "--interval SECONDS" in shown.output, shown.output
    assert "Keep running and mirror the" in shown.output and "(Ctrl-C stops)" in shown.output
    db = tmp_path / "t.db"
    for interval in ("0.01", "nan", "soon"):
        refused = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(tmp_path), "--follow", "--interval", interval])
        assert refused.exit_code == 2 and "--interval" in refused.output, refused.output
    assert not db.exists()


@pytest.mark.parametrize("tool", ["claude-code", "pi", "swe-agent"])
def test_an_interval_without_follow_is_refused_before_the_database_is_made(tmp_path: Path, tool: str) -> None:
    """An import run once took `--interval 5` without a word, as if it would poll."""
    db = tmp_path / "t.db"
    refused = CliRunner().invoke(cli, ["--db", str(db), "import", tool, str(tmp_path), "--interval", "5"])
    assert refused.exit_code == 2 and "--interval sets how often --follow polls: give --follow too" in refused.output
    assert not db.exists()


def test_a_pi_session_file_created_empty_waits_for_its_header(tmp_path: Path) -> None:
    """pi creates a session file, then writes its header line: the follower read the empty file
    between the two and refused it ("a pi session file starts with a session header line").
    Empty and just changed, it waits as a half-written header does; its lines are then imported."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    live = sessions / "session.jsonl"
    live.touch()
    header = {"type": "session", "id": "s1", "timestamp": "2025-12-08T22:41:05.306Z", "cwd": "/w"}
    asked = {"type": "message", "timestamp": "2025-12-08T22:41:06.306Z",
             "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}}
    refused: list[str] = []
    polls = iter(range(12))

    def stop() -> bool:
        n = next(polls, None)
        if n == 6:
            live.write_text("".join(json.dumps(line) + "\n" for line in (header, asked)))
        return n is None

    store = Store(":memory:")
    follow_files(store, "pi", [sessions], interval=0.01, stop=stop, on_refused=lambda path, error: refused.append(str(error)))
    assert refused == []
    assert _events(store) == _one_shot(import_pi, live) != []


# Followers under the conditions they meet where they run: two at once, a directory removed or
# locked, a trajectory replaced, a service manager's SIGTERM. Real processes, fixture files.
TRAJECTORIES = sorted((FIXTURES / "swe-agent").glob("*.traj"))
PI_HEAD = FIXTURES / "pi" / "large-session-head.jsonl"
CC_SESSIONS = sorted((FIXTURES / "claude-code").glob("-*/*.jsonl"))
# The line Claude Code writes as a turn ends: what the session held before it is complete.
_TURN_OVER = {"type": "system", "subtype": "turn_duration", "durationMs": 1000, "parentUuid": None}


def _follow_command(tool: str, db: str | Path, directory: Path, interval: str = "0.05") -> list[str]:
    return [sys.executable, "-m", "threadlog", "--db", str(db), "import", tool, "--follow", "--interval", interval, str(directory)]


def _write_steps(tool: str, directory: Path) -> None:
    """Write `tool`'s sessions into `directory` as the tool does, a few at a time: SWE-agent
    rewrites each trajectory whole after each step, pi and Claude Code append line by line."""
    if tool == "swe-agent":
        for source in TRAJECTORIES:
            trajectory = json.loads(source.read_text(encoding="utf-8"))
            history = trajectory["history"]
            for step in [n for n in range(1, len(history)) if history[n]["role"] == "assistant"][::2]:
                (directory / source.name).write_text(json.dumps({**trajectory, "history": history[:step], "info": {}}))
                time.sleep(0.02)
            (directory / source.name).write_text(json.dumps(trajectory))
        return
    if tool == "pi":
        lines = PI_HEAD.read_bytes().splitlines(keepends=True)
        header = json.loads(lines[0])
        sessions = [(f"s{n}.jsonl", [json.dumps({**header, "id": f"session-{n}"}).encode() + b"\n", *lines[1:]]) for n in range(3)]
    else:
        sessions = [(f"{source.parent.name}/{source.name}",
                     [*source.read_bytes().splitlines(keepends=True), json.dumps({**_TURN_OVER, "uuid": f"over-{source.stem}"})
                      .encode() + b"\n"]) for source in CC_SESSIONS]
    for name, content in sessions:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        with (directory / name).open("ab") as writer:
            for chunk in _writes(content):
                writer.write(chunk)
                writer.flush()
                time.sleep(0.005)


def _writes(lines: list[bytes], size: int = 8) -> list[bytes]:
    """`lines` in writes of about `size` lines, none ending between two children of one entry.
    A follower that looks between a rewind's branches keeps the first it saw as the thread's
    main line, since it is stored (tests/test_import.py, `test_rewind_after_import_becomes_a_fork`),
    where one import of the whole file follows the latest branch: the database would end as one
    import of the files or not by when the follower looked (it did, about once in fifteen runs,
    on a Claude Code session with three slash commands answered from one message)."""
    first_child: dict[str, int] = {}
    held: set[int] = set()  # the cuts that would end a write between two siblings
    for i, line in enumerate(lines):
        entry = json.loads(line)
        parent = entry.get("parentUuid") or entry.get("parentId")
        if isinstance(parent, str):
            held.update(range(first_child.setdefault(parent, i) + 1, i + 1))
    writes, start = [], 0
    for cut in range(1, len(lines) + 1):
        if cut == len(lines) or (cut - start >= size and cut not in held):
            writes.append(b"".join(lines[start:cut]))
            start = cut
    return writes


def _one_shot_of(tool: str, directory: Path) -> Held:
    from threadlog import import_claude_code
    importer = {"claude-code": import_claude_code, "pi": import_pi, "swe-agent": import_swe_agent}[tool]
    return _one_shot(importer, directory)


def _verified(db: str | Path) -> None:
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), "verify"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout + done.stderr


def _reported(stdout: str) -> int:
    """The events a follower's progress lines (`+N event(s) (M file(s))`) say it added."""
    return sum(int(line[1:].split(" ", 1)[0]) for line in stdout.splitlines() if line.startswith("+"))


def _database(kind: str, tmp_path: Path) -> str:
    """Where a follower test's store is: a SQLite file, or a schema of its own on the
    throwaway PostgreSQL cluster (skipped without one)."""
    return str(tmp_path / "f.db") if kind == "sqlite" else postgres_url()


def _dump(db: str) -> list[str]:
    """Every row of the store at `db`, as text: equal dumps, an unchanged database."""
    if db.startswith("postgresql://"):
        from eventstore.postgres import PostgresBackend

        backend = PostgresBackend(db, read_only=True)
        try:
            return backend.dump()
        finally:
            backend.close()
    return file_dump(Path(db))


def _claimants(db: str, tool: str) -> set[int]:
    """The process ids that the claim of a follower of `tool` on `db` names, as a refusal reads
    them: the one in the lock file beside a SQLite file (kept there once its process has
    ended, until the next follower's claim), those in the names of the claims' connections
    on PostgreSQL (gone with them)."""
    if not db.startswith("postgresql://"):
        with suppress(FileNotFoundError):
            text = Path(f"{db}-follow-{tool}.lock").read_text().strip()
            return {int(text)} if text.isdigit() else set()
        return set()
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        names = conn.execute("SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
                             (f"threadlog (pid %) claim follow-{tool}",)).fetchall()
    return {int(str(name).split("(pid ", 1)[1].split(")", 1)[0]) for name, in names}


def _claimed(db: str, tool: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> bool:
    """Whether the follower `proc` holds the claim of a follower of `tool` on `db`, waiting for
    it up to `timeout` while it runs."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if proc.pid in _claimants(db, tool):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return False


def _let_go(db: str, tool: str, proc: subprocess.Popen[str], timeout: float = 10.0) -> bool:
    """Whether the claim of `proc`, ended, is let go of, waiting up to `timeout`: on SQLite the
    lock went with the process's files as it ended; a PostgreSQL server lets go once it has
    seen the connection closed."""
    if not db.startswith("postgresql://"):
        return True
    deadline = time.monotonic() + timeout
    while proc.pid in _claimants(db, tool):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


# A pi follower that reads a turn between two of its tool results keeps them as two messages
# (test_pi_a_session_imported_between_two_tool_results_keeps_both), where one import of the
# finished file makes them one: how its mirror ends depends on when it read, so for pi only
# what always holds is asserted (each event once, the totals, the store verifies).
@pytest.mark.parametrize(("tool", "kind", "whole"), [("claude-code", "sqlite", True), ("pi", "sqlite", False),
                                                     ("swe-agent", "sqlite", True), ("pi", "postgresql", False)])
def test_a_second_follower_of_a_format_into_one_database_is_refused(tmp_path: Path, tool: str, kind: str, whole: bool) -> None:
    """A second follower started by mistake (or a service restarted while the old one
    lingers), of the same format into the same database: two reading one pi or Claude Code
    session a moment apart took a turn still being written at different points, and the
    second refused that session. It is refused at its start (exit 1), in one line naming the
    database and the first follower's pid, and writes nothing. The first goes on mirroring
    as the tool writes: each event is stored once (and the database ends as one import of the
    files, but for pi: above), what it says it added is every event stored, and the store
    verifies."""
    sources, db = tmp_path / "sources", _database(kind, tmp_path)
    sources.mkdir()
    first = interruptible(_follow_command(tool, db, sources), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _claimed(db, tool, first)
        before = _dump(db)
        second = subprocess.run(_follow_command(tool, db, sources), capture_output=True, text=True, timeout=60)
        with Store(db, read_only=True) as named:
            path = named.path
        assert (second.returncode, second.stdout) == (1, ""), second.stderr
        assert second.stderr.splitlines() == [f"error: another {tool} follower (pid {first.pid}) is running into the database "
                                              f"{path}; stop it first: one follower of each format runs into a database at "
                                              "a time"]
        assert _dump(db) == before and _claimed(db, tool, first, timeout=0)  # (the lock file still names the first)
        _write_steps(tool, sources)
        expected = _one_shot_of(tool, sources)
        held = _caught_up(db, expected, timeout=30 if whole else 3)
    finally:
        out, err = ctrl_c(first)
    held = _held(db)
    assert first.returncode == 0 and "Traceback" not in err and "refused" not in err, err
    if whole:
        assert held == expected
    assert len(held) > 40 and len({event[2] for event in held}) == len(held)  # no event id twice
    assert _reported(out) == len(held) and err.splitlines()[-1] == f"stopped: {len(held)} event(s) imported in all", err
    _verified(db)


def test_a_follower_whose_claim_the_server_let_go_of_takes_it_again() -> None:
    """On PostgreSQL a follower's claim is a lock held by a connection of its own, which a
    restart of the server (or an idle timeout) ends unseen; the store itself connects again, so
    the follower went on importing without the claim, and a second follower started then was
    let in beside it. The follower takes its claim again at its next look; the second is refused."""
    import psycopg

    db = postgres_url()
    sources = Path(tempfile.mkdtemp())
    first = interruptible(_follow_command("pi", db, sources), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _claimed(db, "pi", first)
        with psycopg.connect(db, autocommit=True) as admin:
            ended = [pid for pid, done in admin.execute("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                                                         "WHERE application_name = %s",
                                                         (f"threadlog (pid {first.pid}) claim follow-pi",)) if done]
            assert len(ended) == 1
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (ended,)).fetchone() != (0,):
                time.sleep(0.01)  # the server has let go of the claim
        assert _claimed(db, "pi", first)  # taken again
        second = subprocess.run(_follow_command("pi", db, sources), capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and f"another pi follower (pid {first.pid})" in second.stderr, second.stderr
    finally:
        out, err = ctrl_c(first)
        shutil.rmtree(sources, ignore_errors=True)
    assert first.returncode == 0 and "Traceback" not in err, err


def test_a_follower_waits_through_a_restart_of_the_server_and_goes_on() -> None:
    """A follower into PostgreSQL exited 1 when the server restarted, and a service mirroring
    sessions stopped mirroring until someone restarted it. It says once that the server went
    away, takes its claim again once it is back, and imports what the sessions wrote meanwhile:
    the database ends as one import of the files."""
    from tests.backends import postgres_cluster

    db, cluster = postgres_url(), postgres_cluster()
    sources = Path(tempfile.mkdtemp())
    first = interruptible(_follow_command("claude-code", db, sources), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _claimed(db, "claude-code", first)
        cluster.kill()
        try:
            _write_steps("claude-code", sources)
            time.sleep(1.0)  # polls find the server gone
            assert first.poll() is None
        finally:
            cluster.start()
        expected = _one_shot_of("claude-code", sources)
        held = _caught_up(db, expected, timeout=60)
        assert _claimed(db, "claude-code", first)
    finally:
        out, err = ctrl_c(first)
        shutil.rmtree(sources, ignore_errors=True)
    assert held == expected
    assert first.returncode == 0 and "Traceback" not in err, err
    waits = [line for line in err.splitlines() if line.startswith("waiting: ")]
    assert len(waits) == 1 and "once the server answers again" in waits[0], err
    _verified(db)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_followers_of_two_formats_into_one_database_run_side_by_side(tmp_path: Path, kind: str) -> None:
    """Each format's follower holds a claim of its own: a pi follower and a SWE-agent one into
    one database both run, and each mirrors its own files."""
    sessions, runs, db = tmp_path / "sessions", tmp_path / "runs", _database(kind, tmp_path)
    sessions.mkdir()
    runs.mkdir()
    tools = {"pi": sessions, "swe-agent": runs}
    procs = {tool: interruptible(_follow_command(tool, db, directory), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tool, directory in tools.items()}
    try:
        assert all(_claimed(db, tool, proc) for tool, proc in procs.items())
        shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
        shutil.copy(TRAJECTORIES[0], runs / TRAJECTORIES[0].name)
        expected = sorted(_one_shot_of("pi", sessions) + _one_shot_of("swe-agent", runs))
        held = _caught_up(db, expected)
    finally:
        said = {tool: ctrl_c(proc) for tool, proc in procs.items()}
    for tool, (out, err) in said.items():
        assert procs[tool].returncode == 0 and "Traceback" not in err and "refused" not in err, err
    assert held == expected
    assert sum(_reported(out) for out, _ in said.values()) == len(held), said
    _verified(db)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_a_follower_starts_once_the_one_before_it_has_stopped(tmp_path: Path, kind: str, signum: int) -> None:
    """The claim ends with the follower that held it, however it ends: stopped with Ctrl-C,
    or killed with SIGKILL, which gives it no chance to let go, nothing is left to clear by
    hand, and a new follower of the format starts, takes the claim, and mirrors what comes."""
    runs, db = tmp_path / "runs", _database(kind, tmp_path)
    runs.mkdir()
    first = interruptible(_follow_command("swe-agent", db, runs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _claimed(db, "swe-agent", first)
    finally:
        if signum == signal.SIGINT:
            ctrl_c(first)
        else:
            first.kill()
            first.communicate()
    assert first.returncode == (0 if signum == signal.SIGINT else -signal.SIGKILL)
    assert _let_go(db, "swe-agent", first)
    out: dict[str, str] = {}
    with _follower("swe-agent", db, runs, out) as proc:
        assert _claimed(db, "swe-agent", proc)
        shutil.copy(TRAJECTORIES[0], runs / TRAJECTORIES[0].name)
        expected = _one_shot_of("swe-agent", runs)
        assert _caught_up(db, expected) == expected
    _stopped_cleanly(out, len(expected))


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 0), (signal.SIGTERM, 128 + signal.SIGTERM)],
                         ids=["sigint", "sigterm"])
def test_a_stopped_follower_exits_promptly_and_says_what_it_imported(tmp_path: Path, signum: int, status: int) -> None:
    """Ctrl-C printed only `stopped`, and SIGTERM (a service manager's stop) exited 0 as if the
    follower had ended of itself. Both stop it within a poll whatever --interval is (here
    30 seconds), and it says how many events it imported in all; Ctrl-C exits 0, SIGTERM
    128 + 15, as a shell reports it. The store verifies."""
    runs, db = tmp_path / "runs", tmp_path / "f.db"
    runs.mkdir()
    for source in TRAJECTORIES:
        shutil.copy(source, runs / source.name)
    expected = _one_shot_of("swe-agent", runs)
    proc = interruptible(_follow_command("swe-agent", db, runs, interval="30"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert _caught_up(db, expected, timeout=8) == expected
        time.sleep(0.3)  # waiting for its next poll, 30 seconds away
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=3)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == status, err
    assert err.splitlines() == [f"stopped: {len(expected)} event(s) imported in all"], err
    assert _reported(out) == len(expected)
    _verified(db)


def test_a_followed_directory_removed_and_made_again_is_named_and_read_again(tmp_path: Path) -> None:
    """A followed directory removed (an old run's output cleaned up) was waited on without a
    word. It is named once while it is gone, with no traceback; made again, with a trajectory
    it held before and a new one, it is followed as before: what was stored is kept, nothing
    is stored twice, and the new trajectory comes in."""
    runs, db = tmp_path / "runs", tmp_path / "f.db"
    runs.mkdir()
    first, second = TRAJECTORIES[0], TRAJECTORIES[1]
    shutil.copy(first, runs / first.name)
    before = _one_shot_of("swe-agent", runs)
    out: dict[str, str] = {}
    with _follower("swe-agent", db, runs, out):
        assert _caught_up(db, before, timeout=8) == before
        shutil.rmtree(runs)
        time.sleep(0.5)  # ten polls of a directory that is not there
        runs.mkdir()
        shutil.copy(first, runs / first.name)
        shutil.copy(second, runs / second.name)
        after = _one_shot_of("swe-agent", runs)
        assert _caught_up(db, after, timeout=8) == after
    assert out["returncode"] == "0" and "Traceback" not in out["stderr"], out["stderr"]
    gone = [line for line in out["stderr"].splitlines() if "is gone" in line]
    assert gone == [f"refused: {runs} is gone (removed or renamed); what was imported from it stays; the other trajectories "
                    "are still followed, and it is searched again at each poll"], out["stderr"]
    assert set(before) < set(after) and _reported(out["stdout"]) == len(after)
    _verified(db)


def test_what_a_swe_agent_follower_refuses_speaks_of_trajectories(tmp_path: Path) -> None:
    """SWE-agent writes trajectories, not sessions: a follower's refusals said "the sessions in
    it would be left out", "the session file was rewritten" and "the other sessions are still
    followed". A directory it may not read and a trajectory replaced by another run's are
    named, in its words, once each, while the trajectory beside them goes on being mirrored,
    and the replaced one's events stay as they were stored."""
    prefix = bound_by_file_modes("dac_override", "dac_read_search")
    runs, db = tmp_path / "runs", tmp_path / "f.db"
    (runs / "locked").mkdir(parents=True)
    replaced, growing = runs / "replaced.traj", runs / "growing.traj"
    shutil.copy(TRAJECTORIES[0], replaced)
    trajectory = json.loads(TRAJECTORIES[1].read_text(encoding="utf-8"))
    growing.write_text(json.dumps({**trajectory, "history": trajectory["history"][:2], "info": {}}))
    proc = interruptible([*prefix, *_follow_command("swe-agent", db, runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        stored = _caught_up(db, _one_shot_of("swe-agent", runs), timeout=8)
        (runs / "locked").chmod(0)
        other = json.loads(TRAJECTORIES[2].read_text(encoding="utf-8"))
        # Another run, over the same file, in one change: written and dated beside it, then moved
        # over it (a poll between a write in place and its new date saw two changes, and said
        # the refusal twice).
        replacing = tmp_path / "replacing.traj"
        replacing.write_text(json.dumps({**other, "history": other["history"][:3]}))
        os.utime(replacing, (time.time() - 3600, time.time() - 3600))
        os.replace(replacing, replaced)
        growing.write_text(json.dumps(trajectory))
        whole = _one_shot(import_swe_agent, growing)
        deadline = time.monotonic() + 8
        while not set(whole) <= set(_held(db)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        out, err = ctrl_c(proc)
        (runs / "locked").chmod(0o755)
    assert proc.returncode == 0 and "Traceback" not in err, err
    refused = [line for line in err.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 2 and all("session" not in line for line in refused), err
    assert any(line.startswith(f"refused: cannot read the directory {runs / 'locked'} (Permission denied): the trajectories in "
                               "it would be left out") for line in refused), err
    assert any(f"the file is {replaced}" in line and "the file was rewritten" in line for line in refused), err
    assert all("the other trajectories are still followed" in line for line in refused), err
    held = _held(db)
    assert set(stored) | set(whole) == set(held) and len(set(held)) == len(held)
    _verified(db)


@contextmanager
def _write_lock_held(db: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `db`'s write lock (`BEGIN IMMEDIATE`, as a long import, a
    `redact` or a `purge` does) for `seconds`, then committing; yields once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "conn.execute('BEGIN IMMEDIATE'); print('held', flush=True)\n"
                               "time.sleep(float(sys.argv[2])); conn.execute('COMMIT')", str(db), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.communicate()


def _follower_started(db: Path, runs: Path, timeout: str) -> subprocess.Popen[str]:
    """`import swe-agent --follow` of `runs` with `--timeout`, once it has made `db` a store."""
    proc = interruptible([*_follow_command("swe-agent", db, runs), "--timeout", timeout], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _readable(db):
        time.sleep(0.05)
    return proc


def _readable(db: Path) -> bool:
    try:
        Store(db, read_only=True).close()
    except StoreError:
        return False
    return True


def test_a_follower_outlives_a_write_lock_held_longer_than_its_timeout(tmp_path: Path) -> None:
    """Another process holding the database's write lock longer than --timeout (a big import,
    a `redact`, a `purge`, a `BEGIN IMMEDIATE` by hand) made the follower exit with status 1,
    and a service mirroring sessions stopped mirroring. It says so once, naming the database,
    keeps running, and imports the trajectory written meanwhile once the lock is released:
    each event once, nothing left out, and the store verifies."""
    runs, db = tmp_path / "runs", tmp_path / "f.db"
    runs.mkdir()
    proc = _follower_started(db, runs, timeout="0.5")
    try:
        with _write_lock_held(db, seconds=3) as holder:
            shutil.copy(TRAJECTORIES[0], runs / TRAJECTORIES[0].name)
            expected = _one_shot_of("swe-agent", runs)
            holder.wait(timeout=8)  # about five polls given up meanwhile
        assert proc.poll() is None
        assert _caught_up(db, expected, timeout=5) == expected
    finally:
        out, err = ctrl_c(proc)
    assert proc.returncode == 0 and "Traceback" not in err and "refused" not in err, err
    waiting = [line for line in err.splitlines() if line.startswith("waiting: ")]
    assert waiting == [f"waiting: the database {db} is locked by another writer (database is locked); the trajectories it "
                       "holds up are imported once it is free, tried again at each poll"], err
    assert err.splitlines()[-1] == f"stopped: {len(expected)} event(s) imported in all", err
    assert len(expected) > 10 and _reported(out) == len(expected)
    _verified(db)


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
def test_ctrl_c_while_a_follower_waits_for_the_write_lock(tmp_path: Path, twice: bool) -> None:
    """Ctrl-C while the follower waits for another writer's lock stops it once that wait ends
    (the lock is still held), as Ctrl-C does between polls: exit 0 and how many events it
    imported; it exited 1 with the lock's error. A second Ctrl-C stops it at once: SQLite's
    wait ran to its end (up to --timeout, 30 seconds by default) with both signals held back,
    and then counted as one, so the follower went on to import what the lock had held up."""
    runs, db = tmp_path / "runs", tmp_path / "f.db"
    runs.mkdir()
    proc = _follower_started(db, runs, timeout="30" if twice else "2.5")
    try:
        with _write_lock_held(db, seconds=10 if twice else 8):
            shutil.copy(TRAJECTORIES[0], runs / TRAJECTORIES[0].name)
            assert proc.stderr is not None  # said after the first second of the wait
            assert proc.stderr.readline() == "waiting for another writer… (--timeout sets how long)\n"
            proc.send_signal(signal.SIGINT)
            if twice:
                time.sleep(0.3)
                proc.send_signal(signal.SIGINT)
            asked = time.monotonic()
            out, err = proc.communicate(timeout=6)
            took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert took < (1 if twice else 1.5 + 1), took  # once: the 1.5 seconds of the wait left, then at most one more
    assert err.splitlines()[-1] == "stopped: 0 event(s) imported in all", err
    assert _held(db) == [] and out == ""


class _LockedAfterFirstWrite(Store):
    """A store whose second write (`append_prepared`) finds the write lock held by another
    process for a second (`_write_lock_held`): an import of a session, which creates its
    thread in one transaction and appends its events in others, loses the lock after the
    first is committed."""

    def __init__(self, db: Path, holds: ExitStack) -> None:
        super().__init__(db, timeout=0.2)
        self.db, self.holds, self.writes = db, holds, 0

    def append_prepared(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.writes == 2:
            self.holds.enter_context(_write_lock_held(self.db, seconds=1))
        return super().append_prepared(*args, **kwargs)


def test_a_follower_counts_what_it_wrote_before_the_write_lock_was_lost(tmp_path: Path) -> None:
    """A session is imported in several transactions (its thread made, then its events): the
    write lock lost after the first of them stopped that session's import, and what it had
    committed was never counted, so `stopped: N event(s) imported in all` said fewer events
    than the follower wrote. The total and what each poll reported are every event stored."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    expected = _one_shot(import_pi, sessions)
    polls: list[int] = []
    locked: list[str] = []
    deadline = time.monotonic() + 30
    with ExitStack() as holds:
        store = _LockedAfterFirstWrite(db, holds)

        def stop() -> bool:
            return store.counts().events == len(expected) or time.monotonic() > deadline

        total = follow_files(store, "pi", [sessions], interval=0.05, on_import=lambda summary: polls.append(summary.added),
                             on_locked=lambda error: locked.append(str(error)), stop=stop)
        store.close()
    assert store.writes > 2 and len(locked) == 1, locked  # the lock was lost once, partway through the session
    assert _held(db) == expected
    assert total.added == sum(polls) == len(expected), (total.added, polls)


def _with_bad_line(directory: Path, cut: int = 0) -> Path:
    """A pi session whose fourth line is not JSON (a tool that wrote it was killed mid-line,
    then went on), in `directory`; without its last `cut` lines."""
    lines = PI_SESSION.read_bytes().splitlines(keepends=True)
    directory.mkdir()
    session = directory / PI_SESSION.name
    session.write_bytes(b"".join(lines[:3]) + b'{"type": "message", "id": \n' + b"".join(lines[3:len(lines) - cut]))
    return session


def test_a_follower_skipping_a_bad_line_reports_it_once(tmp_path: Path) -> None:
    """With --skip-bad, a follower reports each line it skipped, once: a poll that skipped a
    line and added nothing was not reported at all, and each poll of a session reads its bad
    lines again. What it added is what one import with --skip-bad adds."""
    session = _with_bad_line(tmp_path / "sessions", cut=6)
    reports: list[Any] = []
    polls = iter(range(8))

    def stop() -> bool:
        n = next(polls, None)
        if n == 3:  # the session grows: read again, its bad line with it
            with session.open("ab") as writer:
                writer.write(b"".join(PI_SESSION.read_bytes().splitlines(keepends=True)[-6:]))
        return n is None

    store = Store(":memory:")
    follow_files(store, "pi", [session.parent], interval=0.01, settle=0.02, skip_bad=True, stop=stop, on_import=reports.append)
    bad = [line for report in reports for line in report.bad]
    assert [(file, line) for file, line, _ in bad] == [(str(session), 4)], bad
    expected = Store(":memory:")
    import_pi(expected, [session], skip_bad=True)
    assert _events(store) == _events(expected)


def test_a_follower_prints_the_lines_it_skipped(tmp_path: Path) -> None:
    """`import pi --follow --skip-bad` printed `+N event(s)` and nothing of the line it skipped
    (only --json said it): it prints the line, as an import without --follow does, once."""
    session = _with_bad_line(tmp_path / "sessions")
    db = tmp_path / "f.db"
    proc = interruptible([*_follow_command("pi", db, session.parent), "--skip-bad"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        expected = Store(":memory:")
        import_pi(expected, [session], skip_bad=True)
        assert _caught_up(db, _events(expected)) == _events(expected)
        time.sleep(0.5)  # polls that read the bad line again
    finally:
        out, err = ctrl_c(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err
    skipped = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {session}:4: "), out


def test_a_pi_run_of_tool_results_read_before_its_last_was_written_waits_for_it(tmp_path: Path) -> None:
    """pi writes the results of a response's parallel tool calls one line each, as each tool
    finishes. Read between two of them (a follower's poll, an import of a live session), the
    results written so far became a user message of their own, and the rest another: the
    thread held two messages where pi sent one, and disagreed with a one-shot import of the
    same file. The results wait until every call has one, as Claude Code's importer waits."""
    lines = PI_SESSION.read_bytes().splitlines(keepends=True)
    session = tmp_path / PI_SESSION.name
    session.write_bytes(b"".join(lines[:7]))  # line 6 makes three tool calls, line 7 is the first result
    with Store(tmp_path / "grown.db") as store:
        first = import_pi(store, [session])
        assert first.waiting_files == [str(session)]
        session.write_bytes(b"".join(lines))
        import_pi(store, [session])
        held = _events(store)
    assert held == _one_shot(import_pi, session)


def test_a_follower_goes_on_while_another_process_redacts_and_forks_the_thread(tmp_path: Path) -> None:
    """While pi appends to a session, another process redacts the thread's newest message and
    forks the thread there, again and again. A redaction appends its `event.redacted` to the
    thread between a poll's read and its write, and the follower exited 1 (`expected 27 but it
    has head 28`), so the mirror stopped. The write is tried again at the next poll: the
    follower goes on, each event of the session is stored once, in the thread, every redacted
    one stays erased, and the forks hold only their own events."""
    lines = PI_SESSION.read_bytes().splitlines(keepends=True)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    live, db, out = sessions / PI_SESSION.name, tmp_path / "f.db", {}
    live.write_bytes(b"".join(lines[:10]))
    redacted: dict[int, str] = {}
    with _follower("pi", db, sessions, out) as proc:
        assert _caught_up(db, _one_shot(import_pi, live))
        written = 10
        while written < len(lines):
            with live.open("ab") as writer:
                writer.write(b"".join(lines[written:written + 2]))
            written += 2
            time.sleep(0.05)  # a poll under way
            with Store(db) as store:
                newest = [e for e in store.read_all() if e.type == "message.appended" and e.position not in redacted]
                if newest:
                    event = newest[-1]
                    redacted[event.position] = event.event_id
                    store.redact(event.position, "a key pasted", "ops")
                    store.fork(event.stream_id, event.offset + 1, unanswered="drop")
            assert proc.poll() is None, "the follower stopped"
        final = _one_shot(import_pi, live)
        time.sleep(1.0)
    assert out["returncode"] == "0" and "error" not in out["stderr"] and "refused" not in out["stderr"], out["stderr"]
    assert len(redacted) > 10
    expected = {event[2]: event[0] for event in final}
    with Store(db, read_only=True) as store:
        held = list(store.read_all())
        imported = [e for e in held if e.event_id in expected]
        assert sorted(e.event_id for e in imported) == sorted(expected)  # each once
        assert all(e.stream_id == expected[e.event_id] for e in imported)  # in the thread it belongs to
        others = {e.type for e in held if e.event_id not in expected}
        assert others == {"event.redacted", "thread.forked"}, others
        for position, event_id in redacted.items():
            erased = next(store.read_all(position - 1, 1))
            assert erased.event_id == event_id and "[redacted]" in json.dumps(erased.data), erased.data  # not imported again
        store.verify()


def test_a_follower_whose_statements_the_server_cancels_says_so_and_counts_what_it_kept(tmp_path: Path) -> None:
    """A follower into PostgreSQL as a user with a short `statement_timeout`: the server cancels
    a write (here one held up by a lock another session holds on the events: a 5 ms timeout
    alone was met or not with the machine's speed), and the follower stops (exit 1) naming the
    timeout and how to raise it, its tally what the database holds (what a session's earlier
    transactions committed before such a stop is counted: `test_a_follower_stopped_by_a_second_
    ctrl_c_counts_what_it_wrote`). What it kept is whole (the store verifies), and a follower run
    again as a user without the timeout goes on to hold what one import of the session holds."""
    import psycopg

    from tests.backends import postgres_cluster

    db = postgres_url()
    cluster = postgres_cluster()
    role = f"hurried_follower{os.getpid()}"
    cluster.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    cluster.execute(f"ALTER ROLE {role} SET statement_timeout = '300ms'")
    hurried = db.replace("postgres@", f"{role}@", 1)
    with Store(db):
        pass  # made by a user without the timeout
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / PI_SESSION.name).write_bytes(PI_SESSION.read_bytes())
    with psycopg.connect(db) as holder:
        holder.execute("LOCK TABLE events IN EXCLUSIVE MODE")  # its writes wait past the timeout; its reads go on
        stopped = subprocess.run(_follow_command("pi", hurried, sessions), capture_output=True, text=True, timeout=60)
        holder.rollback()
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr, stopped.stderr
    assert stopped.stderr.startswith("error: the server cancelled a statement") and "statement_timeout" in stopped.stderr
    kept = len(_held(db))
    assert _reported(stopped.stdout) == kept, (stopped.stdout, kept)
    assert kept == 0 and "imported before it" not in stopped.stderr, stopped.stderr  # its first write waited: none kept
    _verified(db)
    expected = _one_shot(import_pi, sessions / PI_SESSION.name)
    out: dict[str, str] = {}
    proc = interruptible(_follow_command("pi", db, sessions), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _caught_up(db, expected) == expected
    finally:
        out["stdout"], out["stderr"] = ctrl_c(proc)
    assert proc.returncode == 0 and _reported(out["stdout"]) + kept == len(expected), out


class _CtrlCAfterSecondWrite(Store):
    """A store whose second write (`append_prepared`) is committed, and a Ctrl-C comes as it
    returns: the session's thread is made, its first events stored, and the follower stops."""

    def __init__(self, db: Path) -> None:
        super().__init__(db)
        self.writes = 0

    def append_prepared(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        written = super().append_prepared(*args, **kwargs)
        if self.writes == 2:
            raise KeyboardInterrupt
        return written


def test_a_follower_stopped_by_a_second_ctrl_c_counts_what_it_wrote(tmp_path: Path) -> None:
    """A second Ctrl-C (or SIGTERM) stops a follower at once, partway through a session: what
    that session's writes had committed was left out of the poll's `+N event(s)` and of
    `stopped: N event(s) imported in all`, which said fewer events than the database held."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    polls: list[int] = []
    store = _CtrlCAfterSecondWrite(db)
    with pytest.raises(KeyboardInterrupt):
        follow_files(store, "pi", [sessions], interval=0.05, on_import=lambda summary: polls.append(summary.added))
    store.close()
    held = len(_held(db))
    assert store.writes == 2 and held > 1
    assert sum(polls) == held, (polls, held)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 0), (signal.SIGTERM, 128 + signal.SIGTERM)],
                         ids=["sigint", "sigterm"])
def test_a_signal_as_a_stopped_follower_exits_changes_nothing_it_said(tmp_path: Path, signum: int, status: int) -> None:
    """A second Ctrl-C, or a service manager's second SIGTERM, as a stopped follower closed its
    database, after it had said `stopped: N event(s) imported in all`, exited 3 with `error:
    committed: the sessions imported so far …; only what came after it was interrupted`: a stop
    that went as asked read as a failure, said twice. It exits as the first signal asked, with
    nothing more said."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    expected = _one_shot(import_pi, sessions)
    proc = interruptible(_follow_command("pi", db, sessions), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == f"+{len(expected)} event(s) (1 file(s))\n"
        proc.send_signal(signum)
        said = proc.stderr.readline()
        proc.send_signal(signum)  # as the follower closes its database
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert said == f"stopped: {len(expected)} event(s) imported in all\n"
    assert (proc.returncode, err) == (status, ""), err
    assert _held(db) == expected
    _verified(db)


def test_a_follower_stopped_at_once_between_sessions_counts_the_poll_so_far(tmp_path: Path) -> None:
    """A second Ctrl-C that stopped a follower between two sessions of a poll (here as it said
    the second one's refusal) left the whole poll uncounted: nothing of the sessions it had
    imported was printed as `+N event(s)`, and `stopped: 0 event(s) imported in all` was said of
    a database holding them."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / "a.jsonl")
    (sessions / "b.jsonl").write_bytes(PI_SESSION.read_bytes().replace(b"\n", b"\n{\n", 1))  # a bad second line
    polls: list[int] = []

    def refused(path: Path | None, error: StoreError) -> None:
        assert path == sessions / "b.jsonl", error
        raise KeyboardInterrupt  # as the refusal is said

    with Store(db) as store, pytest.raises(KeyboardInterrupt):
        follow_files(store, "pi", [sessions], interval=0.05, on_import=lambda summary: polls.append(summary.added),
                     on_refused=refused)
    held = len(_held(db))
    assert held > 0
    assert sum(polls) == held, (polls, held)


class _AlwaysMoved(Store):
    """A store whose every write finds the thread moved since it was read (ConcurrencyError),
    however fresh the read: no race a poll's fresh read settles."""

    def append_prepared(self, thread: str, *args: Any, **kwargs: Any) -> Any:
        from eventstore import ConcurrencyError

        raise ConcurrencyError(thread, 27, 28)


class _MovedThrice(Store):
    """A store whose first three writes find the thread moved since it was read: another
    process redacting in the thread again and again, as fast as the follower polls."""

    moved = 0

    def append_prepared(self, thread: str, *args: Any, **kwargs: Any) -> Any:
        from eventstore import ConcurrencyError

        if self.moved < 3:
            self.moved += 1
            raise ConcurrencyError(thread, 27, 28)
        return super().append_prepared(thread, *args, **kwargs)


def test_a_session_raced_at_a_few_polls_in_a_row_is_mirrored_whole_without_a_refusal(tmp_path: Path) -> None:
    """Another process redacting in the thread at every poll made the second write in a row
    find its thread moved: the session was refused (`expected 75 but it has head 76`), and read
    again only when its file changed, so a session pi had finished lacked its end. It is read
    again at each poll until a write goes through."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    refusals: list[StoreError] = []
    polls = 0

    def pause(_: float) -> None:
        nonlocal polls
        polls += 1

    with _MovedThrice(db) as store:
        follow_files(store, "pi", [sessions], interval=0, on_refused=lambda _, error: refusals.append(error),
                     stop=lambda: polls >= 5, pause=pause)
    assert refusals == []
    assert _held(db) == _one_shot(import_pi, sessions / PI_SESSION.name)


def test_a_session_whose_writes_always_find_its_thread_moved_is_refused_once_not_retried_unsaid(tmp_path: Path) -> None:
    """A write finding its thread moved since the poll read it (another process's redaction in
    between) is read again at the next poll; one that finds it so at every poll, each after a
    fresh read (`RACES` times in a row), was read again at every poll for good, saying nothing,
    and the session was never mirrored. It is said as a refusal, once, and the follower goes on."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    refusals: list[StoreError] = []
    polls = 0

    def stop() -> bool:
        return polls >= RACES + 3

    def pause(_: float) -> None:
        nonlocal polls
        polls += 1

    with _AlwaysMoved(db) as store:
        follow_files(store, "pi", [sessions], interval=0, on_refused=lambda _, error: refusals.append(error), stop=stop,
                     pause=pause)
    assert [type(error).__name__ for error in refusals] == ["ConcurrencyError"], refusals
    assert "expected 27 but it has head 28" in str(refusals[0])


# A follower (`import pi --follow`) whose summaries' merges (each session's counts into the poll's,
# the poll's into the total) send it a SIGTERM: the first merge the first one, merge number
# `sys.argv[2]` the second one, as it begins or as it ends (`sys.argv[3]`).
_SIGNALLED_IN_A_MERGE = """
import signal, sys
from threadlog.cli import cli
from threadlog.importers.summary import ImportSummary

merge, calls, second, where = ImportSummary.merge, [], int(sys.argv[2]), sys.argv[3]

def signalled(self, other):
    calls.append(1)
    if len(calls) == 1:
        signal.raise_signal(signal.SIGTERM)
    if len(calls) == second and where == "begins":
        signal.raise_signal(signal.SIGTERM)
    merge(self, other)
    if len(calls) == second and where == "ends":
        signal.raise_signal(signal.SIGTERM)

ImportSummary.merge = signalled
cli(["--db", sys.argv[1], "import", "pi", "--follow", "--interval", "0.05", sys.argv[4]], prog_name="threadlog")
"""


@pytest.mark.parametrize("where", ["begins", "ends"])
@pytest.mark.parametrize("second", [1, 2, 3])
def test_a_second_signal_inside_a_merge_leaves_the_total_what_the_database_holds(tmp_path: Path, second: int,
                                                                                 where: str) -> None:
    """A second SIGTERM (or Ctrl-C) that landed in the merge of a poll's counts (microseconds)
    stopped the follower with `stopped: N event(s) imported in all` a session short of what it
    had written. Here it is sent in each merge of the poll, as the merge begins and as it ends:
    the total said is what the database holds, however it lands."""
    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    run = subprocess.run([sys.executable, "-c", _SIGNALLED_IN_A_MERGE, str(db), str(second), where, str(sessions)],
                         capture_output=True, text=True, timeout=60)
    held = _held(db)
    assert held == _one_shot(import_pi, sessions / PI_SESSION.name)
    assert run.returncode == 128 + signal.SIGTERM and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1] == f"stopped: {len(held)} event(s) imported in all", run.stderr


def test_a_follower_without_callbacks_counts_what_it_wrote_before_it_raised(tmp_path: Path) -> None:
    """A follower given no `on_locked` raises `Locked` once the write lock is lost; what the
    session's earlier writes had committed stayed in the database, but the total went down with
    the follower, and its caller had no count of it. The caller's `total` holds it."""
    from eventstore import Locked

    sessions, db = tmp_path / "sessions", tmp_path / "f.db"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    total = ImportSummary()
    with ExitStack() as holds:
        store = _LockedAfterFirstWrite(db, holds)
        with pytest.raises(Locked):
            follow_files(store, "pi", [sessions], interval=0.05, total=total)
        store.close()
    held = len(_held(db))
    assert store.writes == 2 and held > 0
    assert total.added == held, (total.added, held)


_SUMMARY = r"total: must be an ImportSummary \(or None\), not "
_SECONDS = r"must be a number of seconds from 0 to \d+, not "


@pytest.mark.parametrize(("given", "refusal"), [
    *[({"total": total}, _SUMMARY) for total in (5, True, "0", {})],
    *[({name: value}, f"{name}: {_SECONDS}") for name, value in (
        ("interval", -1), ("interval", float("nan")), ("interval", 10**30), ("interval", "1"), ("interval", True),
        ("settle", float("inf")), ("settle", -0.5))],
])
def test_a_parameter_of_another_kind_is_refused_before_anything_is_written(tmp_path: Path, given: dict[str, Any],
                                                                           refusal: str) -> None:
    """`total=` of another kind was taken: the follower imported the session, then raised
    AttributeError ('int' object has no attribute 'merge') with the session written.
    `interval=-1` raised ValueError from `time.sleep` once the first poll had written,
    `interval=10**30` OverflowError, `"1"` TypeError; NaN polled with no pause at all. Each is
    refused naming the parameter, and the database is left as it was."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copy(PI_SESSION, sessions / PI_SESSION.name)
    with Store(tmp_path / "f.db") as store:
        with pytest.raises(StoreError, match=refusal):
            follow_files(store, "pi", [sessions], **{"interval": 0.05, **given}, stop=lambda: False)
        assert list(store.read_all()) == []
