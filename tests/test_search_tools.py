"""Search's tool labels: a tool result is labelled with the tool of the call it answers, the
latest call with its id in the result's own history (its thread, and each ancestor below the
fork point), whatever ids other threads use and whenever the index last caught up: the same
log gives the same index as a rebuild. A search checks the label against the log, and shows
the thread's title as the log gives it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import Store, StoreError, rebuild_index, search, update_index
from tests.backends import BACKENDS, dump, file_dump, open_store


def _call(store: Store, thread: str, call_id: str, tool: str, text: str = "run it") -> None:
    store.append_message(thread, "assistant", [{"type": "tool_use", "id": call_id, "name": tool, "input": {"text": text}}])


def _answer(store: Store, thread: str, call_id: str, text: str) -> None:
    store.append_message(thread, "user", [{"type": "tool_result", "tool_use_id": call_id, "content": text}])


def _labels(store: Store, query: str, **scope: Any) -> list[tuple[str, str, str | None]]:
    return sorted((hit.thread, hit.kind, hit.tool) for hit in search(store, query, limit=100, **scope))


def _docs(store: Store) -> list[str]:
    """The index's documents, as stored (the engine's own tables aside: their layout depends on
    how the documents were written, in one batch or several)."""
    return [line for line in dump(store) if "search_docs" in line]


def test_a_call_id_another_thread_reuses_never_labels_a_result(store: Store) -> None:
    """Ids such as `call_0` repeat across threads (other providers number calls per turn): B's
    result of a Read call was labelled Bash, A's call with the same id, `--tool Read` missed
    it, and a rebuild gave the same wrong answer."""
    a, b = store.create_thread(thread_id="a"), store.create_thread(thread_id="b")
    _call(store, b, "call_0", "Read")
    _call(store, a, "call_0", "Bash")
    _answer(store, b, "call_0", "contents of hostsfile")
    _answer(store, a, "call_0", "listing of dir")
    expected = [("a", "tool_result", "Bash"), ("b", "tool_result", "Read")]
    assert _labels(store, "hostsfile OR listing") == expected
    assert _labels(store, "hostsfile OR listing", tool="Read") == [("b", "tool_result", "Read")]
    assert _labels(store, "hostsfile OR listing", tool="Bash") == [("a", "tool_result", "Bash")]
    rebuild_index(store)
    assert _labels(store, "hostsfile OR listing") == expected


def test_a_forks_result_is_labelled_with_the_call_below_its_fork_point(store: Store) -> None:
    """The fork answers a call it inherited; after the fork point its parent answered that call
    and used the id again for another tool, which labels only the parent's own result."""
    t = store.create_thread(thread_id="t")
    _call(store, t, "call_0", "Read")
    fork = store.fork(t, unanswered="keep", fork_id="f")
    _answer(store, t, "call_0", "parent read output")
    _call(store, t, "call_0", "Bash")
    _answer(store, t, "call_0", "parent bash output")
    _answer(store, fork, "call_0", "fork read output")
    expected = [("f", "tool_result", "Read"), ("t", "tool_result", "Bash"), ("t", "tool_result", "Read")]
    assert _labels(store, "output") == expected
    assert _labels(store, "output", thread=fork) == [("f", "tool_result", "Read")]
    rebuild_index(store)
    assert _labels(store, "output") == expected


def test_a_result_far_from_its_call_is_labelled_whenever_the_index_caught_up(store: Store) -> None:
    """The index caught up between a call and its result, and 20 events (progress while the
    tool ran) came between them: the result was labelled with no tool (the read-back went 16
    events back), `--tool Bash` missed it, and a rebuild labelled it Bash."""
    t = store.create_thread()
    store.append_message(t, "user", "go")
    _call(store, t, "toolu_1", "Bash", "make")
    assert search(store, "anything") == []  # the index catches up: it covers the call
    for i in range(20):
        store.append(t, [{"type": "todos.set", "data": {"todos": [{"content": f"step {i}", "status": "in_progress"}]}}])
    _answer(store, t, "toolu_1", "build finished okay")
    assert [(hit.kind, hit.tool) for hit in search(store, "finished", tool="Bash")] == [("tool_result", "Bash")]
    incremental = _docs(store)
    rebuild_index(store)
    assert _docs(store) == incremental


