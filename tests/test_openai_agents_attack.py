"""`ThreadlogSession` used as its users would misuse it: processes racing on one session,
items of every shape the Agents SDK makes and some it should not, hostile names.

Real SQLite files and real processes (`tests/agents_worker.py`); the SDK's own
`AdvancedSQLiteSession` is the oracle for the edges where threadlog claims to behave the same.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import SQLiteSession  # noqa: E402
from agents.extensions.memory import AdvancedSQLiteSession  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from threadlog import InvalidEvent, Store, StoreError  # noqa: E402
from threadlog.cli import cli  # noqa: E402
from threadlog.integrations.openai_agents import ThreadlogSession  # noqa: E402
from tests.procs import started_together  # noqa: E402
from tests.test_openai_agents import read_by_another_process  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "agents_worker.py")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agents.db"


# -- several processes on one session -----------------------------------------------------------


def race(db: Path, writers: int, count: int, clears: bool) -> tuple[list[list[Any]], list[list[str]]]:
    """Start `writers` processes mixing add_items/pop_item (and clear_session) on one session at
    once; returns what each did and what each one's session object reads once all are done."""
    Store(db).close()
    argvs = [[WORKER, "mix", str(db), "shared", f"w{k}", str(count), str(k), "1" if clears else "0"] for k in range(writers)]
    with started_together(argvs) as procs:
        done = []
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:] if proc.stderr else ""
            done.append(json.loads(line))
        views = []
        for proc in procs:
            out, err = proc.communicate("views\n", timeout=120)
            assert proc.returncode == 0, err[-3000:]
            views.append(json.loads(out))
        return done, views


def test_processes_adding_and_popping_one_session_lose_nothing_and_pop_nothing_twice(db: Path) -> None:
    """A process that popped could be handed the head of the thread the branch moved to as
    it read it, after another process had written there and popped again: its next
    `add_items` went after that pop's superseding event, where no reader follows (items
    lost), and the thread looked current again to some readers (an item popped twice)."""
    done, views = race(db, writers=3, count=60, clears=False)
    added = [text for ops in done for op, value in ops if op == "add" for text in value]
    popped = [value for ops in done for op, value in ops if op == "pop" and value is not None]
    final = views[0]
    assert all(view == final for view in views)  # every process ends with the same view
    assert sorted(popped) == sorted(set(popped))  # nothing popped twice
    assert sorted(final + popped) == sorted(added)  # nothing lost, nothing duplicated
    order = {text: i for i, text in enumerate(added)}  # each writer's items keep their order
    for k in range(3):
        mine = [text for text in final if text.startswith(f"w{k}-")]
        assert mine == sorted(mine, key=order.__getitem__)
    with Store(db) as store:
        assert [item["content"] for item in run(ThreadlogSession("shared", store).get_items())] == final
        store.verify()


def test_processes_clearing_while_others_add_and_pop_agree_on_the_view(db: Path) -> None:
    done, views = race(db, writers=3, count=50, clears=True)
    added = [text for ops in done for op, value in ops if op == "add" for text in value]
    popped = [value for ops in done for op, value in ops if op == "pop" and value is not None]
    final = views[0]
    assert all(view == final for view in views)
    assert sorted(popped) == sorted(set(popped)) and set(popped) <= set(added)
    assert len(final) == len(set(final)) and set(final) <= set(added) - set(popped)
    with Store(db) as store:
        assert [item["content"] for item in run(ThreadlogSession("shared", store).get_items())] == final
        store.verify()


# -- items ------------------------------------------------------------------------------------------

