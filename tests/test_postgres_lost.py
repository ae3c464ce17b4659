"""A store whose connection the server ended: the call under way says the connection was lost
(not that the server cannot be reached at that URL), what was acknowledged is kept, and the
calls after it go on over a new connection."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from eventstore.postgres import PostgresBackend
from threadlog import Disconnected, Store, StoreError
from tests.backends import postgres_cluster, postgres_url
from tests.procs import ctrl_c, interruptible

ROOT = Path(__file__).resolve().parent.parent


def _end_sessions(name: str) -> int:
    with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
        return len(admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                                 (name,)).fetchall())


def test_a_connection_ended_by_the_server_fails_the_call_under_way_and_the_store_goes_on() -> None:
    """Every call after a lost connection failed with "lost the connection ... reconnect and
    retry", for good: a service holding a `Store` had to notice and open another. The call
    under way fails, unacknowledged, with `Disconnected` (a name `threadlog` exports, as the
    README's PostgreSQL section names it, so a service can catch it); the next one connects again."""
    url = postgres_url() + "&application_name=threadlog-lost"
    store = Store(url)
    thread = store.create_thread(title="Trip")
    kept = [store.append_message(thread, "user", f"message {i}").event_id for i in range(3)]
    for call in (lambda: store.append_message(thread, "user", "after"), lambda: list(store.read(thread)), store.verify):
        assert _end_sessions("threadlog-lost") == 1
        with pytest.raises(Disconnected, match="(lost the connection|shut down or restarted).*retry \\(the store connects again\\)") as lost:
            call()
        assert "check that it runs" not in str(lost.value)
        assert [e.event_id for e in store.read(thread)][1:] == kept  # the next call: a new connection
    assert store.append_message(thread, "user", "went on").offset == 4
    store.verify()
    store.close()
    with pytest.raises(StoreError, match="is closed"):  # closed by its owner: not made again
        list(store.read(thread))
    with Store(url) as again:
        assert [e.event_id for e in again.read(thread)][1:4] == kept


def test_a_store_goes_on_after_the_server_restarts() -> None:
    """While the server is down a call says it cannot be reached; once it is back the same
    store reads and writes. A snapshot read whose connection was lost is not taken up on a
    new one (its reads would not be one snapshot)."""
    url = postgres_url() + "&application_name=threadlog-restart"
    cluster = postgres_cluster()
    backend = PostgresBackend(url)
    store = Store(backend)
    thread = store.create_thread(title="Trip")
    store.append_message(thread, "user", "before the restart")
    with pytest.raises(StoreError, match="lost the connection|shut down or restarted"), backend.read_transaction():
        backend.stream(thread)
        _end_sessions("threadlog-restart")
        backend.stream(thread)
    cluster.kill()
    try:
        with pytest.raises(StoreError, match="lost the connection|shut down or restarted|cannot reach|takes no connections"):
            list(store.read(thread))
        with pytest.raises(StoreError, match="cannot reach|takes no connections"):
            store.append_message(thread, "user", "while it is down")
    finally:
        cluster.start()
    assert store.append_message(thread, "user", "after the restart").offset == 2
    assert [e.data["content"][0]["text"] for e in store.read(thread) if e.type == "message.appended"] == [
        "before the restart", "after the restart"]
    store.verify()
    store.close()


def test_follow_goes_on_after_the_server_restarts_printing_each_event_once() -> None:
    """`threadlog follow` ended (exit 1) at a restart of the server, saying to reconnect and
    retry, where the viewer goes on: a tail left running lost every event after it. It now
    opens the store again once the server answers and goes on after the last position read."""
    url = postgres_url()
    cluster = postgres_cluster()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        before = store.append_message(thread, "user", "before the restart")
    follower = _following(url, "before the restart")
    try:
        cluster.kill()
        time.sleep(1.5)  # the follower finds the server gone, and waits
        cluster.start()
        with Store(url) as store:
            after = store.append_message(thread, "user", "after the restart")
        line = follower.stdout.readline()
        assert "after the restart" in line and f" {after.position} " in line
        assert follower.poll() is None
    finally:
        out, err = ctrl_c(follower)
    assert follower.returncode == 130
    assert "before the restart" not in out and "after the restart" not in out  # each printed once
    assert err.count(f"note: following on after position {before.position} once the server answers again") == 1, err
    assert "Traceback" not in err and "error:" not in err, err


def _following(url: str, text: str) -> subprocess.Popen[str]:
    """`threadlog follow` of `url` from its start, once it has printed the message holding `text`
    (its thread's second event)."""
    follower = interruptible([sys.executable, "-m", "threadlog", "follow", "--db", url, "--interval", "0.05", "--after", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert follower.stdout is not None
        assert text in follower.stdout.readline() + follower.stdout.readline()
    except BaseException:
        follower.kill()
        follower.communicate()
        raise
    return follower


def _transaction_calls(store: Store) -> dict[str, Callable[[], object]]:
    """A thread, and calls that each write in one transaction on it."""
    thread = store.create_thread(title="Trip", model="claude-test-1", thread_id="T")
    question = store.append_message(thread, "user", "Weather in Lyon and Nice?")
    store.append_message(thread, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}])
    return {
        "fan_out": lambda: store.fan_out(thread, ["Lyon", "Nice"]),
        "batch": lambda: store.append(thread, [{"type": "title.set", "data": {"title": t}} for t in ("a", "b")]),
        "fork with a title": lambda: store.fork(thread, 2, title="Nice only", fork_id="F"),
        "redact": lambda: store.redact(question.position, "personal", "ops"),
    }


def test_a_call_writing_in_a_transaction_after_a_loss_connects_again(tmp_path: Path) -> None:
    """A write transaction only queues its BEGIN, so its first statement found the connection
    lost, and inside the transaction the store does not connect again: after a loss a batch, a
    fork with a title, fan_out and redact each failed, call after call, for as long as no call
    outside a transaction came between. The call under way fails; the next one connects again,
    and what they wrote is what the same calls write with no loss (nothing twice)."""
    url = postgres_url() + "&application_name=threadlog-lost-tx"
    store = Store(url)
    for name, call in _transaction_calls(store).items():
        assert _end_sessions("threadlog-lost-tx") == 1
        with pytest.raises(StoreError, match="lost the connection|shut down or restarted"):
            call()
        call()
    with Store(tmp_path / "same.db") as same:
        for call in _transaction_calls(same).values():
            call()
        assert store.counts() == same.counts()
        assert [(e.type, e.data) for e in store.read("T")] == [(e.type, e.data) for e in same.read("T")]
        assert [(t.kind, t.head) for t in store.all_threads()] == [(t.kind, t.head) for t in same.all_threads()]
    store.verify()
    store.close()


def test_a_closed_store_says_it_is_closed_whatever_the_call() -> None:
    """A store its owner closed is not connected again, but a write (sent through libpq, not the
    driver's cursors) said "lost the connection ... retry (the store connects again)", which no
    retry made true. Every call now says the store is closed."""
    store = Store(postgres_url())
    thread = store.create_thread(title="Trip")
    store.append_message(thread, "user", "Weather in Lyon?")
    store.close()
    calls = {
        "append": lambda: store.append_message(thread, "user", "again"),
        "batch": lambda: store.append(thread, [{"type": "title.set", "data": {"title": t}} for t in ("a", "b")]),
        "create": lambda: store.create_thread(title="another"),
        "fork": lambda: store.fork(thread, title="Lyon"),
        "read": lambda: list(store.read(thread)),
        "last position": store.last_position,
        "verify": store.verify,
    }
    for name, call in calls.items():
        with pytest.raises(StoreError, match="is closed; open it again to read or write") as refused:
            call()
        assert "retry" not in str(refused.value), name


def _copying(name: str) -> bool:
    """Whether the session named `name` is sending the search index its documents (a COPY)."""
    with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
        return bool(admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'COPY%%'",
                                  (name,)).fetchall())


