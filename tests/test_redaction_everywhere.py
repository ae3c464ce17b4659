"""`redact` erases a payload wherever an event can carry text, and the log still verifies.

A unique secret is planted in every place a caller can put text: a thread's title, system
prompt, tools and metadata, message text, thinking, tool input and output, titles,
metadata, todos, compactions, interrupts and their answers, and the options of a fork and
of a sub-agent fan-out (its directive). Snapshots and the search index are built, forks
taken; then every event holding a secret is redacted, and the raw bytes of the database,
its WAL and shared-memory files and an `export --all` must hold none of them, in UTF-8,
JSON-escaped or UTF-16 form. (`meta` is not redacted: the README says to keep secrets out.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from click.testing import CliRunner

from projections import save_snapshot
from threadlog import Store, blame, display_rows, import_events, lineage, search, thread_state, transcript
from threadlog.cli import cli


def secret(name: str) -> str:
    return f"Zq{name}Sécret☃Kx"  # non-ASCII: JSON escapes it, UTF-16 spells it otherwise


def forms(text: str) -> list[bytes]:
    return [text.encode(), json.dumps(text).strip('"').encode(), text.encode("utf-16-le"), text.encode("utf-16-be")]


def holding(paths: list[Path], names: list[str]) -> list[str]:
    found = []
    for path in paths:
        if path.exists():
            raw = path.read_bytes()
            found += [f"{path.name}: {name}" for name in names if any(form in raw for form in forms(secret(name)))]
    return found


def own(store: Store, thread: str) -> list[Any]:
    """The events a thread holds itself (not its parent's)."""
    return [event for event in store.read(thread) if event.stream_id == thread]


def plant(store: Store) -> tuple[dict[str, int], dict[str, str]]:
    """A history with a secret in every place; (secret name -> position, thread names)."""
    at: dict[str, int] = {}
    t = store.create_thread(title=secret("title"), system=secret("system"), metadata={"k": secret("meta")},
                            tools=[{"name": "bash", "description": secret("tool"), "input_schema": {"type": "object"}}])
    at["title"] = 1

    def put(name: str, thread: str, event: dict[str, Any]) -> None:
        at[name] = store.append(thread, [event])[0].position

    put("text", t, {"type": "message.appended", "data": {"role": "user", "content": secret("text")}})
    put("thinking", t, {"type": "message.appended", "data": {"role": "assistant", "content": [
        {"type": "thinking", "thinking": secret("thinking"), "signature": "sig"},
        {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"cmd": secret("thinking")}}]}})
    put("result", t, {"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu1", "content": secret("result")}]}})
    put("retitle", t, {"type": "title.set", "data": {"title": secret("retitle")}})
    put("patch", t, {"type": "metadata.set", "data": {"patch": {"x": secret("patch")}}})
    put("todo", t, {"type": "todos.set", "data": {"todos": [{"content": secret("todo")}]}})
    put("summary", t, {"type": "compaction.recorded", "data": {"summary": secret("summary"), "through_offset": 2}})
    put("question", t, {"type": "interrupt.raised", "data": {"interrupt_id": "i1", "question": secret("question"),
                                                             "payload": {"p": secret("question")}}})
    put("answer", t, {"type": "interrupt.resolved", "data": {"interrupt_id": "i1", "answer": secret("answer")}})
    put("raised", t, {"type": "interrupt.raised", "data": {"interrupt_id": "i2", "question": secret("raised")}})
    put("cancel", t, {"type": "interrupt.cancelled", "data": {"interrupt_id": "i2", "reason": secret("cancel")}})
    store.append_message(t, "assistant", "plain")
    fork = store.fork(t, metadata={"k": secret("forkoptions")}, todos=[{"content": secret("forkoptions")}],
                      context="note", transcript=f"/tmp/{secret('forkoptions')}.md")
    at["forkoptions"] = own(store, fork)[0].position
    store.append_message(fork, "user", "in the fork")
    put("call", t, {"type": "message.appended", "data": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "tu2", "name": "task", "input": {"goal": secret("call")}}]}})
    [agent] = store.fan_out(t, [f"{secret('directive')} {secret('primed')}"])
    first, primed = own(store, agent)
    at["directive"], at["primed"] = first.position, primed.position
    return at, {"t": t, "fork": fork, "agent": agent}


