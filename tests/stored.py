"""The events table read with raw sqlite3, each column as the text it stands for.

The file packs some columns (schema 5: ids and hashes as bytes, types as numbers, no digest the data gives back; see `eventstore/packing.py`). Tests that read or
forge rows by hand read them through `events`, which decodes in Python (not with the
backend's SQL), and may write text values back: a text value is stored as it is.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

from eventstore import packing

_UNPACK = {
    "event_id": packing.unpack_id,
    "type": packing.unpack_type,
    "recorded_at": packing.unpack_time,
    "hash": packing.unpack_hash,
    "data_digest": packing.unpack_digest,
}


def events(conn: sqlite3.Connection, columns: Sequence[str], tail: str = "", params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """`SELECT columns FROM events tail` with every packed column unpacked."""
    selected = ", ".join(f'"{c}"' for c in columns)
    out = []
    for row in conn.execute(f"SELECT {selected}, data FROM events {tail}", params):
        values = []
        for column, value in zip(columns, row):
            if column == "data_digest" and value is None:
                value = hashlib.sha256(row[-1].encode()).hexdigest()
            elif column in _UNPACK and value is not None:
                value = _UNPACK[column](value)
            values.append(value)
        out.append(tuple(values))
    return out


def back_to_schema_7(conn: sqlite3.Connection) -> None:
    """Undo schema 8 in a current file (its rows untouched): streams listed through
    `streams_recent` on `last_position`, with no `recency` column. Tests of older layouts
    start from here."""
    conn.execute("DROP INDEX streams_recency")
    conn.execute("ALTER TABLE streams DROP COLUMN recency")
    conn.execute("CREATE INDEX streams_recent ON streams (parent_id IS NULL, last_position)")
    conn.execute("PRAGMA user_version = 7")
