"""What Claude Code adds to the user's turn besides what the person typed, as an import keeps it:
the text a hook adds to what the model sees and the skill listing it gives the model (both
`attachment` lines), and the IDE's context leading a typed prompt (`<ide_opened_file>`,
`<ide_selection>` blocks). Real sessions: tests/fixtures/cc-hooks (a Claude Code 2.1.114 session
from claude-code-log's test data, its README says whence), claude-code-log's hand-written
`hook_attachments.jsonl`, and the IDE sessions in tests/fixtures/claude-code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from projections import anthropic_request, display_rows, search, validate_request
from threadlog import Store, import_claude_code
from threadlog.cli import cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HOOKED = FIXTURES / "cc-hooks" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"  # a SessionStart hook's context
HOOK_LINES = FIXTURES / "claude-code" / "claude-code-log" / "hook_attachments.jsonl"  # a UserPromptSubmit hook's
IDE = FIXTURES / "claude-code" / "-Users-dain-workspace-JSSoundRecorder" / "7acd37a8-2745-4b58-a8a9-46164b22ad9e.jsonl"
SESSION_START = "clmail 6.0.10 session registered: -experiments/worktrees (kitty)"


def _raw(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _messages(store: Store, thread: str) -> list[Any]:
    return [e for e in store.read(thread) if e.type == "message.appended"]


def _cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _events(store: Store) -> list[tuple[str, int, str, str]]:
    """Every event, with its data and meta, by thread and offset."""
    return sorted((e.stream_id, e.offset, e.event_id, json.dumps([e.type, e.data, e.meta], sort_keys=True))
                  for e in store.read_all())


def test_a_session_start_hooks_context_is_claude_codes_message_before_the_first_prompt(tmp_path: Path) -> None:
    """The text a SessionStart hook adds (`hook_additional_context`, written before the first
    prompt, which names it as its parent) was counted as a line without conversation: the
    transcript, the request rebuilt and search had none of what the model read. It is a user
    message of Claude Code's, before the prompt, which still starts the run; so is the skill
    listing Claude Code gives the model after the prompt (`skill_listing`)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        summary = import_claude_code(store, [HOOKED])
        [thread] = summary.thread_ids
        assert summary.prompts == 2  # this one and a later one
        messages = _messages(store, thread)
        hook, prompt, listing = messages[:3]
        assert hook.data == {"role": "user", "content": [{"type": "text", "text": SESSION_START}]}
        assert hook.meta["source"]["flags"] == {"injected": True, "attachment": "hook_additional_context"}
        assert prompt.data["content"][0]["text"].startswith("OK, we're going to make a little experiment here.")
        assert "injected" not in prompt.meta["source"].get("flags", {})
        assert store.event_at(thread, prompt.offset - 1).type == "run.started"  # the prompt starts the run
        [skills] = [r for r in _raw(HOOKED) if r.get("attachment", {}).get("type") == "skill_listing"]
        assert listing.data["content"] == [{"type": "text", "text": skills["attachment"]["content"]}]
        assert listing.meta["source"]["flags"] == {"injected": True, "attachment": "skill_listing"}
        assert not any(e.type == "run.finished" and e.data["status"] == "cancelled" for e in store.read(thread))
        request = anthropic_request(store, thread, model="claude-opus-4-7", max_tokens=100)
        validate_request(request)
        first = request["messages"][0]["content"]
        assert [b["text"] for b in first if b["type"] == "text"][0] == SESSION_START
        assert [(h.stream, h.offset) for h in search(store, '"session registered"')] == [(thread, hook.offset)]
    sections = _cli(db, "transcript", thread).split("\n## ")[1:]
    assert sections[0] == f"user (injected by claude-code)\n\n    {SESSION_START}\n"
    assert sections[1].startswith("user\n")


