"""A thread's request settings (`thread.created`'s `settings`, a fork's `config.settings`):
validated against the SDK's types, inherited and replaced by forks, sent by every request
(live turns over HTTP to a local server, with the real client), rebuilt by `check_request`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from eventstore import InvalidEvent, Store
from projections import anthropic_request, body_digest, check_request, request_body, save_snapshot, thread_state, validate_request
from projections import state as state_module
from projections.request import _CREATE_ORDER, _STREAM_ORDER
from eventstore.integrity import canonical, chain_hash, digest
from eventstore.settings import setting_keys
from threadlog.cli import cli
from threadlog.export import export_events
from threadlog.live import rerun, run_turn

from messages_api import MessagesAPI, message

MODEL = "claude-test-1"
TOOLS = [{"name": "weather", "description": "Weather in a city", "input_schema": {"type": "object"}}]
SETTINGS = {"stop_sequences": ["END", "\n\nHuman:"], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "metadata": {"user_id": "u-42"}, "service_tier": "standard_only", "output_config": {"effort": "low"}}


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def untouched(store: Store) -> tuple[Any, ...]:
    return store.last_position(), store.counts(), [t.id for t in store.all_threads()]


# -- what a thread may hold ------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"temperature": 0}, "settings.temperature", "is not a Messages API parameter anthropic"),
    ({"stop_sequence": ["END"]}, "settings.stop_sequence", "settings take diagnostics, inference_geo, metadata"),
    ({"model": "claude-other"}, "settings.model", "threadlog sends it from the thread's `model`"),
    ({"max_tokens": 10}, "settings.max_tokens", "each turn (run_turn(max_tokens=)"),
    ({"tools": []}, "settings.tools", "the thread's `tools`"),
    ({"stream": True}, "settings.stream", "each turn"),
    ({"cache_control": {"type": "ephemeral"}}, "settings.cache_control", "the request's own cache breakpoints"),
    ({"context_management": {}}, "settings.context_management", "beta Messages API only"),
    ({"workspace_id": "w1"}, "settings.workspace_id", "anthropic-workspace-id header"),
    ({"stop_sequences": "END"}, "settings.stop_sequences", "not allowed as a Sequence"),
    ({"service_tier": "fast"}, "settings.service_tier", "'auto' or 'standard_only'"),
    ({"tool_choice": {"type": "tool"}}, "settings.tool_choice.name", "Field required"),
    ({"tool_choice": {"type": "sometimes"}}, "settings.tool_choice.type", "expected one of any, auto, none, tool"),
    ({"tool_choice": {"type": ["any"]}}, "settings.tool_choice.type", "unknown tool_choice type ['any']; expected one of"),
    ({"tool_choice": {"type": {"any": 1}}}, "settings.tool_choice.type", "unknown tool_choice type {'any': 1}"),
    ({"tool_choice": {"type": "auto", "parallel": False}}, "settings.tool_choice.parallel", "not a key the SDK's type declares"),
    ({"metadata": {"userid": "u1"}}, "settings.metadata.userid", "not a key the SDK's type declares"),
    ({"output_config": {"effort": 1}}, "settings.output_config.effort", "Input should be"),
    ({"stop_sequences": None}, "settings.stop_sequences", "is null: leave the key out"),
], ids=["unknown-temperature", "typo", "model", "max_tokens", "tools", "stream", "cache_control", "beta-only", "header",
        "text-for-list", "bad-literal", "tool-without-name", "unknown-type", "type-a-list", "type-an-object", "undeclared-key",
        "nested-undeclared", "strict-type", "null"])
def test_a_setting_the_api_would_refuse_is_refused_naming_it_and_nothing_is_written(
        file_store: Store, settings: dict[str, Any], field: str, words: str) -> None:
    before = untouched(file_store)
    with pytest.raises(InvalidEvent) as refused:
        file_store.create_thread(model=MODEL, tools=TOOLS, settings=settings)
    assert refused.value.field.endswith(field) and words in refused.value.why, str(refused.value)
    assert untouched(file_store) == before


def test_the_keys_a_thread_may_set_are_the_sdks_body_keys_threadlog_does_not_manage() -> None:
    """Taken from the installed SDK's types; each has its place in the body order that
    `request_body` (and so `check_request`) writes, or a request holding it could not rebuild."""
    keys = setting_keys()
    assert {"stop_sequences", "tool_choice", "metadata", "service_tier", "output_config"} <= set(keys)
    assert not {"messages", "model", "system", "tools", "thinking", "max_tokens", "stream"} & set(keys)
    assert set(keys) <= set(_CREATE_ORDER) & set(_STREAM_ORDER)


# -- forks -------------------------------------------------------------------------------------


def test_a_fork_inherits_the_settings_replaces_them_key_by_key_and_null_removes_one(file_store: Store) -> None:
    t = file_store.create_thread(model=MODEL, tools=TOOLS, settings=SETTINGS)
    file_store.append_message(t, "user", "Weather in Lyon?")
    inherited = file_store.fork(t)
    changed = file_store.fork(t, config={"settings": {"stop_sequences": None, "tool_choice": {"type": "auto"}, "speed": "fast"}})
    blank = file_store.fork(t, config={"blank": True, "model": MODEL, "settings": {"service_tier": "auto"}})
    kid = file_store.fork(changed, config={"settings": {"metadata": None}})
    assert thread_state(file_store, inherited).settings == SETTINGS
    assert anthropic_request(file_store, inherited)["stop_sequences"] == ["END", "\n\nHuman:"]
    assert thread_state(file_store, changed).settings == {
        "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u-42"}, "service_tier": "standard_only",
        "output_config": {"effort": "low"}, "speed": "fast"}
    assert "stop_sequences" not in anthropic_request(file_store, changed)
    assert thread_state(file_store, blank).settings == {"service_tier": "auto"}
    assert "metadata" not in thread_state(file_store, kid).settings and thread_state(file_store, kid).settings["speed"] == "fast"
    assert thread_state(file_store, t).settings == SETTINGS  # the parent's are its own still


def test_sub_agents_inherit_their_parents_settings(mem: Store) -> None:
    t = mem.create_thread(model=MODEL, tools=TOOLS, settings={"metadata": {"user_id": "u-42"}})
    mem.append_message(t, "user", "Research two cities.")
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}])
    for kid in mem.fan_out(t, ["Lyon", "Nice"]):
        assert anthropic_request(mem, kid)["metadata"] == {"user_id": "u-42"}


def test_a_fork_refused_for_its_settings_writes_nothing(file_store: Store) -> None:
    t = file_store.create_thread(model=MODEL, settings={"stop_sequences": ["END"]})
    file_store.append_message(t, "user", "Hi")
    before = untouched(file_store)
    for changes, field in (({"temperature": None}, "config.settings.temperature"), ({"model": "m"}, "config.settings.model"),
                           ({"stop_sequences": [1]}, "config.settings.stop_sequences[0]")):
        with pytest.raises(InvalidEvent) as refused:
            file_store.fork(t, config={"settings": changes})
        assert refused.value.field == field, str(refused.value)
    assert untouched(file_store) == before


def test_a_redacted_fork_event_leaves_the_fork_none_of_its_own_settings(file_store: Store) -> None:
    t = file_store.create_thread(model=MODEL, settings={"stop_sequences": ["END"]})
    file_store.append_message(t, "user", "Hi")
    f = file_store.fork(t, config={"settings": {"metadata": {"user_id": "secret"}}})
    file_store.redact(file_store.event_at(f, 2).position, reason="user id", actor="ana")
    assert thread_state(file_store, f).settings == {}


# -- the request -------------------------------------------------------------------------------


def test_the_request_sends_the_settings_where_the_sdk_writes_them(mem: Store) -> None:
    t = mem.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS, settings={**SETTINGS, "speed": "standard"})
    mem.append_message(t, "user", "Weather in Lyon?")
    kwargs = anthropic_request(mem, t)
    assert list(kwargs) == ["max_tokens", "messages", "model", "metadata", "output_config", "service_tier", "speed",
                            "stop_sequences", "system", "tool_choice", "tools"]
    validate_request(kwargs)
    body = json.loads(request_body(kwargs, stream=True))
    assert list(body)[-4:] == ["system", "tools", "tool_choice", "stream"]
    assert {key: body[key] for key in SETTINGS} == {**SETTINGS, "tool_choice": {"disable_parallel_tool_use": True, "type": "any"}}


def test_a_tool_choice_with_placeholder_tools_is_none_and_one_forcing_nothing_is_left_out_without_tools(mem: Store) -> None:
    """An imported history calls tools the thread does not define: the request defines
    placeholders nobody can call, so its tool_choice is none whatever the setting says; with
    no tool at all, auto has nothing to choose from and is not sent."""
    t = mem.create_thread(model=MODEL, settings={"tool_choice": {"type": "auto"}})
    mem.append_message(t, "user", "Hi")
    assert "tool_choice" not in anthropic_request(mem, t)
    mem.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}])
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}])
    kwargs = anthropic_request(mem, t)
    assert kwargs["tool_choice"] == {"type": "none"} and [tool["name"] for tool in kwargs["tools"]] == ["Bash"]
    validate_request(kwargs)


@pytest.mark.parametrize(("config", "settings", "words"), [
    ({}, {"tool_choice": {"type": "any"}}, "forces a tool call, but the requests of thread"),
    ({"tools": TOOLS}, {"tool_choice": {"type": "tool", "name": "search"}}, "names tool 'search', which the requests"),
    ({"tools": TOOLS, "thinking": {"type": "enabled", "budget_tokens": 2048}}, {"tool_choice": {"type": "tool", "name": "weather"}},
     "which the API refuses while thinking is enabled"),
], ids=["forced-without-tools", "undefined-tool", "forced-with-thinking"])
def test_a_tool_choice_the_api_would_refuse_is_refused_by_the_request_and_before_a_turn_starts(
        file_store: Store, api: MessagesAPI, config: dict[str, Any], settings: dict[str, Any], words: str) -> None:
    t = file_store.create_thread(model=MODEL, settings=settings, **config)
    file_store.append_message(t, "user", "Hi")
    file_store.append_message(t, "assistant", "Hello.")
    with pytest.raises(InvalidEvent, match=words):
        anthropic_request(file_store, t)
    before = untouched(file_store)
    with pytest.raises(InvalidEvent, match=words):
        run_turn(file_store, t, "Weather in Lyon?", api.client(0, 10.0))
    with pytest.raises(InvalidEvent, match=words):
        rerun(file_store, t, 2, api.client(0, 10.0))
    assert untouched(file_store) == before and api.requests == []


def test_a_forced_tool_choice_is_sent_with_adaptive_thinking(file_store: Store, api: MessagesAPI) -> None:
    """The API refuses a forced tool call only with thinking `enabled` (a budget); with
    `adaptive` thinking it took `tool_choice: any` and answered with the call (the recorded
    exchange tests/fixtures/anthropic-exchanges/pydantic-ai-anthropic_opus_46_adaptive_thinking_accepts_tool_output.json).
    Every request of such a thread was refused, and so was every turn."""
    choice = {"type": "any"}
    t = file_store.create_thread(model=MODEL, tools=TOOLS, thinking={"type": "adaptive"}, settings={"tool_choice": choice})
    file_store.append_message(t, "user", "Hi")
    kwargs = anthropic_request(file_store, t)
    assert kwargs["tool_choice"] == choice and kwargs["thinking"] == {"type": "adaptive"}
    validate_request(kwargs)
    api.reply_json(message([{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}], "tool_use"))
    api.reply_json(message([{"type": "text", "text": "Sunny."}]))
    turn = run_turn(file_store, t, None, api.client(0, 10.0), tools={"weather": lambda city: "sun"})
    assert turn.status == "ok" and api.requests[0].json["tool_choice"] == choice


def test_a_tool_choice_may_name_a_tool_the_turn_offers_besides_the_threads(mem: Store) -> None:
    search = {"name": "search", "description": "Search", "input_schema": {"type": "object"}}
    t = mem.create_thread(model=MODEL, settings={"tool_choice": {"type": "tool", "name": "search"}})
    mem.append_message(t, "user", "Hi")
    kwargs = anthropic_request(mem, t, extra_tools=[search])
    assert kwargs["tool_choice"] == {"name": "search", "type": "tool"}
    validate_request(kwargs)


# -- live turns --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_live_turn_sends_the_threads_settings_and_its_request_rebuilds(file_store: Store, api: MessagesAPI, stream: bool) -> None:
    t = file_store.create_thread(system="You plan trips.", model=MODEL, tools=TOOLS, settings=SETTINGS)
    use = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Lyon"}}
    for reply in (message([use], "tool_use"), message(text("Rain. END"), "stop_sequence")):
        api.reply_sse(reply) if stream else api.reply_json(reply)
    turn = run_turn(file_store, t, "Weather in Lyon?", api.client(0, 10.0), tools={"weather": lambda city: "rain"}, stream=stream)
    assert turn.status == "ok", turn.error
    for sent in api.requests:
        assert {key: sent.json[key] for key in SETTINGS} == {
            **SETTINGS, "tool_choice": {"disable_parallel_tool_use": True, "type": "any"}}
    # A fork that drops the forced choice and the stop sequences: its turn sends neither.
    f = file_store.fork(t, config={"settings": {"tool_choice": None, "stop_sequences": None, "speed": "fast"}})
    api.reply_sse(message(text("Sun."))) if stream else api.reply_json(message(text("Sun.")))
    assert run_turn(file_store, f, "And Nice?", api.client(0, 10.0), stream=stream).status == "ok"
    last = api.requests[-1].json
    assert "tool_choice" not in last and "stop_sequences" not in last and last["speed"] == "fast"
    assert last["metadata"] == {"user_id": "u-42"}
    for thread in (t, f):
        offsets = [e.offset for e in file_store.read(thread) if e.stream_id == thread and "request" in e.meta]
        for offset in offsets:
            check = check_request(file_store, thread, offset)
            assert check.ok, check.reason
    sent_digests = {body_digest(r.body) for r in api.requests}
    recorded = {e.meta["request"]["digest"] for thread in (t, f) for e in file_store.read(thread) if "request" in e.meta}
    assert recorded == sent_digests


def test_a_forced_tool_choice_turn_ends_at_max_rounds_with_its_tools_run(file_store: Store, api: MessagesAPI) -> None:
    """As README says: with a forcing tool_choice every call calls a tool, so a turn ends at
    `max_rounds` with status error; with 1, one call is made and its tool runs."""
    t = file_store.create_thread(model=MODEL, tools=TOOLS, settings={"tool_choice": {"type": "tool", "name": "weather"}})
    api.reply_json(message([{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Lyon"}}], "tool_use"))
    ran: list[str] = []
    turn = run_turn(file_store, t, "Weather in Lyon?", api.client(0, 10.0), tools={"weather": lambda city: ran.append(city) or "rain"}, max_rounds=1)
    assert (turn.status, turn.error, ran) == ("error", "the model was still calling tools after 1 round", ["Lyon"])
    assert len(api.requests) == 1 and api.requests[0].json["tool_choice"] == {"type": "tool", "name": "weather"}
    assert list(file_store.read(t))[-2].data["content"][0]["tool_use_id"] == "toolu_1"  # its result, then the run's end


# -- snapshots and verify ----------------------------------------------------------------------


# The state threadlog saved for `plain` below at offset 3 before threads had settings
# (`_Fold.dump` at commit 99fe2f7, snapshot version 5): no `settings` key.
_SAVED_BEFORE = {"length": 3, "title": None, "system": None, "model": MODEL, "tools": None, "thinking": None, "metadata": {},
                 "todos": [], "runs": [], "last_run": None, "interrupts": [], "demoted": [], "dropped": [], "note": None,
                 "compaction": None, "fork": None, "messages": [[1, 3]]}


def test_a_snapshot_keeps_the_settings_and_one_saved_before_threads_had_them_reads_and_verifies(file_store: Store) -> None:
    t = file_store.create_thread(model=MODEL, settings={"stop_sequences": ["END"]})
    plain = file_store.create_thread(model=MODEL, thread_id="plain")
    for thread in (t, plain):
        for i in range(4):
            file_store.append_message(thread, "user" if i % 2 == 0 else "assistant", f"m{i}")
    save_snapshot(file_store, t, 3)
    file_store.save_snapshot(state_module.PROJECTION, state_module.VERSION, plain, 3, _SAVED_BEFORE, as_of=file_store.last_position())
    assert thread_state(file_store, t) == thread_state(file_store, t, use_snapshots=False)
    assert thread_state(file_store, t).settings == {"stop_sequences": ["END"]}
    assert thread_state(file_store, plain) == thread_state(file_store, plain, use_snapshots=False)
    assert thread_state(file_store, plain).settings == {}
    # verify compares each snapshot with the state folded from its events, byte for byte: a
    # state with no settings is written as before (no key), so the earlier one still verifies.
    file_store.verify()
    assert file_store.nearest_snapshot(state_module.PROJECTION, state_module.VERSION, plain, 3) == (3, _SAVED_BEFORE)


# -- the CLI -----------------------------------------------------------------------------------


def tl(db: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ANTHROPIC_")}
    return CliRunner().invoke(cli, ["--db", str(db), *args], env={**unset, **(env or {})}, catch_exceptions=False)


def test_new_and_fork_take_settings_show_prints_them_and_ask_sends_them(tmp_path: Path, api: MessagesAPI) -> None:
    db = tmp_path / "t.db"
    made = tl(db, "new", "--model", MODEL, "--setting", 'stop_sequences=["END"]', "--setting", 'metadata={"user_id": "u1"}',
              "--setting", 'service_tier="auto"')
    assert made.exit_code == 0, made.stderr
    t = made.stdout.strip()
    shown = tl(db, "show", t, "--no-pager").stdout
    assert 'settings    metadata {"user_id": "u1"}\n            service_tier "auto"\n            stop_sequences ["END"]\n' in shown
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_json(message(text("Rain.")))
    assert tl(db, "ask", t, "Weather?", env=env).exit_code == 0
    assert {k: api.requests[0].json.get(k) for k in ("stop_sequences", "metadata", "service_tier")} == {
        "stop_sequences": ["END"], "metadata": {"user_id": "u1"}, "service_tier": "auto"}
    forked = tl(db, "fork", t, "--setting", "stop_sequences=null", "--setting", 'speed="fast"')
    assert forked.exit_code == 0, forked.stderr
    f = forked.stdout.strip()
    request = json.loads(tl(db, "request", f, "--json").stdout)
    assert "stop_sequences" not in request and (request["speed"], request["service_tier"]) == ("fast", "auto")
    assert json.loads(tl(db, "show", f, "--json").stdout)["settings"] == {
        "metadata": {"user_id": "u1"}, "service_tier": "auto", "speed": "fast"}
    assert tl(db, "request", t, "--check").exit_code == 0


def test_show_cuts_a_long_setting_to_one_short_line_and_show_json_has_it_whole(tmp_path: Path) -> None:
    """`show` printed a setting whole: a stop sequence of 1 MB was one line of 1 MB, where the
    other one-line fields are cut at 100 characters."""
    db = tmp_path / "t.db"
    long = "x" * 1_000_000
    t = tl(db, "new", "--setting", f"stop_sequences={json.dumps([long, 'END'])}").stdout.strip()
    line = next(line for line in tl(db, "show", t, "--no-pager").stdout.splitlines() if line.startswith("settings"))
    assert line == "settings    " + 'stop_sequences ["' + "x" * 82 + "…"
    assert json.loads(tl(db, "show", t, "--json").stdout)["settings"] == {"stop_sequences": [long, "END"]}


@pytest.mark.parametrize(("args", "code", "words"), [
    (["new", "--setting", "service_tier=auto"], 2, "text is JSON too: service_tier='\"auto\"'"),
    (["new", "--setting", "stop_sequences"], 2, "is not KEY=JSON"),
    (["new", "--setting", "speed=\"fast\"", "--setting", "speed=\"standard\""], 2, "speed is given twice"),
    (["new", "--setting", "temperature=0"], 1, "settings.temperature: is not a Messages API parameter"),
    (["new", "--setting", "stop_sequences=null"], 1, "settings.stop_sequences: is null"),
], ids=["not-json", "no-value", "twice", "unknown", "null"])
def test_a_bad_setting_on_the_command_line_is_refused_naming_it_and_writes_nothing(tmp_path: Path, args: list[str], code: int,
                                                                                   words: str) -> None:
    db = tmp_path / "t.db"
    assert tl(db, "init").exit_code == 0
    done = tl(db, *args)
    assert done.exit_code == code and words in done.stderr, done.stderr
    with Store(db) as store:
        assert store.counts() == (0, 0)


def test_new_and_fork_say_what_a_setting_is_in_their_help(tmp_path: Path) -> None:
    for command in ("new", "fork"):
        assert "--setting KEY=JSON" in tl(tmp_path / "t.db", command, "--help").stdout


# -- property ----------------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_VALUES: dict[str, Any] = {
    "stop_sequences": st.lists(_TEXT, max_size=3),
    "metadata": st.fixed_dictionaries({}, optional={"user_id": st.none() | _TEXT}),
    "service_tier": st.sampled_from(["auto", "standard_only"]),
    "speed": st.sampled_from(["fast", "standard"]),
    "inference_geo": _TEXT,
    "output_config": st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["low", "medium", "high"])}),
    "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "none"}, {"type": "any"}, {"type": "tool", "name": "weather"},
                                    {"type": "auto", "disable_parallel_tool_use": True}]),
}


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(created=st.fixed_dictionaries({}, optional=_VALUES), changes=st.fixed_dictionaries(
    {}, optional={key: st.none() | value for key, value in _VALUES.items()}), stream=st.booleans(), snapshot=st.booleans())
def test_any_valid_settings_are_sent_as_given_and_rebuild_through_forks_and_snapshots(
        created: dict[str, Any], changes: dict[str, Any], stream: bool, snapshot: bool) -> None:
    with Store(":memory:") as store:
        t = store.create_thread(model=MODEL, tools=TOOLS, settings=created or None)
        store.append_message(t, "user", "Weather in Lyon?")
        f = store.fork(t, config={"settings": changes} if changes else None)
        store.append_message(f, "user", "And Nice?")
        expected = {k: v for k, v in {**created, **changes}.items() if v is not None}
        if snapshot:
            save_snapshot(store, f)
        kwargs = anthropic_request(store, f)
        validate_request(kwargs)
        body = request_body(kwargs, stream)
        sent = json.loads(body)
        assert {key: sent[key] for key in expected} == expected
        assert set(sent) - {"max_tokens", "messages", "model", "tools", "stream"} == set(expected)
        answer = store.append(f, [{"type": "message.appended", "data": {"role": "assistant", "content": text("Sun.")}, "meta": {
            "request": {"digest": body_digest(body), "model": MODEL, "max_tokens": kwargs["max_tokens"], "stream": stream}}}])[0]
        assert check_request(store, f, answer.offset).ok


# -- restored from an export -------------------------------------------------------------------


def _rechained(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Export lines with every event's digest and hash computed again from its data, as anyone
    altering an export can: a restore must refuse what it would not write, whatever the hashes."""
    parents = {line["stream"]["id"]: line["stream"]["parent_id"] for line in lines if "stream" in line}
    hashes: dict[tuple[str, int], str] = {}

    def previous(stream: str, offset: int) -> str:
        while (stream, offset - 1) not in hashes and offset:
            stream = parents[stream]
        return hashes[(stream, offset - 1)] if offset else ""

    for line in lines:
        if "event" in line:
            e = line["event"]
            e["data_digest"] = digest(canonical(e["data"]))
            e["hash"] = chain_hash(previous(e["stream_id"], e["offset"]), e["stream_id"], e["offset"], e["event_id"], e["type"],
                                   e["schema_version"], e["recorded_at"], canonical(e["meta"]), e["data_digest"])
            hashes[(e["stream_id"], e["offset"])] = e["hash"]
    return lines


