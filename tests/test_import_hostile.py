"""Importers and the CLI fed hostile files: a refusal is one `error:` line naming the file and
line, exit status 1, and the database exactly as it was (its SQL dump compared before and after).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

import threadlog.importers.plan as plan_module
from eventstore import cuts
from projections import validate_request
from threadlog import InvalidEvent, Store, StoreError, anthropic_request, export_all, import_claude_code, import_event_files, import_pi, import_swe_agent
from threadlog.cli import cli
from threadlog.export import dump_lines
from threadlog.importers.follow import follow_claude_code
from tests.backends import file_dump
from tests.procs import ctrl_c, interruptible

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SESSION = FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
SESSION_ID = "11111111-2222-4333-8444-555555555555"
DEEP = 100_000  # levels: far past what `json` and any recursive walk can take
THREADLOG = str(Path(sys.executable).parent / "threadlog")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("hostile") / "seed.db"
    with Store(db) as store:
        import_claude_code(store, [SESSION])
    return db


def fresh(seeded: Path, tmp_path: Path) -> Path:
    db = tmp_path / "t.db"
    shutil.copy(seeded, db)
    return db


def user_line(uuid: str, text: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": SESSION_ID, "timestamp": "2025-01-01T00:00:00Z",
            "message": {"role": "user", "content": text}, **extra}


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def deep(levels: int = DEEP) -> bytes:
    return b"[" * levels + b"]" * levels


def refused(result: Result, says: str) -> None:
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert says in lines[0], lines[0]


def import_refused(seeded: Path, tmp_path: Path, args: list[str], says: str) -> None:
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    refused(CliRunner().invoke(cli, ["--db", str(db), "import", *args]), says)
    assert file_dump(db) == before, "a refused import changed the database"


# -- JSON nested deeper than Python can parse ---------------------------------------------------


def _pi_header() -> bytes:
    return jsonl({"type": "session", "id": "pi-session", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/tmp"})


@pytest.mark.parametrize(("kind", "content"), [
    ("claude-code", jsonl(user_line("u1", "hi")) + deep() + b"\n"),
    ("claude-code", jsonl(user_line("u1", "hi")) + b'{"type": "user", "toolUseResult": ' + deep() + b"}\n"),
    ("pi", _pi_header() + deep() + b"\n"),
], ids=["claude-code-line", "claude-code-field", "pi-line"])
def test_a_line_nested_too_deeply_is_a_bad_line(seeded: Path, tmp_path: Path, kind: str, content: bytes) -> None:
    path = tmp_path / f"{SESSION_ID}.jsonl"
    path.write_bytes(content)
    import_refused(seeded, tmp_path, [kind, str(path)], f"{path}:2: ")
    db = fresh(seeded, tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert [(bad["file"], bad["line"]) for bad in json.loads(result.stdout)["bad"]] == [(str(path), 2)]


def test_a_sub_agent_file_nested_too_deeply_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / f"{SESSION_ID}.jsonl").write_bytes(jsonl(user_line("u1", "hi")))
    agent = tmp_path / "agent-1234abcd.jsonl"
    agent.write_bytes(deep() + b"\n")
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "claude-code", str(tmp_path)])
    refused(result, f"{agent}:1: ")


@pytest.mark.parametrize("importer", [import_claude_code, import_pi, import_event_files, follow_claude_code],
                         ids=["claude-code", "pi", "events", "follow"])
def test_one_path_given_as_a_string_is_refused_not_read_a_character_at_a_time(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, importer: Any
) -> None:
    """`import_claude_code(store, "ss")` read the paths "s" and "s": a directory named by the
    first character was imported (`"/home/me/sessions"` searched the whole file system)."""
    db = fresh(seeded, tmp_path)
    (tmp_path / "s").mkdir()
    shutil.copy(SESSION, tmp_path / "s" / "other.jsonl")
    monkeypatch.chdir(tmp_path)
    before = file_dump(db)
    with Store(db) as store, pytest.raises(InvalidEvent, match=r"^paths: must be a list of paths, not str; pass \[path\] for one$"):
        importer(store, "ss")
    assert file_dump(db) == before


# -- paths that name no file, or a directory where a file belongs -----------------------------

PI_SESSION = FIXTURES / "pi" / "large-session-head.jsonl"


def an_export(tmp_path: Path) -> Path:
    """An export of a thread the seeded database does not hold: restoring it writes."""
    with Store(tmp_path / "other.db") as other:
        other.append_message(other.create_thread(title="other"), "user", "hello")
        path = tmp_path / "other.jsonl"
        path.write_text("".join(dump_lines(export_all(other))), encoding="utf-8")
    return path


def follow_once(store: Store, paths: Any) -> Any:
    polls = iter([False])
    return follow_claude_code(store, paths, interval=0, settle=0, stop=lambda: next(polls, True))


IMPORTERS: dict[str, tuple[Any, Any, str]] = {  # importer, a file it reads, what the refusal asks for
    "claude-code": (import_claude_code, lambda tmp: SESSION, "name Claude Code session files (.jsonl) or directories of them"),
    "pi": (import_pi, lambda tmp: PI_SESSION, "name pi session files (.jsonl) or directories of them"),
    "events": (import_event_files, an_export, "name files `threadlog export` wrote"),
    "follow": (follow_once, lambda tmp: SESSION, "name Claude Code session files (.jsonl) or directories of them"),
}


@pytest.mark.parametrize("kind", sorted(IMPORTERS))
@pytest.mark.parametrize("missing", ["nope.jsonl", "gone/nope.jsonl", "file.jsonl/nope.jsonl"])
def test_a_path_that_names_nothing_is_refused_by_name(seeded: Path, tmp_path: Path, kind: str, missing: str) -> None:
    """A missing path raised FileNotFoundError (claude-code, pi, events), NotADirectoryError (a
    path through a file, events), or was waited for without a word (follow): after the files
    before it were read, and for events written, in the transaction the error undid."""
    importer, readable, asks = IMPORTERS[kind]
    db = fresh(seeded, tmp_path)
    (tmp_path / "file.jsonl").write_bytes(b"")
    path = tmp_path / missing
    before = file_dump(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as caught:
        importer(store, [readable(tmp_path), path])
    print(f"\n{kind}: {caught.value}")
    assert str(caught.value) == f"paths[1]: no such file or directory: {path}; {asks}"
    assert file_dump(db) == before, "a refused import changed the database"


@pytest.mark.parametrize("kind", sorted(IMPORTERS))
def test_a_path_starting_with_a_tilde_names_the_home_directory_as_a_shell_would(seeded: Path, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """`import_claude_code(store, ["~/.claude/projects"])`, as the library's own example writes it,
    was refused ("no such file or directory: ~/.claude/projects") though the directory was there:
    a shell expands the `~`, Python did not. It is read from the home directory now; one missing
    there is refused naming the path it was taken for, with nothing written."""
    importer, readable, asks = IMPORTERS[kind]
    monkeypatch.setenv("HOME", str(tmp_path))
    source = readable(tmp_path)
    (tmp_path / "sessions").mkdir()
    shutil.copy(source, tmp_path / "sessions" / source.name)
    read: list[list[tuple[str, str]]] = []
    for n, name in enumerate(("~/sessions/" + source.name, str(tmp_path / "sessions" / source.name))):
        with Store(tmp_path / f"new{n}.db") as store:
            importer(store, [name])
            read.append([(e.event_id, e.type) for e in store.read_all()])
    assert read[0] == read[1] and read[0]
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as caught:
        importer(store, [readable(tmp_path), "~/nothing"])
    assert str(caught.value) == f"paths[1]: no such file or directory: {tmp_path / 'nothing'}; {asks}"
    assert file_dump(db) == before, "a refused import changed the database"


def test_a_directory_given_for_an_export_is_refused_by_name(seeded: Path, tmp_path: Path) -> None:
    """It raised IsADirectoryError, after the exports before it were restored (and undone)."""
    db = fresh(seeded, tmp_path)
    folder = tmp_path / "exports"
    folder.mkdir()
    before = file_dump(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as caught:
        import_event_files(store, [an_export(tmp_path), folder])
    assert str(caught.value) == f"paths[1]: {folder} is a directory; name files `threadlog export` wrote"
    assert file_dump(db) == before, "a refused import changed the database"


TRAJECTORY = FIXTURES / "swe-agent" / "function_calling_simple.traj"


@pytest.mark.parametrize("kind", [*sorted(IMPORTERS), "swe-agent"])
@pytest.mark.parametrize("special", ["/dev/zero", "socket"])
def test_a_device_or_socket_given_as_a_path_is_refused_by_name(seeded: Path, tmp_path: Path, kind: str, special: str) -> None:
    """/dev/zero was read until memory ran out (an export's reader gave up after 65 MiB of
    it), and a socket raised `No such device or address`, after the files before it were read."""
    importer, readable, asks = IMPORTERS[kind] if kind in IMPORTERS else (
        import_swe_agent, lambda tmp: TRAJECTORY, "name SWE-agent trajectory files (.traj) or directories of them")
    db = fresh(seeded, tmp_path)
    path = Path(special)
    if special == "socket":
        path = tmp_path / "listening.jsonl"
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(path))  # its file stays when it is closed
    before = file_dump(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as caught:
        importer(store, [readable(tmp_path), path])
    what = "a device" if special == "/dev/zero" else "a socket"
    assert str(caught.value) == f"paths[1]: {path} is {what}, not a file; {asks}"
    assert file_dump(db) == before, "a refused import changed the database"


def _piped(content: bytes) -> int:
    """The reading end of a pipe holding `content`, written and closed (`<(cat FILE)`)."""
    read, write = os.pipe()
    os.write(write, content)
    os.close(write)
    return read


@pytest.mark.parametrize(("kind", "source"), [("claude-code", SESSION), ("pi", PI_SESSION), ("swe-agent", TRAJECTORY)])
def test_pipes_given_to_a_session_importer_are_refused_not_imported_as_empty(seeded: Path, tmp_path: Path, kind: str,
                                                                              source: Path) -> None:
    """An import reads each file to check it and again to write it: given two pipes
    (`import pi <(cat a) <(cat b)`), the second reading found them empty and the import said
    `0 event(s) added` with exit status 0; a named pipe no program writes to was waited on forever."""
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    pipes = [_piped(source.read_bytes()[:60_000]) for _ in range(2)]  # what a pipe holds unread
    try:
        done = subprocess.run([THREADLOG, "--db", str(db), "import", kind, *(f"/dev/fd/{fd}" for fd in pipes)],
                              capture_output=True, text=True, timeout=60, pass_fds=pipes)
    finally:
        for fd in pipes:
            os.close(fd)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr == (f"error: paths[0]: /dev/fd/{pipes[0]} is a pipe, not a file: an import reads its files more "
                           "than once, and a pipe gives its text once; save it to a file and name that\n")
    assert file_dump(db) == before, "a refused import changed the database"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    done = subprocess.run([THREADLOG, "--db", str(db), "import", kind, str(fifo)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"{fifo} is a pipe, not a file" in done.stderr, done


def test_an_export_given_as_pipes_is_restored(tmp_path: Path) -> None:
    """A restore reads each file once, as it comes: `import events <(zcat backup.gz)` works."""
    pipes = []
    for name in ("a", "b"):  # two exports of threads of their own
        (tmp_path / name).mkdir()
        pipes.append(_piped(an_export(tmp_path / name).read_bytes()))
    try:
        done = subprocess.run([THREADLOG, "--db", str(tmp_path / "t.db"), "import", "events", "--json",
                               *(f"/dev/fd/{fd}" for fd in pipes)], capture_output=True, text=True, timeout=60, pass_fds=pipes)
    finally:
        for fd in pipes:
            os.close(fd)
    assert done.returncode == 0, done.stderr
    assert [report["added"] for report in json.loads(done.stdout)] == [2, 2]


def test_the_cli_names_a_missing_default_folder_as_a_usage_error(seeded: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`import claude-code` with no PATHS reads ~/.claude/projects; where there is none it said
    `error: No such file or directory` (and --follow waited for it without a word)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    for follow in ([], ["--follow"]):
        result = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", *follow])
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert "Traceback" not in result.stderr
        assert [line for line in result.stderr.splitlines() if line.startswith("Error: ")] == [
            f"Error: no PATHS given, and {tmp_path}/.claude/projects, where Claude Code keeps its sessions, does not "
            "exist: name the session files or directories to import"], result.stderr
    assert file_dump(db) == before


# -- names that are not UTF-8 -----------------------------------------------------------------

NOT_UTF8 = b"\xff\xfe"  # bytes a Linux file name may hold that no UTF-8 text decodes to


def test_read_commands_open_a_database_whose_name_is_not_utf8(tmp_path: Path) -> None:
    db = str(tmp_path / os.fsdecode(b"threads" + NOT_UTF8 + b".db"))
    runner = CliRunner()
    thread = runner.invoke(cli, ["--db", db, "new", "--title", "kept"]).stdout.strip()
    for command in (["verify"], ["show", thread], ["ls"], ["log", thread]):
        result = runner.invoke(cli, ["--db", db, *command])
        assert result.exit_code == 0, (command, result.output, result.exception)
    assert "kept" in runner.invoke(cli, ["--db", db, "show", thread]).stdout


@pytest.mark.parametrize("kind", ["claude-code", "pi"])
@pytest.mark.parametrize("given", ["file", "directory"])
def test_a_session_file_whose_name_is_not_utf8_is_refused_by_name(seeded: Path, tmp_path: Path, kind: str, given: str) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / os.fsdecode(b"s" + NOT_UTF8 + b".jsonl")
    path.write_bytes(_pi_header() if kind == "pi" else jsonl(user_line("u1", "hi")))
    import_refused(seeded, tmp_path, [kind, str(path if given == "file" else folder)], "s\\udcff\\udcfe.jsonl: its name is not UTF-8")


@pytest.mark.parametrize("kind", ["claude-code", "pi", "swe-agent"])
def test_a_file_given_in_a_directory_whose_name_is_not_utf8_is_refused_by_its_path(
        seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """An import records each file by its real path, which must be text as its name must: one
    named by a relative path from inside such a directory (`cd` there, `import pi s.jsonl`) is
    refused naming that path, as it is when named by its whole path, with nothing written."""
    folder = tmp_path / os.fsdecode(b"runs" + NOT_UTF8)
    folder.mkdir()
    name = {"claude-code": f"{SESSION_ID}.jsonl", "pi": "s.jsonl", "swe-agent": TRAJECTORY.name}[kind]
    content = {"claude-code": jsonl(user_line("u1", "hi")), "pi": _pi_header(), "swe-agent": TRAJECTORY.read_bytes()}[kind]
    _aged(folder / name, content)
    monkeypatch.chdir(folder)
    import_refused(seeded, tmp_path, [kind, name], f"runs\\udcff\\udcfe/{name}: its name is not UTF-8")


@pytest.mark.parametrize("flags", [[], ["--skip-bad"]], ids=["strict", "skip-bad"])
@pytest.mark.parametrize("given", ["file", "directory"])
@pytest.mark.parametrize("whose", ["session", "sub-agent"])
def test_a_claude_code_file_whose_name_holds_a_control_character_is_refused_by_name(seeded: Path, tmp_path: Path, flags: list[str],
                                                                                   given: str, whose: str) -> None:
    """Its ids are made from its name, which no line can change: every line of it would be
    refused, each offering to delete it or skip it. The name is refused instead, once."""
    folder = tmp_path / "sessions"
    (folder / "s1" / "subagents").mkdir(parents=True)
    session = folder / ("s\x1b[31m1.jsonl" if whose == "session" else "s1.jsonl")
    session.write_bytes(jsonl(user_line("u1", "hi")))
    agent = folder / "s1" / "subagents" / "agent-a\x1b[31m1.jsonl"
    if whose == "sub-agent":
        agent.write_bytes(jsonl(user_line("u1", "hi", isSidechain=True, agentId="a1")))
    shown = (session if whose == "session" else agent).name.replace("\x1b", "\\x1b")  # as the error line escapes it
    import_refused(seeded, tmp_path, ["claude-code", *flags, str(session if given == "file" else folder)],
                   f"{shown}: its name holds the control character '\\x1b' at index {shown.index(chr(92))}; rename it to import it")


_UUIDS = [f"00000000-0000-4000-8000-{i:012d}" for i in range(4)]  # Claude Code's: 36 characters


def _long_named_session(folder: Path, stem: str, agent_stem: str | None = None) -> Path:
    """A finished session whose title Claude Code wrote twice (the longest ids a line makes), and
    a sub-agent's file under it when `agent_stem` is given."""
    session = folder / f"{stem}.jsonl"
    session.write_bytes(jsonl(user_line(_UUIDS[0], "hi"), assistant_line(_UUIDS[1], _UUIDS[0], "hello"),
                              {"type": "summary", "summary": "Greeting", "leafUuid": _UUIDS[1]},
                              {"type": "summary", "summary": "A greeting", "leafUuid": _UUIDS[1]}))
    if agent_stem is not None:
        (folder / stem / "subagents").mkdir(parents=True)
        (folder / stem / "subagents" / f"{agent_stem}.jsonl").write_bytes(jsonl(
            user_line(_UUIDS[2], "look", isSidechain=True, agentId="a1"),
            assistant_line(_UUIDS[3], _UUIDS[2], "seen") | {"isSidechain": True, "agentId": "a1"}))
    return session