def test_a_user_prompt_submit_hooks_context_follows_its_prompt_in_the_thread(tmp_path: Path) -> None:
    """claude-code-log's `hook_attachments.jsonl`: a UserPromptSubmit hook's context names the
    prompt as its parent, as the answer does. It is Claude Code's message after the prompt and
    before the answer, in the thread (not a branch of its own), and the lines no model saw (a
    hook's success, its errors, the deferred tools' names) are still lines without conversation."""
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [HOOK_LINES])
        [thread] = summary.thread_ids
        assert [t.id for t in store.all_threads()] == [thread]
        texts = [(e.data["role"], [b.get("text") for b in e.data["content"]], e.meta["source"].get("flags", {}).get("injected"))
                 for e in _messages(store, thread)]
        assert texts == [("user", ["Run the test suite"], None),
                         ("user", ["clmail status: idle", "focus: hook-fix-001"], True),
                         ("assistant", ["Running tests."], None)]
        assert summary.skipped["attachment"] == 4 and summary.prompts == 1
        assert [e.data.get("status") for e in store.read(thread) if e.type == "run.finished"] == ["ok"]


def test_sessions_an_earlier_release_imported_without_their_hooks_context_import_again_as_they_are(tmp_path: Path) -> None:
    """tests/fixtures/cc-hooks.db: the two hook sessions imported at commit 290b2af, which left
    every attachment line out. Importing them again adds and changes nothing (a message before
    the events stored cannot be put there); a hook's context the session grows by is imported."""
    db = tmp_path / "t.db"
    shutil.copy(FIXTURES / "cc-hooks.db", db)
    session = tmp_path / HOOKED.name
    shutil.copy(HOOKED, session)
    lines = tmp_path / HOOK_LINES.name
    shutil.copy(HOOK_LINES, lines)
    with Store(db) as store:
        stored = [(e.event_id, e.hash) for e in store.read_all()]
        again = import_claude_code(store, [session, lines])
        assert (again.added, again.changed, again.gone) == (0, 0, 0)
        assert [(e.event_id, e.hash) for e in store.read_all()] == stored
        records = _raw(session)
        [hook] = [r for r in records if r.get("attachment", {}).get("type") == "hook_additional_context"]
        last = records[-1]
        prompt = {**records[4], "uuid": "later-prompt", "parentUuid": last["uuid"], "message": {"role": "user", "content": "And now?"}}
        context = {**hook, "uuid": "later-hook", "parentUuid": "later-prompt",
                   "attachment": {**hook["attachment"], "hookName": "UserPromptSubmit", "hookEvent": "UserPromptSubmit",
                                  "content": ["focus: round 3"]}}
        answer = next(r for r in reversed(records) if r["type"] == "assistant")
        answer = {**answer, "uuid": "later-answer", "parentUuid": "later-hook", "message": {**answer["message"], "id": "msg_later"}}
        session.write_text(session.read_text(encoding="utf-8") + "".join(json.dumps(r) + "\n" for r in (prompt, context, answer)),
                           encoding="utf-8")
        grown = import_claude_code(store, [session, lines])
        assert (grown.changed, grown.gone) == (0, 0)
        assert [(e.event_id, e.hash) for e in store.read_all()][:len(stored)] == stored
        added = list(store.read_all())[len(stored):]
        assert [(e.type, e.meta["source"]["uuid"]) for e in added] == [
            ("run.started", "later-prompt"), ("message.appended", "later-prompt"), ("message.appended", "later-hook"),
            ("message.appended", "later-answer"), ("run.finished", "later-answer")]
        assert added[2].data["content"] == [{"type": "text", "text": "focus: round 3"}]
        assert added[2].meta["source"]["flags"]["injected"] is True
        assert import_claude_code(store, [session, lines]).added == 0
        store.verify()


