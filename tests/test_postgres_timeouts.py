"""A statement the server cancels on its own: a `statement_timeout` set on the database user.

A search catching its index up over a few thousand messages, run by a user whose statements
the server cancels after 10 ms, said "the database ... stayed locked by another writer
(canceling statement due to statement timeout); retry": no other writer was there, and the
same search, retried, is cancelled again. It now names the timeout and how to raise it, and
the database is as it was.
"""

from __future__ import annotations

import itertools

from click.testing import CliRunner

from eventstore.postgres import PostgresBackend
from threadlog import Locked, Store, StoreError, search
from threadlog.cli import cli
from tests.backends import postgres_cluster, postgres_url

_ROLES = itertools.count(1)


def _hurried(url: str, timeout: str) -> str:
    """`url` as a new user whose every statement the server cancels after `timeout`."""
    role = f"hurried{next(_ROLES)}"
    cluster = postgres_cluster()
    cluster.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    cluster.execute(f"ALTER ROLE {role} SET statement_timeout = '{timeout}'")
    return url.replace("postgres@", f"{role}@", 1)


def _filled(url: str) -> str:
    """A thread of 3,000 messages of 100 words each, none indexed yet."""
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        for batch in range(30):
            store.append(thread, [{"type": "message.appended",
                                   "data": {"role": "user", "content": f"message {batch}.{i} " + "word " * 100}}
                                  for i in range(100)])
        return thread


def test_a_statement_the_users_statement_timeout_cancels_names_the_timeout_and_changes_nothing() -> None:
    url = postgres_url()
    _filled(url)
    before = PostgresBackend(url)
    dumped = before.dump()
    before.close()
    hurried = _hurried(url, "10ms")
    with Store(hurried) as store:
        try:
            search(store, "word")
        except StoreError as error:
            refused = error
        else:
            raise AssertionError("a search indexing 3,000 messages ran within 10 ms")
    assert not isinstance(refused, Locked), refused
    assert "statement_timeout" in str(refused) and "another writer" not in str(refused), refused
    result = CliRunner().invoke(cli, ["search", "word", "--db", hurried])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr.startswith("error: ") and "statement_timeout" in result.stderr, result.stderr
    assert "another writer" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    after = PostgresBackend(url)
    assert after.dump() == dumped
    after.close()
