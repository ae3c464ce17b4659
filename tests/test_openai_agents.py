"""`ThreadlogSession`: the OpenAI Agents SDK's Session over a threadlog store.

Driven through the SDK's own `Runner` with its own `ScriptedModel` (`agents.testing`), on a
real SQLite file, with real processes where a second process matters (resuming, two
writers). The SDK's behaviour is the oracle: items come back exactly as the SDK gave them,
and a branch holds what `AdvancedSQLiteSession`'s would.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.extensions.memory import AdvancedSQLiteSession  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from threadlog import InvalidEvent, Store, display_rows, lineage, search, transcript  # noqa: E402
from threadlog.integrations.openai_agents import ThreadlogSession, item_of  # noqa: E402
from tests.procs import all_done, started_together  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "agents_worker.py")


@pytest.fixture(autouse=True, scope="module")
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI
    yield


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def three_turns() -> ScriptedModel:
    """Turn 1 calls the tool then answers; turns 2 and 3 answer."""
    return ScriptedModel([
        [function_call("get_weather", {"city": "Lyon"}, call_id="call_1")],
        [assistant_message("It is sunny in Lyon.", item_id="m1")],
        [assistant_message("Take a hat.", item_id="m2")],
        [assistant_message("Goodbye.", item_id="m3")],
    ])


async def chat(session: Session, model: ScriptedModel, *texts: str) -> None:
    agent = Agent(name="planner", model=model, tools=[get_weather])
    for text in texts:
        await Runner.run(agent, text, session=session)


def worker(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, WORKER, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def read_by_another_process(db: Path, session_id: str) -> Any:
    """The items of session `session_id` in the file `db`, as a new process reads them."""
    return json.loads(worker("items", str(db), session_id).stdout)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agents.db"


def test_runner_turns_with_a_tool_call_are_stored_as_the_sdk_gave_them(db: Path) -> None:
    store = Store(db)
    session = ThreadlogSession("ana", store)
    assert isinstance(session, Session)
    model = three_turns()
    run(chat(session, model, "Weather in Lyon?", "Anything to bring?"))

    oracle = AdvancedSQLiteSession(session_id="ana", create_tables=True)  # the SDK's own session, same run
    run(chat(oracle, three_turns(), "Weather in Lyon?", "Anything to bring?"))
    items = run(session.get_items())
    assert items == run(oracle.get_items())
    assert [item.get("type") for item in items] == [None, "function_call", "function_call_output", "message", None, "message"]
    # The model's second turn was given the first turn from the session.
    second_input = model.calls[2].input
    assert second_input[:4] == items[:4]

    assert run(session.get_items(limit=2)) == items[-2:]
    limited = ThreadlogSession("ana", store, session_settings=SessionSettings(limit=3))
    assert run(limited.get_items()) == items[-3:]
    assert run(limited.get_items(limit=1)) == items[-1:]

    # Their text is visible to threadlog's own readers.
    assert session.thread is not None
    md = transcript(store, session.thread)
    for text in ("Weather in Lyon?", "get_weather", "Sunny in Lyon", "It is sunny in Lyon.", "Take a hat."):
        assert text in md
    assert {hit.snippet for hit in search(store, "hat", thread=session.thread)} == {"Take a **hat**."}
    store.verify()
    oracle.close()
    store.close()


def test_a_streamed_run_stores_the_same_items(db: Path) -> None:
    async def streamed(session: Session) -> None:
        agent = Agent(name="planner", model=three_turns(), tools=[get_weather])
        result = Runner.run_streamed(agent, "Weather in Lyon?", session=session)
        async for _ in result.stream_events():
            pass

    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(streamed(session))
        oracle = AdvancedSQLiteSession(session_id="ana", create_tables=True)
        run(chat(oracle, three_turns(), "Weather in Lyon?"))
        assert run(session.get_items()) == run(oracle.get_items())
        oracle.close()


def test_a_new_process_resumes_the_session(db: Path) -> None:
    with Store(db) as store:
        run(chat(ThreadlogSession("ana", store), three_turns(), "Weather in Lyon?"))
        before = run(ThreadlogSession("ana", store).get_items())

    given_to_model = json.loads(worker("turn", str(db), "ana", "And tomorrow?", "Rain.").stdout)

    assert given_to_model[:len(before)] == before
    assert given_to_model[len(before)] == {"role": "user", "content": "And tomorrow?"}
    with Store(db) as store:
        after = run(ThreadlogSession("ana", store).get_items())
        assert after[:len(before) + 1] == given_to_model
        assert after[-1]["content"][0]["text"] == "Rain."
        store.verify()


def test_a_branch_is_a_fork_holding_what_the_sdk_branch_holds(db: Path) -> None:
    store = Store(db)
    session = ThreadlogSession("ana", store)
    run(chat(session, three_turns(), "Weather in Lyon?", "Anything to bring?", "Bye"))
    main_items = run(session.get_items())
    oracle = AdvancedSQLiteSession(session_id="ana", create_tables=True)
    run(oracle.add_items(main_items))

    events = store.counts().events
    name = run(session.create_branch_from_turn(2, "retry"))
    assert name == "retry" == session.current_branch
    assert store.counts().events == events + 1  # one thread.forked event: nothing copied
    run(oracle.create_branch_from_turn(2, "retry"))
    assert run(session.get_items()) == run(oracle.get_items()) == main_items[:4]

    run(chat(session, ScriptedModel([[assistant_message("Then take an umbrella.")]]), "What if it rains?"))
    branch_items = run(session.get_items())
    assert branch_items[:4] == main_items[:4] and branch_items[4] == {"role": "user", "content": "What if it rains?"}

    turns = run(session.get_conversation_turns())
    assert [(t["turn"], t["content"]) for t in turns] == [(1, "Weather in Lyon?"), (2, "What if it rains?")]
    assert [t["turn"] for t in run(session.find_turns_by_content("RAINS"))] == [2]

    listed = {b["branch_id"]: b for b in run(session.list_branches())}
    assert set(listed) == {"main", "retry"}
    assert (listed["main"]["message_count"], listed["main"]["user_turns"], listed["main"]["is_current"]) == (8, 3, False)
    assert (listed["retry"]["message_count"], listed["retry"]["user_turns"], listed["retry"]["is_current"]) == (6, 2, True)

    run(session.switch_to_branch("main"))
    assert run(session.get_items()) == main_items
    # threadlog's fork tree shows the branch below main's thread.
    assert session.thread is not None
    forks = [entry for entry in lineage(store, session.thread) if entry.relation == "descendant"]
    assert [(entry.parent_id, entry.parent_offset) for entry in forks] == [(session.thread, 5)]

    with pytest.raises(ValueError, match="already been used"):
        run(session.create_branch_from_turn(1, "retry"))
    with pytest.raises(ValueError, match="Turn 4 does not contain a user message"):
        run(session.create_branch_from_turn(4))
    with pytest.raises(ValueError, match="does not exist"):
        run(session.switch_to_branch("nope"))
    auto = run(session.create_branch_from_turn(1))
    assert auto.startswith("branch_from_turn_1_") and run(session.get_items()) == []
    store.verify()
    oracle.close()
    store.close()


def test_finding_turns_by_content_answers_as_the_sdk_does(db: Path) -> None:
    """`find_turns_by_content` gives each match's whole text (not the 100-character preview of
    `get_conversation_turns`) and searches the text parts only, not the names threadlog
    gives other parts in its transcripts (`[image]`, `[file …]`)."""
    long = "Lyon " + "and then further south " * 10
    items: list[Any] = [
        {"role": "user", "content": long},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [{"type": "input_text", "text": "What is in this picture?"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]},
        {"role": "user", "content": [{"type": "input_file", "filename": "lyon.pdf", "file_data": "data:application/pdf;base64,AA"}]},
        {"role": "user", "content": "Un élan vers ÉTÉ, à Genève"},  # case folded for ASCII letters only, as SQLite's LIKE
    ]
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        oracle = AdvancedSQLiteSession(session_id="ana", create_tables=True)
        for s in (session, oracle):
            run(s.add_items(items))

        def found(s: Any, term: str) -> list[tuple[int, Any, Any]]:  # a list's preview is its JSON (threadlog's keys sorted)
            return [(t["turn"], t["content"] if isinstance(t["full_content"], str) else None, t["full_content"])
                    for t in run(s.find_turns_by_content(term))]

        for term in ("lyon", "SOUTH", "picture", "image", "file", "pdf", "ÉLAN", "été", "GENÈVE", "un"):
            assert found(session, term) == found(oracle, term), term
        oracle.close()


def test_a_new_session_object_branches_from_the_cached_turns_with_the_same_answer(db: Path) -> None:
    """A new object (a new process) finds the user turns from a snapshot instead of reading every
    item; the snapshot is a cache: without it, and with items added after it, the branch is the same."""
    from threadlog.integrations.openai_agents import SNAPSHOT_AFTER, TURNS

    with Store(db) as store:
        talk = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(SNAPSHOT_AFTER + 40)]
        run(ThreadlogSession("ana", store).add_items(talk))
        first = ThreadlogSession("ana", store)
        run(first.create_branch_from_turn(3, "b1"))  # reads every item, then caches the turns
        assert store.count_snapshots() == 1
        run(ThreadlogSession("ana", store).add_items([{"role": "user", "content": "late"}]))
        turns = len(talk) // 2 + 1
        for name, drop in (("b2", False), ("b3", True)):
            if drop:
                store.drop_snapshots(TURNS)
            session = ThreadlogSession("ana", store)
            run(session.create_branch_from_turn(turns, name))
            assert run(session.get_items()) == talk
            run(session.switch_to_branch("main"))
            run(session.create_branch_from_turn(2, name + "-early"))
            assert run(session.get_items()) == talk[:2]
        store.verify()


def test_pop_and_clear_change_the_view_and_keep_the_log(db: Path) -> None:
    store = Store(db)
    session = ThreadlogSession("ana", store)
    run(chat(session, three_turns(), "Weather in Lyon?", "Anything to bring?"))
    items = run(session.get_items())
    first_thread = session.thread
    events = store.counts().events

    assert run(session.pop_item()) == items[-1]
    assert run(session.pop_item()) == items[-2]
    assert run(session.get_items()) == items[:-2]
    assert store.counts().events > events  # popping appends; nothing is deleted
    assert first_thread is not None
    kept = [item_of(e.data) for e in store.read(first_thread) if e.type == "message.appended"]
    assert kept == items  # the log still holds what was popped
    assert search(store, "hat", thread=session.thread) == []  # the view's history no longer has it
    assert len(search(store, "hat")) == 1  # the log does

    run(session.add_items([{"role": "user", "content": "Anything else?"}]))
    assert run(session.get_items()) == [*items[:-2], {"role": "user", "content": "Anything else?"}]
    run(session.create_branch_from_turn(1, "other"))
    run(session.add_items([{"role": "user", "content": "Paris instead?"}]))

    run(session.clear_session())
    assert session.current_branch == "main"
    assert run(session.get_items()) == [] and run(session.pop_item()) is None
    assert run(session.list_branches()) == []
    with pytest.raises(ValueError, match="does not exist"):
        run(session.switch_to_branch("other"))
    run(session.add_items([{"role": "user", "content": "Again"}]))
    with pytest.raises(ValueError, match="already been used"):  # a name stays used after a clear, as in the SDK
        run(session.create_branch_from_turn(1, "other"))
    assert run(session.get_items()) == [{"role": "user", "content": "Again"}]
    # Another session object (a new process) sees the same view.
    assert run(ThreadlogSession("ana", store).get_items()) == [{"role": "user", "content": "Again"}]
    logged = [item_of(e.data) for e in store.read_all() if e.type == "message.appended"]
    assert [item["content"] for item in logged if item.get("role") == "user"] == [
        "Weather in Lyon?", "Anything to bring?", "Anything else?", "Paris instead?", "Again"]
    store.verify()
    store.close()


def test_a_writer_that_missed_a_pop_or_clear_writes_where_the_branch_lives(db: Path) -> None:
    """Two session objects on two connections: one pops and clears behind the other's back."""
    mine, theirs = Store(db), Store(db)
    a, b = ThreadlogSession("ana", mine), ThreadlogSession("ana", theirs)
    run(a.add_items([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]))
    assert run(b.get_items()) == run(a.get_items())

    assert run(b.pop_item()) == {"role": "assistant", "content": "two"}
    run(a.add_items([{"role": "assistant", "content": "three"}]))  # a still knows the old thread
    expected = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "three"}]
    assert run(a.get_items()) == run(b.get_items()) == expected

    run(b.clear_session())
    run(a.add_items([{"role": "user", "content": "four"}]))
    assert run(b.get_items()) == [{"role": "user", "content": "four"}]
    assert run(a.pop_item()) == {"role": "user", "content": "four"}
    assert run(b.get_items()) == []
    mine.verify()
    mine.close()
    theirs.close()