def test_a_session_followed_line_by_line_holds_its_hooks_context_as_one_import_does(tmp_path: Path) -> None:
    """A follower reads a session after any of its lines: a hook's context read before the
    answer that follows it, or before the prompt it leads, ends where one import of the whole
    file puts it."""
    for source, cuts in ((HOOK_LINES, range(1, 8)), (HOOKED, range(1, 16))):
        lines = source.read_bytes().splitlines(keepends=True)
        live = tmp_path / source.name
        live.write_bytes(b"".join(lines))
        whole = Store(":memory:")
        import_claude_code(whole, [live])
        expected = _events(whole)
        for cut in cuts:
            with Store(":memory:") as store:
                live.write_bytes(b"".join(lines[:cut]))
                import_claude_code(store, [live], partial_tail=True)
                live.write_bytes(b"".join(lines))
                import_claude_code(store, [live], partial_tail=True)
                import_claude_code(store, [live])
                assert _events(store) == expected, f"{source.name}: cut after line {cut}"


def test_the_ides_context_leading_a_prompt_is_shown_as_claude_codes_and_the_prompt_starts_its_run(tmp_path: Path) -> None:
    """A prompt typed in an IDE starts with the IDE's own text, a block of its own
    (`<ide_opened_file>…`, `<ide_selection>…`): the rows and the transcript showed it as typed.
    Its rows and its transcript lines now say Claude Code wrote it; what the person typed is
    theirs, and the prompt still starts its run."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        summary = import_claude_code(store, [IDE])
        thread = summary.thread_ids[0]
        prompts = [e for e in _messages(store, thread) if e.data["role"] == "user" and len(e.data["content"]) > 1
                   and str(e.data["content"][0].get("text", "")).startswith(("<ide_opened_file>", "<ide_selection>"))]
        assert len(prompts) == 2
        rows = display_rows(store, thread)
        for prompt in prompts:
            assert store.event_at(thread, prompt.offset - 1).type == "run.started"
            mine = [r for r in rows if r.offset == prompt.offset]
            assert [r.injected_by for r in mine] == ["claude-code", None]
            assert mine[0].text.startswith(("<ide_opened_file>", "<ide_selection>"))
    markdown = _cli(db, "transcript", thread)
    opened = next(s for s in markdown.split("\n## ")[1:] if "<ide_opened_file>" in s)
    heading, _, body = opened.partition("\n\n")
    assert heading == "user"
    assert body.startswith("injected by claude-code:\n    <ide_opened_file>The user opened the file")
    assert "\n\n    OK, so this was just so you know what there is now" in body


def test_text_the_person_typed_is_theirs_however_it_starts(tmp_path: Path) -> None:
    """The IDE writes its context as blocks of their own before what was typed. A prompt typed
    (or pasted) as `<ide_selection>…`, a string or the last of its blocks, was listed as Claude
    Code's, and the rows, the transcript and the viewer showed what the person typed as
    written by the tool."""
    typed = "<ide_selection>is what I pasted, and my question"
    records = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s-1", "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": typed}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s-1", "timestamp": "2026-01-01T00:00:01Z",
         "message": {"id": "msg_1", "role": "assistant", "model": "claude-x", "stop_reason": "end_turn",
                     "content": [{"type": "text", "text": "one"}]}},
        {"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": "s-1", "timestamp": "2026-01-01T00:00:02Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "<ide_opened_file>The user opened a.py</ide_opened_file>"},
                                                 {"type": "text", "text": typed}]}},
    ]
    session = tmp_path / "s-1.jsonl"
    session.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db = tmp_path / "t.db"
    with Store(db) as store:
        [thread] = import_claude_code(store, [session]).thread_ids
        prompts = [e for e in _messages(store, thread) if e.data["role"] == "user"]
        assert [e.meta["source"].get("flags", {}).get("injected_blocks") for e in prompts] == [None, [0]]
        rows = display_rows(store, thread)
        assert [(r.text, r.injected_by) for r in rows if r.role == "user"] == [
            (typed, None), ("<ide_opened_file>The user opened a.py</ide_opened_file>", "claude-code"), (typed, None)]
    markdown = _cli(db, "transcript", thread)
    assert markdown.count("injected by claude-code:") == 1
    assert f"## user\n\n    {typed}\n" in markdown