@pytest.mark.parametrize("flags", [[], ["--skip-bad"]], ids=["strict", "skip-bad"])
@pytest.mark.parametrize("whose", ["session", "sub-agent"])
def test_a_claude_code_file_whose_name_is_too_long_for_its_ids_is_refused_by_name(seeded: Path, tmp_path: Path,
                                                                                 flags: list[str], whose: str) -> None:
    """Event ids are `cc:NAME:` and a line's uuid, at most 200 characters: a session file renamed
    at length had every line refused as one to fix or delete, or, at a length that fit its first
    lines, imported until Claude Code wrote a title again. The name is refused instead, once."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    if whose == "session":
        path = _long_named_session(folder, "s" * 160)
    else:  # the sub-agent's ids hold its session's name, then its own
        _long_named_session(folder, "s" * 120, "agent-" + "a" * 34)
        path = folder / ("s" * 120) / "subagents" / f"agent-{'a' * 34}.jsonl"
    import_refused(seeded, tmp_path, ["claude-code", *flags, str(folder)],
                   f"{path}: its name is too long to make ids of (")


def test_a_claude_code_session_whose_name_is_as_long_as_ids_allow_is_imported(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    _long_named_session(folder, "s" * 100, "agent-" + "a" * 37)  # its sub-agent's name: 144 characters with the session's
    session = _long_named_session(folder, "t" * 144)
    for path in folder.rglob("*.jsonl"):
        os.utime(path, (time.time() - 3600, time.time() - 3600))  # finished: nothing waits
    store = Store(str(tmp_path / "t.db"))
    summary = import_claude_code(store, [folder])
    assert (summary.threads, summary.prompts, summary.assistant_messages) == (3, 3, 3), summary  # the sub-agent's own thread too
    assert sorted(str(store.title(t.id)) for t in store.threads()) == ["A greeting", "A greeting", "None"], session


# -- what a directory search finds --------------------------------------------------------------


def test_pi_directory_search_takes_only_regular_files(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    (folder / "old.jsonl").mkdir(parents=True)  # a directory named like a session file
    os.mkfifo(folder / "pipe.jsonl")  # nothing ever writes to it: reading it would wait forever
    (folder / "real.jsonl").write_bytes(_pi_header() + jsonl(
        {"type": "message", "timestamp": "2025-01-01T00:00:01Z", "message": {"role": "user", "content": "hi"}}))
    done = subprocess.run([THREADLOG, "--db", str(tmp_path / "t.db"), "import", "pi", str(folder), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["files"], summary["threads"], summary["prompts"]) == (1, 1, 1)


# -- values the store refuses in a thread's first event ------------------------------------------

LONE = "\\ud800"  # a lone surrogate, as JSON writes it: Python reads it, UTF-8 cannot hold it
_PI_HELLO = b'{"type": "message", "id": "e1", "parentId": null, "message": {"role": "user", "content": "hi"}}\n'


@pytest.mark.parametrize(("kind", "content", "line"), [
    ("claude-code", jsonl(user_line("u1", "hi", cwd="/home/x")).replace(b"/home/x", f"/home/{LONE}".encode()), 1),
    ("claude-code", jsonl(user_line("u1", "hi"), user_line("u2", "again", "u1", gitBranch="b")).replace(b'"b"', f'"{LONE}"'.encode()), 2),
    # (a first entry after each header: a header alone that names no model waits for pi's model change)
    ("pi", _pi_header().replace(b'"/tmp"', f'"/tmp/{LONE}"'.encode()) + _PI_HELLO, 1),
    ("pi", _pi_header().replace(b'"pi-session"', b'"pi-\\u001b[2J"') + _PI_HELLO, 1),
], ids=["claude-code-cwd", "claude-code-later-line", "pi-header-cwd", "pi-header-id"])
def test_a_header_value_the_store_refuses_names_its_line(seeded: Path, tmp_path: Path, kind: str, content: bytes, line: int) -> None:
    path = tmp_path / f"{SESSION_ID}.jsonl"
    path.write_bytes(content)
    import_refused(seeded, tmp_path, [kind, str(path)], f"{path}:{line}: ")


def test_a_pi_session_id_that_is_not_text_is_refused_naming_its_line(seeded: Path, tmp_path: Path) -> None:
    """A lone surrogate in the header's id: it was reported as a stored row altered outside
    threadlog (the thread id made from it could not be encoded), with --skip-bad too (which
    skips the file, and fails: nothing else was imported)."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(_pi_header().replace(b'"pi-session"', f'"pi-{LONE}"'.encode()) + jsonl(_pi_entry("e1", None, role="user", content="hi")))
    import_refused(seeded, tmp_path, ["pi", str(path)], f"{path}:1: the session id is not UTF-8 text")
    db = fresh(seeded, tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "pi", "--skip-bad", str(path), "--json"])
    assert result.exit_code == 1 and result.stderr.startswith("error: nothing was imported"), result.output
    assert json.loads(result.stdout)["bad"] == [{"file": str(path), "line": 1, "why": "the session id is not UTF-8 text"}]


