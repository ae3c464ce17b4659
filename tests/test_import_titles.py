"""Claude Code `summary` lines (a session's titles) through imports of a session that grows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from threadlog import Store, import_claude_code
from tests.procs import ctrl_c, interruptible

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SESSION = "0a1b2c3d-0000-4000-8000-00000000c0de"


def _line(uuid: str, parent: str | None, type_: str, message: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": SESSION, "isSidechain": False, "cwd": "/src",
            "version": "2.0.0", "timestamp": "2025-07-01T10:00:00.000Z", "message": message}


def _answer(uuid: str, parent: str, text: str) -> dict[str, Any]:
    return _line(uuid, parent, "assistant", {"id": f"msg_{uuid}", "role": "assistant", "model": "claude-x",
                                             "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})


def _exchange(n: int, parent: str | None) -> list[dict[str, Any]]:
    """A prompt and its answer, after `parent`."""
    return [_line(f"u{n}", parent, "user", {"role": "user", "content": f"question {n}"}), _answer(f"a{n}", f"u{n}", f"answer {n}")]


def _title(leaf: str, text: str) -> dict[str, Any]:
    return {"type": "summary", "summary": text, "leafUuid": leaf}


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _ids(store: Store, thread: str) -> list[str]:
    return [e.event_id for e in store.read(thread)]


def _whole(path: Path) -> list[str]:
    """The event ids of one import of the file as it is now."""
    with Store(":memory:") as store:
        return _ids(store, import_claude_code(store, [path]).thread_ids[0])


def test_a_titled_session_that_grows_adds_only_its_new_lines(tmp_path: Path) -> None:
    """A title is placed where its summary line is: the lines written after it come after it,
    so the file's growth is added after what is stored, as one import of the whole file has it."""
    path = tmp_path / f"{SESSION}.jsonl"
    records = [*_exchange(1, None), _title("a1", "First"), *_exchange(2, "a1")]
    _write(path, records)
    with Store(tmp_path / "t.db") as store:
        thread = import_claude_code(store, [path]).thread_ids[0]
        before = _ids(store, thread)
        records += [*_exchange(3, "a2"), _title("a3", "Third")]
        _write(path, records)
        grown = import_claude_code(store, [path])
        assert (grown.added, grown.changed) == (5, 0)  # run, prompt, answer, run end; the title
        assert _ids(store, thread)[:len(before)] == before
        assert _ids(store, thread) == _whole(path)
        assert store.title(thread) == "Third"
        assert import_claude_code(store, [path]).added == 0


def test_a_titled_session_imported_by_the_release_that_put_titles_last_takes_its_growth(tmp_path: Path) -> None:
    """tests/fixtures/cc-titled.db: the session imported at commit c754ae9, which put every
    title after all of the messages (one summary line at the top of the file, one at its end).
    The titles stay where they are stored, and the file's growth comes after them."""
    db, path = tmp_path / "t.db", tmp_path / "cc-titled.jsonl"
    shutil.copy(FIXTURES / "cc-titled.db", db)
    shutil.copy(FIXTURES / "cc-titled.jsonl", path)
    with Store(db) as store:
        [info] = store.all_threads()
        stored = [e.hash for e in store.read(info.id)]
        assert [e.type for e in store.read(info.id)][-2:] == ["title.set", "title.set"]
        again = import_claude_code(store, [path])
        assert (again.added, again.changed) == (0, 0)
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        _write(path, [*records, *_exchange(3, "a2"), _title("a3", "Third")])
        grown = import_claude_code(store, [path])
        assert (grown.added, grown.changed) == (5, 0)
        assert [e.hash for e in store.read(info.id)][:len(stored)] == stored
        assert store.title(info.id) == "Third"
        assert import_claude_code(store, [path]).added == 0
        store.verify()


def test_a_title_written_again_for_the_same_message_is_the_title(tmp_path: Path) -> None:
    """Claude Code writes a summary for the same message again when it regenerates the title:
    each is a title.set of its own (the first keeps the id earlier releases gave it), the later
    one the thread's title, and the session imports again as it grows."""
    path = tmp_path / f"{SESSION}.jsonl"
    records = [*_exchange(1, None), _title("a1", "First try"), _title("a1", "A better title")]
    _write(path, records)
    with Store(tmp_path / "t.db") as store:
        thread = import_claude_code(store, [path]).thread_ids[0]
        assert [(e.event_id, e.data["title"]) for e in store.read(thread) if e.type == "title.set"] == [
            ("cc:" + SESSION + ":title:a1", "First try"), ("cc:" + SESSION + ":title:a1:4", "A better title")]
        assert store.title(thread) == "A better title"
        _write(path, [*records, *_exchange(2, "a1"), _title("a1", "Third")])
        assert import_claude_code(store, [path]).added == 5
        assert store.title(thread) == "Third"
        assert _ids(store, thread) == _whole(path)


