"""What a PostgreSQL user's grants allow: a schema named in the URL, a role that may only read.

A URL whose search_path names no schema this user may keep a store in is refused by name.
`options=-csearch_path=NAME` puts a store in a schema of its own. PostgreSQL passes over a
schema that does not exist, or one the user has no USAGE on, without a word: `ls` then said
the database held no threadlog store (of a schema that held one, unseen by this user), and
`init` failed with the server's "no schema has been selected to create in (SQLSTATE 3F000)".
"""

from __future__ import annotations

import urllib.parse

import pytest
from click.testing import CliRunner

from eventstore import Store, StoreError
from eventstore.postgres import PostgresBackend
from projections.search import update_index
from tests.backends import login_role, postgres_cluster, postgres_url
from threadlog.cli import cli


def dump(url: str) -> list[str]:
    backend = PostgresBackend(url, read_only=True)
    try:
        return backend.dump()
    finally:
        backend.close()


def _in_schema(url: str, schema: str, user: str = "postgres") -> str:
    base, _, query = url.partition("?")
    kept = [part for part in query.split("&") if not part.startswith("options=")]
    return (base.replace("postgres@", f"{user}@", 1) + "?" + "&".join(kept)
            + "&options=" + urllib.parse.quote(f"-csearch_path={schema}"))


@pytest.mark.parametrize("command", [["init"], ["ls"], ["new", "--title", "Trip"]], ids=["init", "ls", "new"])
def test_a_schema_that_does_not_exist_is_named(command: list[str]) -> None:
    url = _in_schema(postgres_url(), "no_such_schema")
    result = CliRunner().invoke(cli, ["--db", url, *command])
    assert result.exit_code == 1
    assert "no schema" in result.output and "no_such_schema" in result.output, result.output
    assert "CREATE SCHEMA" in result.output and "SQLSTATE" not in result.output, result.output
    assert "holds no threadlog store" not in result.output


def test_a_schema_the_user_may_not_use_is_named_not_taken_for_an_empty_one() -> None:
    url = postgres_url()
    schema = urllib.parse.unquote(url.rpartition("search_path%3D")[2])
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
    cluster = login_role("threadlog_nousage")
    other = _in_schema(url, schema, user="threadlog_nousage")
    for command in (["ls"], ["init"]):
        result = CliRunner().invoke(cli, ["--db", other, *command])
        assert result.exit_code == 1
        assert "no schema" in result.output and schema in result.output and "USAGE" in result.output, result.output
        assert "holds no threadlog store" not in result.output
    with pytest.raises(StoreError, match="no schema"):
        Store(other, read_only=True)
    with Store(url, read_only=True) as store:  # untouched
        assert [t.id for t in store.threads()] == [thread]


def test_a_role_that_may_only_read_searches_what_the_index_covers_as_a_read_only_file_is() -> None:
    """`search` brings the index up to date first, a write: a role granted SELECT alone (a
    reporting role) was refused ("permission denied for table search_docs") once anyone had
    appended since the last search, where a SQLite file it may not write is searched as it is."""
    url = postgres_url()
    schema = urllib.parse.unquote(url.rpartition("search_path%3D")[2])
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
        store.append_message(thread, "user", "read me")
        update_index(store)
        store.append_message(thread, "user", "searched later")
    cluster = login_role("threadlog_reader")
    cluster.execute(f"GRANT USAGE ON SCHEMA {schema} TO threadlog_reader")
    cluster.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO threadlog_reader")
    reader = _in_schema(url, schema, user="threadlog_reader")
    kept = dump(url)
    note = (f"note: {reader} does not let this user write its search index: its search index covers positions up to 2 "
            "of 3; newer events are not searched\n")
    found = CliRunner().invoke(cli, ["--db", reader, "search", "read"])
    assert found.exit_code == 0, found.output
    assert found.stdout.startswith(f"{thread} (Trip) @1 user: **read** me") and found.stderr == note
    later = CliRunner().invoke(cli, ["--db", reader, "search", "later"])
    assert later.exit_code == 0 and later.stdout == "" and later.stderr == note + "no match\n"
    verified = CliRunner().invoke(cli, ["--db", reader, "verify"])  # the position sequence is not the reader's to read
    assert verified.exit_code == 0 and verified.output.startswith("ok: 3 events"), verified.output
    assert dump(url) == kept