SDK_ITEMS: list[dict[str, Any]] = [
    user("plain"),
    {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                 {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
                                 {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}]},
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "use tools"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]},
    {"type": "message", "role": "assistant", "id": "msg_2", "status": "completed",
     "content": [{"type": "refusal", "refusal": "no"}]},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Lyon\"}", "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_image", "image_url": "https://x/y.png"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}], "encrypted_content": "gAAA"},
    {"type": "reasoning", "id": "rs_2", "summary": []},
    {"type": "computer_call", "id": "cu_1", "call_id": "c3", "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
     "pending_safety_checks": [], "status": "completed"},
    {"type": "computer_call_output", "call_id": "c3", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "trains"}},
    {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed", "results": None},
    {"type": "image_generation_call", "id": "ig_1", "result": "iVBOR", "status": "completed"},
    {"type": "local_shell_call", "id": "ls_1", "call_id": "c4", "action": {"type": "exec", "command": ["ls"], "env": {}},
     "status": "completed"},
    {"type": "local_shell_call_output", "id": "c4", "output": "a\nb"},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "t", "arguments": "{}", "output": None, "error": None},
    {"type": "mcp_approval_request", "id": "ar_1", "server_label": "s", "name": "t", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "ar_1", "approve": True},
    {"type": "custom_tool_call", "call_id": "c5", "name": "grammar", "input": "x + 1"},
    {"type": "custom_tool_call_output", "call_id": "c5", "output": "2"},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "compaction", "encrypted_content": "gAAAA"},
    user("NUL\x00 and controls \x01\x1b[31m\r\u2028\ufeff"),
    {"type": "function_call", "call_id": "c6", "name": "\x00", "arguments": "\x00\ud7ff\U0010ffff"},
    {"role": "user", "content": ""},
    {"role": "assistant", "content": "   "},
    {},
    {"role": None, "content": None, "type": None},
    {"type": "x", "numbers": [0, -0.0, 1.0, 1e308, 2**70, -(2**63), True, False, None], "nested": {"a": {"b": {"c": [[[]]]}}}},
    {"type": "x", "deep": json.loads("[" * 90 + "]" * 90)},
    user("x" * 5_000_000),
]


def test_every_item_shape_the_sdk_makes_reads_back_exactly_here_and_in_a_new_process(db: Path) -> None:
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items(SDK_ITEMS))  # type: ignore[arg-type]
        assert run(session.get_items()) == SDK_ITEMS
        store.verify()
    assert read_by_another_process(db, "ana") == SDK_ITEMS
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        assert [run(session.pop_item()) for _ in SDK_ITEMS] == SDK_ITEMS[::-1]
        assert run(session.pop_item()) is None
        store.verify()


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("item", "why"), [
    ({"role": "user", "content": {1, 2}}, "not storable as UTF-8 JSON"),
    ({"role": "user", "content": b"bytes"}, "not storable as UTF-8 JSON"),
    ({"type": "function_call", "arguments": float("nan")}, "not storable as UTF-8 JSON"),
    ({"type": "x", "v": float("inf")}, "not storable as UTF-8 JSON"),
    ({"type": "x", "v": object()}, "not storable as UTF-8 JSON"),
    ({"type": "x", 1: "int key"}, "JSON object keys must be text"),
    ({"role": "user", "content": "lone \ud800 surrogate"}, "not storable as UTF-8 JSON"),
    ({"type": "function_call_output", "output": "\udfff"}, "not storable as UTF-8 JSON"),
    ({"type": "x", "v": _deep(5000)}, "nested more than 100 levels"),
    ("text", "must be a dict"),
    (None, "must be a dict"),
], ids=["set", "bytes", "nan", "inf", "object", "int-key", "surrogate-text", "surrogate-output", "too-deep", "str", "none"])
def test_an_item_the_store_cannot_hold_exactly_is_refused_and_nothing_is_written(db: Path, item: Any, why: str) -> None:
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([user("kept")]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=why) as refused:
            run(session.add_items([user("not kept"), item]))
        assert refused.value.field.startswith("items[1]")  # named as the caller passed it
        assert store.counts().events == events
        assert run(session.get_items()) == [user("kept")]
        run(session.add_items([user("after")]))
        assert run(ThreadlogSession("ana", store).get_items()) == [user("kept"), user("after")]
        store.verify()


# -- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", [" ", "\n", "a\x00b", "x" * 100_000, "a/b", "main", "🙂"],
                         ids=["blank", "newline", "nul", "huge", "slash", "main", "emoji"])
def test_any_text_is_a_session_id_and_sessions_stay_apart(db: Path, session_id: str) -> None:
    with Store(db) as store:
        mine, other = ThreadlogSession(session_id, store), ThreadlogSession(session_id + "-other", store)
        run(mine.add_items([user("mine")]))
        run(other.add_items([user("other")]))
        assert run(ThreadlogSession(session_id, store).get_items()) == [user("mine")]
        run(mine.create_branch_from_turn(1, "b" + session_id))
        assert run(mine.get_items()) == []
        store.verify()