def test_a_branch_made_by_a_writer_that_missed_a_pop_starts_from_the_current_items(db: Path) -> None:
    mine, theirs = Store(db), Store(db)
    a, b = ThreadlogSession("ana", mine), ThreadlogSession("ana", theirs)
    u1, a1, u2, a2, u3 = ({"role": role, "content": text} for role, text in
                          [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")])
    run(a.add_items([u1, a1, u2, a2]))
    assert [t["turn"] for t in run(a.get_conversation_turns())] == [1, 2]  # a has read the turns of the old thread
    assert run(b.pop_item()) == a2
    run(b.add_items([u3]))
    run(a.create_branch_from_turn(3, "from-u3"))
    assert run(a.get_items()) == [u1, a1, u2]
    run(b.switch_to_branch("from-u3"))
    assert run(b.get_items()) == [u1, a1, u2]
    mine.verify()
    mine.close()
    theirs.close()


def test_two_processes_writing_one_session_lose_nothing(db: Path) -> None:
    with Store(db) as store:
        run(ThreadlogSession("shared", store).add_items([{"role": "user", "content": "start"}]))
    count = 40
    with started_together([[WORKER, "add", str(db), "shared", writer, str(count)] for writer in ("a", "b")]) as procs:
        all_done(procs, timeout=120)
    with Store(db) as store:
        contents = [item["content"] for item in run(ThreadlogSession("shared", store).get_items())]
        assert contents[0] == "start" and len(contents) == 1 + 2 * count
        for writer in ("a", "b"):
            assert [c for c in contents if c.startswith(writer)] == [f"{writer}-{i}" for i in range(count)]
        store.verify()


def test_a_bad_item_is_refused_and_nothing_is_written(db: Path) -> None:
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "kept"}]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=r"items\[1\]: must be a dict"):
            run(session.add_items([{"role": "user", "content": "not kept"}, "text"]))  # type: ignore[list-item]
        assert store.counts().events == events
        assert run(session.get_items()) == [{"role": "user", "content": "kept"}]


