"""A batch's rows are made as the backend asks for them (`Store._write`), and PostgreSQL sends
them by COPY in chunks while the rest are hashed (`PostgresBackend.insert_events`). These
tests hold what that must not change, on every backend: a refusal far into a batch, after
rows were already sent, writes nothing; the facts a batch carries (a tool call waiting for
its result) run across the chunks; batches of every size around a chunk's read back exactly
as appended; and a Ctrl-C during batches leaves whole batches only, and a store that works.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventstore.errors import InvalidEvent
from eventstore.postgres import _COPY_CHUNK
from tests.backends import dump, postgres_url
from tests.procs import ctrl_c, interruptible
from threadlog import Store


def _text(i: int) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}}


def _call(tool_id: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "assistant", "content": [
        {"type": "tool_use", "id": tool_id, "name": "search", "input": {"q": "lyon"}}]}}


def _result(tool_id: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": "two trains"}]}}


@pytest.mark.parametrize("bad_at", [0, _COPY_CHUNK - 1, _COPY_CHUNK, 2 * _COPY_CHUNK + 50, 3 * _COPY_CHUNK - 1])
def test_a_refusal_deep_in_a_batch_writes_nothing(store: Store, bad_at: int) -> None:
    thread = store.create_thread(title="t")
    store.append(thread, [_text(i) for i in range(5)])
    before = dump(store)
    batch = [_text(i) for i in range(3 * _COPY_CHUNK)]
    batch[bad_at] = _result("toolu_never_called")
    with pytest.raises(InvalidEvent) as caught:
        store.append(thread, batch)
    assert caught.value.field.startswith(f"events[{bad_at}].data") and "toolu_never_called" in str(caught.value)
    assert dump(store) == before
    # The store (and its connection) still works: the same batch without the bad event lands.
    batch[bad_at] = _text(bad_at)
    recorded = store.append(thread, batch)
    assert [e.offset for e in recorded] == list(range(6, 6 + 3 * _COPY_CHUNK))
    assert store.verify().events == 6 + 3 * _COPY_CHUNK


def test_a_tool_call_and_its_result_in_different_chunks(store: Store) -> None:
    thread = store.create_thread(title="t")
    batch = [_text(i) for i in range(3 * _COPY_CHUNK)]
    batch[10] = _call("toolu_a")
    batch[2 * _COPY_CHUNK + 7] = _result("toolu_a")
    batch[2 * _COPY_CHUNK + 20] = _call("toolu_b")  # still waiting after the batch
    store.append(thread, batch)
    with pytest.raises(InvalidEvent, match="toolu_a"):
        store.append(thread, [_result("toolu_a")])  # answered inside the batch: not waiting any more
    store.append(thread, [_result("toolu_b")])
    assert store.verify().events == 3 * _COPY_CHUNK + 2


@pytest.mark.parametrize("size", [1, 2, _COPY_CHUNK - 1, _COPY_CHUNK, _COPY_CHUNK + 1, 2 * _COPY_CHUNK + 1])
def test_a_batch_reads_back_as_appended(store: Store, size: int) -> None:
    thread = store.create_thread(title="t")
    recorded = store.append(thread, [_text(i) for i in range(size)])
    stored = list(store.read(thread, 1))
    assert stored == recorded
    assert [e.data["content"][0]["text"] for e in stored] == [f"m{i}" for i in range(size)]
    assert [e.position for e in stored] == list(range(stored[0].position, stored[0].position + size))
    assert store.head(thread) == size + 1
    assert store.verify().events == size + 1


CHILD = """
import json, sys
from threadlog import Store
store = Store(sys.argv[1])
thread = store.create_thread(title="t")
batch = [{"type": "message.appended", "data": {"role": "user", "content": f"m{i} " * 20}} for i in range(20_000)]
print("ready", flush=True)
try:
    while True:
        store.append(thread, batch)
except KeyboardInterrupt:
    pass
store.append_message(thread, "user", "after the interrupt")
print(json.dumps({"head": store.head(thread), "verified": store.verify().events}), flush=True)
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_ctrl_c_during_a_batch_keeps_whole_batches_and_the_store_usable(backend: str, tmp_path: Path) -> None:
    """Ctrl-C lands wherever it lands (mostly while the rows are made and sent): every batch is
    all there or not at all, and the same store appends and verifies afterwards."""
    target = postgres_url() if backend == "postgresql" else str(tmp_path / "t.db")
    proc = interruptible([sys.executable, "-c", CHILD, target], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.7)
    out, err = ctrl_c(proc, timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert (report["head"] - 2) % 20_000 == 0, report  # thread.created, whole batches, the last message
    assert report["verified"] == report["head"]