def test_the_results_of_calls_pending_when_the_index_caught_up_each_take_their_own_call(store: Store) -> None:
    """40 calls waited for their results when the index caught up, one reusing the id of an
    older call answered before; each result read back is labelled with its own call."""
    t = store.create_thread()
    _call(store, t, "call_0", "Read")
    _answer(store, t, "call_0", "old output")
    store.append(t, [{"type": "todos.set", "data": {"todos": []}}] * 60)
    for i in range(40):
        _call(store, t, f"call_{i}", f"Tool{i}")
    update_index(store)
    for i in reversed(range(40)):  # the nearest call first: the history is read further back each time
        _answer(store, t, f"call_{i}", f"output {i}")
    labels = {hit.snippet: hit.tool for hit in search(store, "output", limit=100)}
    assert labels == {f"**output** {i}": f"Tool{i}" for i in range(40)} | {"old **output**": "Read"}
    incremental = _docs(store)
    rebuild_index(store)
    assert _docs(store) == incremental


def test_a_redacted_call_still_labels_its_result(store: Store) -> None:
    """A redaction keeps a call's id and name (a request built from the history stays valid), so
    its result keeps its label, in a rebuilt index too, rather than taking an older call's."""
    t = store.create_thread()
    _call(store, t, "call_0", "Read")
    _answer(store, t, "call_0", "first output")
    _call(store, t, "call_0", "Bash")
    store.redact(next(iter(store.read(t, 3, 4))).position, reason="r", actor="a")
    _answer(store, t, "call_0", "second output")
    assert sorted((hit.offset, hit.tool) for hit in search(store, "output")) == [(2, "Read"), (5, "Bash")]  # event.redacted at 4
    incremental = _docs(store)
    rebuild_index(store)
    assert _docs(store) == incremental


# A script of steps over a few threads: ("call", thread, id, tool), ("answer", thread),
# ("fork", thread), ("filler", thread, how many events), ("catch up",).
_STEPS = st.one_of(
    st.tuples(st.just("call"), st.integers(0, 3), st.sampled_from(["call_0", "call_1"]), st.sampled_from(["Bash", "Read", "Grep"])),
    st.tuples(st.just("answer"), st.integers(0, 3)),
    st.tuples(st.just("fork"), st.integers(0, 3)),
    st.tuples(st.just("filler"), st.integers(0, 3), st.sampled_from([1, 20])),
    st.tuples(st.just("catch up")),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_STEPS, min_size=1, max_size=30))
def test_incremental_catch_ups_give_the_index_a_rebuild_gives(tmp_path: Path, script: list[tuple[Any, ...]]) -> None:
    """Whatever the fork tree, the reused ids and the catch-ups between them, the index equals one
    rebuilt from the log, and each result is labelled with the latest call of its id that
    `read(thread)` shows before it."""
    store = open_store(BACKENDS[1], tmp_path)  # SQLite in memory: the same code as a file, faster
    try:
        threads = [store.create_thread(thread_id="t0"), store.create_thread(thread_id="t1")]
        for thread in threads:
            store.append_message(thread, "user", "start")
        for number, step in enumerate(script):
            thread = threads[step[1] % len(threads)] if len(step) > 1 else ""
            pending = store.pending_tool_uses(thread) if thread else ()
            if step[0] == "call" and step[2] not in pending:
                _call(store, thread, step[2], step[3], f"input {number}")
            elif step[0] == "answer" and pending:
                _answer(store, thread, pending[0], f"output {number}")
            elif step[0] == "fork":
                threads.append(store.fork(thread, unanswered="keep", fork_id=f"t{len(threads)}"))
            elif step[0] == "filler":
                store.append(thread, [{"type": "todos.set", "data": {"todos": []}}] * step[2])
            elif step[0] == "catch up":
                update_index(store)
        update_index(store)
        incremental = _docs(store)
        rebuild_index(store)
        assert _docs(store) == incremental
        for thread in threads:
            calls: dict[str, str] = {}
            expected = []
            for event in store.read(thread):
                for block in event.data.get("content", []) if event.type == "message.appended" else ():
                    if block["type"] == "tool_use":
                        calls[block["id"]] = block["name"]
                    elif block["type"] == "tool_result":
                        expected.append((event.offset, calls[block["tool_use_id"]]))
            hits = search(store, "output", thread=thread, limit=1000)
            assert sorted((hit.offset, hit.tool) for hit in hits) == sorted(expected)
    finally:
        store.close()


