"""Bad input, through the library and the CLI: a clear error, and the database untouched.

Every case runs on a fresh copy of one seeded database and compares the file's bytes and
its SQL dump before and after. The CLI cases also check that exactly one `error:` line
reaches stderr (exit 1) or click's usage message (exit 2), never a traceback.

Read-only files: the tests run as root, for whom file modes do not stop writes, so the
file is made immutable with `chattr +i` (root cannot write an immutable file either); as
any other user a plain `chmod 0444` does it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.sqlite import SQLiteBackend
from threadlog import (
    ConcurrencyError,
    ForkRefused,
    InvalidEvent,
    SchemaError,
    Store,
    StoreError,
    ThreadNotFound,
    anthropic_request,
    diff,
    display_rows,
    export_all,
    report,
    search,
    thread_state,
    transcript,
)
from threadlog.cli import cli

THREADLOG = str(Path(sys.executable).parent / "threadlog")
FIFTY_MB = 50 * 1024 * 1024


# -- the seeded database and its fingerprint ---------------------------------------------------


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("bad") / "seed.db"
    with Store(db) as s:
        t = s.create_thread(title="ok", thread_id="t")
        s.append_message(t, "user", "hello", event_id="ev-hello")
        s.append_message(t, "assistant", "hi")
        other = s.create_thread(thread_id="other")
        s.append_message(other, "user", "elsewhere", event_id="ev-other")
        empty = s.create_thread(thread_id="empty")
        busy = s.create_thread(thread_id="busy")
        s.append_message(busy, "user", "go")
        s.append(busy, [{"type": "run.started", "data": {"run_id": "r1"}}])
        pending = s.create_thread(thread_id="pending")
        s.append_message(pending, "user", "search")
        s.append_message(pending, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}])
        sub = s.fan_out(pending, ["look"])[0]
        s.append_message(sub, "assistant", [{"type": "tool_use", "id": "toolu_2", "name": "search", "input": {}}])
        fork = s.fork(t, 2, fork_id="fork")
        s.verify()
    return db, {"t": t, "empty": empty, "busy": busy, "pending": pending, "sub": sub, "fork": fork, "other": other}


def fingerprint(db: Path) -> tuple[str, list[str] | None]:
    """(sha256 of the file, its SQL dump or None if it is not a database)."""
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    conn = sqlite3.connect(db)
    try:
        dump = list(conn.iterdump())
    except sqlite3.DatabaseError:
        dump = None
    finally:
        conn.close()
    return digest, dump


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make `path` really read-only, for root too, for the duration."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr +i needs CAP_LINUX_IMMUTABLE and ext4/xfs/btrfs)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def fresh(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    db = tmp_path / "t.db"
    shutil.copy(seeded[0], db)
    return db


# -- library cases --------------------------------------------------------------------------

Call = Callable[[Store, dict[str, str]], Any]

MSG = "message.appended"


HEADER = {"format": "threadlog-events", "version": 2}


class Unweakable:
    """A reader that has `store_closing` but no weak reference (slots without `__weakref__`)."""

    __slots__ = ()

    def store_closing(self) -> None:
        pass


def msg(role: str, content: Any, **meta: Any) -> dict[str, Any]:
    return {"type": MSG, "data": {"role": role, "content": content}, "meta": meta}


LIB: list[tuple[str, Call, type[Exception], str]] = [
    ("append-unknown-thread", lambda s, i: s.append_message("nope", "user", "hi"), ThreadNotFound, "nope"),
    ("read-unknown-thread", lambda s, i: list(s.read("nope")), ThreadNotFound, "nope"),
    ("fork-unknown-thread", lambda s, i: s.fork("nope"), ThreadNotFound, "nope"),
    ("unknown-event-type", lambda s, i: s.append(i["t"], [{"type": "message.deleted", "data": {}}]), InvalidEvent, "events[0].type"),
    ("unknown-event-key", lambda s, i: s.append(i["t"], [{"type": MSG, "payload": {}}]), InvalidEvent, "events[0].payload"),
    ("data-not-an-object", lambda s, i: s.append(i["t"], [{"type": MSG, "data": [1, 2]}]), InvalidEvent, "events[0].data"),
    ("invalid-content-block-type", lambda s, i: s.append_message(i["t"], "user", [{"type": "bogus"}]), InvalidEvent, "content"),
    ("content-block-missing-field", lambda s, i: s.append_message(i["t"], "user", [{"type": "text"}]), InvalidEvent, "content"),
    ("nested-bad-block-in-tool-result", lambda s, i: s.append_message(i["pending"], "user", [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text"}]}]), InvalidEvent, "content"),
    # Block values pydantic would only coerce: stored as given, they would be sent so, and refused by the API.
    ("is-error-as-text", lambda s, i: s.append_message(i["pending"], "user", [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r", "is_error": "false"}]), InvalidEvent,
     "content[0].is_error: Input should be a valid boolean"),
    ("citation-index-as-text", lambda s, i: s.append_message(i["t"], "assistant", [{"type": "text", "text": "x", "citations": [
        {"type": "char_location", "cited_text": "x", "document_index": "0", "start_char_index": 0, "end_char_index": 1}]}]),
     InvalidEvent, "citations[0].document_index: Input should be a valid integer"),
    ("wrong-role-system", lambda s, i: s.append_message(i["t"], "system", "hi"), InvalidEvent, "role"),
    ("tool-use-in-user-message", lambda s, i: s.append_message(i["t"], "user", [
        {"type": "tool_use", "id": "x", "name": "n", "input": {}}]), InvalidEvent, "content"),
    ("tool-result-for-unknown-tool-use", lambda s, i: s.append_message(i["t"], "user", [
        {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "r"}]), InvalidEvent, "toolu_nope"),
    ("run-started-while-in-progress", lambda s, i: s.append(i["busy"], [{"type": "run.started", "data": {"run_id": "r1"}}]),
     InvalidEvent, "run 'r1' is already in progress"),
    ("run-finished-unknown-run", lambda s, i: s.append(i["t"], [{"type": "run.finished", "data": {"run_id": "r9", "status": "ok"}}]), InvalidEvent, "run_id"),
    # The answer to an interrupt on a tool call becomes that call's result: one on a call not
    # waiting for it (mistyped, or answered already) was recorded, and its answer went nowhere.
    ("interrupt-on-a-tool-call-not-pending", lambda s, i: s.append(i["pending"], [{"type": "interrupt.raised", "data": {
        "interrupt_id": "q", "tool_use_id": "toolu_nope"}}]), InvalidEvent,
     "tool_use 'toolu_nope' is not waiting for its result in this thread (pending: 'toolu_1')"),
    ("interrupt-on-a-tool-call-none-pending", lambda s, i: s.append(i["t"], [{"type": "interrupt.raised", "data": {
        "interrupt_id": "q", "tool_use_id": "toolu_1"}}]), InvalidEvent, "tool_use 'toolu_1' is not waiting for its result in "
     "this thread (no tool_use is)"),
    ("interrupt-resolved-not-pending", lambda s, i: s.append(i["t"], [{"type": "interrupt.resolved", "data": {"interrupt_id": "q"}}]), InvalidEvent, "interrupt_id"),
    ("compaction-through-the-future", lambda s, i: s.append(i["t"], [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 99}}]), InvalidEvent, "through_offset"),
    ("reserved-thread-forked", lambda s, i: s.append(i["t"], [{"type": "thread.forked", "data": {"parent_id": "t", "parent_offset": 1, "options": {}}}]), InvalidEvent, "fork()"),
    ("second-thread-created", lambda s, i: s.append(i["t"], [{"type": "thread.created", "data": {}}]), InvalidEvent, "thread.created"),
    ("empty-batch", lambda s, i: s.append(i["t"], []), InvalidEvent, "empty"),
    ("batch-repeats-event-id", lambda s, i: s.append(i["t"], [msg("user", "a", event_id="e1"), msg("user", "b", event_id="e1")]), InvalidEvent, "event_id"),
    ("retry-of-a-different-batch", lambda s, i: s.append(i["t"], [msg("user", "hello", event_id="ev-hello"), msg("user", "new", event_id="ev-new")]), InvalidEvent, "event_id"),
    ("event-id-of-another-thread", lambda s, i: s.append(i["t"], [msg("user", "elsewhere", event_id="ev-other")]), InvalidEvent, "other"),
    ("bad-meta-origin", lambda s, i: s.append(i["t"], [msg("user", "a", origin="forged")]), InvalidEvent, "meta.origin"),
    ("occurred-at-not-a-time", lambda s, i: s.append_message(i["t"], "user", "a", occurred_at="1999-01-01T00:00:00Z (signed by CFO)"),
     InvalidEvent, "meta.occurred_at"),
    ("lone-surrogate-not-utf8", lambda s, i: s.append_message(i["t"], "user", "bad \ud800 text"), InvalidEvent, "UTF-8"),
    ("lone-surrogate-in-meta", lambda s, i: s.append_message(i["t"], "user", "fine", actor="ops \udc80"), InvalidEvent, "events[0].meta"),
    ("tool-use-id-already-pending", lambda s, i: s.append_message(i["pending"], "assistant", [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]), InvalidEvent, "'toolu_1' is already waiting"),
    ("tool-use-id-twice-in-one-message", lambda s, i: s.append_message(i["t"], "assistant", [
        {"type": "tool_use", "id": "toolu_d", "name": "a", "input": {}},
        {"type": "tool_use", "id": "toolu_d", "name": "b", "input": {}}]), InvalidEvent, "'toolu_d' appears twice"),
    ("tool-use-id-pending-in-sub-agent", lambda s, i: s.append_message(i["sub"], "assistant", [
        {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {}}]), InvalidEvent, "toolu_2"),
    ("nan-in-data", lambda s, i: s.append(i["t"], [{"type": "metadata.set", "data": {"patch": {"x": float("nan")}}}]), InvalidEvent, "data"),
    ("fifty-megabyte-message", lambda s, i: s.append_message(i["t"], "user", "x" * FIFTY_MB), InvalidEvent, "bytes"),
    ("fork-past-head", lambda s, i: s.fork(i["t"], 99), ForkRefused, "offset_out_of_range"),
    ("fork-at-zero", lambda s, i: s.fork(i["t"], 0), ForkRefused, "offset_out_of_range"),
    ("fork-at-negative", lambda s, i: s.fork(i["t"], -1), ForkRefused, "offset_out_of_range"),
    ("fork-empty", lambda s, i: s.fork(i["empty"]), ForkRefused, "empty"),
    ("fork-busy", lambda s, i: s.fork(i["busy"]), ForkRefused, "busy"),
    ("fork-unanswered-tool-calls", lambda s, i: s.fork(i["pending"]), ForkRefused, "unanswered_tool_calls"),
    ("fork-bad-option", lambda s, i: s.fork(i["t"], context="summary"), InvalidEvent, "context"),
    ("fork-id-taken", lambda s, i: s.fork(i["t"], fork_id="other"), InvalidEvent, "fork_id"),
    ("fan-out-recursion", lambda s, i: s.fan_out(i["sub"], ["again"]), ForkRefused, "recursion"),
    ("fan-out-no-directives", lambda s, i: s.fan_out(i["pending"], []), ForkRefused, "no_directives"),
    ("fan-out-no-pending-tool-use", lambda s, i: s.fan_out(i["t"], ["go"]), ForkRefused, "no_pending_tool_use"),
    ("stale-expected-head", lambda s, i: s.append_message(i["t"], "user", "late", expect=1), ConcurrencyError, "expected 1"),
    ("expect-no-stream-of-existing", lambda s, i: s.append(i["t"], [{"type": "thread.created", "data": {}}], expect="no_stream"), ConcurrencyError, "no_stream"),
    ("expect-nonsense", lambda s, i: s.append_message(i["t"], "user", "x", expect="latest"), InvalidEvent, "expect"),
    ("expect-negative", lambda s, i: s.append_message(i["t"], "user", "x", expect=-1), InvalidEvent, "expect"),
    ("read-all-negative-limit", lambda s, i: list(s.read_all(limit=-1)), InvalidEvent, "limit"),
    ("read-all-negative-after", lambda s, i: list(s.read_all(after=-5)), InvalidEvent, "after"),
    ("read-negative-start", lambda s, i: list(s.read(i["t"], start=-1)), InvalidEvent, "start"),
    ("event-at-out-of-range", lambda s, i: s.event_at(i["t"], 42), InvalidEvent, "offset"),
    ("redact-unknown-position", lambda s, i: s.redact(999, "r", "a"), InvalidEvent, "position"),
    ("redact-position-zero", lambda s, i: s.redact(0, "r", "a"), InvalidEvent, "position"),
    # a thread named by something other than text: an int past 2**63 failed in the driver
    # (OverflowError), a dict as a database error that named no argument
    ("thread-an-int-past-2**63", lambda s, i: s.head(2**63), InvalidEvent, "thread: must be a thread id (text), not int"),
    ("read-a-dict-as-thread", lambda s, i: list(s.read({"id": "t"})), InvalidEvent, "thread: must be a thread id (text), not dict"),
    ("fork-an-int-as-thread", lambda s, i: s.fork(2**64), InvalidEvent, "thread: must be a thread id (text)"),
    ("fan-out-a-list-as-thread", lambda s, i: s.fan_out(["pending"], ["look"]), InvalidEvent, "thread: must be a thread id (text)"),
    ("subtree-bytes-as-thread", lambda s, i: s.subtree(b"t"), InvalidEvent, "thread: must be a thread id (text), not bytes"),
    ("threads-root-an-int", lambda s, i: s.threads(root=-2**63 - 1), InvalidEvent, "root: must be a thread id (text)"),
    # other names looked up, of another kind: unhashable (TypeError), past 2**63 (OverflowError),
    # or concatenated with text (TypeError)
    ("count-a-list-as-type", lambda s, i: s.count(i["t"], ["message.appended"]), InvalidEvent,
     "type_: must be an event type (text), not list"),
    ("count-an-int-past-2**63-as-type", lambda s, i: s.count(i["t"], 2**63), InvalidEvent, "type_: must be an event type"),
    ("count-each-a-dict-as-type", lambda s, i: s.count_each([s.thread(i["t"])], {"a": 1}), InvalidEvent, "type_:"),
    ("ids-starting-an-int", lambda s, i: s.ids_starting(5), InvalidEvent, "prefix: must be the start of a thread id (text), not int"),
    ("drop-snapshots-an-int-past-2**63", lambda s, i: s.drop_snapshots(2**63), InvalidEvent,
     "projection: must be a projection's name (text), not int"),
    ("snapshot-a-version-of-text", lambda s, i: s.save_snapshot("state", "1", i["t"], 1, {}), InvalidEvent,
     "version: must be a version (an integer), not str"),
    ("snapshot-a-dict-as-projection", lambda s, i: s.save_snapshot({"p": 1}, 1, i["t"], 1, {}), InvalidEvent,
     "projection: must be a projection's name (text), not dict"),
    ("nearest-snapshot-a-version-past-2**63", lambda s, i: s.nearest_snapshot("state", 2**63, i["t"], 1), InvalidEvent, "version"),
    ("redact-a-position-of-another-kind", lambda s, i: s.redact("3", "r", "a"), InvalidEvent, "position"),
    # an export's lines not shaped (line number, parsed JSON): unpacking them raised ValueError or
    # TypeError, and a line number of None or text was taken and shown as "line None"
    ("restore-a-string", lambda s, i: s.restore("abc"), InvalidEvent,
     "lines: must be an export's lines, as (line number, parsed JSON line) pairs, not str"),
    ("restore-none", lambda s, i: s.restore(None), InvalidEvent, "lines: must be an export's lines"),
    ("restore-a-line-an-int", lambda s, i: s.restore([5]), InvalidEvent,
     "lines[0]: must be a (line number, parsed JSON line) pair, not 5"),
    ("restore-a-line-of-three", lambda s, i: s.restore([(1, HEADER, 3)]), InvalidEvent, "lines[0]: must be a (line number"),
    ("restore-a-line-of-one", lambda s, i: s.restore([(1, HEADER), (2,)]), InvalidEvent, "lines[1]: must be a (line number"),
    ("restore-a-line-none", lambda s, i: s.restore([None]), InvalidEvent, "lines[0]: must be a (line number"),
    ("restore-a-line-number-none", lambda s, i: s.restore([(None, HEADER)]), InvalidEvent,
     "lines[0]: its line number must be an integer >= 0, not None"),
    ("restore-a-line-number-text", lambda s, i: s.restore([(1, HEADER), ("2", {"end": {}})]), InvalidEvent,
     "lines[1]: its line number must be an integer >= 0, not '2'"),
    ("restore-a-line-unparsed", lambda s, i: s.restore([(1, json.dumps(HEADER))]), InvalidEvent,
     "line 1: is str, not a JSON object: restore takes each line parsed (json.loads(line))"),
    ("restore-a-line-of-bytes", lambda s, i: s.restore([(1, HEADER), (2, b"{}")]), InvalidEvent, "line 2: is bytes, not a JSON object"),
    ("restore-many-a-string", lambda s, i: s.restore_many("ab"), InvalidEvent,
     "exports: must be a list of (name, lines) pairs, not str"),
    ("restore-many-an-export-of-three", lambda s, i: s.restore_many([("a", [(1, HEADER)], 3)]), InvalidEvent,
     "exports[0]: must be a (name, lines) pair"),
    ("restore-many-a-name-an-int", lambda s, i: s.restore_many([(5, [(1, HEADER)])]), InvalidEvent,
     "exports[0]: its name must be text (a file name, or \"\" for none), not int"),
    # threads of another kind than ThreadInfo: AttributeError ('str' object has no attribute 'id')
    ("titles-of-ids", lambda s, i: s.titles(["t"]), InvalidEvent,
     "threads[0]: must be a ThreadInfo (as thread() and threads() give them), not str"),
    ("titles-of-dicts", lambda s, i: s.titles([s.thread("t"), {"id": "t"}]), InvalidEvent, "threads[1]: must be a ThreadInfo"),
    ("titles-of-none", lambda s, i: s.titles(None), InvalidEvent,
     "threads: must be a list of ThreadInfo (as threads() gives it), not NoneType"),
    ("titles-a-string", lambda s, i: s.titles("t"), InvalidEvent, "threads: must be a list of ThreadInfo"),
    ("count-each-of-ids", lambda s, i: s.count_each(["t"], MSG), InvalidEvent, "threads[0]: must be a ThreadInfo"),
    ("count-each-none-in-list", lambda s, i: s.count_each([s.thread("t"), None], MSG), InvalidEvent,
     "threads[1]: must be a ThreadInfo (as thread() and threads() give them), not NoneType"),
    ("count-each-an-int-as-type", lambda s, i: s.count_each([s.thread("t")], 5), InvalidEvent,
     "type_: must be an event type (text), not int"),
    # an extractor that is no function: TypeError ('int' object is not callable) inside the catch-up
    ("update-index-an-int", lambda s, i: s.update_index(5), InvalidEvent,
     "extractor: must be a function that makes an extractor (projections.search.extractor(store) gives one), not int"),
    ("update-index-a-maker-of-an-int", lambda s, i: s.update_index(lambda: 5), InvalidEvent,
     "extractor: returned int, not an extractor (a function of (stream_id, offset, type, data)"),
    ("rebuild-index-none", lambda s, i: s.rebuild_index(None), InvalidEvent, "extractor: must be a function"),
    ("rebuild-index-a-maker-of-none", lambda s, i: s.rebuild_index(lambda: None), InvalidEvent, "extractor: returned NoneType"),
    # a reader without store_closing: TypeError (cannot create weak reference), or AttributeError at close
    ("finish-before-close-an-object", lambda s, i: s.finish_before_close(object()), InvalidEvent,
     "reader: must have a store_closing() method, which the store calls before it closes; object has none"),
    ("finish-before-close-a-function", lambda s, i: s.finish_before_close(lambda: None), InvalidEvent,
     "reader: must have a store_closing() method, which the store calls before it closes; function has none"),
    ("finish-before-close-a-dict", lambda s, i: s.finish_before_close({"store_closing": print}), InvalidEvent,
     "reader: must have a store_closing() method"),
    ("finish-before-close-unweakable", lambda s, i: s.finish_before_close(Unweakable()), InvalidEvent,
     "reader: is held weakly, and Unweakable objects cannot be: give the class a __weakref__ slot"),
    # keys of several kinds in one object: Python's "'<' not supported between instances of 'int'
    # and 'str'" (canonical JSON sorts keys) as the reason, naming no place below the data
    ("mixed-keys-in-message-data", lambda s, i: s.append(i["t"], [{"type": MSG, "data": {"role": "user", "content": "hi", 1: "x"}}]),
     InvalidEvent, "events[0].data: the key 1 is int, not text: JSON object keys must be text"),
    ("mixed-keys-in-a-tool-input", lambda s, i: s.append_message(i["t"], "assistant", [
        {"type": "tool_use", "id": "toolu_k", "name": "n", "input": {"a": [{"b": 1}, {"b": 1, 2: 3}]}}]), InvalidEvent,
     "events[0].data.content[0].input.a[1]: the key 2 is int, not text: JSON object keys must be text"),
    ("a-key-of-another-kind-in-a-tool-input", lambda s, i: s.append_message(i["t"], "assistant", [
        {"type": "tool_use", "id": "toolu_k", "name": "n", "input": {1: "a", "b": 2}}]), InvalidEvent,
     "events[0].data.content[0].input: the key 1 is int, not text: JSON object keys must be text"),
    ("mixed-keys-in-a-patch", lambda s, i: s.append(i["t"], [{"type": "metadata.set", "data": {"patch": {"x": 1, 2: 3}}}]),
     InvalidEvent, "events[0].data.patch: the key 2 is int, not text"),
    ("mixed-keys-in-a-payload", lambda s, i: s.append(i["t"], [{"type": "interrupt.raised", "data": {
        "interrupt_id": "q", "payload": {"x": 1, None: 2}}}]), InvalidEvent, "events[0].data.payload: the key None is NoneType, not text"),
    ("mixed-keys-in-meta", lambda s, i: s.append(i["t"], [{"type": "title.set", "data": {"title": "x"}, "meta": {
        "source": {"tool": "pi", "file": "f", "flags": {"a": {"b": 1, (1, 2): 3}}}}}]), InvalidEvent,
     "events[0].meta.source.flags.a: the key (1, 2) is tuple, not text"),
    ("mixed-keys-in-a-snapshot", lambda s, i: s.save_snapshot("state", 1, i["t"], 1, {"a": {"b": 1, 2: 3}}), InvalidEvent,
     "state.a: the key 2 is int, not text: JSON object keys must be text"),
    # bytes given for text: pydantic decoded them, and b"x" was stored as "x"
    ("title-as-bytes", lambda s, i: s.create_thread(title=b"x"), InvalidEvent, "events[0].data.title: Input should be a valid string"),
    ("model-as-bytes", lambda s, i: s.create_thread(model=b"claude"), InvalidEvent, "events[0].data.model: Input should be a valid string"),
    ("system-as-bytes", lambda s, i: s.create_thread(system=b"be brief"), InvalidEvent, "events[0].data.system"),
    ("title-set-as-a-bytearray", lambda s, i: s.append(i["t"], [{"type": "title.set", "data": {"title": bytearray(b"x")}}]),
     InvalidEvent, "events[0].data.title: Input should be a valid string"),
    ("fork-config-model-as-bytes", lambda s, i: s.fork(i["t"], config={"model": b"m"}), InvalidEvent, "config.model"),
    ("fork-config-system-as-bytes", lambda s, i: s.fork(i["t"], config={"system": b"m"}), InvalidEvent, "config.system"),
    ("message-model-as-bytes", lambda s, i: s.append_message(i["t"], "assistant", "x", model=b"m"), InvalidEvent,
     "events[0].data.model: Input should be a valid string"),
    ("run-id-as-bytes", lambda s, i: s.append(i["t"], [{"type": "run.started", "data": {"run_id": b"r2"}}]), InvalidEvent,
     "events[0].data.run_id: Input should be a valid string"),
    ("actor-as-bytes", lambda s, i: s.append_message(i["t"], "user", "x", actor=b"me"), InvalidEvent,
     "events[0].meta.actor: Input should be a valid string"),
    ("patch-key-as-bytes", lambda s, i: s.append(i["t"], [{"type": "metadata.set", "data": {"patch": {b"k": 1}}}]), InvalidEvent,
     "events[0].data.patch: the key b'k' is bytes, not text: JSON object keys must be text"),
    ("request-model-as-bytes", lambda s, i: anthropic_request(s, i["t"], model=b"m"), InvalidEvent,
     "model: must be a model name (printable text), not b'm'"),
    ("restore-many-lines-an-int", lambda s, i: s.restore_many([("a.jsonl", 5)]), InvalidEvent, "a.jsonl: lines: must be an export's lines"),
    # A model is one of the SDK's names or any text: a number was refused by listing every name
    # the SDK knows, as if only those were allowed.
    ("fallback-model-a-number", lambda s, i: s.append_message(i["t"], "assistant", [
        {"type": "fallback", "from": {"model": "claude-a"}, "to": {"model": 5}, "reason": "overloaded"}]), InvalidEvent,
     "events[0].data.content[0].to.model: Input should be a valid string"),
]


@pytest.mark.parametrize(("call", "error", "says"), [c[1:] for c in LIB], ids=[c[0] for c in LIB])
def test_library_refuses_and_changes_nothing(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, call: Call, error: type[Exception], says: str
) -> None:
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    with Store(db) as store, pytest.raises(StoreError) as caught:
        call(store, seeded[1])
    print(f"\n{type(caught.value).__name__}: {str(caught.value)[:200]}")
    assert type(caught.value) is error
    assert says in str(caught.value) + getattr(caught.value, "reason", "") + getattr(caught.value, "field", "")
    assert fingerprint(db) == before, "a refused call changed the database"


def export_of_two_threads(tmp_path: Path) -> list[tuple[int, Any]]:
    """An export of another file's two threads, as (line number, parsed line) pairs: restoring
    it writes the first thread's events before it reads the second's."""
    with Store(tmp_path / "other.db") as other:
        for title in ("first", "second"):
            t = other.create_thread(title=title)
            other.append_message(t, "user", f"hello from {title}")
        return list(enumerate(export_all(other), 1))


PAIR = "lines[7]: must be a (line number, parsed JSON line) pair"
MISSHAPEN_LINES = [
    ("none", None, PAIR),
    ("int", 5, PAIR),
    ("string", "line", PAIR),
    ("three-items", (7, {"end": {}}, 3), PAIR),
    ("number-text", ("7", {"end": {}}), "lines[7]: its line number must be an integer >= 0, not '7'"),
    ("unparsed", (7, '{"end": {}}'), "line 7: is str, not a JSON object"),
]


@pytest.mark.parametrize(("bad", "says"), [c[1:] for c in MISSHAPEN_LINES], ids=[c[0] for c in MISSHAPEN_LINES])
def test_a_restore_refused_at_a_misshapen_line_after_writing_leaves_nothing(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, bad: Any, says: str
) -> None:
    """The lines before the misshapen one were written (a thread's run is written when the next
    thread's events begin), in the restore's one transaction: the refusal undoes them, and in
    `restore_many` the exports restored before it too."""
    db = fresh(seeded, tmp_path)
    lines = export_of_two_threads(tmp_path)
    with Store(db) as store:
        exported = list(export_all(store))
    before = fingerprint(db)
    with Store(db) as store:
        with pytest.raises(InvalidEvent) as one:
            store.restore([*lines[:-1], bad, lines[-1]])
        with pytest.raises(InvalidEvent) as many:
            store.restore_many([("a.jsonl", lines), ("b.jsonl", [*lines[:-1], bad, lines[-1]])])
        print(f"\n{one.value}\n{many.value}")
        assert str(one.value).startswith(says)
        assert str(many.value).startswith(f"b.jsonl: {says}")
        assert list(export_all(store)) == exported
    assert fingerprint(db) == before, "a refused restore changed the database"
    with Store(db) as store:  # the same lines, well shaped, restore
        assert store.restore(lines).added == 4


def test_a_full_disk_refuses_the_append_and_changes_nothing(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """SQLITE_FULL (here: the file may not grow past its current pages) is a StoreError saying so."""
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    backend = SQLiteBackend(db)
    pages = backend.conn.execute("PRAGMA page_count").fetchone()[0]
    backend.conn.execute(f"PRAGMA max_page_count = {pages}")
    with Store(backend) as store, pytest.raises(StoreError, match="full") as caught:
        store.append_message("t", "user", "x" * 200_000)
    assert type(caught.value) is StoreError
    assert fingerprint(db) == before, "a refused call changed the database"


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


# Arguments whose plain repr is no message: 10 MB of text, a RecursionError (1,200 levels of
# dicts), a ValueError (Python writes out no int past 4,300 digits).
HUGE = "x" * 10_000_000
DEEP = nested(1200)
LONG = 10**5000
SHOWN: list[tuple[str, Call, type[Exception], str]] = [
    ("expect-deep", lambda s, i: s.append_message(i["t"], "user", "x", expect=DEEP), InvalidEvent, "expect"),
    ("expect-huge-text", lambda s, i: s.append_message(i["t"], "user", "x", expect=HUGE), InvalidEvent, "expect"),
    ("expect-long-int", lambda s, i: s.append_message(i["t"], "user", "x", expect=LONG), ConcurrencyError, "expected an integer of 16,610 bits"),
    ("read-start-deep", lambda s, i: list(s.read(i["t"], DEEP)), InvalidEvent, "start"),
    ("read-start-long-int", lambda s, i: list(s.read(i["t"], LONG)), InvalidEvent, "start: an integer of 16,610 bits is too large"),
    ("read-all-limit-huge-text", lambda s, i: list(s.read_all(limit=HUGE)), InvalidEvent, "limit"),
    ("fork-at-deep", lambda s, i: s.fork(i["t"], DEEP), ForkRefused, "offset_out_of_range"),
    ("fork-at-long-int", lambda s, i: s.fork(i["t"], -LONG), ForkRefused, "a negative integer of 16,610 bits"),
    ("fork-busy-deep", lambda s, i: s.fork(i["t"], busy=DEEP), InvalidEvent, "busy"),
    ("fork-retry-deep", lambda s, i: s.fork(i["t"], retry=DEEP), InvalidEvent, "retry"),
    ("fork-id-deep", lambda s, i: s.fork(i["t"], fork_id=DEEP), InvalidEvent, "fork_id"),
    ("state-at-deep", lambda s, i: thread_state(s, i["t"], DEEP), InvalidEvent, "at"),
    ("state-at-long-int", lambda s, i: thread_state(s, i["t"], LONG), InvalidEvent, "at"),
    ("rows-start-deep", lambda s, i: display_rows(s, i["t"], start=DEEP), InvalidEvent, "start"),
    ("request-model-deep", lambda s, i: anthropic_request(s, i["t"], model=DEEP), InvalidEvent, "model"),
    ("request-max-tokens-huge-text", lambda s, i: anthropic_request(s, i["t"], model="m", max_tokens=HUGE), InvalidEvent, "max_tokens"),
    ("search-role-deep", lambda s, i: search(s, "hello", role=DEEP), InvalidEvent, "role"),
    ("report-status-deep", lambda s, i: report(s, i["sub"], "done", status=DEEP), InvalidEvent, "status"),
]


@pytest.mark.parametrize(("call", "error", "says"), [c[1:] for c in SHOWN], ids=[c[0] for c in SHOWN])
def test_a_refusal_shows_an_argument_briefly(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, call: Call, error: type[Exception], says: str
) -> None:
    """A refused argument is shown cut short: a deep or huge value raised RecursionError or
    ValueError while the message was written, or made the message megabytes long."""
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    with Store(db) as store, pytest.raises(StoreError) as caught:
        call(store, seeded[1])
    assert type(caught.value) is error
    assert says in str(caught.value) + getattr(caught.value, "reason", "")
    assert len(str(caught.value)) < 400, str(caught.value)[:400]
    assert fingerprint(db) == before


# Values of the wrong kind, or odd ones of the right kind, for any argument.
ODD = st.one_of(
    st.none(), st.booleans(), st.floats(), st.integers(-(2**70), 2**70), st.integers(-(10**5000), 10**5000),
    st.text(max_size=12), st.binary(max_size=6), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.builds(object), st.just(DEEP),
)
ODD_CALLS: dict[str, Callable[[Store, dict[str, str], Any], Any]] = {
    "read-start": lambda s, i, v: list(s.read(i["fork"], v)),
    "read-stop": lambda s, i, v: list(s.read(i["fork"], 0, v)),
    "read-thread": lambda s, i, v: list(s.read(v)),
    "read-all-after": lambda s, i, v: list(s.read_all(v)),
    "read-all-limit": lambda s, i, v: list(s.read_all(0, v)),
    "threads-limit": lambda s, i, v: s.threads(v),
    "threads-before": lambda s, i, v: s.threads(20, v),
    "threads-root": lambda s, i, v: s.threads(root=v),
    "ancestry-start": lambda s, i, v: s.ancestry(i["fork"], v),
    "event-at-offset": lambda s, i, v: s.event_at(i["t"], v),
    "head-thread": lambda s, i, v: s.head(v),
    "subtree-thread": lambda s, i, v: s.subtree(v),
    "append-expect": lambda s, i, v: s.append_message(i["t"], "user", "x", expect=v),
    "append-thread": lambda s, i, v: s.append_message(v, "user", "x"),
    "append-events": lambda s, i, v: s.append(i["t"], v),
    "fork-at": lambda s, i, v: s.fork(i["t"], v),
    "fork-thread": lambda s, i, v: s.fork(v),
    "fan-out-thread": lambda s, i, v: s.fan_out(v, ["look"]),
    "redact-position": lambda s, i, v: s.redact(v, "r", "a"),
    "state-at": lambda s, i, v: thread_state(s, i["t"], v),
    "rows-start": lambda s, i, v: display_rows(s, i["t"], start=v),
    "transcript-stop": lambda s, i, v: transcript(s, i["t"], stop=v),
    "diff-limit": lambda s, i, v: diff(s, i["t"], i["fork"], v),
    "request-extra-tools": lambda s, i, v: anthropic_request(s, i["t"], model="m", extra_tools=v),
    "search-limit": lambda s, i, v: search(s, "hello", limit=v),
    "search-thread": lambda s, i, v: search(s, "hello", thread=v),
    "restore-lines": lambda s, i, v: s.restore(v),
    "restore-line": lambda s, i, v: s.restore([(1, HEADER), v]),
    "restore-many-exports": lambda s, i, v: s.restore_many(v),
    "restore-many-export": lambda s, i, v: s.restore_many([v]),
    "titles-threads": lambda s, i, v: s.titles(v),
    "titles-thread": lambda s, i, v: s.titles([v]),
    "count-each-thread": lambda s, i, v: s.count_each([s.thread(i["fork"]), v], MSG),
    "count-each-type": lambda s, i, v: s.count_each([s.thread(i["fork"])], v),
    "update-index": lambda s, i, v: s.update_index(v),
    "rebuild-index": lambda s, i, v: s.rebuild_index(v),
    "finish-before-close": lambda s, i, v: s.finish_before_close(v),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(call=st.sampled_from(sorted(ODD_CALLS)), value=ODD)
def test_an_odd_argument_is_answered_or_refused_as_a_store_error_that_changes_nothing(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, call: str, value: Any
) -> None:
    """Whatever a caller passes, a call answers or raises a `StoreError`, never a TypeError,
    OverflowError, RecursionError or ValueError from below, and a refused call writes nothing."""
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    with Store(db) as store:
        try:
            ODD_CALLS[call](store, seeded[1], value)
        except StoreError:
            refused = True
        else:
            refused = False
    if refused:
        assert fingerprint(db) == before, "a refused call changed the database"


def test_refusals_carry_their_details(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    with Store(fresh(seeded, tmp_path)) as s:
        with pytest.raises(ForkRefused) as fork:
            s.fork("pending")
        assert (fork.value.reason, fork.value.tool_use_ids) == ("unanswered_tool_calls", ["toolu_1"])
        with pytest.raises(ConcurrencyError) as race:
            s.append_message("t", "user", "late", expect=1)
        assert (race.value.expected, race.value.actual) == (1, 3)
        with pytest.raises(InvalidEvent) as bad:
            s.append_message("t", "user", [{"type": "bogus"}])
        assert bad.value.field.startswith("events[0].data.content")
    print(f"\nForkRefused.tool_use_ids={fork.value.tool_use_ids}, ConcurrencyError expected/actual="
          f"{race.value.expected}/{race.value.actual}, InvalidEvent.field={bad.value.field}")


def test_read_only_file_refuses_writes_and_still_reads(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    with read_only(db):
        with Store(db) as s:
            with pytest.raises(StoreError, match="read-only") as caught:
                s.append_message("t", "user", "hi")
            assert [e.offset for e in s.read("t")] == [0, 1, 2]
            s.verify()
        print(f"\nappend to an immutable file: {caught.value}")
    assert fingerprint(db) == before


@pytest.mark.parametrize("kind", ["not-sqlite", "sqlite-but-not-threadlog", "newer-schema"])
def test_files_that_cannot_be_opened(seeded: tuple[Path, dict[str, str]], tmp_path: Path, kind: str) -> None:
    db = make_unopenable(seeded, tmp_path, kind)
    before = fingerprint(db)
    with pytest.raises(SchemaError) as caught:
        Store(db)
    print(f"\n{kind}: {caught.value}")
    assert str(db) in str(caught.value)
    assert fingerprint(db) == before


def make_unopenable(seeded: tuple[Path, dict[str, str]], tmp_path: Path, kind: str) -> Path:
    db = tmp_path / f"{kind}.db"
    if kind == "not-sqlite":
        db.write_bytes(b"# notes\nthis is a text file, not a database\n" * 100)
    elif kind == "sqlite-but-not-threadlog":
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
        conn.commit()
        conn.close()
    else:
        shutil.copy(seeded[0], db)
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA user_version = 999")
        conn.close()
    return db


# -- CLI cases --------------------------------------------------------------------------------

# (id, args, stdin bytes, files to create {name: bytes}, expected exit code, text in the error)
CLI: list[tuple[str, list[str], bytes | None, dict[str, bytes], int, str]] = [
    ("append-unknown-thread", ["append", "nope", "--role", "user", "--text", "hi"], None, {}, 1, "not found"),
    ("emit-unknown-type", ["emit", "t", "message.deleted", "--data", "{}"], None, {}, 1, "unknown event type"),
    ("usage-emit-malformed-json", ["emit", "t", MSG, "--data", '{"role": "user",'], None, {}, 2,
     "Invalid value for '--data': is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 17)"),
    ("emit-data-not-object", ["emit", "t", MSG, "--data", "[1, 2]"], None, {}, 1, "object"),
    ("usage-emit-meta-malformed-json", ["emit", "t", "title.set", "--data", '{"title": "x"}', "--event-meta", "{"], None, {}, 2,
     "Invalid value for '--event-meta': is not valid JSON"),
    ("emit-meta-bad-origin", ["emit", "t", "title.set", "--data", '{"title": "x"}', "--event-meta", '{"origin": "forged"}'], None, {}, 1, "origin"),
    ("emit-wrong-role", ["emit", "t", MSG, "--data", '{"role": "system", "content": "x"}'], None, {}, 1, "role"),
    ("emit-tool-result-unknown", ["emit", "t", MSG, "--data", json.dumps({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "r"}]})], None, {}, 1, "toolu_nope"),
    ("interrupt-raise-tool-use-id-not-pending", ["interrupt", "raise", "pending", "q", "--tool-use-id", "toolu_nope"], None, {},
     1, "tool_use 'toolu_nope' is not waiting for its result in this thread (pending: 'toolu_1')"),
    ("interrupt-raise-tool-use-id-none-pending", ["interrupt", "raise", "t", "q", "--tool-use-id", "toolu_1"], None, {},
     1, "(no tool_use is)"),
    ("emit-run-started-while-in-progress", ["emit", "busy", "run.started", "--data", '{"run_id": "r1"}'], None, {}, 1,
     "run 'r1' is already in progress"),
    ("emit-run-finished-unknown", ["emit", "t", "run.finished", "--data", '{"run_id": "r9", "status": "ok"}'], None, {}, 1, "r9"),
    ("emit-reserved-type", ["emit", "t", "thread.forked", "--data", '{"parent_id": "t", "parent_offset": 1, "options": {}}'], None, {}, 1, "`threadlog fork`"),
    ("append-invalid-block", ["append", "t", "--role", "user", "--content", "{dir}/c.json"], None, {"c.json": b'[{"type": "bogus"}]'}, 1, "bogus"),
    ("append-content-not-utf8", ["append", "t", "--role", "user", "--content", "{dir}/c.json"], None, {"c.json": b'"caf\xe9"'}, 1, "UTF-8"),
    ("emit-data-file-not-json", ["emit", "t", "title.set", "--data-file", "{dir}/d.json"], None, {"d.json": b'{"title": '}, 1,
     "d.json) is not valid JSON"),
    ("emit-empty-stdin", ["emit", "t", "title.set", "--data-file", "-"], b"", {}, 1, "--data-file (standard input) is not valid JSON"),
    ("append-content-not-utf8-named", ["append", "t", "--role", "user", "--content", "{dir}/c.json"], None, {"c.json": b'"caf\xe9"'}, 1,
     "c.json is not UTF-8 text (invalid continuation byte at byte 4)"),
    ("emit-stdin-not-utf8-named", ["emit", "t", "title.set", "--data-file", "-"], b'{"title": "\xff"}', {}, 1,
     "--data-file: standard input is not UTF-8 text (invalid start byte at byte 11)"),
    ("emit-stdin-not-utf8", ["emit", "t", "title.set", "--data-file", "-"], b'{"title": "\xff\xfe"}', {}, 1, "UTF-8"),
    ("append-content-missing-file", ["append", "t", "--role", "user", "--content", "{dir}/none.json"], None, {}, 2, "none.json"),
    ("fork-past-head", ["fork", "t", "--at", "99"], None, {}, 1, "--at must be"),
    ("fork-at-zero", ["fork", "t", "--at", "0"], None, {}, 1, "--at must be"),
    ("fork-at-negative", ["fork", "t", "--at", "-2"], None, {}, 1, "--at must be"),
    ("fork-empty", ["fork", "empty"], None, {}, 1, "no message"),
    ("fork-busy", ["fork", "busy"], None, {}, 1, "in progress"),
    ("fork-unanswered", ["fork", "pending"], None, {}, 1, "toolu_1"),
    ("append-stale-expect", ["append", "t", "--role", "user", "--text", "late", "--expect", "1"], None, {}, 1, "expected 1"),
    ("fan-out-no-pending-tool-use", ["fan-out", "t", "look"], None, {}, 1, "`threadlog fan-out` launches sub-agents"),
    ("report-not-a-sub-agent", ["report", "t"], None, {}, 1, "not a sub-agent fork (made by `threadlog fan-out`)"),
    ("log-unknown-thread", ["log", "nope"], None, {}, 1, "not found"),
    ("tree-unknown-thread", ["tree", "nope"], None, {}, 1, "not found"),
    # refused before the search index catches up with the log (that catch-up is a write)
    ("search-limit-too-large", ["search", "hello", "-n", str(2**63)], None, {}, 1, "limit: 9223372036854775808 is too large"),
    ("search-query-too-long", ["search", "hello " * 400], None, {}, 1, "a search takes at most 2,000"),
    # usage errors: click's message, exit 2
    ("usage-log-negative-start", ["log", "t", "--start", "-1"], None, {}, 2, "--start"),
    ("usage-append-wrong-role", ["append", "t", "--role", "system", "--text", "x"], None, {}, 2, "--role"),
    ("usage-append-negative-expect", ["append", "t", "--role", "user", "--text", "x", "--expect", "-1"], None, {}, 2, "--expect"),
    ("usage-append-no-text", ["append", "t", "--role", "user"], None, {}, 2, "--text"),
    ("usage-export-model-of-events", ["export", "t", "--model", "claude-x"], None, {}, 2, "--model names the model of --format anthropic only"),
    ("usage-export-all-model", ["export", "--all", "--model", "claude-x"], None, {}, 2, "--model names the model of --format anthropic only"),
    ("usage-new-empty-model", ["new", "--model", ""], None, {}, 2, "Invalid value for '--model': is empty: name a model"),
    ("usage-fork-empty-model", ["fork", "t", "--model", ""], None, {}, 2, "Invalid value for '--model': is empty: name a model"),
    # `--reason "$REASON"`, the variable unset: the model's field path ("redact.data.reason: String
    # should have at least 1 character"), exit 1, where `--model ""` is a usage error naming the option
    # `threadlog search "$Q"`, the variable unset: "no match", exit 0, as if nothing held the words
    ("usage-search-empty-query", ["search", ""], None, {}, 2, "Invalid value for 'QUERY': is empty"),
    ("usage-search-blank-query", ["search", "  "], None, {}, 2, "Invalid value for 'QUERY': is empty"),
    ("usage-redact-empty-reason", ["redact", "2", "--reason", "", "--actor", "ops"], None, {}, 2,
     "Invalid value for '--reason': is empty"),
    ("usage-redact-blank-actor", ["redact", "2", "--reason", "leak", "--actor", " "], None, {}, 2,
     "Invalid value for '--actor': is empty"),
    # An interrupt cancelled with a blank reason was recorded, and showed none.
    ("usage-cancel-blank-reason", ["interrupt", "cancel", "t", "q", "--reason", "  "], None, {}, 2,
     "Invalid value for '--reason': is empty: say why it no longer needs an answer"),
    ("usage-tree-thread-all", ["tree", "t", "--all"], None, {}, 2, "give them without THREAD"),
    ("usage-tree-thread-before", ["tree", "t", "--before", "3"], None, {}, 2, "give them without THREAD"),
    ("usage-tree-thread-limit", ["tree", "t", "-n", "3"], None, {}, 2, "give them without THREAD"),
    ("usage-tree-all-before", ["tree", "--all", "--before", "3"], None, {}, 2, "give it without --before"),
    # `-n` chooses a page of roots, as `--before` does: `tree --all -n 5` printed every tree, the 5 unsaid
    ("usage-tree-all-limit", ["tree", "--all", "-n", "5"], None, {}, 2, "Error: --all shows every tree: give it without -n"),
    ("usage-tree-all-limit-default", ["tree", "--all", "--limit", "20"], None, {}, 2, "give it without -n"),
    ("usage-tree-all-limit-before", ["tree", "--all", "-n", "5", "--before", "3"], None, {}, 2,
     "give it without -n and --before"),
]


def check_cli_failure(code: int, stdout: str, stderr: str, expected_code: int, says: str) -> None:
    assert code == expected_code, (code, stdout, stderr)
    assert "Traceback" not in stdout + stderr
    assert stdout == ""
    lines = stderr.splitlines()
    if expected_code == 1:
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    else:
        assert [line for line in lines if line.startswith("Error: ")], stderr
    assert says in stderr, stderr


@pytest.mark.parametrize(("args", "stdin", "files", "code", "says"), [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_cli_refuses_with_one_error_line(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path,
    args: list[str], stdin: bytes | None, files: dict[str, bytes], code: int, says: str,
) -> None:
    db = fresh(seeded, tmp_path)
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    before = fingerprint(db)
    argv = [a.replace("{dir}", str(tmp_path)) for a in args] + ["--db", str(db)]
    result = CliRunner().invoke(cli, argv, input=stdin)
    print(f"\n$ threadlog {' '.join(args)} -> exit {result.exit_code}: {result.stderr.strip().splitlines()[-1:]}")
    assert isinstance(result.exception, SystemExit), result.exception
    check_cli_failure(result.exit_code, result.stdout, result.stderr, code, says)
    assert fingerprint(db) == before, "a refused command changed the database"


# -- the console script, in real processes ----------------------------------------------------


def run_threadlog(args: list[str], stdin: bytes | None = None, wrapper: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `threadlog` script; `wrapper` is Python run first that then execs it."""
    argv = [THREADLOG, *args]
    if wrapper is not None:
        argv = [sys.executable, "-c", f"import os, sys\n{wrapper}\nos.execv(sys.argv[1], sys.argv[1:])", *argv]
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


def test_console_script_fifty_megabyte_message(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    db = fresh(seeded, tmp_path)
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * FIFTY_MB))
    before = fingerprint(db)
    run = run_threadlog(["append", "t", "--role", "user", "--content", str(big), "--db", str(db)])
    print(f"\n$ threadlog append t --content <50 MB> -> exit {run.returncode}: {run.stderr.strip()}")
    check_cli_failure(run.returncode, run.stdout, run.stderr, 1, "at most")
    assert fingerprint(db) == before