def _nested(depth: int) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for _ in range(depth):
        nested = {"a": nested}
    return nested


@pytest.mark.parametrize(("kind", "field"), [("function_call", "arguments"), ("mcp_call", "arguments"), ("mcp_call", "output"),
                                             ("code_interpreter_call", "code"), ("web_search_call", "status"), ("custom", "type")])
def test_an_item_nested_past_python_s_stack_is_refused_by_its_place_and_nothing_is_written(db: Path, kind: str,
                                                                                           field: str) -> None:
    """Its text, written from the item before the store read it, raised RecursionError (the SDK
    takes loose dicts): an item nested 150 levels deep was refused naming it, one 3,000 deep
    was not, and the caller could not tell which item."""
    item = {"type": kind, "id": "x", "name": "t"} | {field: _nested(3000)}
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "kept"}]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=r"^items\[1\]\.data\.item: JSON nested more than 100 levels deep"):
            run(session.add_items([{"role": "user", "content": "not kept"}, item]))
        assert store.counts().events == events
        assert run(session.get_items()) == [{"role": "user", "content": "kept"}]


def test_a_tool_output_of_a_few_mib_is_searched_whole(db: Path) -> None:
    """Its text copy was cut at 1 MiB characters, so a word past that (a secret to find and
    redact) was not found, though the item and its whole text fit in one event."""
    output = "filler line\n" * (3 * 1024 * 1024 // 12) + "NEEDLE at the end"
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"type": "function_call_output", "call_id": "call_1", "output": output}]))
        stored = list(store.read(session.thread))[-1]
        assert stored.data["content"][0]["text"] == f"← {output}"
        assert [(hit.stream, hit.offset) for hit in search(store, "NEEDLE")] == [(session.thread, stored.offset)]


