"""An answer the model did not end whole (`stop_reason` `max_tokens`,
`model_context_window_exceeded`, one this release does not know) says so wherever it shows:
`rows`, the transcript, `show`, `diff`, and the viewer's thread, replay and diff pages. Each read
as a whole answer; only `ask` (exit 3) and `Turn.cut_short` said it was cut short."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import Store
from projections import transcript
from threadlog.cli import cli

MODEL = "claude-test-1"
# A stop reason as a hostile file could word it: markup, a terminal escape, a bidi override, a line break.
HOSTILE = "<b>odd</b>\u202e \x1b[31mred\nnext"
HOSTILE_SAID = "may be cut short: a stop reason this release does not know (<b>odd</b>\u202e \x1b[31mred\nnext)"


def _threadlog(db: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)


def _answers(tmp_path: Path) -> tuple[str, str, list[Any]]:
    """A file whose thread holds answers that stopped every way: cut short (the token limit,
    the context window, pi's `length`, an unknown reason), whole, and continued (a tool call,
    a paused turn, pi's own words for them)."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(model=MODEL, thread_id="t")
        store.append_message(t, "user", "Hi")
        store.append_message(t, "assistant", [{"type": "text", "text": "The first step is"}], stop_reason="max_tokens")
        store.append_message(t, "user", "And?")
        store.append_message(t, "assistant", [{"type": "text", "text": ""}], stop_reason="model_context_window_exceeded")
        store.append_message(t, "user", "Once more")
        store.append_message(t, "assistant", [{"type": "text", "text": "Whole."}], stop_reason="end_turn")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}],
                             stop_reason="tool_use")
        store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "seen"}])
        store.append_message(t, "assistant", [{"type": "text", "text": "Searching"}], stop_reason="pause_turn")
        store.append_message(t, "assistant", [{"type": "text", "text": "Found"}], stop_reason="stop")
        store.append_message(t, "assistant", [{"type": "text", "text": "Calling"},
                                              {"type": "tool_use", "id": "toolu_2", "name": "look", "input": {}}], stop_reason="toolUse")
        store.append_message(t, "assistant", [{"type": "text", "text": "Long"}], stop_reason="length")
        store.append_message(t, "assistant", [{"type": "text", "text": "Odd"}], stop_reason=HOSTILE)
        store.append_message(t, "assistant", [{"type": "text", "text": "Fine"}])
        events = list(store.read(t))
    return db, t, events


def test_rows_end_a_cut_short_answer_with_a_cut_short_row(tmp_path: Path) -> None:
    """`rows` showed an answer cut off at the token limit as a whole one, and one cut off by the
    context window with nothing but its empty text. Each ends with a `cut_short` row now, under
    the id a block after its last would have; whole and continued answers make none."""
    db, t, events = _answers(tmp_path)
    rows = json.loads(_threadlog(db, "rows", t, "--json").stdout)
    marked = [(r["id"], r["offset"], r["text"]) for r in rows if r["kind"] == "cut_short"]
    assert marked == [(f"{events[2].event_id}:1", 2, "cut off at the token limit (max_tokens)"),
                      (f"{events[4].event_id}:1", 4, "cut off by the context window (model_context_window_exceeded)"),
                      (f"{events[12].event_id}:1", 12, "cut off at the token limit (length)"),
                      (f"{events[13].event_id}:1", 13, HOSTILE_SAID)]
    assert [r for r in rows if r["offset"] == 4] == [
        {"id": f"{events[4].event_id}:1", "kind": "cut_short", "stream_id": t, "offset": 4, "time": events[4].recorded_at,
         "role": "assistant", "text": "cut off by the context window (model_context_window_exceeded)"}]  # no empty bubble
    assert len({r["id"] for r in rows}) == len(rows)
    assert [r["text"] for r in rows if r["offset"] == 2] == ["The first step is", "cut off at the token limit (max_tokens)"]
    lines = _threadlog(db, "rows", t).stdout.splitlines()
    assert "     2  cut_short   assistant: (cut off at the token limit (max_tokens))" in lines
    assert "     4  cut_short   assistant: (cut off by the context window (model_context_window_exceeded))" in lines
    assert ("    13  cut_short   assistant: (may be cut short: a stop reason this release does not know (<b>odd</b>\\u202e "
            "\\x1b[31mred next))") in lines, lines
    printed = _threadlog(db, "rows", t, "--json").stdout
    assert "\u202e" not in printed and "\x1b" not in printed