def _pi_entry(uuid: str, parent: str | None, **message: Any) -> dict[str, Any]:
    return {"type": "message", "id": uuid, "parentId": parent, "timestamp": "2025-01-01T00:00:00Z", "message": message}


_CALL = {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "/etc"}}


@pytest.mark.parametrize(("entries", "says"), [
    ([_pi_entry("e1", None, role="user", content=[{"type": "text", "text": None}])], "message.content[0].text must be a string"),
    ([_pi_entry("e1", None, role="user", content=[{"type": "text", "text": "a"}, {"type": "text", "text": {"a": 1}}])],
     "message.content[1].text must be a string"),
    ([_pi_entry("e1", None, role="user", content="hi"),
      _pi_entry("e2", "e1", role="assistant", content=[{**_CALL, "id": None}])], "message.content[0].id must be a non-empty string"),
    ([_pi_entry("e1", None, role="user", content="hi"),
      _pi_entry("e2", "e1", role="assistant", content=[{**_CALL, "name": ""}])], "message.content[0].name must be a non-empty string"),
    ([_pi_entry("e1", None, role="user", content="hi"),
      _pi_entry("e2", "e1", role="assistant", content=[{**_CALL, "arguments": '{"path": "/etc"}'}])],
     "message.content[0].arguments must be an object"),
    ([_pi_entry("e1", None, role="user", content="hi"),
      _pi_entry("e2", "e1", role="assistant", content=[_CALL]),
      _pi_entry("e3", "e2", role="toolResult", toolCallId="", content=[{"type": "text", "text": "ok"}])],
     "a toolResult needs a non-empty string toolCallId"),
    ([_pi_entry("e1", None, role="user", content="hi"), _pi_entry("e2", "e1", role="bashExecution", command={"x": 1}, output=None)],
     "a bashExecution needs a string command"),
    ([_pi_entry("e1", None, role="user", content="hi"),
      _pi_entry("e2", "e1", role="assistant", content=[_CALL]),
      _pi_entry("e3", "e2", role="toolResult", toolCallId="call_1", content=[{"type": "text", "text": "ok"}], isError="false")],
     "isError must be true, false or null, not str"),
], ids=["null-text", "object-text", "call-without-id", "call-without-name", "arguments-as-text", "result-without-call",
        "bash-command-object", "is-error-as-text"])