def test_a_tool_output_over_half_an_event_is_stored_whole_with_its_text_cut(db: Path) -> None:
    # 20 MiB: the item and a full copy of its text beside it would pass the 32 MiB an event holds.
    output = "line of a large file\n" * (20 * 1024 * 1024 // 21)
    item = {"type": "function_call_output", "call_id": "call_1", "output": output}
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "read it"}, item]))
        assert run(session.get_items()) == [{"role": "user", "content": "read it"}, item]
        text = list(store.read(session.thread))[-1].data["content"][0]["text"]
        assert text.startswith("← line of a large file\n") and len(text) < 1024 * 1024 + 100
        assert text.endswith(f"[… {len(output) + 2 - 1024 * 1024:,} more characters, kept in the item]")


def test_an_item_too_large_for_an_event_is_refused_by_its_place_in_the_items(db: Path) -> None:
    """The refusal named `events[1]`: the caller passed items, and made no events."""
    huge = {"type": "function_call_output", "call_id": "call_1", "output": "y" * (32 * 1024 * 1024)}
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "kept"}]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=r"^items\[1\]\.data: is \d+ bytes of JSON; an event holds at most 33554432"):
            run(session.add_items([{"role": "user", "content": "not kept"}, huge]))
        assert store.counts().events == events
        assert run(session.get_items()) == [{"role": "user", "content": "kept"}]