def test_a_cut_short_row_keeps_its_own_id_beside_events_whose_ids_end_in_a_number(tmp_path: Path) -> None:
    """The row is `E:N`, N the answer's number of blocks: a message whose own id is `E:N`
    makes rows `E:N:i`, so none takes it."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        store.append(t, [{"type": "message.appended", "meta": {"event_id": "m"}, "data": {
            "role": "assistant", "content": [{"type": "text", "text": "a"}], "stop_reason": "max_tokens"}},
            {"type": "message.appended", "meta": {"event_id": "m:1"}, "data": {"role": "user", "content": [{"type": "text", "text": "b"}]}}])
    rows = json.loads(_threadlog(db, "rows", t, "--json").stdout)
    assert [(r["id"], r["kind"]) for r in rows] == [("m:0", "text"), ("m:1", "cut_short"), ("m:1:0", "text")]


def test_the_transcript_says_an_answer_was_cut_short_and_why(tmp_path: Path) -> None:
    """The transcript wrote the cut answer's text as if whole, and gave the one cut off by the
    context window (its text empty) no section. Each says why it stopped on a line of its own;
    a stop reason this release does not know is named, escaped to one line as a code span."""
    db, t, _ = _answers(tmp_path)
    with Store(db) as store:
        text = transcript(store, t)
    assert "## assistant\n\n    The first step is\n\ncut off at the token limit (stop_reason `max_tokens`)\n\n" in text
    assert "## assistant\n\ncut off by the context window (stop_reason `model_context_window_exceeded`)\n\n" in text
    assert ("## assistant\n\n    Odd\n\nmay be cut short: a stop reason this release does not know "
            "(stop_reason `<b>odd</b>\u202e \\u001b[31mred\\nnext`)\n\n") in text, text
    assert "    Found\n\n## " in text and "    Searching\n\n## " in text and "    Whole.\n\n## " in text
    assert text.count("stop_reason") == 4
    assert _threadlog(db, "transcript", t).stdout.count("stop_reason") == 4


def test_show_and_diff_end_a_cut_short_answer_s_line_with_why(tmp_path: Path) -> None:
    """`show` and `diff` printed the cut answer's text alone, and the one cut off by the
    context window as an empty line. Their lines end with why it stopped, the text cut to make
    room; `show --json` carries it as `cut_short`."""
    db, t, _ = _answers(tmp_path)
    long = "Sure, here is how the first part of the procedure goes, step by step:"
    with Store(db) as store:
        store.append_message(t, "assistant", [{"type": "text", "text": long}], stop_reason="max_tokens")
        other = store.create_thread(thread_id="other")
    shown = _threadlog(db, "show", t).stdout
    assert "     2  assistant       The first step is (cut off at the token limit (max_tokens))\n" in shown, shown
    assert "     4  assistant       (cut off by the context window (model_context_window_exceeded))\n" in shown
    assert "    10  assistant       Found\n" in shown and "     9  assistant       Searching\n" in shown
    assert "    13  assistant       Odd\n                          (may be cut short: a stop reason this release does not know\n" in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    cut = long[:27] + "… (cut off at the token limit (max_tokens))"
    assert f"    15  assistant       {cut}\n" in shown, shown
    compared = _threadlog(db, "diff", t, other).stdout
    assert f"      15  assistant {cut}\n" in compared and "       4  assistant (cut off by the context window" in compared
    messages = json.loads(_threadlog(db, "show", t, "--json").stdout)["messages"]
    said = {m["offset"]: m["cut_short"] for m in messages if "cut_short" in m}
    assert said == {2: "cut off at the token limit (max_tokens)",
                    4: "cut off by the context window (model_context_window_exceeded)",
                    12: "cut off at the token limit (length)", 13: HOSTILE_SAID,
                    15: "cut off at the token limit (max_tokens)"}


def test_a_user_message_carrying_a_stop_reason_is_not_marked_cut_short_or_refused(tmp_path: Path) -> None:
    """A stop reason says how the model ended its answer: a user's message holding one (written
    by hand, or by a tool that copies every field) read as an answer cut off at the token
    limit, or refused, in rows, the transcript, show and the viewer, as if the model wrote it."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        store.append_message(t, "user", "Hi", stop_reason="max_tokens")
        store.append_message(t, "assistant", [{"type": "text", "text": "Hello"}], stop_reason="max_tokens")
        store.append_message(t, "user", [{"type": "text", "text": ""}], stop_reason="refusal",
                             stop_details={"type": "refusal", "category": "cyber", "explanation": "no"})
        text = transcript(store, t)
    rows = json.loads(_threadlog(db, "rows", t, "--json").stdout)
    assert [(r["offset"], r["kind"]) for r in rows if r["kind"] in ("cut_short", "refusal")] == [(2, "cut_short")]
    assert text.count("stop_reason") == 1 and "## user\n\n    Hi\n\n## assistant" in text
    shown = _threadlog(db, "show", t).stdout
    assert "     1  user            Hi\n" in shown and "Hello (cut off at the token limit (max_tokens))" in shown
    messages = json.loads(_threadlog(db, "show", t, "--json").stdout)["messages"]
    assert [m["offset"] for m in messages if "cut_short" in m or "refusal" in m] == [2]