@pytest.mark.parametrize(("where", "settings", "field", "words"), [
    ("thread", {"messages": [{"role": "user", "content": "Say yes."}]}, "settings.messages", "the thread's messages"),
    ("thread", {"model": "claude-other"}, "settings.model", "the thread's `model`"),
    ("thread", {"stream": True}, "settings.stream", "each turn"),
    ("thread", {"workspace_id": "w1"}, "settings.workspace_id", "anthropic-workspace-id header"),
    ("thread", {"stop_sequences": None}, "settings.stop_sequences", "is null"),
    ("fork", {"system": "You obey."}, "settings.system", "the thread's `system`"),
], ids=["messages", "model", "stream", "header", "null", "fork-system"])
def test_a_restore_refuses_settings_that_replace_what_threadlog_sends(
        tmp_path: Path, where: str, settings: dict[str, Any], field: str, words: str) -> None:
    """A restore skipped the settings' checks (an SDK since may have dropped a key), so an
    altered export's `messages` or `model` setting replaced the thread's own in every request
    (`threadlog request` sent `"messages": []`), and `stream` was sent besides the turn's. No
    release writes such a key, nor a null in a thread's own settings: refused by line, nothing
    written. A key the installed SDK does not know still restores."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(model=MODEL, tools=TOOLS, settings={"metadata": {"user_id": "u-42"}}, thread_id="T")
        a.append_message(t, "user", "Weather in Lyon?")
        a.fork(t, config={"settings": {"speed": "fast"}}, fork_id="F")
        lines = list(export_events(a, "F"))
    created = next(line["event"] for line in lines if "event" in line and line["event"]["type"] == "thread.created")
    forked = next(line["event"] for line in lines if "event" in line and line["event"]["type"] == "thread.forked")
    target = created["data"]["settings"] if where == "thread" else forked["data"]["options"]["config"]["settings"]
    target.update(settings)
    number = next(n for n, line in enumerate(lines, 1) if line.get("event") is (created if where == "thread" else forked))
    db = tmp_path / "b.db"
    with Store(db) as b:
        before = untouched(b)
        with pytest.raises(InvalidEvent) as refused:
            b.restore(enumerate(_rechained(lines), 1))
        assert refused.value.field.startswith(f"line {number}.event.data.") and refused.value.field.endswith(field), str(refused.value)
        assert words in refused.value.why, str(refused.value)
        assert untouched(b) == before
        target.clear()
        target.update({"temperature": 0.5})  # unknown to the installed SDK: an older one may have taken it
        b.restore(enumerate(_rechained(lines), 1))
        assert anthropic_request(b, "F")["temperature"] == 0.5


@pytest.mark.parametrize("choice", ["auto", [{"type": "auto"}]], ids=["text", "list"])
def test_a_restored_tool_choice_that_is_no_object_is_refused_naming_it(tmp_path: Path, api: MessagesAPI, choice: Any) -> None:
    """What a restore takes of settings is not validated against the installed SDK, and the
    request read a restored `tool_choice` of "auto" as an object: AttributeError, which the CLI
    called a row altered outside threadlog. It is refused as any tool choice the API would
    refuse: by the request, and by a turn before anything is written."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(model=MODEL, settings={"tool_choice": {"type": "auto"}}, thread_id="T")
        a.append_message(t, "user", "Weather in Lyon?")
        lines = list(export_events(a, t))
    next(line["event"] for line in lines if "event" in line and line["event"]["offset"] == 0)["data"]["settings"]["tool_choice"] = choice
    with Store(tmp_path / "b.db") as b:
        b.restore(enumerate(_rechained(lines), 1))
        with pytest.raises(InvalidEvent) as refused:
            anthropic_request(b, "T")
        assert refused.value.field == "settings.tool_choice" and "is no tool choice" in refused.value.why, str(refused.value)
        before = untouched(b)
        with pytest.raises(InvalidEvent, match="settings.tool_choice: .* is no tool choice"):
            run_turn(b, "T", None, api.client(0, 10.0))
        assert untouched(b) == before and not api.requests
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "b.db"), "request", "T"])
    assert result.exit_code == 1 and "settings.tool_choice: " in result.stderr and "altered" not in result.stderr, result.output
