"""A PostgreSQL store that cannot be opened says whether the server was reached.

Every failure said "cannot reach the PostgreSQL server", also when the server answered and
refused: a wrong password, a role or database that does not exist. The user then looked for a
network problem. These run against the session's throwaway cluster, with a role of their own
that must give a password (scram-sha-256), and against addresses where no server answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from eventstore import Store, StoreError
from tests.backends import postgres_cluster

ROOT = Path(__file__).resolve().parent.parent
ROLE = "threadlog_reach"
SECRET = "hunter2-reach-s3cret"


@pytest.fixture(name="socket_dir", scope="module")
def password_role() -> Iterator[str]:
    """The cluster's socket directory, quoted for a URL, where `ROLE` logs in with `SECRET` only."""
    cluster = postgres_cluster()
    cluster.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{SECRET}'")
    hba = cluster.data / "pg_hba.conf"
    trusting = hba.read_text()
    hba.write_text(f"local all {ROLE} scram-sha-256\n" + trusting)  # before the lines that trust every role
    cluster.execute("SELECT pg_reload_conf()")
    quoted = urllib.parse.quote(str(cluster.socket), safe="")
    for _ in range(200):  # the server reads the file again when it gets to it
        try:
            psycopg.connect(f"postgresql://{ROLE}@/postgres?host={quoted}").close()
        except psycopg.OperationalError:
            break
    else:
        pytest.fail("the server did not take the password rule")
    yield quoted
    hba.write_text(trusting)
    cluster.execute("SELECT pg_reload_conf()")


def _refusal(url: str, timeout: float | None = None) -> str:
    with pytest.raises(StoreError) as refused:
        Store(url, timeout=timeout)
    message = str(refused.value)
    assert SECRET not in message and "Traceback" not in message
    return message


REACHED = {
    "wrong-password": (f"{ROLE}:wrong-{SECRET}@/postgres", "password authentication failed"),
    "no-such-database": (f"{ROLE}:{SECRET}@/no_such_db", "no_such_db"),
    "no-such-database-trusted": ("postgres@/no_such_db", "no_such_db"),
    "no-such-role": (f"no_such_role:{SECRET}@/postgres", "no_such_role"),
}


@pytest.mark.parametrize(("where", "reason"), list(REACHED.values()), ids=list(REACHED))
def test_a_server_that_answers_and_refuses_is_said_to_be_reached(socket_dir: str, where: str, reason: str) -> None:
    message = _refusal(f"postgresql://{where}?host={socket_dir}")
    assert message.startswith("the PostgreSQL server for postgresql://"), message
    assert "was reached and refused the connection (" in message and reason in message, message
    assert "check the user, password and database the URL names" in message
    assert "cannot reach" not in message


def test_a_password_the_server_asks_for_and_the_url_lacks_is_named(socket_dir: str) -> None:
    message = _refusal(f"postgresql://{ROLE}@/postgres?host={socket_dir}")
    assert "asks for a password and the URL gives none" in message, message
    assert "cannot reach" not in message


def test_the_right_password_opens_the_store(socket_dir: str) -> None:
    """(What the refusals above are measured against: the role and the server work.)"""
    schema = f"{ROLE}_own"
    postgres_cluster().execute(f"CREATE SCHEMA {schema} AUTHORIZATION {ROLE}")
    options = urllib.parse.quote(f"-csearch_path={schema}")
    with Store(f"postgresql://{ROLE}:{SECRET}@/postgres?host={socket_dir}&options={options}") as store:
        assert store.head(store.create_thread()) == 1


def test_no_server_at_the_address_is_said_to_be_unreachable(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    for url in (f"postgresql://u:{SECRET}@127.0.0.1:{closed}/db",
                f"postgresql://u:{SECRET}@/db?host={urllib.parse.quote(str(tmp_path), safe='')}"):
        message = _refusal(url)
        assert message.startswith("cannot reach the PostgreSQL server for postgresql://u:***@"), message
        assert "check that it runs and the URL's host and port" in message


def test_a_server_that_never_answers_is_said_to_be_unreachable() -> None:
    with socket.socket() as silent:  # accepts at the network, then says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        message = _refusal(f"postgresql://u:{SECRET}@127.0.0.1:{silent.getsockname()[1]}/db", timeout=1)
    assert message.startswith("cannot reach the PostgreSQL server for postgresql://u:***@"), message
    assert "timeout" in message


def test_the_cli_says_the_server_refused_not_that_it_is_unreachable(socket_dir: str) -> None:
    url = f"postgresql://{ROLE}:wrong-{SECRET}@/postgres?host={socket_dir}"
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", url, "ls"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: the PostgreSQL server for postgresql://"), done.stderr
    assert "was reached and refused the connection" in done.stderr and SECRET not in done.stderr


def test_a_server_shutting_down_is_said_to_take_no_connections_now() -> None:
    """A server of its own, told to stop once its last session ends (`pg_ctl stop -m smart`)
    while one is open: it answers every new connection with "shutting down"."""
    from tests.pgcluster import Cluster

    postgres_cluster()  # (skips where no cluster can start)
    cluster = Cluster()
    try:
        held = psycopg.connect(cluster.url())
        cluster._run("pg_ctl", "-D", str(cluster.data), "-m", "smart", "-W", "stop")
        for _ in range(200):  # the server takes the signal when it gets to it
            message = _refusal(cluster.url())
            if "takes no connections now" in message:
                break
        held.close()  # the server then stops
        for _ in range(600):
            if not (cluster.data / "postmaster.pid").exists():
                break
            time.sleep(0.05)
        assert message.startswith("the PostgreSQL server for postgresql://postgres@/postgres?host="), message
        assert "takes no connections now: it is starting, shutting down or recovering (" in message
        assert message.endswith("; retry later")
    finally:
        cluster.stop()


def test_a_server_that_refused_while_starting_is_not_said_to_refuse_the_user(tmp_path: Path) -> None:
    """libpq is asked why a connection failed after it failed: a server that refused it while
    starting had started by then, and the refusal was taken for a wrong user, password or database
    (a `StoreError`), so a follower polling through a restart of the server exited. It is a
    `Disconnected` (the server refused one connection and took the next: retry), and the next try
    opens the store. The server's socket is stood in for by a process (`tests/pgstarting.py`) that refuses the first
    connection as a starting server does and passes the later ones through to the cluster."""
    from eventstore import Disconnected
    from tests.backends import postgres_url

    url = postgres_url()
    cluster = postgres_cluster()
    stand_in = subprocess.Popen([sys.executable, "-m", "tests.pgstarting", str(tmp_path), str(cluster.socket)],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert stand_in.stdout is not None and stand_in.stdout.readline() == "listening\n"
        quoted = urllib.parse.quote(str(cluster.socket), safe="")
        through = url.replace(f"host={quoted}", "host=" + urllib.parse.quote(str(tmp_path), safe=""))
        assert through != url
        with pytest.raises(Disconnected) as refused:
            Store(through, timeout=10)
        message = str(refused.value)
        assert "refused a connection and took the next one: it was starting" in message
        assert "not yet accepting connections" in message
        assert "check the user" not in message
        with Store(through) as store:
            assert store.counts() == (0, 0)
    finally:
        stand_in.kill()
        stand_in.wait()
        assert stand_in.stdout is not None
        stand_in.stdout.close()