def test_no_copy_of_any_redacted_text_stays_in_the_files_or_an_export(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    with Store(db) as store:
        at, threads = plant(store)
        names = list(at)
        for thread in threads.values():
            thread_state(store, thread)
            save_snapshot(store, thread)
        assert all(search(store, secret(name)) != [] for name in ("title", "text", "summary", "primed"))
        kept = store.checkpoint()
        assert set(n.split(": ")[1] for n in holding(files, names)) == set(names), "every secret must start on disk"
        for position in sorted(at.values()):
            store.redact(position, reason="leak", actor="dpo")
        assert store.verify(checkpoint=kept).redacted == len(at)
        assert store.verify(since=kept).events == len(at)
        assert all(search(store, secret(name)) == [] for name in at)
        for thread in threads.values():  # every reader still works on the erased history
            state = thread_state(store, thread)
            assert "Sécret" not in json.dumps([state.title, state.metadata, state.todos, state.system], ensure_ascii=False)
            assert "Sécret" not in transcript(store, thread)
            display_rows(store, thread), blame(store, thread), lineage(store, thread)
        assert thread_state(store, threads["agent"]).directive is None
        assert thread_state(store, threads["fork"]).context == "note"
    assert holding(files, names) == []
    backup = tmp_path / "all.jsonl"
    result = CliRunner().invoke(cli, ["--db", str(db), "export", "--all", "-o", str(backup)])
    assert result.exit_code == 0, result.output
    assert holding([backup], names) == []
    with Store(tmp_path / "restored.db") as restored:  # the erased history restores and verifies
        import_events(restored, backup)
        assert restored.verify().redacted == len(at)


def test_a_fork_keeps_its_place_and_kind_when_its_first_event_is_redacted(store: Store) -> None:
    with store:
        t = store.create_thread(title="plan", metadata={"user": "ana"})
        store.append_message(t, "user", "hello")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "tu1", "name": "task", "input": {}}])
        [agent] = store.fan_out(t, ["look for " + secret("goal")])
        forked, primed = own(store, agent)
        before = thread_state(store, agent)
        store.redact(forked.position, reason="leak", actor="dpo")
        after = thread_state(store, agent)
        assert (after.parent_id, after.parent_offset, after.kind, after.length) == (t, 3, "subagent", before.length + 1)
        assert [m.role for m in after.messages] == [m.role for m in before.messages]
        store.verify()
        # A redaction killed after its commit may leave old pages: the refusal says what finishes it.
        with pytest.raises(Exception, match="already redacted .*cut short, `purge` leaves no old page"):
            store.redact(forked.position, reason="again", actor="dpo")
        redaction = store.redact(primed.position, reason="leak", actor="dpo")
        with pytest.raises(Exception, match="structural"):
            store.redact(redaction.position, reason="again", actor="dpo")
        assert store.verify().redacted == 2


SECRET = "My card is 4111 1111 1111 1111, book the 8:15 to Lyon"


def test_redact_names_the_events_of_its_thread_tree_that_still_hold_the_erased_text(tmp_path: Path) -> None:
    """`redact` said only "redacted position N", and the same text stayed in the file wherever
    another event held it whole (a tool call echoing the message, a fork's answer quoting it, a
    LangGraph checkpoint holding every message): the user took it to be gone. Those events of
    the thread tree are named (text of 12 characters or more; a call's id, shared with its
    result, and short words are no copy), another tree's are not, nor the erased event itself."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="trip")
        asked = store.append_message(t, "user", SECRET).position
        call = store.append(t, [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_0123456789abcdef", "name": "book", "input": {"note": SECRET}}]}}])[0].position
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_0123456789abcdef", "content": "booked"}]}}])
        fork = store.fork(t)
        quoted = store.append_message(fork, "assistant", f"You wrote: {json.dumps(SECRET)}").position
        store.append_message(fork, "assistant", "Booked the 8:15 to Lyon.")  # a part of it is no copy of it whole
        other = store.create_thread(title="elsewhere")
        store.append_message(other, "user", SECRET)  # another tree: not this redaction's to name
    result = CliRunner().invoke(cli, ["--db", str(db), "redact", str(asked), "--reason", "pii", "--actor", "ops"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        f"position {call} (message.appended, {t} offset 2) still holds text of the erased payload: redact it too if that text "
        "must go",
        f"position {quoted} (message.appended, {fork} offset 5) still holds text of the erased payload: redact it too if that "
        "text must go"], result.stdout
    again = CliRunner().invoke(cli, ["--db", str(db), "redact", str(call), "--reason", "pii", "--actor", "ops", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["events_holding"] == [
        {"position": quoted, "thread": fork, "offset": 5, "type": "message.appended"}]  # the first is erased now


def test_redact_names_an_event_holding_the_erased_text_as_json_inside_a_text(tmp_path: Path) -> None:
    """A tool's result that is a JSON document holds a message's line breaks, quotes and
    non-ASCII letters escaped: such copies went unnamed, and the user took the text for gone."""
    text = "My card is 4111 1111 1111 1111,\nexpiry 09/29; ask for \u201cZo\u00e9\u201d"
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="card")
        asked = store.append_message(t, "user", text).position
        store.append(t, [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "save", "input": {"note": text}}]}}])
        escaped = store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": json.dumps({"saved": text})}]}}])[0].position
        verbatim = store.append_message(t, "assistant", json.dumps({"saved": text}, ensure_ascii=False)).position
    result = CliRunner().invoke(cli, ["--db", str(db), "redact", str(asked), "--reason", "pii", "--actor", "ops", "--json"])
    assert result.exit_code == 0, result.output
    assert [event["position"] for event in json.loads(result.stdout)["events_holding"]] == [asked + 1, escaped, verbatim]


def test_redact_of_a_langgraph_message_names_the_checkpoints_holding_it_and_how_they_go(tmp_path: Path) -> None:
    """A LangGraph thread's checkpoints and writes hold every message of the graph: redacting the
    message left its text there, unsaid (the README says to use `delete_thread`, which the command
    never mentioned). They are named, with that way to erase them."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from threadlog.integrations.langgraph import ThreadlogSaver, line_id

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("noted")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    db = tmp_path / "lg.db"
    with Store(db) as store:
        builder.compile(checkpointer=ThreadlogSaver(store)).invoke({"messages": [("user", SECRET)]},
                                                                   {"configurable": {"thread_id": "ana"}})
        events = list(store.read(line_id("ana", "")))
    message = next(e.position for e in events if e.type == "message.appended" and SECRET in json.dumps(e.data))
    result = CliRunner().invoke(cli, ["--db", str(db), "redact", str(message), "--reason", "pii", "--actor", "ops"])
    assert result.exit_code == 0, result.output
    named = result.stdout.splitlines()[1:]
    records = [e for e in events if e.type.startswith("langgraph.") and SECRET in json.dumps(e.data, ensure_ascii=False)]
    assert records and len(named) == len(records), result.stdout
    assert all(f"position {e.position} ({e.type}, " in line and "erase the thread with the saver's delete_thread" in line
               for e, line in zip(records, named)), result.stdout


