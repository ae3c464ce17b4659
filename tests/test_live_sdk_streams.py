"""Live turns on the `anthropic` SDK's own recorded streams (tests/fixtures/sdk-streams).

The local Messages API server serves each stream to a live turn, library and CLI; what
threadlog records is held against what the SDK itself makes of the same stream, served by the
same server to `client.beta.messages.stream(...).get_final_message()` (the beta stream: it
folds what the stable one passes over, a compaction block's content, a fallback's usage, which
threadlog keeps too). Then the thread must still verify, its next request validate and carry
back what the API needs, and the transcript and `show` render the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import Store
from projections import anthropic_request, check_request, thread_state, transcript, validate_request
from threadlog.cli import cli
from threadlog.live import run_turn
from threadlog.note_tools import transcript_tools

from messages_api import MessagesAPI

STREAMS = Path(__file__).parent / "fixtures" / "sdk-streams"
MODEL = "claude-test-1"
TOOLS = [{"name": "get_weather", "description": "The weather in a place", "input_schema": {"type": "object"}},
         {"name": "make_file", "description": "Write a file", "input_schema": {"type": "object"}}]
# Each stream the SDK makes a whole message of, by its file.
WHOLE = ["basic_response.txt", "tool_use_response.txt", "compaction_response.txt", "fallback_response.txt",
         "fallback_credit_response.txt", "refusal_response.txt"]


def served(name: str) -> bytes:
    """The recorded stream with its last event dispatched: the files end without the blank
    line after `message_stop` that the API sends, which the SDK's own tests add too."""
    return (STREAMS / name).read_bytes().rstrip(b"\n") + b"\n\n"


