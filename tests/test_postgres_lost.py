"""A store whose connection the server ended: every call after says the connection was lost
(not that the server cannot be reached at that URL), and what was acknowledged is kept."""

from __future__ import annotations

import psycopg
import pytest

from threadlog import Store, StoreError
from tests.backends import postgres_cluster, postgres_url


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