def test_a_redacted_item_leaves_a_placeholder(db: Path) -> None:
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "my password is hunter2"}, {"role": "assistant", "content": "Noted."}]))
        assert session.thread is not None
        leaked = next(e for e in store.read(session.thread) if e.type == "message.appended")
        store.redact(leaked.position, reason="secret", actor="ops")
        assert run(session.get_items()) == [{"role": "user", "content": "[redacted]"}, {"role": "assistant", "content": "Noted."}]
        store.verify()


# Items the SDK may hold: any JSON object (messages, tool calls, reasoning, types to come).
_scalars = st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_items = st.fixed_dictionaries(
    {},
    optional={"type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "web_search_call",
                                       "computer_call_output", "something_new"]),
              "role": st.sampled_from(["user", "assistant", "system", "developer"]),
              "content": st.text() | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text",
                                                                                          "input_image", "refusal"]),
                                                                     "text": st.text()}), max_size=2),
              "name": st.text(max_size=10), "arguments": st.text(max_size=20), "output": st.text(max_size=20) | _json,
              "summary": _json, "extra": _json},
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(_items, min_size=1, max_size=3), min_size=1, max_size=4), limit=st.integers(0, 12))
def test_items_come_back_exactly_and_pop_returns_them_in_reverse(batches: list[list[dict[str, Any]]], limit: int) -> None:
    with Store(":memory:") as store:
        session = ThreadlogSession("any", store)
        for batch in batches:
            run(session.add_items(batch))
        flat = [item for batch in batches for item in batch]
        got = run(session.get_items())
        assert got == flat
        assert json.dumps(got, sort_keys=True) == json.dumps(flat, sort_keys=True)  # 1 stays 1, 1.0 stays 1.0
        assert run(session.get_items(limit=limit)) == (flat[-limit:] if limit else [])
        popped = [run(session.pop_item()) for _ in flat]
        assert popped == flat[::-1] and run(session.pop_item()) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer"]), "content": st.text(max_size=12)},
    optional={"type": st.just("message"), "id": st.text(max_size=4)}), min_size=1, max_size=6))