def test_an_answer_that_stopped_for_a_tool_call_it_does_not_hold_is_cut_short(tmp_path: Path) -> None:
    """`ask` exits 3 on an answer whose stop reason is `tool_use` and that holds no tool call
    (nothing goes on from it), but rows, the transcript and show read it as a whole answer."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        store.append_message(t, "user", "Look it up")
        store.append_message(t, "assistant", [{"type": "text", "text": "Let me search"}], stop_reason="tool_use")
        store.append_message(t, "user", "And?")
        store.append_message(t, "assistant", [{"type": "text", "text": "Reading"}], stop_reason="toolUse")
        text = transcript(store, t)
    said = {2: "cut off before the tool call it stopped for (tool_use)", 4: "cut off before the tool call it stopped for (toolUse)"}
    rows = json.loads(_threadlog(db, "rows", t, "--json").stdout)
    assert {r["offset"]: r["text"] for r in rows if r["kind"] == "cut_short"} == said
    assert "    Let me search\n\ncut off before the tool call it stopped for (stop_reason `tool_use`)\n\n" in text, text
    messages = json.loads(_threadlog(db, "show", t, "--json").stdout)["messages"]
    assert {m["offset"]: m["cut_short"] for m in messages if "cut_short" in m} == said


PAUSED = "paused by the server and not resumed (pause_turn)"


def _paused(tmp_path: Path) -> tuple[str, str, list[Any]]:
    """A thread that ends on a paused answer (`pause_turn`, a server tool's long turn): nothing
    sent it back, so nothing goes on from it. An earlier paused answer was resumed."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(model=MODEL, thread_id="t")
        store.append_message(t, "user", "Search trains")
        store.append_message(t, "assistant", [{"type": "text", "text": "Searching"}], stop_reason="pause_turn")
        store.append_message(t, "assistant", [{"type": "text", "text": "Found"}], stop_reason="end_turn")
        store.append_message(t, "user", "And buses?")
        store.append_message(t, "assistant", [{"type": "text", "text": "Looking"}], stop_reason="pause_turn")
        store.append(t, [{"type": "metadata.set", "data": {"patch": {"k": 1}}}])
        events = list(store.read(t))
    return db, t, events


def test_a_paused_answer_nothing_resumed_is_marked_where_a_cut_short_one_is(tmp_path: Path) -> None:
    """A thread left on a paused answer (`pause_turn`) read as whole, or as going on, in rows,
    the transcript, show and the viewer, though nothing followed it. The answer no message
    follows, as of the point read, is marked `paused by the server and not resumed`; the one
    the model went on from is not."""
    from projections import display_rows, thread_state

    db, t, events = _paused(tmp_path)
    rows = json.loads(_threadlog(db, "rows", t, "--json").stdout)
    assert [(r["id"], r["text"]) for r in rows if r["kind"] == "cut_short"] == [(f"{events[5].event_id}:1", PAUSED)]
    assert f"     5  cut_short   assistant: ({PAUSED})" in _threadlog(db, "rows", t).stdout.splitlines()
    with Store(db) as store:
        text = transcript(store, t)
        bounded = transcript(store, t, last=1, max_bytes=2048)
        # A page of rows that ends on it, and one past it: the page reads on to see nothing follows.
        page = display_rows(store, t, start=4, stop=6)
        assert [r.text for r in page if r.kind == "cut_short"] == [PAUSED]
        assert [r.kind for r in display_rows(store, t, start=0, stop=3)] == ["text", "text"]
    marker = "paused by the server and not resumed (stop_reason `pause_turn`)"
    assert f"    Looking\n\n{marker}\n\n" in text and "    Searching\n\n## " in text and text.count(marker) == 1, text
    assert f"    Looking\n\n{marker}\n\n" in bounded, bounded
    shown = _threadlog(db, "show", t).stdout
    assert "     2  assistant       Searching\n" in shown and f"     5  assistant       Looking ({PAUSED})\n" in shown, shown
    assert f"     5  assistant       Looking ({PAUSED})\n" in _threadlog(db, "show", t, "--last", "1").stdout
    messages = json.loads(_threadlog(db, "show", t, "--json").stdout)["messages"]
    assert {m["offset"]: m["cut_short"] for m in messages if "cut_short" in m} == {5: PAUSED}
    with Store(db) as store:
        # As of offset 3 the first paused answer is the last message: nothing had resumed it yet.
        early = thread_state(store, t, at=3)
        assert [m.cut_short for m in early.messages] == [None, PAUSED]
        assert [m.cut_short for m in thread_state(store, t, at=3, paged=True).view[-1:]] == [PAUSED]
        assert f"    Searching\n\n{marker}\n\n" in transcript(store, t, stop=3)
        assert [r.text for r in display_rows(store, t, at=3) if r.kind == "cut_short"] == [PAUSED]
        # Resumed now: the mark is gone from every reading.
        store.append_message(t, "assistant", [{"type": "text", "text": "Buses too"}], stop_reason="end_turn")
        assert [r for r in display_rows(store, t, start=4, stop=6) if r.kind == "cut_short"] == []
        assert all(m.cut_short is None for m in thread_state(store, t).messages)
        assert "paused" not in transcript(store, t)
    assert "paused" not in _threadlog(db, "show", t).stdout and "paused" not in _threadlog(db, "rows", t).stdout


def test_a_side_of_a_diff_ending_on_a_paused_answer_says_so(tmp_path: Path) -> None:
    """`diff` showed a fork left on a paused answer as if whole: its last message is marked."""
    db, t, _ = _paused(tmp_path)
    with Store(db) as store:
        fork = store.fork(t, at=3)
        store.append_message(fork, "user", "Trams?")
        store.append_message(fork, "assistant", [{"type": "text", "text": "Trams"}], stop_reason="pause_turn")
    compared = _threadlog(db, "diff", t, fork).stdout
    assert f"       5  assistant Looking ({PAUSED})\n" in compared and f"       5  assistant Trams ({PAUSED})\n" in compared
    assert compared.count("paused") == 2, compared


def test_the_viewer_marks_a_paused_answer_nothing_resumed(tmp_path: Path) -> None:
    """The thread, replay and diff pages end the paused answer nothing followed with its card."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db, t, _ = _paused(tmp_path)
    with Store(db) as store:
        store.create_thread(thread_id="other")
    card = f'<div class="card cut-short">Answer <span class="why">{PAUSED}</span></div>'
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        for url in (f"/thread?id={t}", f"/replay?id={t}", f"/diff?a={t}&b=other", f"/replay?id={t}&at=3"):
            page = browser.get(url).text
            assert page.count(card) == 1, url
        assert browser.get(f"/replay?id={t}&at=4").text.count(card) == 0


def test_an_open_page_is_told_to_drop_the_mark_of_a_paused_answer_the_model_went_on_from(tmp_path: Path) -> None:
    """The open thread page replaces the rows an update sends and keeps the others: the paused
    answer's card stayed on it once the model went on from that answer, where a page loaded then
    shows none. The update names the rows the new events took away (`resumed`)."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db, t, events = _paused(tmp_path)
    with Store(db) as store:
        position = store.last_position()
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        assert f'id="r-{events[5].event_id}:1"' in browser.get(f"/thread?id={t}").text
        with Store(db) as store:
            store.append_message(t, "assistant", [{"type": "text", "text": "Buses too"}], stop_reason="end_turn")
        update = browser.get("/live/rows", params={"id": t, "after": position, "from": 0}).json()
        quiet = browser.get("/live/rows", params={"id": t, "after": 0, "from": 0}).json()
    assert update["resumed"] == [f"r-{events[5].event_id}:1"], update
    assert f"r-{events[5].event_id}:1" not in [item["id"] for item in update["items"]]
    assert "resumed" not in quiet  # a page that never had it: nothing was taken away since it last looked


def test_show_and_diff_give_a_long_mark_whole_on_lines_of_its_own(tmp_path: Path) -> None:
    """`show` and `diff` cut a refusal's words, and a stop reason this release does not know, to
    their line (`… a stop reason this release do…`), where rows and `--json` give them whole. A
    mark too long for its share of the line is given whole below the message's text, wrapped at
    the line's width, escaped as before (no terminal escape, no line break of its own)."""
    db, t, _ = _answers(tmp_path)
    explanation = "This request asks for help with something the usage policy does not allow, in several ways at once"
    with Store(db) as store:
        store.append_message(t, "assistant", [{"type": "text", "text": ""}], stop_reason="refusal",
                             stop_details={"type": "refusal", "category": "cyber", "explanation": explanation})
        other = store.create_thread(thread_id="other")
    shown = _threadlog(db, "show", t).stdout
    compared = _threadlog(db, "diff", t, other).stdout
    for out, indent in ((shown, 26), (compared, 20)):
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("13  assistant"))
        assert lines[start].endswith("assistant Odd") or lines[start].endswith("assistant       Odd"), lines[start]
        mark = []
        for line in lines[start + 1:]:
            if not line.startswith(" " * indent) or line[indent] == " ":
                break
            mark.append(line[indent:])
        assert " ".join(mark) == ("(may be cut short: a stop reason this release does not know (<b>odd</b>\\u202e "
                                  "\\x1b[31mred next))"), out
        assert all(len(part) <= 70 for part in mark)
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("15  assistant"))
        refused = [lines[start].split("assistant", 1)[1].strip()]
        refused += [line[indent:] for line in lines[start + 1:start + 4] if line.startswith(" " * indent) and line[indent] != " "]
        assert " ".join(refused) == f"(refused: cyber: {explanation})", out
        assert "\x1b" not in out and "\u202e" not in out and "…" not in "".join(refused + mark)
    # A mark that fits its share stays on the message's line, as it was.
    assert "     2  assistant       The first step is (cut off at the token limit (max_tokens))\n" in shown


