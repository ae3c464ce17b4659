"""`Store.claim`: one process at a time holds a name on a database, until it lets go of it or
ends, however it ends (a follower holds `follow-<format>` while it runs:
tests/test_import_follow.py). Real processes hold the claims, on SQLite files and on the
throwaway PostgreSQL cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eventstore.errors import InvalidEvent
from threadlog import Claimed, Store, StoreError
from tests.backends import postgres_url

HOLD = ("import sys, time\nfrom threadlog import Store\n"
        "claim = Store(sys.argv[1]).claim(sys.argv[2])\nprint('held', flush=True)\ntime.sleep(600)")


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store's path or URL, the store made (a SQLite file, or a schema of its own on PostgreSQL)."""
    target = str(tmp_path / "t.db") if request.param == "sqlite" else postgres_url()
    Store(target).close()
    return target


@contextmanager
def _held_by_another(database: str, name: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the claim `name` on `database`; yields once it holds it, and
    kills it (if it still runs) on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, database, name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def _free(database: str, name: str, timeout: float = 10.0) -> bool:
    """Whether the claim can be taken (and is let go again), tried until `timeout`: a server
    lets go of a killed client's lock once it has seen the connection closed."""
    deadline = time.monotonic() + timeout
    with Store(database) as store:
        while True:
            try:
                store.claim(name).release()
                return True
            except Claimed:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)


def test_a_claim_another_process_holds_is_refused_naming_it(database: str) -> None:
    """The second claim of a name is refused at once, naming the database and the process that
    holds it; a claim of another name is taken meanwhile."""
    with _held_by_another(database, "follow-pi") as holder, Store(database) as store:
        with pytest.raises(Claimed) as refused:
            store.claim("follow-pi")
        assert (refused.value.path, refused.value.name, refused.value.pid) == (store.path, "follow-pi", holder.pid)
        assert str(refused.value) == (f"another process (pid {holder.pid}) holds the claim 'follow-pi' on the database "
                                      f"{store.path}; stop it first (its claim ends with it)")
        with store.claim("follow-claude-code"):
            pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_claim_ends_with_its_process(database: str, signum: int) -> None:
    """A claim needs no clearing by hand: the process that held it stopped, or killed with no
    chance to let go, the claim can be taken again."""
    with _held_by_another(database, "follow-pi") as holder:
        assert not _free(database, "follow-pi", timeout=0)
        holder.send_signal(signum)
        holder.wait(timeout=10)
        assert _free(database, "follow-pi")


def test_a_claim_is_one_holder_s_within_a_process_too(database: str) -> None:
    """Two stores of one database in one process are two claimants: the second is refused
    until the first lets go (the end of its `with` block, or `release()`)."""
    with Store(database) as first, Store(database) as second:
        with first.claim("follow-pi"):
            with pytest.raises(Claimed):
                second.claim("follow-pi")
        claim = second.claim("follow-pi")
        with pytest.raises(Claimed):
            first.claim("follow-pi")
        claim.release()
        claim.release()  # again: nothing
        first.claim("follow-pi").release()


def test_claims_on_postgresql_are_each_schema_s_own() -> None:
    """Advisory locks are one key space for a whole database: a store in another schema of it
    (a store of its own) takes the same name meanwhile."""
    with Store(postgres_url()) as one, Store(postgres_url()) as other:
        with one.claim("follow-pi"), other.claim("follow-pi"):
            pass


def test_a_postgresql_claim_its_connection_lost_is_taken_again_or_refused() -> None:
    """A PostgreSQL claim is a lock its connection holds, gone when the server ends that
    connection (a restart, an idle timeout). `keep` takes it again; when another process
    claimed it meanwhile, `keep` raises `Claimed` naming it."""
    import psycopg

    url = postgres_url()  # (each call names a schema of its own, whose claims are its own)

    def end_claims() -> int:
        """End the claims' connections, and wait until the server has let go of them."""
        with psycopg.connect(url, autocommit=True) as admin:
            # The connections holding a claim: a refused claim's closed connection may still be listed
            # for a moment under the same name, its server process exiting (counted, it made 2).
            ended = [pid for pid, done in admin.execute(
                "SELECT DISTINCT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                "AND l.locktype = 'advisory' AND l.granted WHERE a.application_name = %s",
                (f"threadlog (pid {os.getpid()}) claim follow-pi",)) if done]  # this process's: not another test's
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (ended,)).fetchone() != (0,):
                time.sleep(0.01)
        return len(ended)

    with Store(url) as store:
        claim = store.claim("follow-pi")
        assert end_claims() == 1
        claim.keep()
        with pytest.raises(Claimed):
            store.claim("follow-pi")  # held again
        assert end_claims() == 1
        with _held_by_another(url, "follow-pi") as holder:
            with pytest.raises(Claimed) as refused:
                claim.keep()
            assert refused.value.pid == holder.pid
        claim.release()
        claim.keep()  # released: nothing to keep


def test_a_store_in_memory_claims_nothing(tmp_path: Path) -> None:
    """No other process can open a database in memory: a claim there holds nothing (and leaves
    no file)."""
    with Store(":memory:") as store, store.claim("follow-pi"), store.claim("follow-pi"):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["", "Follow", "follow_pi", "../x", "follow--pi", "-pi", "a" * 65, 5],
                         ids=["empty", "upper", "underscore", "path", "double-hyphen", "leading-hyphen", "long", "int"])
def test_a_claim_s_name_is_checked(tmp_path: Path, name: object) -> None:
    """A claim's name is part of a file name: only lowercase words joined by hyphens, named in
    the refusal, and no file is made."""
    with Store(tmp_path / "t.db") as store:
        with pytest.raises(InvalidEvent, match="a claim's name is lowercase letters and digits"):
            store.claim(name)  # type: ignore[arg-type]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.db"]


def test_a_sqlite_claim_whose_file_cannot_be_made_is_refused_naming_it(tmp_path: Path) -> None:
    """The lock file's place taken (here by a directory; a directory no one may write to is
    another case): the claim is refused, naming the file and what to do, with no claim held."""
    db = tmp_path / "t.db"
    (tmp_path / "t.db-follow-pi.lock").mkdir()
    with Store(db) as store:
        with pytest.raises(StoreError) as refused:
            store.claim("follow-pi")
        assert not isinstance(refused.value, Claimed)
        assert str(refused.value).startswith(f"cannot open {tmp_path / 't.db-follow-pi.lock'} (Is a directory), the file "
                                             "whose lock keeps a second process from taking the claim 'follow-pi'")


def test_a_sqlite_claim_through_a_symlink_is_the_file_s(tmp_path: Path) -> None:
    """SQLite follows a symlink to the file it names: a claim through a link to a database is
    that database's, refused while a claim through its own path is held."""
    db, link = tmp_path / "t.db", tmp_path / "link.db"
    link.symlink_to(db)
    with Store(db) as store, Store(link) as linked, store.claim("follow-pi"):
        with pytest.raises(Claimed):
            linked.claim("follow-pi")