def sdk_answer(api: MessagesAPI, name: str) -> dict[str, Any]:
    """What the SDK makes of the stream: its final message, with the fields the stream set."""
    api.reply_stream(served(name))
    with api.client().beta.messages.stream(model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": "Hi"}]) as stream:
        final = stream.get_final_message()
    made: dict[str, Any] = final.to_dict(mode="json", exclude_unset=True, warnings=False)
    return made


def without_cache_control(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


def assert_recorded_as_the_sdk_made_it(recorded: dict[str, Any], made: dict[str, Any]) -> None:
    assert recorded["content"] == made["content"]
    assert recorded["message_id"] == made["id"]
    assert recorded["model"] == made["model"]
    assert recorded["stop_reason"] == made["stop_reason"]
    assert recorded.get("stop_details") == made.get("stop_details")
    assert recorded["usage"] == {k: v for k, v in made["usage"].items() if v is not None}


def ran(store: Store, name: str, api: MessagesAPI) -> tuple[str, list[dict[str, Any]]]:
    """A thread with a live turn on the stream `name` (a tool call's round answered by the
    basic stream); the calls its tools got."""
    t = store.create_thread(title="t", system="You help.", model=MODEL, tools=TOOLS)
    calls: list[dict[str, Any]] = []
    api.reply_stream(served(name))
    api.reply_stream(served("basic_response.txt"))
    run_turn(store, t, "Hi", api.client(), stream=True,
             tools={"get_weather": lambda **given: calls.append(given) or "18 degrees", "make_file": lambda **given: "written"})
    return t, calls


@pytest.mark.parametrize("name", WHOLE)
def test_a_recorded_stream_is_kept_as_the_sdk_makes_it_and_the_thread_goes_on(file_store: Store, api: MessagesAPI,
                                                                              name: str) -> None:
    made = sdk_answer(api, name)
    t, _ = ran(file_store, name, api)
    answers = [e for e in file_store.read(t) if e.type == "message.appended" and e.data["role"] == "assistant"]
    assert_recorded_as_the_sdk_made_it(answers[0].data, made)
    assert list(file_store.read(t))[-1].data["status"] == "ok"
    file_store.verify()
    for answer in answers:
        check = check_request(file_store, t, answer.offset)
        assert check.ok, check.reason
    kwargs = anthropic_request(file_store, t)
    validate_request(kwargs, beta=True)
    sent_back = [m for m in kwargs["messages"] if m["role"] == "assistant"]
    blocks = [b for b in made["content"] if b.get("type") != "text" or b["text"]]  # a blank text block is left out
    if blocks:
        assert without_cache_control(sent_back[0]["content"]) == blocks
    shown = transcript(file_store, t)
    for block in blocks:
        assert (block["text"] if block["type"] == "text" else f"[{block['type']}]") in shown or block["type"] == "tool_use"


def test_a_recorded_tool_call_runs_and_its_id_goes_back_with_its_result(mem: Store, api: MessagesAPI) -> None:
    t, calls = ran(mem, "tool_use_response.txt", api)
    assert calls == [{"location": "Paris"}]
    second = api.requests[-1].json["messages"]
    assert second[1]["content"][1] == {"type": "tool_use", "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "name": "get_weather",
                                       "input": {"location": "Paris"}, "caller": {"type": "direct"}}
    assert second[2]["content"][0]["tool_use_id"] == "toolu_01NRLabsLyVHZPKxbKvkfSMn"
    assert "tool call `get_weather` `{\"location\":\"Paris\"}`" in transcript(mem, t)


def test_a_recorded_compaction_goes_back_with_its_encrypted_content(mem: Store, api: MessagesAPI) -> None:
    t, _ = ran(mem, "compaction_response.txt", api)
    mem.append_message(t, "user", "And then?")
    compaction = anthropic_request(mem, t)["messages"][1]["content"][0]
    assert compaction == {"type": "compaction", "content": "Earlier conversation summarized.",
                          "encrypted_content": "EpwBCioIDxgCEAEYASJALd_opaque_compaction_payload"}


def test_a_stream_cut_off_inside_a_tool_input_is_recorded_as_the_sdk_reads_it_and_its_call_is_not_run(
        file_store: Store, api: MessagesAPI) -> None:
    """The answer stops at `max_tokens` inside the tool call's JSON: the SDK reads what came as
    far as it parses; threadlog keeps that answer, does not run the call (its input may be
    incomplete), answers it with an error result and ends the run in error, as documented."""
    made = sdk_answer(api, "incomplete_partial_json_response.txt")
    t, calls = ran(file_store, "incomplete_partial_json_response.txt", api)
    assert calls == []
    events = list(file_store.read(t))
    assert_recorded_as_the_sdk_made_it(events[3].data, made)
    assert events[4].data["content"][0]["is_error"] is True
    assert events[4].data["content"][0]["tool_use_id"] == "toolu_01EKqbqmZrGRXy18eN7m9kvY"
    assert events[-1].data["status"] == "error"
    assert "stop_reason 'max_tokens'" in events[-1].data["error"]
    assert thread_state(file_store, t).status == "idle"
    file_store.verify()
    validate_request(anthropic_request(file_store, t), beta=True)
    assert len(api.requests) == 2  # the SDK's read, and the turn's one call


@pytest.mark.parametrize("name, printed", [("basic_response.txt", "Hello there!"), ("compaction_response.txt", "Hello there!")])
def test_ask_on_a_recorded_stream_prints_the_answer_and_show_and_transcript_render_it(tmp_path: Path, api: MessagesAPI,
                                                                                    name: str, printed: str) -> None:
    db = str(tmp_path / "t.db")

    def threadlog(*args: str) -> Any:
        env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
        return CliRunner().invoke(cli, ["--db", db, *args], env=env, catch_exceptions=False)

    t = threadlog("new", "--model", MODEL).stdout.strip()
    api.reply_stream(served(name))
    done = threadlog("ask", t, "Hi", "--stream")
    assert (done.exit_code, done.stdout) == (0, printed + "\n"), done.stderr
    assert threadlog("request", t, "--check").stdout.startswith("ok")
    shown = threadlog("show", t).stdout
    assert f"assistant       {'[compaction] ' if 'compaction' in name else ''}{printed}" in shown
    compacted = "[compaction]\n\n" if "compaction" in name else ""
    assert f"## assistant\n\n{compacted}    {printed}" in threadlog("transcript", t).stdout


def test_a_streamed_answer_that_fell_back_names_the_model_that_served_it(mem: Store, api: MessagesAPI) -> None:
    """`message_start` names the model asked for; a `fallback` block then says the request fell
    back to another, which served the answer (the unstreamed answer names it, and the SDK's beta
    stream relabels its message so). The answer was recorded with the model asked for."""
    t, _ = ran(mem, "fallback_response.txt", api)
    answer = list(mem.read(t))[3].data
    assert answer["content"][0]["to"] == {"model": "claude-sonnet-4-5"}
    assert answer["model"] == "claude-sonnet-4-5"


def test_a_recorded_refusal_shows_in_show_the_transcript_and_a_note_forks_reading(tmp_path: Path, api: MessagesAPI) -> None:
    """A refused answer holds no text: `ask` says so and names `show` as where the turn shows,
    but `show` printed a blank assistant line, and the transcript (and the note fork's
    `read_transcript`, which a model reads) had no section for it: the refusal left no trace
    outside the raw event. Each now says the model refused, and why."""
    db = str(tmp_path / "t.db")

    def threadlog(*args: str) -> Any:
        env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
        return CliRunner().invoke(cli, ["--db", db, *args], env=env, catch_exceptions=False)

    t = threadlog("new", "--model", MODEL).stdout.strip()
    api.reply_stream(served("refusal_response.txt"))
    done = threadlog("ask", t, "Hi", "--stream")
    assert done.exit_code == 3 and f"`threadlog show {t} --last 2` shows it" in done.stderr
    why = "cyber: This request was refused due to policy."
    assert f"     3  assistant       (refused: {why})\n" in threadlog("show", t, "--last", "2").stdout
    section = f"## assistant\n\nrefused (stop_reason refusal)\n\n    {why}\n"
    assert section in threadlog("transcript", t).stdout
    with Store(db) as store:
        answer = list(store.read(t))[3].data
        assert (answer["stop_reason"], answer["stop_details"]["category"]) == ("refusal", "cyber")
        fork = store.fork(t, context="note")
        assert "refused (stop_reason refusal)" in transcript_tools(store, fork)["read_transcript"](start=0)


# A refusal's category and explanation as a hostile server could word them: markup, terminal
# escapes, a bidi override, a line break.
CATEGORY = "<b>cy</b>\u202eber"
EXPLANATION = "<script>alert(1)</script> \x1b[31mred\x1b[0m\nsecond line \u2067"


# The viewer's card for that refusal: their words as text, the escapes shown, the line break kept.
REFUSAL_CARD = ('<div class="card refusal">Refused: <span class="why">&lt;b&gt;cy&lt;/b&gt;\\u202eber: '
                '&lt;script&gt;alert(1)&lt;/script&gt; \\x1b[31mred\\x1b[0m\nsecond line \\u2067</span></div>')


def refused_with(api: MessagesAPI, tmp_path: Path, category: str, explanation: str) -> tuple[str, str, Any]:
    """A file whose thread's last answer the model refused, recorded by `ask` on the SDK's
    refusal stream with `stop_details` worded so; the file, the thread, and a CLI on them."""
    db = str(tmp_path / "t.db")

    def threadlog(*args: str) -> Any:
        env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
        return CliRunner().invoke(cli, ["--db", db, *args], env=env, catch_exceptions=False)

    recorded = '"category":"cyber","explanation":"This request was refused due to policy."'
    worded = f'"category":{json.dumps(category)},"explanation":{json.dumps(explanation)}'
    stream = served("refusal_response.txt").decode()
    assert recorded in stream
    t = threadlog("new", "--model", MODEL).stdout.strip()
    api.reply_stream(stream.replace(recorded, worded).encode())
    assert threadlog("ask", t, "Hi", "--stream").exit_code == 3
    return db, t, threadlog


def test_a_refused_answer_is_a_refusal_row_with_its_category_and_explanation(tmp_path: Path, api: MessagesAPI) -> None:
    """The refused answer's one block is an empty text block: `rows` gave it an empty
    `assistant:` row, and said nothing of the refusal. Its blank text makes no row now; a
    `refusal` row after its blocks says why, printed escaped; every other row is as it was."""
    db, t, threadlog = refused_with(api, tmp_path, CATEGORY, EXPLANATION)
    with Store(db) as store:
        events = list(store.read(t))
    question, answer = events[2], events[3]
    assert answer.data["content"] == [{"type": "text", "text": ""}] and answer.data["stop_reason"] == "refusal"
    rows = json.loads(threadlog("rows", t, "--json").stdout)
    assert [(r["id"], r["kind"]) for r in rows] == [(f"{question.event_id}:0", "text"), (f"{answer.event_id}:1", "refusal")]
    assert rows[0] == {"id": f"{question.event_id}:0", "kind": "text", "stream_id": t, "offset": 2, "time": question.recorded_at,
                       "role": "user", "text": "Hi"}
    assert rows[1] == {"id": f"{answer.event_id}:1", "kind": "refusal", "stream_id": t, "offset": 3, "time": answer.recorded_at,
                       "role": "assistant", "text": f"{CATEGORY}: {EXPLANATION}"}
    printed = threadlog("rows", t, "--json").stdout
    assert "\u202e" not in printed and "\u2067" not in printed and "\x1b" not in printed
    lines = threadlog("rows", t).stdout.splitlines()
    assert lines == ["     2  text        user: Hi",
                     "     3  refusal     assistant: (refused: <b>cy</b>\\u202eber: <script>alert(1)</script> "
                     "\\x1b[31mred\\x1b[0m second line \\u2067)"]


def test_show_says_an_answer_was_refused_after_the_text_it_gave_first(tmp_path: Path) -> None:
    """A model may refuse part-way through an answer: `show` looked for a refusal only where the
    answer held no text, and printed "Sure, the" alone where `rows` said it was refused."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        t = store.create_thread(model=MODEL)
        store.append_message(t, "user", "Hi")
        store.append_message(t, "assistant", [{"type": "text", "text": "Sure, the"}], stop_reason="refusal",
                             stop_details={"type": "refusal", "category": "cyber", "explanation": "Policy."})
    shown = CliRunner().invoke(cli, ["--db", db, "show", t]).stdout
    assert "     2  assistant       Sure, the (refused: cyber: Policy.)\n" in shown, shown
    messages = json.loads(CliRunner().invoke(cli, ["--db", db, "show", t, "--json"]).stdout)["messages"]
    assert [m.get("refusal") for m in messages] == [None, "cyber: Policy."] and "refusal" not in messages[0]


def test_show_and_diff_keep_a_refusal_on_the_line_of_a_long_answer(tmp_path: Path) -> None:
    """`show` cut a message's line at 70 characters with its refusal after the text: an answer
    refused after a long sentence showed as one cut for width alone. `diff` printed the text
    only, and a refused answer with none as a blank line. Both end the line with the refusal,
    the text cut to make room."""
    db = str(tmp_path / "t.db")
    long = "Sure, here is how the first part of the procedure goes, step by step:"
    with Store(db) as store:
        t = store.create_thread(model=MODEL)
        store.append_message(t, "user", "Hi")
        details = {"type": "refusal", "category": "cyber", "explanation": "Policy."}
        store.append_message(t, "assistant", [{"type": "text", "text": long}], stop_reason="refusal", stop_details=details)
        store.append_message(t, "user", "And?")
        store.append_message(t, "assistant", [{"type": "text", "text": ""}], stop_reason="refusal", stop_details=details)
        other = store.create_thread()
    cut = long[:43] + "… (refused: cyber: Policy.)"
    shown = CliRunner().invoke(cli, ["--db", db, "show", t]).stdout
    assert f"     2  assistant       {cut}\n" in shown, shown
    compared = CliRunner().invoke(cli, ["--db", db, "diff", t, other]).stdout
    assert f"       2  assistant {cut}\n" in compared and "       4  assistant (refused: cyber: Policy.)\n" in compared, compared


def test_a_refused_answer_without_details_is_a_refusal_row_still(tmp_path: Path, api: MessagesAPI) -> None:
    db, t, threadlog = refused_with(api, tmp_path, "", "")
    [_, refusal] = json.loads(threadlog("rows", t, "--json").stdout)
    assert (refusal["kind"], refusal["role"], "text" in refusal) == ("refusal", "assistant", False)
    assert threadlog("rows", t).stdout.splitlines()[-1] == "     3  refusal     assistant: (refused)"


def test_the_viewer_shows_a_refused_answer_as_refused_with_its_words_escaped(tmp_path: Path, api: MessagesAPI) -> None:
    """The viewer drew the refused answer as an empty bubble. It is a card that says the model
    refused, with the category and explanation as text: no markup of theirs runs, and the
    terminal escapes and bidi controls in them show as escapes."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db, t, _ = refused_with(api, tmp_path, CATEGORY, EXPLANATION)
    with Store(db) as store:
        answer = list(store.read(t))[3]
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        page = browser.get("/thread", params={"id": t}).text
        live = browser.get("/live/rows", params={"id": t, "after": 0, "from": 0}).json()
    card = REFUSAL_CARD
    assert f'id="r-{answer.event_id}:1"' in page and card in page
    assert f'id="r-{answer.event_id}:0"' not in page  # the empty bubble
    assert "<script>alert" not in page and "\u202e" not in page and "\x1b" not in page
    [shown] = [item["html"] for item in live["items"] if item["id"] == f"r-{answer.event_id}:1"]
    assert card in shown


def test_the_replay_and_the_diff_show_a_refused_answer_as_the_thread_page_does(tmp_path: Path, api: MessagesAPI) -> None:
    """The replay and the diff draw the model view's messages, which kept no stop reason: the
    refused answer was an empty bubble on both, and neither said the model refused. Each shows
    the thread page's card now, the server's words escaped alike."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db, t, _ = refused_with(api, tmp_path, CATEGORY, EXPLANATION)
    with Store(db) as store:  # a fork can't be made inside the turn: the diff compares it with a thread of its own
        other = store.create_thread(thread_id="other")
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        replay = browser.get("/replay", params={"id": t}).text
        compared = browser.get("/diff", params={"a": t, "b": other}).text
    for page in (replay, compared):
        assert REFUSAL_CARD in page and '<div class="text markdown"></div>' not in page
        assert "<script>alert" not in page and "\u202e" not in page and "\x1b" not in page