def test_a_pi_field_of_the_wrong_type_is_refused_not_turned_into_text(seeded: Path, tmp_path: Path, entries: list[dict[str, Any]],
                                                                     says: str) -> None:
    """They were stored as Python's printed form (`None`, `{'a': 1}`), or as a call with an
    empty id answered by a result naming none, or with its arguments dropped."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(_pi_header() + jsonl(*entries))
    import_refused(seeded, tmp_path, ["pi", str(path)], f"{path}:{len(entries) + 1}: {says}")


def test_a_pi_compaction_that_keeps_tool_results_without_their_calls_is_refused_naming_its_line(seeded: Path,
                                                                                                 tmp_path: Path) -> None:
    """A compaction whose first kept entry is a tool result (pi never cuts there) cuts the call
    from its result. The store refused it only when the compaction was written, after the
    thread's first events were: the database was left changed, the message named an event of a
    batch, not the line, and a second file named with it was written before it too."""
    path = _pi_cut_between_call_and_result(tmp_path)
    says = f"{path}:6: event.data.through_offset: 3 falls between the tool calls at offset 2 ('call_1') and their results at offset 3"
    import_refused(seeded, tmp_path, ["pi", str(path)], says)
    other = tmp_path / "other.jsonl"
    other.write_bytes(_pi_header().replace(b"pi-session", b"pi-other") + jsonl(_pi_entry("e1", None, role="user", content="hi")))
    import_refused(seeded, tmp_path, ["pi", str(other), str(path)], says)


def _pi_cut_between_call_and_result(directory: Path) -> Path:
    """A pi session whose compaction (line 6) keeps its messages from the tool result at line 4,
    leaving the call it answers (line 3) below the cut; a turn follows it."""
    path = directory / "session.jsonl"
    path.write_bytes(_pi_header() + jsonl(
        _pi_entry("e1", None, role="user", content="read /etc"),
        _pi_entry("e2", "e1", role="assistant", content=[_CALL], stopReason="toolUse"),
        _pi_entry("e3", "e2", role="toolResult", toolCallId="call_1", content=[{"type": "text", "text": "ok"}]),
        _pi_entry("e4", "e3", role="assistant", content=[{"type": "text", "text": "Read."}]),
        {"type": "compaction", "id": "c1", "parentId": "e4", "timestamp": "2025-01-01T00:00:00Z", "summary": "They read /etc.",
         "firstKeptEntryId": "e3", "tokensBefore": 100},
        _pi_entry("e5", "c1", role="user", content="and /var?"),
        _pi_entry("e6", "e5", role="assistant", content=[{"type": "text", "text": "Read /var."}], stopReason="stop")))
    return path


def _claude_code_cut_between_call_and_result(directory: Path) -> Path:
    """A Claude Code session whose compact boundary (line 5) keeps a preserved segment that starts
    at the tool result of line 3, leaving the call it answers (line 2) below the cut; its summary
    (line 6), the line the compaction is made from, and a turn follow."""
    def answer(uuid: str, parent: str, content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        line = _assistant_line(uuid, parent, content)
        line["message"].update(id=f"msg_{uuid}", stop_reason=stop, usage={"input_tokens": 1, "output_tokens": 1})
        return line

    boundary = {"type": "system", "subtype": "compact_boundary", "uuid": "cb", "parentUuid": None, "logicalParentUuid": "a2",
                "sessionId": SESSION_ID, "timestamp": "2025-01-01T00:00:02Z", "content": "Conversation compacted",
                "compactMetadata": {"trigger": "auto", "preTokens": 1000,
                                    "preservedSegment": {"headUuid": "r1", "anchorUuid": "cs", "tailUuid": "a2"}}}
    path = directory / f"{SESSION_ID}.jsonl"
    path.write_bytes(jsonl(
        user_line("u1", "list the files"),
        answer("a1", "u1", [_USE], "tool_use"),
        {**user_line("r1", "", "a1"), "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b", "is_error": False}]}},
        answer("a2", "r1", [{"type": "text", "text": "Two files."}], "end_turn"),
        boundary,
        user_line("cs", "This session is being continued. Summary: they listed the files.", "cb", isCompactSummary=True),
        user_line("p1", "and now?", "cs"),
        answer("p2", "p1", [{"type": "text", "text": "Done."}], "end_turn")))
    return path


_CUT_BETWEEN = {"pi": _pi_cut_between_call_and_result, "claude-code": _claude_code_cut_between_call_and_result}


@pytest.mark.parametrize("kind", list(_CUT_BETWEEN))
def test_a_refused_compaction_line_gives_advice_a_session_file_can_follow(seeded: Path, tmp_path: Path, kind: str) -> None:
    """The refusal of an imported compaction ended with the advice `threadlog emit` gets
    ("compact through 2 (before the calls) or through 4 (after the results)"): offsets of a
    thread not yet written, which no line of the session names. It says where in the session
    the compaction keeps its messages from, and leaves the way on to the line: fixed, deleted,
    or skipped with --skip-bad."""
    path = _CUT_BETWEEN[kind](tmp_path)
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path)])
    assert result.exit_code == 1 and file_dump(db) == before, result.output
    assert "compact through" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"error: {path}:6: event.data.through_offset: "), result.stderr
    assert result.stderr.rstrip().endswith("which a request leaves out: the compaction keeps the session's messages from "
                                           "a point between tool calls and their results; fix or delete that line, "
                                           "or skip bad lines (--skip-bad)"), result.stderr


def _messages(kwargs: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """A request's messages: each role with its blocks' text, call id or answered call id."""
    return [(m["role"], [str(b.get("text") or b.get("id") or b.get("tool_use_id")) for b in m["content"]]) for m in kwargs["messages"]]


@pytest.mark.parametrize(("kind", "sent"), [
    ("pi", [("user", ["read /etc"]), ("assistant", ["call_1"]), ("user", ["call_1"]), ("assistant", ["Read."]),
            ("user", ["and /var?"]), ("assistant", ["Read /var."])]),
    ("claude-code", [("user", ["list the files"]), ("assistant", ["toolu_1"]), ("user", ["toolu_1"]), ("assistant", ["Two files."]),
                     ("user", ["and now?"]), ("assistant", ["Done."])]),
])
def test_skip_bad_leaves_out_a_compaction_cut_between_tool_calls_and_results(tmp_path: Path, kind: str,
                                                                            sent: list[tuple[str, list[str]]]) -> None:
    """`import pi --skip-bad` refused the whole session at a compaction line whose cut falls
    between tool calls and their results, as if --skip-bad were not given. The compaction is left
    out, so the model sees every message (nothing lost); its line is named once, and the rest of
    the session imported. Importing again adds nothing and names the line again."""
    path = _CUT_BETWEEN[kind](tmp_path)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path), "--skip-bad"])
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {path}:6: event.data.through_offset: "), result.stdout
    assert "falls between the tool calls" in skipped[0] and "0 compaction(s)" in result.stdout, result.stdout
    again = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path), "--skip-bad", "--json"])
    assert again.exit_code == 0, again.output
    summary = json.loads(again.stdout)
    assert [(bad["file"], bad["line"]) for bad in summary["bad"]] == [(str(path), 6)] and summary["added"] == 0, summary
    with Store(db) as store:
        (thread,) = store.threads()
        assert "compaction.recorded" not in {event.type for event in store.read(thread.id)}
        kwargs = anthropic_request(store, thread.id, model="claude-test-1", max_tokens=10)
        store.verify()
    validate_request(kwargs)
    assert _messages(kwargs) == sent


@pytest.mark.parametrize("kind", list(_CUT_BETWEEN))
def test_a_session_an_earlier_release_stored_with_such_a_compaction_goes_on(tmp_path: Path, kind: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A release before cuts were checked stored a compaction between tool calls and their
    results; the store never checks a stored event again, but the session, grown since, was
    refused at that line, which the database already holds (with --skip-bad: `holds events the
    source no longer has`), so a follower stopped at it. It goes on: what the session added is
    imported, the compaction kept as stored."""
    path = _CUT_BETWEEN[kind](tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:6]))  # up to the compaction's line
    db = tmp_path / "t.db"
    with monkeypatch.context() as earlier:  # as such a release wrote it
        earlier.setattr(plan_module, "check_cuts", lambda *args, **kwargs: None)
        earlier.setattr(cuts, "compacts", lambda batch: False)
        result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path)])
        assert result.exit_code == 0 and "1 compaction(s)" in result.stdout, result.output
    with Store(db) as store:
        held = [event.event_id for event in store.read_all()]
    path.write_bytes(b"".join(lines))
    for options, adds in (([], True), (["--skip-bad"], False)):
        result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path), "--json", *options])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert (summary["compactions"], summary["bad"], summary["added"] > 0) == (1, [], adds), summary
    with Store(db) as store:
        now = [event.event_id for event in store.read_all()]
        store.verify()
    assert now[:len(held)] == held and len(now) > len(held)


