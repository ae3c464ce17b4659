"""Text that is not UTF-8 (a lone surrogate: how Python reads bytes of a command line that are
not UTF-8) given to any call, on either backend, is one clear `StoreError`, and nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from threadlog import Store, StoreError, export_events, search, thread_state
from tests.backends import BACKENDS, BackendCase, dump, open_store

ROOT = Path(__file__).resolve().parent.parent
BAD = "\udcff"

CALLS: dict[str, Callable[[Store], Any]] = {
    "read": lambda s: list(s.read(BAD)),
    "append": lambda s: s.append_message(BAD, "user", "x"),
    "fork": lambda s: s.fork(BAD),
    "thread": lambda s: s.thread(BAD),
    "title": lambda s: s.title(BAD),
    "subtree": lambda s: s.subtree(BAD),
    "ids_starting": lambda s: s.ids_starting(BAD),
    "threads": lambda s: s.threads(root=BAD),
    "state": lambda s: thread_state(s, BAD),
    "export": lambda s: list(export_events(s, BAD)),
    "search thread": lambda s: search(s, "ferry", thread=BAD),
    "search query": lambda s: search(s, "ferry " + BAD),
    "search tool": lambda s: search(s, "ferry", tool=BAD),
}


@pytest.mark.parametrize("case", BACKENDS, ids=[case.id for case in BACKENDS])
@pytest.mark.parametrize("call", CALLS)
def test_text_that_is_not_utf8_is_one_store_error_and_changes_nothing(tmp_path: Path, call: str, case: BackendCase) -> None:
    store = open_store(case, tmp_path)
    thread = store.create_thread(title="Trip")
    store.append_message(thread, "user", "a ferry to Corsica")
    search(store, "ferry")
    before = dump(store)
    with pytest.raises(StoreError, match="not UTF-8"):
        CALLS[call](store)
    assert dump(store) == before
    store.append_message(thread, "user", "the store writes on")
    store.verify()
    store.close()


@pytest.mark.parametrize("case", [case for case in BACKENDS if case.id != "sqlite-memory"], ids=["sqlite-file", "postgresql"])
def test_the_cli_given_a_thread_or_query_that_is_not_utf8_prints_one_error(tmp_path: Path, case: BackendCase) -> None:
    store = open_store(case, tmp_path)
    url = store.path
    store.create_thread(title="Trip")
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in (["log", b"\xff"], ["show", b"\xff"], ["search", b"\xff"], ["search", "x", "--tool", b"\xff"]):
        done = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", url, *command], capture_output=True, env=env)
        # A usage error naming what was typed, before the database is opened (exit 2).
        assert done.returncode == 2, (command, done.stderr)
        assert b"is not UTF-8 text (byte 0xff at character 1)" in done.stderr, (command, done.stderr)
        assert b"Traceback" not in done.stderr, (command, done.stderr)
