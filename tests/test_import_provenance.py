"""Where an imported event came from: the file each event (`meta.source.file`) and thread
(`metadata.file`) names is the file's real path, which names it from any directory, however
the import was given it; real session files (tests/fixtures), imported by the CLI, once and
followed, and into databases earlier releases made."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store, import_claude_code, import_pi, import_swe_agent
from threadlog.cli import cli
from threadlog.importers.follow import follow_claude_code, follow_files

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOURCES = {  # each format's real session: the directory copied, and the file in it imported
    "claude-code": FIXTURES / "claude-code" / "-src-experiments-claude_p" / "29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl",
    "pi": FIXTURES / "pi" / "large-session-head.jsonl",
    "swe-agent": FIXTURES / "swe-agent" / "function_calling_simple.traj",
}


def _files_named(store: Store) -> set[str]:
    """Every file the store's events name: their `meta.source.file`, and the `metadata.file` of
    their threads and sub-agent forks."""
    named = set()
    for event in store.read_all():
        source = event.meta.get("source")
        if isinstance(source, dict) and "file" in source:
            named.add(source["file"])
        metadata = event.data.get("metadata") if event.type in ("thread.created", "thread.forked") else None
        if isinstance(metadata, dict) and "file" in metadata:
            named.add(metadata["file"])
    return named


def _linked_copy(tmp_path: Path, source: Path) -> tuple[Path, Path]:
    """`source`'s directory copied to `real/sessions` (times kept: no file looks just written),
    and `link`, a symbolic link to `real`: (the copy's real directory, the link)."""
    real = tmp_path.resolve() / "real"
    shutil.copytree(source.parent, real / "sessions")
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    return real / "sessions", tmp_path / "link"


def _imported(db: Path, tool: str, *paths: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["--db", str(db), "import", tool, *paths, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


@pytest.mark.parametrize("tool", list(SOURCES))
def test_an_imported_file_is_named_by_its_real_path_however_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         tool: str) -> None:
    """`cd DIR && threadlog import pi sessions/x.jsonl` stored `sessions/x.jsonl`, relative to a
    directory nothing recorded: read anywhere else (the viewer, `show`, an audit) it named no
    file, or another one. Given through a relative path in a linked directory, each event and
    thread names the file's real path; the same file given by any other spelling adds nothing,
    changes nothing, and is named the same."""
    source = SOURCES[tool]
    sessions, link = _linked_copy(tmp_path, source)
    monkeypatch.chdir(link)
    db = tmp_path / "t.db"
    first = _imported(db, tool, f"sessions/{source.name}")
    assert first["added"] > 0
    with Store(db) as store:
        named = _files_named(store)
    real = str(sessions / source.name)
    assert real in named
    assert all(os.path.isabs(name) and Path(name).resolve() == Path(name) and Path(name).is_file() for name in named), named
    # A sub-agent's file (Claude Code's) is named by its own real path, in the session's folder.
    assert all(Path(name).is_relative_to(sessions) for name in named) and (len(named) > 1) == (tool == "claude-code")
    monkeypatch.chdir(tmp_path)
    for spelling in (str(sessions / source.name), f"link/sessions/{source.name}", f"real/sessions/../sessions/{source.name}"):
        again = _imported(db, tool, spelling)
        assert (again["added"], again["changed"], again["gone"], again["thread_ids"]) == (0, 0, 0, first["thread_ids"]), spelling
    with Store(db) as store:
        assert _files_named(store) == named


# Databases earlier releases made importing a session by a relative path (`make_*.py` beside
# them: `import_pi(store, ["pi-merged.jsonl"])`), and a line that grows the session.
EARLIER = {
    "claude-code": ("cc-titled", import_claude_code, {
        "type": "user", "uuid": "u9", "parentUuid": "a2", "sessionId": "0a1b2c3d-0000-4000-8000-00000000c0de",
        "isSidechain": False, "cwd": "/src", "version": "2.0.0", "timestamp": "2025-07-01T10:00:03.000Z",
        "message": {"role": "user", "content": "and the third?"}}),
    "pi": ("pi-merged", import_pi, {
        "type": "message", "id": "a3", "parentId": "u3", "timestamp": "2025-07-01T10:00:03.000Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "then this"}], "stopReason": "stop"}}),
}


@pytest.mark.parametrize("tool", list(EARLIER))
def test_a_session_an_earlier_release_recorded_by_a_relative_path_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          tool: str) -> None:
    """A database whose events name their file as it was given (`pi-merged.jsonl`): the file,
    given by that spelling or any other, adds nothing and is no changed source; grown, it adds
    its new lines alone, which name the file's real path, and what is stored stays as it is."""
    name, importer, grown = EARLIER[tool]
    sessions, link = _linked_copy(tmp_path, FIXTURES / f"{name}.jsonl")
    db = tmp_path / "t.db"
    shutil.copy(FIXTURES / f"{name}.db", db)
    with Store(db) as store:
        stored = [(e.hash, e.meta) for e in store.read_all()]
        assert _files_named(store) == {f"{name}.jsonl"}
        monkeypatch.chdir(sessions)
        for spelling in (f"{name}.jsonl", str(sessions / f"{name}.jsonl"), str(link / "sessions" / f"{name}.jsonl")):
            again = importer(store, [spelling])
            assert (again.added, again.changed, again.gone) == (0, 0, 0), spelling
        with (sessions / f"{name}.jsonl").open("a", encoding="utf-8") as file:
            file.write(json.dumps(grown) + "\n")
        more = importer(store, [f"{name}.jsonl"])
        assert more.added > 0 and (more.changed, more.gone) == (0, 0)
        events = list(store.read_all())
        assert [(e.hash, e.meta) for e in events[:len(stored)]] == stored
        assert {e.meta["source"]["file"] for e in events[len(stored):]} == {str(sessions / f"{name}.jsonl")}
        assert importer(store, [f"{name}.jsonl"]).added == 0
        store.verify()


def _events(store: Store) -> list[tuple[str, int, str, str]]:
    """Every event `store` holds, by thread and offset (a follower may write a session's threads
    in another order than one import does), with its data and meta."""
    return sorted((e.stream_id, e.offset, e.event_id, json.dumps([e.data, e.meta], sort_keys=True)) for e in store.read_all())


@pytest.mark.parametrize("tool", list(SOURCES))
def test_a_followed_file_is_named_as_one_import_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    """`import --follow sessions/` in a linked directory records what one import of the file
    by its real path records: the same events, naming the same file."""
    source = SOURCES[tool]
    sessions, link = _linked_copy(tmp_path, source)
    monkeypatch.chdir(link)
    polls = iter(range(3))
    followed = Store(":memory:")
    if tool == "claude-code":  # its files as finished ones (a checkout's times are recent: its last answer would wait)
        follow_claude_code(followed, ["sessions"], interval=0.01, live_within=0, stop=lambda: next(polls, None) is None)
    else:
        follow_files(followed, tool, ["sessions"], interval=0.01, stop=lambda: next(polls, None) is None)
    once = Store(":memory:")
    {"claude-code": import_claude_code, "pi": import_pi, "swe-agent": import_swe_agent}[tool](once, [sessions])
    assert _events(followed) == _events(once) != []
    assert str(sessions / source.name) in _files_named(followed)


def test_what_an_import_prints_names_the_file_as_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines a source now gives otherwise are named as the import was given the file
    (`sessions/x.jsonl:7`), as its bad lines are, though its events record the real path."""
    source = SOURCES["pi"]
    sessions, link = _linked_copy(tmp_path, source)
    db = tmp_path / "t.db"
    _imported(db, "pi", str(sessions / source.name))
    records = [json.loads(line) for line in (sessions / source.name).read_text(encoding="utf-8").splitlines()]
    line, prompt = next((n, r) for n, r in enumerate(records, 1) if r.get("type") == "message"
                        and r["message"]["role"] == "user" and isinstance(r["message"]["content"], list))
    prompt["message"]["content"] = [{"type": "text", "text": "CHANGED TEXT"}]
    (sessions / source.name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    monkeypatch.chdir(link)
    given = f"sessions/{source.name}"
    printed = CliRunner().invoke(cli, ["--db", str(db), "import", "pi", given])
    assert printed.exit_code == 0 and f"first at {given}:{line}, kept as stored" in printed.output, printed.output
    report = _imported(db, "pi", given)
    assert (report["changed"], report["changed_lines"]) == (1, [{"file": given, "line": line}])
    with Store(db) as store:
        assert _files_named(store) == {str(sessions / source.name)}