def test_a_titled_session_followed_from_any_line_ends_as_one_import(tmp_path: Path) -> None:
    """Polled after any of its lines (a response written over two lines, a title after each
    turn), the session ends with its titles where one import of the whole file puts them."""
    def response(uuid: str, parent: str, block: dict[str, Any], stop: str) -> dict[str, Any]:
        return _line(uuid, parent, "assistant", {"id": "msg_r", "role": "assistant", "model": "claude-x", "content": [block],
                                                 "stop_reason": stop})

    records = [*_exchange(1, None), _title("a1", "First"),
               _line("u2", "a1", "user", {"role": "user", "content": "list them"}),
               response("c1", "u2", {"type": "thinking", "thinking": "ls", "signature": "s"}, "tool_use"),
               _title("c1", "Thinking"),
               response("c2", "c1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}, "tool_use"),
               _line("r1", "c2", "user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                                       "content": "a b"}]}),
               _answer("a2", "r1", "Two files."), _title("a2", "Listing")]
    path = tmp_path / f"{SESSION}.jsonl"
    _write(path, records)
    expected = _whole(path)
    for cut in range(1, len(records)):
        with Store(":memory:") as store:
            _write(path, records[:cut])
            import_claude_code(store, [path], partial_tail=True)
            _write(path, records)
            import_claude_code(store, [path], partial_tail=True)
            [thread] = store.all_threads()
            assert _ids(store, thread.id) == expected, f"cut after line {cut}"


def test_follow_goes_on_past_a_title_as_the_session_grows(tmp_path: Path) -> None:
    """`import claude-code --follow` (a real process) mirrors a titled session through its growth:
    it stopped at the first line written after a title ('holds events the source no longer has')."""
    project = tmp_path / "projects"
    project.mkdir()
    path = project / f"{SESSION}.jsonl"
    _write(path, [*_exchange(1, None), _title("a1", "First")])
    db = tmp_path / "f.db"
    follower = interruptible(
        [sys.executable, "-m", "threadlog", "--db", str(db), "import", "claude-code", "--follow", "--interval", "0.1",
         str(project)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        for n in range(2, 5):
            _wait_for_events(db, len(_whole(path)), follower)
            with path.open("a", encoding="utf-8") as out:  # as Claude Code writes: appended, never rewritten
                out.write("".join(json.dumps(r) + "\n" for r in [*_exchange(n, f"a{n - 1}"), _title(f"a{n}", f"Title {n}")]))
        _wait_for_events(db, len(_whole(path)), follower)
    finally:
        _, err = ctrl_c(follower)
    assert follower.returncode == 0, err.decode()
    with Store(db) as store:
        [info] = store.all_threads()
        assert _ids(store, info.id) == _whole(path)


def _wait_for_events(db: Path, count: int, follower: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and follower.poll() is None:
        if db.exists():
            with Store(db) as store:
                if store.counts().events >= count:
                    return
        time.sleep(0.1)


def test_a_summary_line_written_before_the_message_it_names_waits_for_it(tmp_path: Path) -> None:
    """A summary line at the top naming a later message: an import before that message was
    written drops the title, and the grown file put it before what that import stored (refused
    for good: "holds events the source no longer has in that order")."""
    path = tmp_path / f"{SESSION}.jsonl"
    records = [_title("a2", "Second"), *_exchange(1, None), *_exchange(2, "a1")]
    _write(path, records[:3])
    with Store(tmp_path / "t.db") as store:
        thread = import_claude_code(store, [path]).thread_ids[0]
        before = _ids(store, thread)
        assert store.title(thread) is None
        _write(path, records)
        grown = import_claude_code(store, [path])
        assert (grown.added, grown.changed) == (5, 0)  # run, prompt, answer, run end; the title
        assert _ids(store, thread)[:len(before)] == before
        # One import of the whole file has the title where its line is, first; here it follows
        # what was stored before the message it names was written.
        assert sorted(_ids(store, thread)) == sorted(_whole(path))
        assert store.title(thread) == "Second"
        assert import_claude_code(store, [path]).added == 0


def test_a_titled_answer_left_by_a_retry_does_not_turn_the_growth_away(tmp_path: Path) -> None:
    """The title's source names the message it titles: that message, left on a side branch by a
    regenerated answer, was taken as stored in the main thread, the grown file followed it there,
    and every later import was refused."""
    path = tmp_path / f"{SESSION}.jsonl"
    records = [*_exchange(1, None), _title("a1", "Question one"), _answer("a1b", "u1", "answer 1, regenerated"),
               *_exchange(2, "a1b")]
    with Store(tmp_path / "t.db") as store:
        for cut in (4, len(records)):
            _write(path, records[:cut])
            import_claude_code(store, [path])
        assert import_claude_code(store, [path]).added == 0
        assert store.verify().events == sum(len(_ids(store, t.id)) - t.base for t in store.all_threads())


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_titled_session_with_branches_imports_at_any_cuts(rng: Any) -> None:
    """Prompts answered, rewound to earlier messages, and titled; imported at random points as it
    was written, then whole: never refused, and nothing is added again."""
    records: list[dict[str, Any]] = []
    messages: list[str] = []
    for n in range(1, 12):
        if messages and rng.random() < 0.2:
            records.append(_title(rng.choice(messages[-3:]), f"title {n}"))
            continue
        parent = rng.choice(messages) if messages and rng.random() < 0.15 else (messages[-1] if messages else None)
        records += _exchange(n, parent)
        messages += [f"u{n}", f"a{n}"]
    cuts = sorted(set(rng.sample(range(1, len(records)), k=min(3, len(records) - 1)))) + [len(records)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{SESSION}.jsonl"
        with Store(":memory:") as store:
            for cut in cuts:
                _write(path, records[:cut])
                import_claude_code(store, [path])
            assert import_claude_code(store, [path]).added == 0
            store.verify()