def test_items_read_back_exactly_whether_stored_as_text_or_whole(items: list[dict[str, Any]]) -> None:
    """A plain text message is stored as its text alone (the store's text fast path); every
    other item keeps its JSON in the event. Either way `get_items` gives back what was added."""
    with Store(":memory:") as store:
        session = ThreadlogSession("h", store)
        run(session.add_items(items))  # type: ignore[arg-type]
        assert run(session.get_items()) == items
        stored = [e.data for e in store.read(session.thread or "") if e.type == "message.appended"]
        assert ["item" not in data for data in stored] == [
            set(item) == {"role", "content"} and item["role"] in ("user", "assistant") and item["content"].strip() != ""
            for item in items]


# What a reader is shown of each kind of item: a call with its arguments, what it returned or its error.
SHOWN_ITEMS = {
    "mcp_call": ({"type": "mcp_call", "id": "m", "name": "t", "server_label": "s", "arguments": "{}", "output": "out"},
                 "→ s.t({})\n← out"),
    "mcp_call_error": ({"type": "mcp_call", "id": "m2", "name": "lookup", "server_label": "docs", "arguments": '{"q": "x"}',
                        "output": None, "error": {"type": "mcp_protocol_error", "code": -32000, "message": "server gone"}},
                       '→ docs.lookup({"q": "x"})\n← error: server gone'),
    "mcp_list_tools": ({"type": "mcp_list_tools", "id": "l", "server_label": "docs",
                        "tools": [{"name": "search", "input_schema": {}}, {"name": "fetch", "input_schema": {}}]},
                       "[mcp_list_tools] docs: search, fetch"),
    "mcp_approval_request": ({"type": "mcp_approval_request", "id": "ar", "server_label": "s", "name": "rm", "arguments": '{"f": 1}'},
                             '[mcp_approval_request] → s.rm({"f": 1})'),
    "mcp_approval_response": ({"type": "mcp_approval_response", "approval_request_id": "ar", "approve": False, "reason": "too risky"},
                              "← not approved: too risky"),
    "image_generation_call": ({"type": "image_generation_call", "id": "ig", "result": "iVBOR", "status": "completed",
                               "revised_prompt": "a cat on a train", "output_format": "png", "size": "1024x1024"},
                              "→ image_generation(a cat on a train)\n← [image png, 1024x1024]"),
    "code_interpreter_call": ({"type": "code_interpreter_call", "id": "ci", "code": "print(6 * 7)", "container_id": "c",
                               "outputs": [{"type": "logs", "logs": "42"}], "status": "completed"},
                              "→ code_interpreter(print(6 * 7))\n← 42"),
    "local_shell_call": ({"type": "local_shell_call", "id": "ls", "call_id": "c4", "status": "completed",
                          "action": {"type": "exec", "command": ["ls", "my dir"], "env": {}}}, "→ local_shell(ls 'my dir')"),
    "shell_call": ({"type": "shell_call", "call_id": "sc", "action": {"commands": ["make test"]}}, "→ shell(make test)"),
    "shell_call_output": ({"type": "shell_call_output", "call_id": "sc",
                           "output": [{"stdout": "ok\n", "stderr": "warned\n", "outcome": {"type": "exit", "exit_code": 2}}]},
                          "← ok\nwarned\n[exit 2]"),
    "apply_patch_call": ({"type": "apply_patch_call", "call_id": "ap", "status": "completed",
                          "operation": {"type": "update_file", "path": "app.py", "diff": "-a\n+b"}},
                         "→ apply_patch(update_file app.py)\n-a\n+b"),
    "apply_patch_call_output": ({"type": "apply_patch_call_output", "call_id": "ap", "status": "failed", "output": "no app.py"},
                                "← failed: no app.py"),
    "web_search_call": ({"type": "web_search_call", "id": "ws", "status": "completed",
                         "action": {"type": "search", "query": "trains to Lyon",
                                    "sources": [{"type": "url", "url": "https://sncf.example"}]}},
                        "→ web_search(trains to Lyon)\n← https://sncf.example"),
    "file_search_call": ({"type": "file_search_call", "id": "fs", "queries": ["refund"], "status": "completed",
                          "results": [{"filename": "policy.md", "text": "Refunds within 30 days."}]},
                         "→ file_search(refund)\n← policy.md: Refunds within 30 days."),
    "computer_call": ({"type": "computer_call", "id": "cu", "call_id": "c3", "pending_safety_checks": [], "status": "completed",
                       "action": {"type": "click", "x": 10, "y": 20, "button": "left"}}, "→ computer(click x=10 y=20 button=left)"),
    "computer_call_output": ({"type": "computer_call_output", "call_id": "c3",
                              "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}}, "← [screenshot]"),
    "item_reference": ({"type": "item_reference", "id": "msg_0"}, "[item_reference msg_0]"),
}


@pytest.mark.parametrize(("item", "shown"), list(SHOWN_ITEMS.values()), ids=list(SHOWN_ITEMS))
def test_each_kind_of_item_shows_its_call_and_what_it_returned(db: Path, item: dict[str, Any], shown: str) -> None:
    """An MCP call read `[mcp_call]` in the transcript, the rows and the viewer: which server and
    tool, with which arguments, and what came back were in the log but shown nowhere; so for an
    approval, a shell command and its exit status, a search's query and sources, a patch."""
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([item]))
        assert run(session.get_items()) == [item]
        thread = session.thread
        assert thread is not None
        assert [row.text for row in display_rows(store, thread)] == [shown]
        assert "\n    ".join(shown.split("\n")) in transcript(store, thread)


def test_the_viewer_shows_an_mcp_calls_server_tool_arguments_and_output(db: Path) -> None:
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([SHOWN_ITEMS["mcp_call"][0], SHOWN_ITEMS["mcp_call_error"][0]]))
        thread = session.thread
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1") as client:
        page = client.get("/thread", params={"id": thread}).text
    assert "<p>→ s.t({})<br>\n← out</p>" in page and "[mcp_call]" not in page, page
    assert '<p>→ docs.lookup({"q": "x"})<br>\n← error: server gone</p>' in page