def _event_ids(db: Path) -> list[str]:
    """The ids of the events `db` holds (none while no import has made it a database)."""
    try:
        with Store(db, read_only=True) as store:
            return sorted(event.event_id for event in store.read_all())
    except StoreError:
        return []


def _until_held(db: Path, expected: list[str]) -> list[str]:
    """The ids `db` holds once it holds `expected`, or after 30 seconds."""
    deadline = time.monotonic() + 30
    while _event_ids(db) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return _event_ids(db)


@pytest.mark.parametrize("kind", list(_CUT_BETWEEN))
def test_a_follower_names_a_compaction_cut_between_tool_calls_and_results_once(tmp_path: Path, kind: str) -> None:
    """`import --follow --skip-bad` on a session that grows a compaction line whose cut falls
    between tool calls and their results: the follower leaves it out as one import with
    --skip-bad does, names it once however many polls read it again, and goes on."""
    made = _CUT_BETWEEN[kind](tmp_path)
    lines = made.read_bytes().splitlines(keepends=True)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    live = sessions / made.name
    live.write_bytes(b"".join(lines[:5 if kind == "pi" else 4]))  # up to the answer before the compaction
    db = tmp_path / "f.db"
    proc = interruptible([sys.executable, "-m", "threadlog", "--db", str(db), "import", kind, "--follow", "--interval", "0.05",
                          "--skip-bad", str(sessions)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = _until_held(db, _imported(kind, live))
        assert first, "the follower imported nothing of the session's first turn"
        live.write_bytes(b"".join(lines))
        expected = _imported(kind, live)
        assert _until_held(db, expected) == expected
        time.sleep(0.5)  # polls that read the compaction line again
    finally:
        out, err = ctrl_c(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err
    skipped = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {live}:6: event.data.through_offset: "), out


def _imported(kind: str, path: Path) -> list[str]:
    """The ids of the events one import of `path` with --skip-bad holds."""
    db = path.parent.parent / f"once-{path.stat().st_size}.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path), "--skip-bad"])
    assert result.exit_code == 0, result.output
    return _event_ids(db)


def _assistant_line(uuid: str, parent: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": SESSION_ID, "timestamp": "2025-01-01T00:00:01Z",
            "message": {"id": "msg_1", "role": "assistant", "model": "m", "content": content}}


_USE = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}


@pytest.mark.parametrize(("records", "says"), [
    ([user_line("u1", "hi"), user_line("u2", "more", "u1", isSidechain="no")], "2: isSidechain must be true, false or null, not str"),
    ([user_line("u1", "hi", isMeta=1)], "1: isMeta must be true, false or null, not int"),
    ([user_line("u1", "hi"), user_line("u2", "sum", "u1", isCompactSummary="false")], "2: isCompactSummary must be true, false or null"),
    ([user_line("u1", "hi"), _assistant_line("a1", "u1", [_USE]),
      {**user_line("u2", "", "a1"), "message": {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x", "is_error": "false"}]}}],
     "3: message.content[0].is_error: Input should be a valid boolean"),
], ids=["sidechain-as-text", "meta-as-number", "compact-summary-as-text", "is-error-as-text"])
def test_a_claude_code_flag_of_the_wrong_type_is_refused_not_read_as_true(seeded: Path, tmp_path: Path,
                                                                         records: list[dict[str, Any]], says: str) -> None:
    """`"isSidechain": "no"` read as true: the line went to a sub-agent fork, and an empty thread
    was left behind. `"is_error": "false"` was stored as text, and sent so to the API."""
    path = tmp_path / f"{SESSION_ID}.jsonl"
    path.write_bytes(jsonl(*records))
    import_refused(seeded, tmp_path, ["claude-code", str(path)], f"{path}:{says}")


def test_a_pi_block_of_a_kind_not_known_is_counted_as_skipped(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(_pi_header() + jsonl(
        _pi_entry("e1", None, role="user", content=[{"type": "text", "text": "hear this"}, {"type": "audio", "data": "x"}]),
        _pi_entry("e2", "e1", role="bashExecution", command="ls", output=None)))
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "pi", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"] == {"block/audio": 1}
    with Store(tmp_path / "t.db") as store:
        (thread,) = store.threads()
        texts = [b["text"] for e in store.read(thread.id) if e.type == "message.appended" for b in e.data["content"]]
    assert texts == ["hear this", "!ls\n"]  # an output of null is no output, not "None"


def test_a_sub_agent_id_the_store_refuses_names_its_line(seeded: Path, tmp_path: Path) -> None:
    task = {"type": "tool_use", "id": "toolu_1", "name": "Task", "input": {"prompt": "look"}}
    main = tmp_path / f"{SESSION_ID}.jsonl"
    main.write_bytes(jsonl(
        user_line("u1", "go"),
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": SESSION_ID,
         "message": {"id": "msg_1", "role": "assistant", "content": [task], "stop_reason": "tool_use"}},
        user_line("u2", "", "a1", toolUseResult={"agentId": "ab\x1bcd"},
                  message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]}),
    ))
    agent = tmp_path / "agent-abcd.jsonl"
    agent.write_bytes(jsonl(user_line("s1", "look", isSidechain=True, agentId="ab\x1bcd"),
                            user_line("s2", "more", "s1", isSidechain=True, agentId="ab\x1bcd")).replace(b"\\u001b", LONE.encode()))
    import_refused(seeded, tmp_path, ["claude-code", str(main)], f"{agent}:1: ")


# -- JSON output is as safe to print as text output ------------------------------------------------

# What JSON leaves raw in a string but a terminal obeys: C1 controls (0x9b is CSI), DEL,
# bidirectional overrides, isolates and marks, and the Unicode line separators.
RAW_IN_JSON = "\x9b31m\x85\x7f\u202egnp.exe\u2066\u200f\u2028\u2029"
OBEYED = set("\x9b\x85\x7f\u202e\u2066\u200f\u2028\u2029")


def test_json_output_escapes_what_a_terminal_would_obey(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    thread = runner.invoke(cli, ["--db", db, "new", "--title", "T" + RAW_IN_JSON, "--model", "claude-x"]).stdout.strip()
    assert runner.invoke(cli, ["--db", db, "append", thread, "--role", "user", "--text", "hi" + RAW_IN_JSON]).exit_code == 0
    for command in (["show", thread, "--json"], ["log", thread, "--json"], ["rows", thread, "--json"], ["ls", "--json"],
                    ["tree", "--json"], ["request", thread], ["request", thread, "--json"], ["export", thread],
                    ["export", thread, "--format", "anthropic"], ["export", "--all"]):
        result = runner.invoke(cli, ["--db", db, *command])
        assert result.exit_code == 0, (command, result.output)
        assert not OBEYED & set(result.stdout), (command, result.stdout)
        parsed = [json.loads(line) for line in result.stdout.splitlines()] if command[0] in ("log", "export") and \
            "anthropic" not in command else [json.loads(result.stdout)]
        assert RAW_IN_JSON in json.dumps(parsed, ensure_ascii=False), command


# -- a database altered outside threadlog -------------------------------------------------------


@pytest.mark.parametrize(("column", "value"), [("data", "{not json"), ("meta", "garbage"), ("meta", b"\xff\x00")],
                         ids=["data-not-json", "meta-not-json", "meta-not-text"])
def test_an_event_row_altered_outside_threadlog_is_refused_in_one_line(seeded: Path, tmp_path: Path, column: str,
                                                                       value: str | bytes) -> None:
    db = fresh(seeded, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        position, thread = conn.execute("SELECT position, stream_id FROM events WHERE type = 2 LIMIT 1").fetchone()
        conn.execute(f"UPDATE events SET {column} = ? WHERE position = ?", (value, position))
    conn.close()
    before = file_dump(db)
    runner = CliRunner()
    for command in (["log", thread], ["show", thread], ["transcript", thread], ["rows", thread], ["usage", thread],
                    ["export", thread], ["import", "claude-code", str(SESSION)]):
        result = runner.invoke(cli, ["--db", str(db), *command])
        if result.exit_code == 0 and column == "meta" and command[0] in ("show", "transcript", "rows", "usage"):
            continue  # these read no meta
        assert isinstance(result.exception, SystemExit) and result.exit_code == 1, (command, result.exception)
        lines = result.stderr.splitlines()  # log and export stream: the events before it are printed
        assert len(lines) == 1 and "altered outside threadlog" in lines[0], (command, result.stderr)
    assert file_dump(db) == before


def test_text_that_is_not_utf8_is_refused_in_one_short_line(seeded: Path, tmp_path: Path) -> None:
    db = fresh(seeded, tmp_path)
    conn = sqlite3.connect(db)
    with conn:  # a long message whose text no longer decodes: the driver's error quotes all of it
        position, thread = conn.execute("SELECT position, stream_id FROM events WHERE type = 2 LIMIT 1").fetchone()
        conn.execute("UPDATE events SET data = CAST(? AS TEXT) WHERE position = ?",
                     (b'{"content":[{"text":"' + b"x" * 100_000 + b'\xff","type":"text"}],"role":"user"}', position))
    conn.close()
    before = raw_rows(db)
    runner = CliRunner()
    for command in (["log", thread], ["show", thread], ["transcript", thread], ["rows", thread], ["export", thread]):
        result = runner.invoke(cli, ["--db", str(db), *command])
        assert isinstance(result.exception, SystemExit) and result.exit_code == 1, (command, result.exception)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and len(lines[0]) < 400, (command, result.stderr[:500])
        assert "not UTF-8" in lines[0] and "altered outside threadlog" in lines[0] and "threadlog verify" in lines[0]
    assert raw_rows(db) == before


def raw_rows(db: Path) -> list[tuple[object, ...]]:
    """Every row of the log's tables as stored (`dump` cannot quote text that is not UTF-8)."""
    conn = sqlite3.connect(db)
    conn.text_factory = bytes
    try:
        return [row for table in ("events", "streams") for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        conn.close()
    verified = runner.invoke(cli, ["--db", str(db), "verify"])
    assert verified.exit_code == 1 and f"position {position}" in verified.stderr, verified.stderr[:500]


# -- rewinds nested inside rewinds, deeper than Python's stack ----------------------------------

REWINDS = 1500  # each branch rewound again inside itself: a fork of a fork, this many levels down


def assistant_line(uuid: str, parent: str, text: str, message_id: str | None = None) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": SESSION_ID, "requestId": f"r{uuid}",
            "timestamp": "2025-01-01T00:00:01Z",
            "message": {"id": message_id or f"m{uuid}", "type": "message", "role": "assistant", "model": "m",
                        "stop_reason": "end_turn", "content": [{"type": "text", "text": text}],
                        "usage": {"input_tokens": 1, "output_tokens": 1}}}


def _claude_code_rewinds(levels: int) -> bytes:
    """A session where every branch point's later branch is itself rewound: `levels` nested forks."""
    assistant = assistant_line
    records = [user_line("u0", "start"), assistant("a0", "u0", "reply 0")]
    parents, previous = [], "a0"
    for i in range(1, levels + 1):
        records += [user_line(f"y{i}", f"deeper {i}", previous), assistant(f"ya{i}", f"y{i}", f"answer {i}")]
        parents.append(previous)
        previous = f"ya{i}"
    records += [user_line(f"x{i}", f"leaf {i}", parents[i - 1]) for i in range(levels, 0, -1)]
    return jsonl(*records)


def _pi_rewinds(levels: int) -> bytes:
    def entry(uuid: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        return {"type": "message", "id": uuid, "parentId": parent, "timestamp": "2025-01-01T00:00:00Z",
                "message": {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}}
    records = [entry("u0", None, "user", "start"), entry("a0", "u0", "assistant", "reply 0")]
    parents, previous = [], "a0"
    for i in range(1, levels + 1):
        records.append(entry(f"y{i}", previous, "user", f"deeper {i}"))
        parents.append(previous)
        previous = f"y{i}"
    records += [entry(f"x{i}", parents[i - 1], "user", f"leaf {i}") for i in range(levels, 0, -1)]
    return _pi_header() + jsonl(*records)


@pytest.mark.parametrize(("kind", "content"), [
    ("claude-code", _claude_code_rewinds(REWINDS)),
    ("pi", _pi_rewinds(REWINDS)),
], ids=["claude-code", "pi"])
def test_rewinds_nested_deeper_than_pythons_stack_import(tmp_path: Path, kind: str, content: bytes) -> None:
    """Each branch is written before the next on a stack of the importer's own: a walk that
    called itself per fork ran out of Python's stack at ~1,000 levels, and the error was
    reported as a line nested too deeply (a flat one)."""
    session = tmp_path / "deep.jsonl"
    session.write_bytes(content)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(session)])
    assert result.exit_code == 0, result.output
    assert f"{REWINDS} fork(s)" in result.output
    with Store(db) as store:
        threads, events = store.counts()
        assert threads == REWINDS + 1
        assert f"{events} event(s) added of {events}" in result.output
        store.verify()
        deepest = max(store.all_threads(), key=lambda t: t.depth)
        assert deepest.depth == REWINDS
    again = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(session)])
    assert again.exit_code == 0 and f"0 event(s) added of {events}" in again.output, again.output


def test_a_response_id_repeated_in_a_later_turn_is_a_response_of_its_own(tmp_path: Path) -> None:
    """Lines were grouped into one response by message.id wherever they stood: the second reply
    was merged into the first, and the user's turn between them moved to a fork."""
    session = tmp_path / f"{SESSION_ID}.jsonl"
    session.write_bytes(jsonl(user_line("u1", "Hello"), assistant_line("a1", "u1", "Hi there", "msg_same"),
                              user_line("u2", "How are you?", "a1"), assistant_line("a2", "u2", "I'm doing well", "msg_same"),
                              user_line("u3", "Goodbye", "a2")))
    os.utime(session, (0, 0))
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [session])
        assert (summary.forks, summary.assistant_messages) == (0, 2)
        (thread,) = store.threads()
        texts = [b["text"] for e in store.read(thread.id) if e.type == "message.appended" for b in e.data["content"]]
    assert texts == ["Hello", "Hi there", "How are you?", "I'm doing well", "Goodbye"]


def test_an_event_id_two_lines_would_share_is_refused_by_line_with_nothing_written(seeded: Path, tmp_path: Path) -> None:
    """A uuid made to look like another line's run id (`u1` starts the run `u1:run`): the store
    refuses a batch that repeats an id, but only after the thread was created. The plan refuses
    it first, naming the line, so the database stays as it was."""
    session = tmp_path / f"{SESSION_ID}.jsonl"
    session.write_bytes(jsonl(user_line("u1", "hi"), user_line("u1:run", "again", "u1")))
    import_refused(seeded, tmp_path, ["claude-code", str(session)], f"{session}:2: ")


def _response(uuid: str, parent: str, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": SESSION_ID, "timestamp": "2025-01-01T00:00:00Z",
            "message": {"id": "msg_1", "role": "assistant", "model": "claude-x", "content": [block], "stop_reason": "tool_use"}}


def _repeated_call() -> list[dict[str, Any]]:
    """A response over three lines whose tool_use line is written twice (line 4), then its result and an answer."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    return [user_line("u1", "list the files"), _response("c1", "u1", {"type": "thinking", "thinking": "ls", "signature": "s"}),
            _response("c2", "c1", call), _response("c3", "c2", call),
            user_line("r1", "", "c3", message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                                               "content": "a b"}]}),
            user_line("u2", "and then?", "r1")]


def _huge_result() -> list[dict[str, Any]]:
    """A tool result (line 3) larger than an event may be (a Read of a 40 MB log)."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/var/log/big.log"}}
    return [user_line("u1", "read the log"), _response("c1", "u1", call),
            user_line("r1", "", "c1", message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                                               "content": "x" * (33 << 20)}]}),
            user_line("u2", "and then?", "r1")]


