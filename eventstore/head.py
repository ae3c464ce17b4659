"""`Head`: where a batch of events starts in its thread, the one input of the write path.

A batch goes to one of three places, and the caller, which knows which, builds the head:
a new thread (`Head.new_thread()`), the end of an existing stream (`Head.of(row)`), or a
new fork of `parent` at offset k (`Head.fork(...)`, chaining to the parent's event at k - 1).
A fourth kind is remembered rather than read: the head a store's own last write to a stream
left (`Head.left(...)`, `known`), which the backend checks is still the stored one as it writes.
"""

from __future__ import annotations

from typing import NamedTuple

from .backend import StreamRow
from .errors import StoreError
from .facts import Facts
from .integrity import GENESIS
from .ranges import MAX_INDEX
from .recorded import ThreadInfo, short


class Head(NamedTuple):
    offset: int  # the offset the batch's first event gets
    hash: str  # the hash that event chains to
    facts: Facts  # what is pending before the batch
    first_message: int | None  # the offset of the thread's first message so far, if any
    stream: StreamRow | None = None  # the stream's row when it exists; None creates it
    parent: ThreadInfo | None = None  # the stream forked from, when the batch creates a fork
    known: bool = False  # remembered from this store's last write, not read: checked by the server

    @classmethod
    def new_thread(cls) -> Head:
        return cls(0, GENESIS, Facts(), None)

    @classmethod
    def of(cls, row: StreamRow) -> Head:
        head, head_hash = row.head, row.head_hash
        # A head of another kind (only raw SQL stores one) would fail as a TypeError while the
        # batch is numbered, or an OverflowError past SQLite's integers as it is inserted.
        if head.__class__ is not int or not 0 <= head <= MAX_INDEX or head_hash.__class__ is not str:
            raise StoreError(f"the head stored for {row.id!r} cannot be appended to (head {short(head)}, head_hash "
                             f"{short(head_hash)}): the row was altered outside threadlog (`threadlog verify` names it); "
                             "nothing was written")
        return cls(head, head_hash, Facts.stored(row.facts, row.id), row.first_message_offset, row)

    @classmethod
    def fork(cls, parent: ThreadInfo, at: int, prev_hash: str, facts: Facts, first_message: int | None) -> Head:
        return cls(at, prev_hash, facts, first_message, None, parent)

    @classmethod
    def left(cls, offset: int, hash_: str, facts: Facts, first_message: int | None, stream: StreamRow) -> Head:
        """The head a write left at the end of `stream` (the row it had then: only its identity counts)."""
        return cls(offset, hash_, facts, first_message, stream, None, True)