def _answer(text: str, status: Any, item_id: str) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    return ResponseOutputMessage(id=item_id, type="message", role="assistant", status=status,
                                 content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])])


def test_an_answer_the_model_did_not_finish_is_marked_cut_short_and_comes_back_as_added(db: Path) -> None:
    """An assistant message the model did not finish (its item's `status: incomplete`, as the
    Responses API gives an answer stopped at `max_output_tokens`) read as a whole answer: the
    session kept no stop reason. It keeps the item's status in the item's own words; the item
    comes back exactly as the SDK gave it."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    model = ScriptedModel([[_answer("The first step is", "incomplete", "m1")], [_answer("Done.", "completed", "m2")]])
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(chat(session, model, "Plan a trip", "Thanks"))
        odd = [{"type": "message", "role": "user", "status": "incomplete", "content": [{"type": "input_text", "text": "mine"}]},
               {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "status": "incomplete"},
               {"type": "message", "role": "assistant", "status": "x" * 201, "content": "long"},
               {"type": "message", "role": "assistant", "status": 7, "content": "seven"},
               {"type": "message", "role": "assistant", "status": "in_progress", "content": "still"}]
        run(session.add_items(odd))
        items = run(session.get_items())
        assert [item.get("status") for item in items] == [None, "incomplete", None, "completed", *[item["status"] for item in odd]]
        assert items[1] == _answer("The first step is", "incomplete", "m1").model_dump(exclude_unset=True)
        assert items[4:] == odd
        assert session.thread is not None
        said = [e.data.get("stop_reason") for e in store.read(session.thread) if e.type == "message.appended"]
        assert said == [None, "incomplete", None, "completed", None, None, None, None, "in_progress"]
        thread = session.thread
    rows = json.loads(CliRunner().invoke(cli, ["--db", str(db), "rows", thread, "--json"]).stdout)
    assert [r["text"] for r in rows if r["kind"] == "cut_short"] == [
        "cut off before it was finished (incomplete)", "cut off while it was still being written (in_progress)"]


def _refusal(words: str, item_id: str, text: str | None = None) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal, ResponseOutputText

    said = [ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])] if text is not None else []
    return ResponseOutputMessage(id=item_id, type="message", role="assistant", status="completed",
                                 content=[*said, ResponseOutputRefusal(refusal=words, type="refusal")])


def test_an_answer_the_model_refused_is_marked_refused_with_its_words_and_comes_back_as_added(db: Path) -> None:
    """An assistant message whose content is a `refusal` part (the Responses API's
    `ResponseOutputRefusal`) read as the model's plain text: not marked refused, as an
    Anthropic refusal is everywhere. It is a refusal with the part's words, shown once (no
    text row repeating them); text the answer gave before it stays its text; the item comes
    back exactly as the SDK gave it."""
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from threadlog.cli import cli
    from threadlog.web import create_app

    no, part = "I can't help with picking locks.", "Here is a list of locksmiths."
    refused, partly = _refusal(no, "m1"), _refusal("The rest I can't give.", "m2", text=part)
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([{"role": "user", "content": "How do I pick a lock?"},
                               refused.model_dump(exclude_unset=True), partly.model_dump(exclude_unset=True)]))
        items = run(session.get_items())
        assert items[1:] == [refused.model_dump(exclude_unset=True), partly.model_dump(exclude_unset=True)]
        assert session.thread is not None
        thread = session.thread
        answers = [e.data for e in store.read(thread) if e.type == "message.appended"][1:]
        assert [(a.get("stop_reason"), a.get("stop_details")) for a in answers] == [
            ("refusal", {"type": "refusal", "explanation": no}),
            ("refusal", {"type": "refusal", "explanation": "The rest I can't give."})]
        assert [a["content"] for a in answers] == [[{"type": "text", "text": ""}], [{"type": "text", "text": part}]]
        markdown = transcript(store, thread)
    assert f"refused (stop_reason refusal)\n\n    {no}" in markdown and markdown.count(no) == 1, markdown
    runner = CliRunner()
    rows = json.loads(runner.invoke(cli, ["--db", str(db), "rows", thread, "--json"]).stdout)
    assert [(r["kind"], r.get("text")) for r in rows if r.get("role") == "assistant"] == [
        ("refusal", no), ("text", part), ("refusal", "The rest I can't give.")]
    shown = runner.invoke(cli, ["--db", str(db), "show", thread]).stdout
    assert f"(refused: {no})" in shown and shown.count(no) == 1, shown
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1") as client:
        page = client.get("/thread", params={"id": thread}).text
    assert '<div class="card refusal">Refused: <span class="why">I can&#39;t help with picking locks.</span></div>' in page
    assert page.count("I can&#39;t help with picking locks.") == 1, page