@pytest.mark.parametrize(("records", "line", "says"), [
    (_repeated_call, 4, "tool_use id 'toolu_1' appears twice"),
    (_huge_result, 3, "bytes of JSON; an event holds at most"),
], ids=["repeated-tool-use-id", "line-too-large"])
def test_a_line_refused_for_what_it_holds_is_named_and_skipped_with_skip_bad(seeded: Path, tmp_path: Path,
                                                                             records: Any, line: int, says: str) -> None:
    """Refused for what it means, not how it is written: the error names the line that holds
    it (in a response written over several lines too), and `--skip-bad`, which the error
    offers, skips that event and reports it; the rest of the session is imported."""
    session = tmp_path / f"{SESSION_ID}.jsonl"
    session.write_bytes(jsonl(*records()))
    import_refused(seeded, tmp_path, ["claude-code", str(session)], f"{session}:{line}: ")
    import_refused(seeded, tmp_path, ["claude-code", str(session)], says)
    db = tmp_path / "skip.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", "--skip-bad", "--json", str(session)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(bad["file"], bad["line"]) for bad in report["bad"]] == [(str(session), line)] and says in report["bad"][0]["why"]
    with Store(db) as store:
        texts = [json.dumps(e.data) for e in store.read(report["thread_ids"][0]) if e.type == "message.appended"]
        assert "and then?" in texts[-1] and store.verify()