def test_a_name_utf8_cannot_encode_is_refused_before_anything_is_written(db: Path) -> None:
    """A lone surrogate in a session id was taken, then every write failed with an error about
    a thread's event; in a branch name it failed with an error about a fork's data."""
    with Store(db) as store:
        with pytest.raises(InvalidEvent, match=r"^session_id: surrogates not allowed at index 1"):
            ThreadlogSession("a\ud800", store)
        session = ThreadlogSession("ana", store)
        run(session.add_items([user("one"), user("two")]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=r"^branch_name: surrogates not allowed at index 0"):
            run(session.create_branch_from_turn(2, "\udc80x"))
        assert store.counts().events == events and session.current_branch == "main"
        with pytest.raises(ValueError, match="does not exist"):
            run(session.switch_to_branch("\udc80x"))
        store.verify()


def test_the_sdk_sessions_own_file_is_refused_saying_whose_it_is_and_left_as_it_was(tmp_path: Path) -> None:
    """Switching from `SQLiteSession("user-42", "conversations.db")` by changing the class
    alone hands ThreadlogSession the SDK's file. It was refused as "a SQLite database but not
    a threadlog one ...; pass another --db path": no word of whose file it is, or that its
    history is not read, and an option a Python caller has not got."""
    path = tmp_path / "conversations.db"
    sdk = SQLiteSession("user-42", str(path))
    run(sdk.add_items([user("hello")]))
    sdk.close()
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    with pytest.raises(StoreError, match=r"conversations\.db is an OpenAI Agents SDK session database, not a threadlog one: "
                                         r"threadlog does not read its history; give threadlog a new path"):
        ThreadlogSession("user-42", path)
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before


# -- the SDK's edges ----------------------------------------------------------------------------------


def _answers(session: Any) -> list[Any]:
    async def calls() -> list[Any]:
        out: list[Any] = [await session.pop_item(), await session.get_items()]
        await session.clear_session()
        await session.clear_session()
        await session.add_items([user("a"), {"role": "assistant", "content": "b"}, user("c"), user("100% a_b \\ x")])
        out += [await session.get_items(limit=limit) for limit in (0, -1, -7, 1, 3, 10**9)]
        for call in (lambda: session.switch_to_branch("nope"), lambda: session.delete_branch("nope"),
                     lambda: session.delete_branch("main"), lambda: session.delete_branch(" "),
                     lambda: session.create_branch_from_turn(0), lambda: session.create_branch_from_turn(-1),
                     lambda: session.create_branch_from_turn(4), lambda: session.create_branch_from_turn(1, "main"),
                     lambda: session.create_branch_from_turn(1, ""), lambda: session.create_branch_from_content("zzz"),
                     lambda: session.create_branch_from_turn(2, "b"), lambda: session.delete_branch("b"),
                     lambda: session.switch_to_branch("main"), lambda: session.create_branch_from_turn(1, "b"),
                     lambda: session.switch_to_branch("b"), lambda: session.delete_branch("b", force=True),
                     lambda: session.switch_to_branch("b"), lambda: session.get_items()):
            try:
                out.append(await call())
            except ValueError as error:
                out.append(str(error).split(" (it has")[0])  # threadlog's message also says how many turns there are
        for term in ("%", "_", "\\", "100%", "a_b", "a%b", "", "A_B", "\\\\"):
            out.append([turn["turn"] for turn in await session.find_turns_by_content(term)])
        out.append([turn["turn"] for turn in await session.get_conversation_turns("nope")])
        return out

    return run(calls())


def test_the_protocol_and_branch_edges_answer_as_the_sdk_does(tmp_path: Path) -> None:
    with Store(tmp_path / "threadlog.db") as store:
        ours = _answers(ThreadlogSession("ana", store))
        store.verify()
    oracle = AdvancedSQLiteSession(session_id="ana", db_path=tmp_path / "sdk.db", create_tables=True)
    try:
        assert ours == _answers(oracle)
    finally:
        oracle.close()


def test_a_redacted_tool_output_keeps_its_kind_and_turns_keep_their_numbers(db: Path) -> None:
    """A redacted `function_call_output` came back as a user message saying `[redacted]`: its
    call was left without an output, and it counted as a new turn, so "turn 2" meant another
    turn to a session that had counted before the redaction than to a new one."""
    card = "card 4111-1111-1111-1111"
    with Store(db) as store:
        session = ThreadlogSession("s", store)
        run(session.add_items([user("look up my card"),
                               {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": json.dumps({"q": card})},
                               {"type": "function_call_output", "call_id": "c1", "output": card},
                               {"role": "assistant", "content": "done"}, user("thanks"), {"role": "assistant", "content": "bye"}]))
        run(session.create_branch_from_turn(1, "warm"))
        run(session.switch_to_branch("main"))  # the session has counted main's turns
        assert session.thread is not None
        for event in list(store.read(session.thread)):
            if "4111" in json.dumps(event.data):
                store.redact(event.position, reason="pci", actor="ops")
        items = run(session.get_items())
        assert items[1:3] == [{"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                              {"type": "function_call_output", "call_id": "c1", "output": "[redacted]"}]
        assert "4111" not in json.dumps(items)
        fresh = ThreadlogSession("s", Store(db))
        try:
            counted = [t["turn"] for t in run(session.get_conversation_turns())]
            assert counted == [t["turn"] for t in run(fresh.get_conversation_turns())] == [1, 2]
            run(session.create_branch_from_turn(2, "x"))
            run(fresh.create_branch_from_turn(2, "y"))
            assert run(session.get_items()) == run(fresh.get_items()) == items[:4]
        finally:
            fresh.store.close()
        store.verify()


def test_clear_session_empties_branches_whose_first_event_was_redacted(db: Path) -> None:
    """Redacting the first event of a session's thread (its title is the session id, which may
    name a person; a branch's names the branch) erased the mark `clear_session` finds the
    branches by: the clear did nothing and said nothing, every item stayed, and
    `list_branches` no longer listed `main`. A redacted branch name is not listed again."""
    with Store(db) as store:
        session = ThreadlogSession("ana@example.com", store)
        run(session.add_items([user("one"), {"role": "assistant", "content": "two"}, user("three")]))
        run(session.create_branch_from_turn(2, "ana-private"))
        run(session.add_items([user("four")]))
        branch = session.thread
        run(session.switch_to_branch("main"))
        main = session.thread
        assert main is not None and branch is not None
        for thread in (main, branch):
            first = next(event for event in store.read(thread) if event.stream_id == thread)
            store.redact(first.position, reason="pii", actor="ops")
        assert run(session.get_items()) == [user("one"), {"role": "assistant", "content": "two"}, user("three")]
        assert [listed["branch_id"] for listed in run(session.list_branches())] == ["main"]
        run(session.clear_session())
        assert run(session.get_items()) == []
        with Store(db) as other:
            assert run(ThreadlogSession("ana@example.com", other).get_items()) == []
        with pytest.raises(ValueError, match="does not exist"):
            run(session.switch_to_branch("ana-private"))
        assert "ana-private" not in json.dumps([event.data for event in store.read_all()])
        store.verify()


def test_a_str_enum_role_is_stored_as_its_text() -> None:
    """`{"role": Role.USER}` was refused ("Input should be 'user' or 'assistant'": its str()
    is `Role.USER`), and a system role shown as `[Role.SYSTEM]`. The SDK's own session takes it."""
    import enum

    class Role(str, enum.Enum):
        USER = "user"
        SYSTEM = "system"

    with Store(":memory:") as store:
        session = ThreadlogSession("s", store)
        run(session.add_items([{"role": Role.USER, "content": "hi"}, {"role": Role.SYSTEM, "content": "be brief"}]))
        assert run(session.get_items()) == [{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}]
        assert session.thread is not None
        texts = [e.data["content"][0]["text"] for e in store.read(session.thread) if e.type == "message.appended"]
        assert texts == ["hi", "[system] be brief"]


def test_items_given_as_a_generator_are_all_counted_as_turns(db: Path) -> None:
    """The items were read twice, a generator's the second time empty: turn 2 was stored but
    never counted, and this session could not branch from it."""
    with Store(db) as store:
        session = ThreadlogSession("s", store)
        run(session.add_items([user("q1"), {"role": "assistant", "content": "a1"}]))
        run(session.create_branch_from_turn(1, "b0"))
        run(session.switch_to_branch("main"))
        run(session.add_items(item for item in [user("q2"), {"role": "assistant", "content": "a2"}]))
        run(session.create_branch_from_turn(2, "b2"))
        assert [i["content"] for i in run(session.get_items())] == ["q1", "a1"]


def test_items_of_a_branch_by_name_as_the_sdk_gives_them(db: Path) -> None:
    """`get_items(branch_id=...)`, as `AdvancedSQLiteSession` takes it, was a TypeError."""
    items = [user("one"), {"role": "assistant", "content": "a"}, user("two")]

    async def both(session: Any) -> list[Any]:
        await session.add_items(items)
        await session.create_branch_from_turn(2, "alt")
        await session.add_items([user("on alt")])
        return [await session.get_items(branch_id="main"), await session.get_items(branch_id="alt"),
                await session.get_items(1, branch_id="main"), await session.get_items()]

    with Store(db) as store:
        ours = run(both(ThreadlogSession("s", store)))
    theirs = run(both(AdvancedSQLiteSession(session_id="s", db_path=str(db.with_name("sdk.db")), create_tables=True)))
    assert ours == theirs and ours[0] == items and ours[1] == [*items[:2], user("on alt")]


def test_a_session_serves_runs_on_other_threads_as_the_sdk_session_does(db: Path) -> None:
    """A session made on one thread and run on others (each with its own event loop, as a
    threaded web server's workers run turns): the SDK's `SQLiteSession` serves every thread; this
    one failed there with SQLite's "objects created in a thread can only be used in that same
    thread", whether given a path or a store."""
    from concurrent.futures import ThreadPoolExecutor

    from agents import Agent, Runner, set_tracing_disabled
    from agents.memory import SQLiteSession
    from agents.testing import ScriptedModel, assistant_message

    set_tracing_disabled(True)

    def turns(session: Any) -> list[Any]:
        model = ScriptedModel([[assistant_message(f"answer {i}", item_id=f"m{i}")] for i in range(3)])
        agent = Agent(name="a", model=model)
        with ThreadPoolExecutor(1) as pool:  # each turn on a worker thread, as a threaded server runs them
            for i in range(3):
                pool.submit(lambda i=i: run(Runner.run(agent, f"question {i}", session=session))).result()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(lambda: run(session.pop_item())).result()
        return list(run(session.get_items()))

    theirs = turns(SQLiteSession("s", str(db.with_name("sdk.db"))))
    by_path = ThreadlogSession("s", db)
    assert turns(by_path) == theirs and len(theirs) == 5
    by_path.close()
    with Store(db) as store:
        assert turns(ThreadlogSession("t", store)) == theirs
        store.verify()
    with Store(":memory:") as memory, ThreadPoolExecutor(1) as pool:
        session = ThreadlogSession("m", memory)
        with pytest.raises(StoreError, match="serves only the thread that opened it"):
            pool.submit(lambda: run(session.get_items())).result()


def test_an_item_added_on_another_thread_while_a_pop_runs_is_kept(db: Path) -> None:
    """Threads sharing one session object shared its view of the branch too: an item another
    thread added while a pop ran (between its read of the branch and its write) was in neither
    the view nor what the pop returned, as the pop forked below it."""
    import threading

    popping, added = threading.Event(), threading.Event()

    class Paused(ThreadlogSession):
        def _new_thread_id(self) -> str:  # inside pop_item, between its read and its write
            popping.set()
            added.wait(timeout=1)  # the other thread's add, or a second once it waits for this pop
            return super()._new_thread_id()

    session = Paused("s", db)
    run(session.add_items([user("one"), user("two")]))
    popped: list[Any] = []
    pop = threading.Thread(target=lambda: popped.append(run(session.pop_item())))
    pop.start()
    assert popping.wait(timeout=10)
    run(session.add_items([user("three")]))
    added.set()
    pop.join()
    view = [item["content"] for item in run(session.get_items())]  # type: ignore[typeddict-item]
    assert sorted(view + [popped[0]["content"]]) == ["one", "three", "two"]
    session.close()


# -- marks written by hand ------------------------------------------------------------------------


@pytest.mark.parametrize("back_to", ["itself", "the thread before it", "no thread"])
def test_a_hand_written_mark_sending_a_branch_round_in_a_circle_is_refused_by_name(db: Path, back_to: str) -> None:
    """`threadlog emit` can end a session's thread with a mark naming where its branch goes on.
    One naming the thread itself, or a thread the branch came through, sent every call of the
    session round that circle for ever: a process reading the session never answered. One
    naming a list instead of a thread failed with Python's `unhashable type: 'list'`."""
    with Store(db) as store:
        session = ThreadlogSession("ana", store)
        run(session.add_items([user("one"), user("two")]))
        first = session.thread
        assert first is not None
        target: Any
        if back_to == "itself":
            ended, target = first, first
        elif back_to == "no thread":
            ended, target = first, [first]
        else:
            run(session.pop_item())  # `first` ends naming the fork the branch goes on in
            ended, target = str(session.thread), first
    mark = {"openai_agents": {"session_id": "ana", "branch": "main", "superseded_by": target, "at": None, "by": "hand"}}
    emitted = CliRunner().invoke(cli, ["--db", str(db), "emit", ended, "metadata.set", "--data", json.dumps({"patch": mark})])
    assert emitted.exit_code == 0, emitted.output

    done = subprocess.run([sys.executable, WORKER, "items", str(db), "ana"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    where = "which names no thread" if back_to == "no thread" else "a thread it already came through; its threads go round in a circle"
    why = f"session 'ana', branch 'main': thread {ended!r} ends saying the branch goes on in {target!r}, {where}"
    assert why in done.stderr
    with Store(db) as store:
        events = store.counts().events
        session = ThreadlogSession("ana", store)
        calls: list[Any] = [session.get_items, lambda: session.add_items([user("three")]), session.pop_item,
                            lambda: session.create_branch_from_turn(1, "b"), session.clear_session]
        for call in calls:
            with pytest.raises(StoreError) as refused:
                run(call())
            assert str(refused.value).startswith(why)
        assert store.counts().events == events
        store.verify()


def test_a_closed_session_refuses_an_empty_add_as_it_refuses_any_other(tmp_path: Path) -> None:
    """`add_items([])` on a closed session answered as if it had written, where every other
    call said the store is closed (and the SDK's own session refuses it too)."""
    session = ThreadlogSession("ana", tmp_path / "threadlog.db")
    run(session.add_items([user("one")]))
    session.close()
    for items in ([], [user("two")]):
        with pytest.raises(StoreError, match=r"threadlog\.db is closed; open it again to read or write"):
            run(session.add_items(items))
    oracle = SQLiteSession("ana", tmp_path / "sdk.db")
    oracle.close()
    with pytest.raises(RuntimeError):
        run(oracle.add_items([]))
    again = ThreadlogSession("ana", tmp_path / "threadlog.db")
    assert run(again.get_items()) == [user("one")]
    again.close()


def test_a_session_id_or_branch_name_of_megabytes_is_refused_naming_it(db: Path) -> None:
    """A 20 MB session id was taken, then the first `add_items` was refused as
    `events[0].data: is 40000075 bytes of JSON`, an event the caller never wrote (the id is the
    threads' title and their metadata)."""
    with Store(db) as store:
        with pytest.raises(InvalidEvent, match=r"^session_id: must be at most 1,000,000 characters, not 20,000,000$"):
            ThreadlogSession("s" * 20_000_000, store)
        session = ThreadlogSession("\x00" * 1_000_000, store)  # each escaped to six bytes of JSON
        run(session.add_items([user("one")]))
        events = store.counts().events
        with pytest.raises(InvalidEvent, match=r"^branch_name: must be at most 1,000,000 characters, not 1,000,001$"):
            run(session.create_branch_from_turn(1, "b" * 1_000_001))
        assert store.counts().events == events and session.current_branch == "main"
        run(session.create_branch_from_turn(1, "\x00" * 1_000_000))  # the longest name is taken
        run(session.add_items([user("two")]))
        assert run(session.get_items()) == [user("two")]
        store.verify()