# -- what a hit shows is checked against the log ---------------------------------------------------


def _altered(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_a_tool_label_the_log_does_not_give_is_refused(tmp_path: Path) -> None:
    """Raw SQL labelled a message's text with a tool: the hit showed it, and `--tool Bash` found
    it, while `verify` passed."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        t = store.create_thread(title="Real title")
        store.append_message(t, "user", "hello ferry")
        _call(store, t, "call_0", "Read")
        _answer(store, t, "call_0", "ferry timetable")
        assert _labels(store, "ferry") == [(t, "text", None), (t, "tool_result", "Read")]
    # -> the searches that find the forged document. A result's label is not checked: its call
    # may be any distance back, and a search would read back that far for each hit.
    forgeries = {"UPDATE search_docs SET tool = 'Bash' WHERE kind = 'text'": (None, "Bash")}
    for forgery, finding in forgeries.items():
        _altered(path, forgery)
        before = file_dump(path)
        with Store(path) as store:
            store.verify()  # the log is intact: only the cache was altered
            for tool in finding:
                with pytest.raises(StoreError, match=r"search index labels the .* with tool .*threadlog index --rebuild"):
                    search(store, "ferry", tool=tool)
            assert file_dump(path) == before  # a refused search writes nothing
            rebuild_index(store)
            assert _labels(store, "ferry") == [(t, "text", None), (t, "tool_result", "Read")]


def test_a_hits_title_is_the_threads_title_in_the_log(tmp_path: Path) -> None:
    """The title of a hit was read from the index's title document, which raw SQL rewrote."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        t = store.create_thread(title="Real title")
        store.append_message(t, "user", "hello ferry")
        fork = store.fork(t)
        assert [(hit.title, hit.snippet) for hit in search(store, "ferry", thread=fork)] == [("Real title", "hello **ferry**")]
    _altered(path, "UPDATE search_docs SET text = 'Pay invoice to IBAN XX00' WHERE kind = 'title'",
             "INSERT INTO search_fts (search_fts) VALUES ('rebuild')")
    with Store(path) as store:
        assert [hit.title for hit in search(store, "ferry")] == ["Real title"]
        assert [hit.title for hit in search(store, "ferry", thread=fork)] == ["Real title"]
        with pytest.raises(StoreError, match="search index was altered outside threadlog"):
            search(store, "invoice")  # the forged document itself, as any other


def test_a_fork_below_its_parents_own_events_takes_the_call_below_its_own_fork_point(tmp_path: Path) -> None:
    """F forks P at 2, below P's own events (P forks the root at 4): F's history below 2 is the
    root's. The root called `call_0` (Bash) at 1 and again (Read) at 3, after answering it; F
    answers the first. Walking the fork points up to the root with P's fork point (4) as the bound
    took the second call, Read."""
    with Store(tmp_path / "t.db") as store:
        root = store.create_thread(title="root")
        _call(store, root, "call_0", "Bash")
        _answer(store, root, "call_0", "first output")
        _call(store, root, "call_0", "Read")
        parent = store.fork(root, at=4, unanswered="keep")
        store.append_message(parent, "user", "in the parent")
        fork = store.fork(parent, at=2, unanswered="keep")
        _answer(store, fork, "call_0", "zebra output")
        rebuild_index(store)
        assert _labels(store, "zebra") == [(fork, "tool_result", "Bash")]