def test_a_pi_line_refused_for_what_it_holds_does_not_offer_skip_bad(seeded: Path, tmp_path: Path) -> None:
    """pi's importer cannot go on without such an event, so `--skip-bad` does not skip it: the
    error names the line and does not offer it."""
    call = {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {}}
    session = tmp_path / "pi.jsonl"
    session.write_bytes(_pi_header() + jsonl(
        {"type": "message", "id": "u1", "parentId": None, "timestamp": "2025-01-01T00:00:00Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "go"}]}},
        {"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2025-01-01T00:00:00Z",
         "message": {"role": "assistant", "content": [call, call], "stopReason": "toolUse"}}))
    for flags in ([], ["--skip-bad"]):
        import_refused(seeded, tmp_path, ["pi", *flags, str(session)], f"{session}:3: ")
        result = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "import", "pi", *flags, str(session)])
        assert "appears twice" in result.stderr and "--skip-bad" not in result.stderr, result.stderr


# -- a source whose lines now form another tree than when it was imported --------------------------


def _edited(fixture: Path, line: int, edit: Callable[[dict[str, Any]], None]) -> tuple[bytes, bytes]:
    """A session file, and the same with `edit` made to its line `line`."""
    lines = fixture.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[line - 1])
    edit(record)
    return b"".join(lines), b"".join([*lines[:line - 1], json.dumps(record).encode() + b"\n", *lines[line:]])


@pytest.mark.parametrize(("kind", "fixture", "line", "edit", "flags", "refused_at"), [
    # The answer a prompt followed (line 7) no longer read: the prompt is hung on the line before it, a branch.
    ("pi", FIXTURES / "pi-merged.jsonl", 7, lambda r: r.update(message=5), ["--skip-bad"], 9),
    # The kept messages of a compaction (line 8) a number: the compaction summary starts a fork.
    ("claude-code", FIXTURES / "claude-code" / "dag" / "dag_compact_after_rewind_preserved.jsonl", 8,
     lambda r: r["compactMetadata"].update(preservedMessages=5), [], 10),
], ids=["pi-line-skipped", "claude-code-line-changed"])
def test_a_source_whose_entries_moved_to_another_thread_is_refused_with_nothing_written(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, fixture: Path, line: int,
    edit: Callable[[dict[str, Any]], None], flags: list[str], refused_at: int
) -> None:
    """An entry an import stored in one thread that the source now places in another (a line
    edited, or skipped as bad): the store refused its event only after the streams before it
    were written, a fork left half made, in a message blaming no line (`event id 'pi:s:u2' is
    already used in thread …`, `7 of the batch's 8 event ids are already stored`). The lines
    that now form another tree may be imported into another database. The line is named as the
    file was given (here also by a relative path), though its events record the real path."""
    path = tmp_path / fixture.name
    before, after = _edited(fixture, line, edit)
    path.write_bytes(before)
    (tmp_path / "first").mkdir()
    imported = fresh(seeded, tmp_path / "first")
    assert CliRunner().invoke(cli, ["--db", str(imported), "import", kind, str(path)]).exit_code == 0
    path.write_bytes(after)
    import_refused(imported, tmp_path, [kind, *flags, str(path)], f"{path}:{refused_at}: its event ")
    if not flags:  # named after a session the store does not hold, that one is not written either (--skip-bad writes
        import_refused(imported, tmp_path, [kind, str(SESSION), str(path)], f"{path}:{refused_at}: its event ")  # as it goes)
    monkeypatch.chdir(tmp_path)
    import_refused(imported, tmp_path, [kind, *flags, path.name], f"error: {path.name}:{refused_at}: its event ")


@pytest.mark.parametrize("value", [[], {}, 5], ids=["list", "object", "number"])
def test_a_pi_entry_id_that_is_not_text_is_refused_by_its_line(seeded: Path, tmp_path: Path, value: Any) -> None:
    """An id of a list or an object raised TypeError (`unhashable type: 'list'`), which the
    command reported as a stored event of the wrong shape, "a bug in threadlog"; a number was
    taken for a version 1 entry's index."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(_pi_header() + jsonl(_pi_entry("e1", None, role="user", content="hi"),
                                          {**_pi_entry("e2", "e1", role="user", content="more"), "id": value}))
    import_refused(seeded, tmp_path, ["pi", str(path)], f"{path}:3: id must be a string, not {type(value).__name__}")


# -- files that hold no session at all -------------------------------------------------------------

PI_SESSION = FIXTURES / "pi" / "large-session-head.jsonl"
TRAJECTORY = FIXTURES / "swe-agent" / "function_calling_simple.traj"
# What each importer's refusals say a file should have been, and a session file it imports.
NO_SESSION = {"claude-code": ("a Claude Code session (JSON Lines text)", SESSION), "pi": ("a pi session (JSON Lines text)", PI_SESSION),
              "swe-agent": ("a SWE-agent trajectory (JSON text)", TRAJECTORY)}


def _aged(path: Path, content: bytes, seconds: float = 3600) -> Path:
    """`path` holding `content`, last changed `seconds` ago: not a file still being written."""
    path.write_bytes(content)
    os.utime(path, (time.time() - seconds,) * 2)
    return path


def test_a_pi_file_without_its_session_header_is_refused_as_no_pi_session(seeded: Path, tmp_path: Path) -> None:
    """A file whose first line is no `{"type": "session", ...}` header (a pi entry, a Claude
    Code session given to the pi importer) was refused as a damaged line, "fix or delete that
    line": no line of it makes it a pi session. It is refused as no pi session, with what to do."""
    headless = _aged(tmp_path / "headless.jsonl", jsonl(_pi_entry("e1", None, role="user", content="hi")))
    import_refused(seeded, tmp_path, ["pi", str(headless)],
                   f'{headless}:1: no session header, so not a pi session (JSON Lines text): a pi session file starts with one '
                   '({"type": "session", "id": ...}); leave that file out, or skip such files (--skip-bad)')
    import_refused(seeded, tmp_path, ["pi", str(SESSION)],
                   f"{SESSION}:1: no session header, so not a pi session (JSON Lines text): a pi session file starts with one "
                   '({"type": "session", "id": ...}); this line is Claude Code\'s: for a Claude Code session, run '
                   "`threadlog import claude-code`; leave that file out")