def test_an_event_too_deep_to_read_is_still_redacted_and_an_unreadable_neighbour_is_said(tmp_path: Path) -> None:
    """Looking for other events holding the erased text reads the event first and its thread
    tree after: an event nested too deeply to read (an older release stored it; redacting it is
    the remedy) must still be redacted, and one such beside it must not turn a committed
    redaction into an error."""
    import sqlite3

    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(title="deep")
        deep = store.append_message(t, "user", "to be nested too deep").position
        later = store.append_message(t, "user", SECRET).position
        other = store.append_message(t, "assistant", "another").position
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET data = ? WHERE position IN (?, ?)", ('{"x": ' + "[" * 5000 + "]" * 5000 + "}", deep, other))
    first = CliRunner().invoke(cli, ["--db", str(db), "redact", str(deep), "--reason", "unreadable", "--actor", "ops"])
    assert first.exit_code == 0 and first.stdout.startswith(f"redacted position {deep};"), first.output
    second = CliRunner().invoke(cli, ["--db", str(db), "redact", str(later), "--reason", "pii", "--actor", "ops", "--json"])
    assert second.exit_code == 0, second.output
    report = json.loads(second.stdout)
    assert report["events_holding"] == [] and "could not look for other events holding the erased text" in \
        report["events_holding_unknown"], report


@given(texts=st.lists(st.text(alphabet="ab c\\\"é", min_size=12, max_size=20), min_size=1, max_size=80),
       value=st.text(alphabet="ab c\\\"é", max_size=200))
def test_many_texts_are_found_exactly_where_one_by_one_finds_them(texts: list[str], value: str) -> None:
    """Past a few texts the look goes by each text's first characters (a payload of 10,000
    strings in a thread of 20,000 messages took 24 s one text at a time): it must find a text in a
    string exactly when `in` does, whatever the texts share."""
    from threadlog.leftovers import _Texts

    texts = list(dict.fromkeys(texts))
    planted = value[: len(value) // 2] + texts[-1] + value[len(value) // 2:]
    for string in (value, planted):
        assert _Texts(tuple(texts)).found_in(string) == any(text in string for text in texts)


def test_a_payload_of_many_texts_names_an_event_holding_its_last(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    strings = [f"line {n:03} of a long tool input, kept whole" for n in range(60)]
    with Store(db) as store:
        t = store.create_thread(title="many")
        erased = store.append(t, [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"lines": strings}}]}}])[0].position
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}}])
        quoting = store.append_message(t, "user", f"about this: {strings[-1]}").position
    result = CliRunner().invoke(cli, ["--db", str(db), "redact", str(erased), "--reason", "pii", "--actor", "ops", "--json"])
    assert [copy["position"] for copy in json.loads(result.stdout)["events_holding"]] == [quoting], result.output