def test_a_paused_answer_before_a_call_a_fork_dropped_is_marked_as_the_forks_last_message(tmp_path: Path) -> None:
    """A fork that dropped the call the model made after a paused answer (`pause_turn`) ends on
    that answer: rows, the transcript and the model view leave the call's message out, and the
    fork's request ends on the answer, byte for byte as a fork made before the call. Yet only
    that fork marked it `paused by the server and not resumed`. Now both do, in every reader; a
    message that holds more than the dropped call still goes on from it, and so does the fork's
    own next message."""
    from projections import anthropic_request, display_rows, thread_state

    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(model=MODEL, thread_id="t")
        store.append_message(t, "user", "Search trains")
        store.append_message(t, "assistant", [{"type": "text", "text": "Searching"}], stop_reason="pause_turn")  # 2
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}],
                             stop_reason="tool_use")  # 3
        fork = store.fork(t, unanswered="drop", fork_id="f")
        before = store.fork(t, 3, fork_id="before")  # made at the paused answer: nothing went on from it there
        for thread in (fork, before):
            assert [m.offset for m in thread_state(store, thread).messages] == [1, 2]
            assert [m.cut_short for m in thread_state(store, thread).messages] == [None, PAUSED], thread
            assert [m.cut_short for m in thread_state(store, thread, paged=True).view[-1:]] == [PAUSED], thread
            assert [(r.offset, r.text) for r in display_rows(store, thread) if r.kind == "cut_short"] == [(2, PAUSED)], thread
            assert [(r.offset, r.text) for r in display_rows(store, thread, start=1, stop=3) if r.kind == "cut_short"] == \
                [(2, PAUSED)], thread
            assert "    Searching\n\npaused by the server and not resumed (stop_reason `pause_turn`)\n\n" in transcript(store, thread)
            assert "paused" not in transcript(store, thread, stop=1)
        assert anthropic_request(store, fork)["messages"] == anthropic_request(store, before)["messages"]
        assert anthropic_request(store, fork)["messages"][-1]["content"][0]["text"] == "Searching"  # the model goes on from it
        # Not in the parent, where the call's message follows it in every reader.
        assert all(m.cut_short is None for m in thread_state(store, t).messages)
        assert [r for r in display_rows(store, t) if r.kind == "cut_short"] == [] and "paused" not in transcript(store, t)
        # A message holding more than the dropped call stays in the fork's view, and goes on from it.
        store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "none"}])
        store.append_message(t, "assistant", [{"type": "text", "text": "Another look"}], stop_reason="pause_turn")  # 5
        store.append_message(t, "assistant", [{"type": "text", "text": "Calling"},
                                              {"type": "tool_use", "id": "toolu_2", "name": "look", "input": {}}])  # 6
        kept = store.fork(t, unanswered="drop", fork_id="kept")
        assert all(m.cut_short is None for m in thread_state(store, kept).messages)
        assert [r for r in display_rows(store, kept) if r.kind == "cut_short"] == [] and "paused" not in transcript(store, kept)
        # The fork's own next message goes on from the paused answer: its mark goes.
        store.append_message(fork, "assistant", [{"type": "text", "text": "Buses"}], stop_reason="end_turn")
        assert all(m.cut_short is None for m in thread_state(store, fork).messages)
        assert [r for r in display_rows(store, fork) if r.kind == "cut_short"] == [] and "paused" not in transcript(store, fork)
        assert [(r.offset, r.text) for r in display_rows(store, fork, at=5) if r.kind == "cut_short"] == [(2, PAUSED)]
    assert f"     2  assistant       Searching ({PAUSED})\n" in _threadlog(db, "show", "before").stdout
    assert f"     2  assistant       Searching ({PAUSED})\n" in _threadlog(db, "show", fork, "--at", "5").stdout
    assert {m["offset"]: m["cut_short"] for m in json.loads(_threadlog(db, "show", fork, "--at", "5", "--json").stdout)["messages"]
            if "cut_short" in m} == {2: PAUSED}