def test_a_pi_session_beside_claude_code_sessions_is_refused_by_name(seeded: Path, tmp_path: Path) -> None:
    """`import claude-code` of a directory holding a pi session beside Claude Code's took the
    pi file as a session of nothing (its lines counted as "lines without conversation:
    message 914, session 1, ...") and exited 0: the pi session was lost without a word, where
    the pi importer refuses a Claude Code file by name. It is refused by name (or skipped,
    named, with --skip-bad), the Claude Code session beside it imported."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(SESSION, folder / SESSION.name)
    pi = _aged(folder / "pi.jsonl", PI_SESSION.read_bytes())
    import_refused(seeded, tmp_path, ["claude-code", str(folder)],
                   f"{pi}:1: a pi session's header, so not a Claude Code session (JSON Lines text): for a pi session, run "
                   "`threadlog import pi`; leave that file out, or skip such files (--skip-bad)")
    db = tmp_path / "skipping.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "claude-code", "--skip-bad", "--json", str(folder)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [(bad["file"], bad["line"]) for bad in summary["bad"]] == [(str(pi), 1)] and summary["added"] > 0, summary


@pytest.mark.parametrize("kind", ["claude-code", "pi"])
@pytest.mark.parametrize("name", ["function_calling_simple.traj", "marshmallow-code__marshmallow-1867.traj", "warmup.traj"])
def test_a_trajectory_given_to_a_session_importer_names_the_swe_agent_import(seeded: Path, tmp_path: Path, kind: str,
                                                                             name: str) -> None:
    """`import claude-code` or `import pi` of a SWE-agent trajectory (one JSON object over many
    lines) refused its first line, `{`, as "not JSON ... fix or delete that line", and with
    --skip-bad named every line of it: advice for a damaged session. It is refused by name,
    pointing at `threadlog import swe-agent`, or skipped whole with --skip-bad."""
    trajectory = _aged(tmp_path / name, (FIXTURES / "swe-agent" / name).read_bytes())
    import_refused(seeded, tmp_path, [kind, str(trajectory)],
                   f"{trajectory}:1: a SWE-agent trajectory, so not {NO_SESSION[kind][0]}: for a SWE-agent trajectory, run "
                   "`threadlog import swe-agent`; leave that file out, or skip such files (--skip-bad)")
    db = tmp_path / "skipping.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", "--json", str(trajectory)])
    assert [(bad["file"], bad["line"]) for bad in json.loads(result.stdout)["bad"]] == [(str(trajectory), 1)], result.output


@pytest.mark.parametrize("session, what, run", [
    (PI_SESSION, "a pi session's header", "for a pi session, run `threadlog import pi`"),
    (SESSION, "a Claude Code session's line", "for a Claude Code session, run `threadlog import claude-code`"),
], ids=["pi", "claude-code"])
def test_a_session_given_to_the_swe_agent_import_names_the_command_that_imports_it(seeded: Path, tmp_path: Path, session: Path,
                                                                                   what: str, run: str) -> None:
    """`import swe-agent` of a Claude Code or pi session refused it as "not JSON (Extra data:
    line 2 column 1 ...)"; its first line tells which tool wrote it, and the refusal names it.
    A session of one line, JSON whole, was "not a SWE-agent trajectory" without the command."""
    many = _aged(tmp_path / session.name, session.read_bytes())
    one = _aged(tmp_path / f"one-{session.name}", session.read_bytes().partition(b"\n")[0] + b"\n")
    for path in (many, one):
        import_refused(seeded, tmp_path, ["swe-agent", str(path)],
                       f"{path}: {what}, so not {NO_SESSION['swe-agent'][0]}: {run}")


CLAUDE_CODE = FIXTURES / "claude-code"
_ANOTHER_TOOLS = [
    (PI_SESSION, "a pi session's header", "for a pi session, run `threadlog import pi`"),
    *((CLAUDE_CODE / path, "a Claude Code session's line", "for a Claude Code session, run `threadlog import claude-code`")
      for path in (SESSION.relative_to(CLAUDE_CODE), "-src-deep-manifest/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl",
                   "-Users-dain-workspace-claude-code-log-sample/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl",
                   "-Users-dain-workspace-JSSoundRecorder/7acd37a8-2745-4b58-a8a9-46164b22ad9e.jsonl")),
    *((FIXTURES / "swe-agent" / name, "a SWE-agent trajectory", "for a SWE-agent trajectory, run `threadlog import swe-agent`")
      for name in ("function_calling_simple.traj", "marshmallow-code__marshmallow-1867.traj", "warmup.traj")),
]


@pytest.mark.parametrize("path, what, run", _ANOTHER_TOOLS,
                         ids=["pi", "claude-code", "claude-code-summary-first", "claude-code-user-first",
                              "claude-code-queue-first", "swe-agent", "swe-agent-environment-first", "swe-agent-ctf"])
def test_another_tools_file_given_to_import_events_names_the_command_that_imports_it(seeded: Path, tmp_path: Path,
                                                                                      path: Path, what: str, run: str) -> None:
    """`import events` of a Claude Code or pi session said only `not a threadlog export`, and of
    a SWE-agent trajectory `is not JSON` (its first line, `{`, is none by itself), where the
    Claude Code importer given a pi session names `threadlog import pi`. Its first line (or a
    trajectory's opening) tells which tool wrote it, and the refusal names its command."""
    import_refused(seeded, tmp_path, ["events", str(path)], f"error: {path}: line 1: {what}, not a threadlog export: {run}")


BLANK = {"empty": (b"", "an empty file"), "blank-lines": (b"\n  \n\n", "a file of blank lines only")}


@pytest.mark.parametrize("blank", list(BLANK))
@pytest.mark.parametrize("kind", list(NO_SESSION))
def test_an_empty_or_blank_file_is_refused_by_every_importer_as_no_session(seeded: Path, tmp_path: Path, kind: str,
                                                                           blank: str) -> None:
    """Claude Code's import took an empty file as a session of nothing (`1 file(s)`, exit 0),
    pi's refused it as a damaged first line ("fix or delete that line"), SWE-agent's as "not JSON
    (Expecting value: line 1 column 1 (char 0))". Each now says what it is, by name, with
    nothing written; with --skip-bad it is skipped, named as other skipped files are."""
    content, says = BLANK[blank]
    kind_of, _ = NO_SESSION[kind]
    path = _aged(tmp_path / ("nothing.traj" if kind == "swe-agent" else "nothing.jsonl"), content)
    line = "" if kind == "swe-agent" else ":1"  # SWE-agent's refusals name a file whole
    import_refused(seeded, tmp_path, [kind, str(path)], f"{path}{line}: {says}, not {kind_of}; ")
    db = fresh(seeded, tmp_path)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", "--json", str(path)])
    assert json.loads(result.stdout)["bad"] == [{"file": str(path), "line": 1, "why": f"{says}, not {kind_of}"}], result.output
    assert result.exit_code == 1 and file_dump(db) == before


@pytest.mark.parametrize("blank", list(BLANK))
@pytest.mark.parametrize("kind", list(NO_SESSION))
def test_an_empty_or_blank_file_just_changed_waits_as_one_being_written(tmp_path: Path, kind: str, blank: str) -> None:
    """A file a tool has just created, its first line still to come: pi's and SWE-agent's
    imports left an empty one for a later import, but pi refused one of blank lines, and Claude
    Code's took either as a session of nothing, without a word. Each waits, named."""
    path = tmp_path / ("new.traj" if kind == "swe-agent" else "new.jsonl")
    path.write_bytes(BLANK[blank][0])
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--json", str(path)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["waiting_files"], summary["bad"], summary["events"]) == ([str(path)], [], 0)


@pytest.mark.parametrize("kind", list(NO_SESSION))
def test_skip_bad_that_skips_all_the_files_held_fails(tmp_path: Path, kind: str) -> None:
    """`import pi --skip-bad` of a file without its header, or any import with --skip-bad of
    files all of whose lines were skipped, exited 0, an empty database left behind: a script
    took it for an import that worked. It names each skip as before, then fails (exit 1), and
    leaves no database where there was none; beside a session it imports, it succeeds."""
    bad = {"claude-code": b'not json\n{"type": 5}\n', "pi": jsonl(_pi_entry("e1", None, role="user", content="hi")),
           "swe-agent": b'{"trajectory": []}\n'}[kind]
    path = _aged(tmp_path / ("bad.traj" if kind == "swe-agent" else "bad.jsonl"), bad)
    db = tmp_path / "new.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", str(path)])
    assert result.exit_code == 1 and f"skipped {path}:1: " in result.stdout, result.output
    assert result.stderr.splitlines() == [f"error: nothing was imported: --skip-bad skipped all that {path} held "
                                          f"({result.stdout.count('skipped ')} skipped, each named in the summary)"]
    assert not db.exists()
    beside = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", "--json", str(NO_SESSION[kind][1]), str(path)])
    assert beside.exit_code == 0, beside.output
    summary = json.loads(beside.stdout)
    assert summary["added"] > 0 and {bad["file"] for bad in summary["bad"]} == {str(path)}


@pytest.mark.parametrize("kind", list(NO_SESSION))
def test_an_empty_file_in_an_imported_directory_is_left_out(tmp_path: Path, kind: str) -> None:
    """A tool creates its session file before writing its first line, and may leave it empty.
    Found in a directory beside sessions, an old empty file stopped the whole import ("an empty
    file, not a ... session"; pi's and SWE-agent's before that as a damaged line, or not JSON):
    it holds nothing, and the import of the directory takes the sessions beside it."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    session = NO_SESSION[kind][1]
    shutil.copy(session, folder / session.name)
    _aged(folder / ("empty.traj" if kind == "swe-agent" else "empty.jsonl"), b"")
    alone = tmp_path / "alone.db"
    expected = CliRunner().invoke(cli, ["--db", str(alone), "import", kind, "--json", str(folder / session.name)])
    assert expected.exit_code == 0, expected.output
    db = tmp_path / "t.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--json", str(folder)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["bad"] == [] and summary["events"] == json.loads(expected.stdout)["events"] > 0, summary