def test_console_script_read_only_database(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    with read_only(db):
        run = run_threadlog(["append", "t", "--role", "user", "--text", "hi", "--db", str(db)])
        log = run_threadlog(["log", "t", "--db", str(db)])
    print(f"\n$ threadlog append (immutable file) -> exit {run.returncode}: {run.stderr.strip()}")
    check_cli_failure(run.returncode, run.stdout, run.stderr, 1, "read-only")
    assert log.returncode == 0 and len(log.stdout.splitlines()) == 3
    assert fingerprint(db) == before


@pytest.mark.parametrize("kind", ["not-sqlite", "sqlite-but-not-threadlog", "newer-schema"])
def test_console_script_unopenable_database(seeded: tuple[Path, dict[str, str]], tmp_path: Path, kind: str) -> None:
    db = make_unopenable(seeded, tmp_path, kind)
    before = fingerprint(db)
    run = run_threadlog(["verify", "--db", str(db)])
    print(f"\n$ threadlog verify ({kind}) -> exit {run.returncode}: {run.stderr.strip()}")
    check_cli_failure(run.returncode, run.stdout, run.stderr, 1, str(db))
    assert fingerprint(db) == before


def test_console_script_non_utf8_stdin(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    run = run_threadlog(["append", "t", "--role", "user", "--content", "-", "--db", str(db)], stdin=b'"\xc3\x28 bad"')
    print(f"\n$ threadlog append --content - <non-UTF-8> -> exit {run.returncode}: {run.stderr.strip()}")
    check_cli_failure(run.returncode, run.stdout, run.stderr, 1, "UTF-8")
    assert fingerprint(db) == before


LATIN_1 = os.fsdecode(b"caf\xe9")  # "café" typed in a Latin-1 terminal, as Python keeps the bytes


@pytest.mark.parametrize(("args", "option"), [
    (["append", "t", "--role", "user", "--text", LATIN_1], "'--text'"),
    (["new", "--title", LATIN_1], "'--title'"),
    (["fork", "t", "--system", LATIN_1], "'--system'"),
    (["search", LATIN_1], "'QUERY'"),
    (["interrupt", "raise", "t", "q1", "--question", LATIN_1], "'--question'"),
    (["redact", "2", "--actor", "ana", "--reason", LATIN_1], "'--reason'"),
], ids=["append", "new", "fork", "search", "interrupt", "redact"])
def test_console_script_text_typed_in_another_encoding_is_refused_by_name(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, args: list[str], option: str
) -> None:
    """Bytes that are not UTF-8 on the command line (a terminal in another encoding) are a usage
    error naming the option and the byte, before anything is opened: `append --text` said
    `events[0].data: not storable as UTF-8 JSON`, `search` that its text `cannot be sent`."""
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    run = run_threadlog([*args, "--db", str(db)])
    check_cli_failure(run.returncode, run.stdout, run.stderr, 2, "is not UTF-8 text (byte 0xe9 at character 4)")
    assert option in run.stderr
    assert fingerprint(db) == before


# Options whose value becomes JSON or a mapping as it is read: the check of typed text saw the
# dict or the parsed JSON, not what was typed, and `new --meta`, `--setting`, `emit --data` and
# `--event-meta`, `fork --metadata keep:` and `interrupt resolve --answer` still said
# `not storable as UTF-8 JSON` (exit 1) without naming the option or the byte.
@pytest.mark.parametrize(("args", "option", "at"), [
    (["new", "--meta", f"k={LATIN_1}"], "'--metadata' / '--meta'", 6),
    (["new", "--meta", f"{LATIN_1}=v"], "'--metadata' / '--meta'", 4),
    (["new", "--setting", f'stop_sequences=["{LATIN_1}"]'], "'--setting'", 21),
    (["emit", "t", "title.set", "--data", f'{{"title": "{LATIN_1}"}}'], "'--data'", 15),
    (["emit", "t", "title.set", "--data", "{}", "--event-meta", f'{{"actor": "{LATIN_1}"}}'], "'--event-meta'", 15),
    (["fork", "t", "--metadata", f"keep:{LATIN_1}"], "'--metadata'", 9),
    (["interrupt", "resolve", "t", "q1", "--answer", LATIN_1], "'--answer'", 4),
], ids=["meta-value", "meta-key", "setting", "data", "event-meta", "fork-metadata", "answer"])
def test_console_script_json_typed_in_another_encoding_is_refused_by_name(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, args: list[str], option: str, at: int
) -> None:
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    run = run_threadlog([*args, "--db", str(db)])
    check_cli_failure(run.returncode, run.stdout, run.stderr, 2, f"is not UTF-8 text (byte 0xe9 at character {at})")
    assert option in run.stderr, run.stderr
    assert fingerprint(db) == before


def test_console_script_reads_a_file_whose_name_is_not_utf8(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """A file name is any bytes on Linux: `--content` and `--data-file` read it as named."""
    db = fresh(seeded, tmp_path)
    content = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.json"))
    content.write_text('"from a Latin-1 file name"')
    data = Path(os.fsdecode(bytes(tmp_path) + b"/d\xe9.json"))
    data.write_text('{"title": "named"}')
    run = run_threadlog(["append", "t", "--role", "user", "--content", str(content), "--db", str(db)])
    emit = run_threadlog(["emit", "t", "title.set", "--data-file", str(data), "--db", str(db)])
    assert (run.returncode, emit.returncode) == (0, 0), run.stderr + emit.stderr
    with Store(db, read_only=True) as store:
        *_, appended, emitted = store.read("t")
    assert appended.data["content"] == [{"type": "text", "text": "from a Latin-1 file name"}]
    assert emitted.data == {"title": "named"}


def test_console_script_full_disk(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """A file-size limit (RLIMIT_FSIZE) stands in for a full disk: the WAL cannot grow."""
    db = fresh(seeded, tmp_path)
    before = fingerprint(db)
    limit = db.stat().st_size
    wrapper = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"
    )
    big = json.dumps("x" * 300_000).encode()
    run = run_threadlog(["append", "t", "--role", "user", "--content", "-", "--db", str(db)], stdin=big, wrapper=wrapper)
    print(f"\n$ threadlog append <300 KB> with the files capped at {limit} bytes -> exit {run.returncode}: {run.stderr.strip()}")
    check_cli_failure(run.returncode, run.stdout, run.stderr, 1, "nothing was written")
    assert fingerprint(db) == before
    with Store(db) as s:
        s.verify()
        assert s.head("t") == 3


def test_a_device_named_as_the_database_is_refused_and_left_alone() -> None:
    """`--db /dev/null` said the disk refused an operation ("it may be full") and, as root,
    left /dev/null-journal behind."""
    journal = Path("/dev/null-journal")
    existed = journal.exists()
    with pytest.raises(StoreError, match="/dev/null is a device, not a database file"):
        Store("/dev/null")
    assert journal.exists() == existed


def test_an_empty_path_is_refused_not_opened_as_a_temporary_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Store("")` opened SQLite's private temporary database without a word: what was written
    to it was gone when it closed. `:memory:`, which says so, still opens one in memory."""
    monkeypatch.chdir(tmp_path)
    for opening in (lambda: Store(""), lambda: SQLiteBackend("")):
        with pytest.raises(StoreError) as caught:
            opening()
        assert type(caught.value) is StoreError
        assert str(caught.value) == ("an empty path names no database file (SQLite would open a temporary one, gone when it "
                                     "closes); pass a file path, or ':memory:' for a database in memory")
    assert list(tmp_path.iterdir()) == []
    with Store(":memory:") as store:
        store.create_thread()
        assert store.counts() == (1, 1) and store.path == ":memory:"


def test_a_pipe_named_as_the_database_is_refused_as_one(tmp_path: Path) -> None:
    """It got the failing-disk message ("it may be full"), and `ls` said there was no database."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    pipe = tmp_path / "db.fifo"
    os.mkfifo(pipe)
    with pytest.raises(StoreError, match="is a pipe, not a database file"):
        Store(pipe)
    for command in (["init"], ["ls"], ["new"]):
        result = CliRunner().invoke(cli, [*command, "--db", str(pipe)])
        assert result.exit_code == 1 and f"error: {pipe} is a pipe, not a database file" in result.stderr, command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.fifo"]


@pytest.mark.parametrize("command", [["export", "t"], ["export", "--all"], ["transcript", "t"]])
def test_an_output_file_in_a_directory_that_refuses_it_is_named_as_given(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, command: list[str]
) -> None:
    """-o into a directory this user may not write named a hidden temporary file the user never
    typed (`.out.md.3f9a…tmp`), not the file asked for."""
    db = fresh(seeded, tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / "out.md"
    before = fingerprint(db)
    with read_only(locked):
        result = CliRunner().invoke(cli, [*command, "-o", str(target), "--db", str(db)])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr in (f"error: Permission denied: {target}\n", f"error: Operation not permitted: {target}\n"), result.stderr
    assert list(locked.iterdir()) == []
    assert fingerprint(db) == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("command", [["export", "t"], ["transcript", "t"]])
def test_an_output_file_that_cannot_take_the_bytes_is_named(seeded: tuple[Path, dict[str, str]], tmp_path: Path,
                                                            command: list[str]) -> None:
    """A write that failed (here a full device) said `[Errno 28] No space left on device`, no file named."""
    db = fresh(seeded, tmp_path)
    result = CliRunner().invoke(cli, [*command, "-o", "/dev/full", "--db", str(db)])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr == "error: No space left on device: /dev/full\n", result.stderr


def test_settings_and_lists_of_other_kinds_a_caller_may_mean_are_taken(tmp_path: Path) -> None:
    """read_only=1 and 0 (ints, not text such as "no"), extra tools as a tuple, and a missing
    thread named by an id no thread can have, shown cut short."""
    from eventstore import ThreadNotFound
    from projections import anthropic_request

    with Store(tmp_path / "t.db") as store:
        t = store.create_thread(model="m")
        store.append_message(t, "user", "hi")
    with Store(tmp_path / "t.db", read_only=1) as store:
        assert store.read_only and store.head(t) == 2
        tool = {"name": "search", "description": "d", "input_schema": {"type": "object"}}
        assert [sent["name"] for sent in anthropic_request(store, t, extra_tools=(tool,))["tools"]] == ["search"]
        with pytest.raises(ThreadNotFound) as missing:
            store.head("x" * 1_000_000)
        assert len(str(missing.value)) < 200
    with Store(tmp_path / "t.db", read_only=0) as store:
        assert not store.read_only