def test_an_open_page_of_a_fork_ending_on_a_paused_answer_is_told_to_drop_its_mark(tmp_path: Path) -> None:
    """The fork's view ends on the paused answer before the call it dropped, so its open page
    shows the answer's card; the fork's next message goes on from it, and the update names that
    card's row (`resumed`), past the message the drop left out."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(model=MODEL, thread_id="t")
        store.append_message(t, "user", "Search trains")
        paused = store.append_message(t, "assistant", [{"type": "text", "text": "Searching"}], stop_reason="pause_turn")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}])
        fork = store.fork(t, unanswered="drop", fork_id="f")
        position = store.last_position()
    row = f"r-{paused.event_id}:1"
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        assert f'id="{row}"' in browser.get(f"/thread?id={fork}").text
        with Store(db) as store:
            store.append_message(fork, "assistant", [{"type": "text", "text": "Buses"}], stop_reason="end_turn")
        update = browser.get("/live/rows", params={"id": fork, "after": position, "from": 0}).json()
        assert update["resumed"] == [row], update
        assert f'id="{row}"' not in browser.get(f"/thread?id={fork}").text


def test_a_diff_side_cut_by_its_limit_does_not_mark_its_last_message_paused(tmp_path: Path) -> None:
    """`diff(..., limit=N)` marked the Nth message of a side `paused by the server and not
    resumed` when it was a paused answer, though the message the model went on with follows it:
    the limit cut the side, not its thread. Only a side's thread's last message is marked."""
    from projections import diff

    db, t, _ = _paused(tmp_path)  # offset 2 paused and resumed at 3; offset 5 paused, the thread's last message
    with Store(db) as store:
        store.create_thread(thread_id="other")
        for limit in (1, 2, 3, 4):
            side = diff(store, t, "other", limit=limit).a
            assert [side.cut_short(i) for i in range(len(side.messages))] == [None] * limit, limit
        side = diff(store, t, "other", limit=5).a
        assert [side.cut_short(i) for i in range(len(side.messages))] == [None] * 4 + [PAUSED]
        assert diff(store, t, "other", limit=5).to_json() == diff(store, t, "other").to_json()
