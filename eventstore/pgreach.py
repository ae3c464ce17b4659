"""Why no PostgreSQL connection was made: the server not reached, or reached and refusing.

Every failed connection said "cannot reach the PostgreSQL server", so a wrong password, or a
role or database that does not exist, sent the user looking for a network problem. psycopg
gives such a failure no SQLSTATE (libpq keeps the server's refusal as text, which the server
and libpq may each write in their own language), so the kind is asked of libpq instead:
`PQping` (`PGconn.ping`) says whether a server answers at the URL at all, whether it refuses
connections for now (starting, shutting down, recovering), or whether the URL's parameters
are not ones libpq can connect with. A refusal after the server asked for a password, when
the URL gives none, is libpq's `PQconnectionNeedsPassword` (`pgconn.needs_password`).

The ping comes after the failure: a server that refused while it was starting ("not yet
accepting connections") may answer the ping as one that runs. A refusal of the user, password
or database refuses again, so the connection is tried once more before it is called that: a
follower polling through a restart of the server took the start for a wrong password and exited.
"""

from __future__ import annotations

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from .errors import Disconnected, StoreError, first_line
from .urls import without_passwords


def not_connected(error: psycopg.OperationalError, path: str, url: str, connect_timeout: int) -> StoreError:
    """The `StoreError` for `error`, raised connecting to `url` (shown as `path`, its passwords
    hidden) with `connect_timeout` seconds to answer."""
    text = without_passwords(first_line(error), url)
    if not isinstance(error, psycopg.errors.ConnectionTimeout):  # no answer in time: asking again waits as long
        try:
            answer = pq.PGconn.ping(make_conninfo(url, connect_timeout=connect_timeout).encode())
        except psycopg.Error:  # a URL libpq cannot read (connecting raised for that first)
            answer = pq.Ping.NO_ATTEMPT
        if answer == pq.Ping.OK:
            if error.pgconn is not None and error.pgconn.needs_password:
                return StoreError(f"the PostgreSQL server for {path} asks for a password and the URL gives none ({text}); "
                                  "give it in the URL (postgresql://user:password@host/database) or a password file "
                                  "(~/.pgpass)")
            if _accepts_now(url, connect_timeout):  # it refused while starting (or full), and takes one now
                return Disconnected(f"the PostgreSQL server for {path} refused a connection and took the next one: it "
                                    f"was starting, or had no connection free ({text}); retry")
            return StoreError(f"the PostgreSQL server for {path} was reached and refused the connection ({text}); "
                              "check the user, password and database the URL names")
        if answer == pq.Ping.REJECT:
            return Disconnected(f"the PostgreSQL server for {path} takes no connections now: it is starting, shutting "
                              f"down or recovering ({text}); retry later")
        if answer == pq.Ping.NO_ATTEMPT:
            return StoreError(f"{path} is not a URL PostgreSQL can connect with ({text}); check its parameters")
    return Disconnected(f"cannot reach the PostgreSQL server for {path} ({text}); check that it runs and the URL's host "
                        "and port")


def _accepts_now(url: str, connect_timeout: int) -> bool:
    """Whether a connection to `url` is made now (and closed at once)."""
    try:
        psycopg.connect(url, connect_timeout=connect_timeout).close()
    except psycopg.Error:
        return False
    return True
