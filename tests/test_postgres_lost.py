"""A store whose connection the server ended: every call after says the connection was lost
(not that the server cannot be reached at that URL), and what was acknowledged is kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from threadlog import Store, StoreError
from tests.backends import postgres_cluster, postgres_url

ROOT = Path(__file__).resolve().parent.parent


def test_a_connection_ended_by_the_server_is_reported_as_lost_and_nothing_acknowledged_is() -> None:
    url = postgres_url() + "&application_name=threadlog-lost"
    store = Store(url)
    thread = store.create_thread(title="Trip")
    kept = [store.append_message(thread, "user", f"message {i}").event_id for i in range(3)]
    with psycopg.connect(postgres_cluster().url(), autocommit=True) as admin:
        ended = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE application_name = 'threadlog-lost'").fetchall()
        assert ended == [(True,)]
    for call in (lambda: store.append_message(thread, "user", "after"), lambda: list(store.read(thread)), store.verify):
        with pytest.raises(StoreError, match="lost the connection") as lost:
            call()
        assert "check that it runs" not in str(lost.value)
    store.close()
    with Store(url) as again:
        assert [e.event_id for e in again.read(thread)][1:4] == kept
        again.verify()


def test_follow_goes_on_after_the_server_restarts_printing_each_event_once() -> None:
    """`threadlog follow` ended (exit 1) at a restart of the server, saying to reconnect and
    retry, where the viewer goes on: a tail left running lost every event after it. It now
    opens the store again once the server answers and goes on after the last position read."""
    url = postgres_url()
    cluster = postgres_cluster()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        before = store.append_message(thread, "user", "before the restart")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    follower = subprocess.Popen([sys.executable, "-m", "threadlog", "follow", "--db", url, "--interval", "0.05", "--after", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert follower.stdout is not None
        assert "before the restart" in follower.stdout.readline() + follower.stdout.readline()
        cluster.kill()
        time.sleep(1.5)  # the follower finds the server gone, and waits
        cluster.start()
        with Store(url) as store:
            after = store.append_message(thread, "user", "after the restart")
        line = follower.stdout.readline()
        assert "after the restart" in line and f" {after.position} " in line
        assert follower.poll() is None
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 130
    assert "before the restart" not in out and "after the restart" not in out  # each printed once
    assert err.count(f"note: following on after position {before.position} once the server answers again") == 1, err
    assert "Traceback" not in err and "error:" not in err, err