def test_a_search_whose_connection_ends_while_it_indexes_prints_one_error_line_and_indexes_nothing() -> None:
    """A connection ended while a search sent its catch-up's documents printed the driver's own
    "error ignored terminating <psycopg.Copy [BAD] at 0x...>: the connection is lost" on stderr
    before the `error:` line: the CLI says one `error:` line, and now only that."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        for batch in range(30):
            store.append(thread, [{"type": "message.appended",
                                   "data": {"role": "user", "content": f"message {batch}.{i} " + " ".join(f"word{j % 500}" for j in range(i, i + 300))}}
                                  for i in range(100)])
    before = PostgresBackend(url)
    dumped = before.dump()
    before.close()
    victim = url + "&application_name=threadlog-lost-copy"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    search = subprocess.Popen([sys.executable, "-m", "threadlog", "search", "word", "--db", victim],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not _copying("threadlog-lost-copy") and search.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _end_sessions("threadlog-lost-copy") == 1
    out, err = search.communicate(timeout=60)
    assert search.returncode == 1 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "lost the connection" in err, err
    after = PostgresBackend(url)
    assert after.dump() == dumped
    after.close()


def _in_transaction(name: str) -> bool:
    with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
        return bool(admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND xact_start IS NOT NULL",
                                  (name,)).fetchall())


def test_a_restore_the_server_restarts_under_says_so_writes_nothing_and_runs_again(tmp_path: Path) -> None:
    """`pg_ctl restart` (a fast shutdown) while `threadlog import events` writes a backup: one
    `error:` line saying the server restarted, nothing of the backup stored, and the same command
    run again restores all of it."""
    with Store(tmp_path / "a.db") as lite:
        thread = lite.create_thread(title="Trip")
        for batch in range(20):
            lite.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"message {batch}.{i}"}}
                                 for i in range(100)])
    backup = tmp_path / "backup.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "threadlog", "export", "--all", "--db", str(tmp_path / "a.db"), "-o",
                    str(backup)], check=True, env=env)
    url = postgres_url()
    with Store(url) as store:
        assert store.counts() == (0, 0)
    cluster = postgres_cluster()
    restore = [sys.executable, "-m", "threadlog", "import", "events", str(backup), "--db",
               url + "&application_name=threadlog-restarted"]
    running = subprocess.Popen(restore, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not _in_transaction("threadlog-restarted") and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert running.poll() is None, running.communicate()
    cluster._run("pg_ctl", "-D", str(cluster.data), "-m", "fast", "-w", "stop")
    cluster.start()
    out, err = running.communicate(timeout=60)
    assert running.returncode == 1 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "shut down or restarted" in err or "lost the connection" in err, err
    with Store(url) as store:
        assert store.counts() == (0, 0)
    again = subprocess.run(restore, capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "2001 event(s) added" in again.stdout, again.stderr
    with Store(url) as store:
        assert store.verify().events == 2001



def _waiting_on_a_lock(name: str) -> bool:
    with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
        return bool(admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                                  (name,)).fetchall())


def test_a_session_ended_while_the_store_opens_is_a_lost_connection() -> None:
    """A session ended while the store prepared its statements (held up by a lock on the events
    table, as a migration or a `LOCK TABLE` by hand holds it) said "database error on ...:
    server closed the connection unexpectedly", a `StoreError` a service retrying on
    `Disconnected` did not retry, with no word of what to do."""
    url = postgres_url()
    with Store(url) as store:
        store.create_thread(title="Trip", thread_id="T")
    name = "threadlog-ended-opening"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with psycopg.connect(url) as holder:  # its transaction holds the lock until the session is ended
        holder.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        running = subprocess.Popen([sys.executable, "-m", "threadlog", "log", "T", "--db", f"{url}&application_name={name}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while not _waiting_on_a_lock(name) and running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.poll() is None, running.communicate()
        assert _end_sessions(name) == 1
        stdout, stderr = running.communicate(timeout=60)
        holder.rollback()
    assert running.returncode == 1 and stdout == "", (stdout, stderr)
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "lost the connection" in stderr and "retry (the store connects again)" in stderr, stderr


@pytest.mark.parametrize("command", [["export", "T", "-o", "OUT"], ["export", "--all", "-o", "OUT"],
                                     ["import", "events", "BACKUP"]], ids=["export", "export-all", "import-events"])
def test_a_session_an_administrator_ends_is_named_so_and_leaves_all_as_it_was(tmp_path: Path, command: list[str]) -> None:
    """`pg_terminate_backend` from another connection while an export read a long thread (or a
    restore wrote a backup) said the server "shut down or restarted": one looking found it
    running, its other sessions untouched. The server gives both the same SQLSTATE (57P01), so
    the message names both; the output file is left as it was (no half-written export beside
    it), and the database too."""
    url = postgres_url()
    with Store(url) as store:
        store.create_thread(title="Trip", thread_id="T")
        for batch in range(40):
            store.append("T", [{"type": "message.appended", "data": {"role": "user", "content": f"message {batch}.{i} " + "word " * 100}}
                               for i in range(500)])
    with Store(tmp_path / "a.db") as lite:
        lite.create_thread(title="Elsewhere", thread_id="E")
        for batch in range(20):
            lite.append("E", [{"type": "message.appended", "data": {"role": "user", "content": f"message {batch}.{i}"}}
                              for i in range(100)])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    backup = tmp_path / "backup.jsonl"
    subprocess.run([sys.executable, "-m", "threadlog", "export", "--all", "--db", str(tmp_path / "a.db"), "-o",
                    str(backup)], check=True, env=env)
    out = tmp_path / "out.jsonl"
    out.write_text("as it was\n")
    files = sorted(tmp_path.iterdir())
    before = PostgresBackend(url)
    dumped = before.dump()
    before.close()
    args = [str(out) if arg == "OUT" else str(backup) if arg == "BACKUP" else arg for arg in command]
    name = "threadlog-ended-" + "-".join(command[:2]).lower()
    running = subprocess.Popen([sys.executable, "-m", "threadlog", *args, "--db", f"{url}&application_name={name}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def under_way() -> bool:  # an export writing its file beside the old one; a restore in its transaction
        return sorted(tmp_path.iterdir()) != files if command[0] == "export" else _in_transaction(name)

    deadline = time.monotonic() + 60
    while not under_way() and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert running.poll() is None, running.communicate()
    assert _end_sessions(name) == 1
    stdout, stderr = running.communicate(timeout=60)
    assert running.returncode == 1 and stdout == "", (stdout, stderr)
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    # The driver reads the server's reason unless the socket closed first (a restore sending its lines).
    assert "shut down or restarted, or an administrator ended this session (pg_terminate_backend)" in stderr or \
        "lost the connection" in stderr, stderr
    assert out.read_text() == "as it was\n" and sorted(tmp_path.iterdir()) == files
    after = PostgresBackend(url)
    assert after.dump() == dumped
    after.close()
def test_a_write_whose_connection_ends_while_it_waits_for_a_lock_is_disconnected_and_writes_nothing() -> None:
    """A batch waiting for a lock (another session's on the events table) when the server ends
    its connection (`pg_terminate_backend`): the driver reads the lost connection as a result
    with no SQLSTATE, and the store said `database error on …: server closed the connection
    unexpectedly`, a plain `StoreError`, so a follower stopped where a restart of the server
    only makes it wait. It is `Disconnected`: none of the batch is written, and the same call,
    run again, goes on over a new connection."""
    import threading

    url = postgres_url() + "&application_name=threadlog-locked-lost"
    store = Store(url)
    thread = store.create_thread(title="Trip")
    store.append_message(thread, "user", "before")
    before = [e.event_id for e in store.read_all()]
    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0]
    failed: list[BaseException] = []

    def append() -> None:
        try:
            store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"batch {i}"}}
                                  for i in range(3)])
        except BaseException as error:  # noqa: BLE001 (what the call raised, looked at below)
            failed.append(error)

    with psycopg.connect(postgres_cluster().url()) as holder:
        holder.execute(f"LOCK TABLE {schema}.events IN ACCESS EXCLUSIVE MODE")
        writer = threading.Thread(target=append)
        writer.start()
        waiting = "FROM pg_stat_activity WHERE application_name = 'threadlog-locked-lost' AND wait_event_type = 'Lock'"
        with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
            while admin.execute(f"SELECT count(*) {waiting}").fetchone() != (1,):
                time.sleep(0.01)
            assert admin.execute(f"SELECT pg_terminate_backend(pid) {waiting}").fetchall() == [(True,)]
        writer.join(30)
        holder.rollback()
    assert len(failed) == 1 and isinstance(failed[0], Disconnected), failed
    assert [e.event_id for e in store.read_all()] == before
    store.append_message(thread, "user", "after")
    assert [e.data["content"][0]["text"] for e in store.read(thread) if e.type == "message.appended"] == ["before", "after"]
    store.verify()
    store.close()


def test_follow_s_note_of_an_ended_session_is_escaped() -> None:
    """`threadlog follow` said a session the server ended (pg_terminate_backend) on `note:` lines
    as the error read, its database named by the URL as given: a URL holding ESC, BEL or a line
    break (from a variable someone else set) drove the terminal and split the note. It is
    escaped, as every line the CLI prints is."""
    url = postgres_url() + "&application_name=owned\x1b]0;title\x07\x1b[2J\u202e\nerror:forged"
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        store.append_message(thread, "user", "before the end")
    follower = _following(url, "before the end")
    try:
        with psycopg.connect(postgres_url(), autocommit=True) as admin:
            ended = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE application_name LIKE 'owned%' AND pid <> pg_backend_pid()").fetchall()
            assert ended, "no session of the follower"
            with Store(url) as store:
                after = store.append_message(thread, "user", "after the end")
        line = follower.stdout.readline()
        assert "after the end" in line and f" {after.position} " in line
    finally:
        out, err = ctrl_c(follower)
    assert "note: " in err and "Traceback" not in err, err
    assert not any(c in err for c in "\x1b\x07\u202e") and "\nerror:forged" not in err, err
