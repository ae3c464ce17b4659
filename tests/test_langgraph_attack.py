"""ThreadlogSaver with checkpoint namespaces whose stream ids collide.

A LangGraph thread and namespace map to one threadlog stream, `line_id`: 10 hex digits of
the thread id's SHA-256 and 8 of the namespace's. Eight hex digits are 32 bits, so among
the namespaces of one thread (a subgraph's is "node:<task id>", new for every run) two share
a stream with even odds among about 77,000 of them, and 1 in 100 threads with 10,000 subgraph runs has such
a pair; "child:866" and "child:65516" are one. Then each reads the other's checkpoints.
The saver reads which thread and namespace a root stream was created for, and gives the
second one the next free id (`ID~1`), so each keeps its own checkpoints.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402

A, B = "child:866", "child:65516"


def test_the_two_namespaces_do_collide_in_32_bits() -> None:
    assert hashlib.sha256(A.encode()).hexdigest()[:8] == hashlib.sha256(B.encode()).hexdigest()[:8]



def test_namespaces_whose_hashes_share_32_bits_keep_their_own_checkpoints(tmp_path: Path) -> None:
    with Store(tmp_path / "ns.db") as store:
        saver = ThreadlogSaver(store)
        for ns, value in ((A, "alpha"), (B, "beta")):
            checkpoint: Any = {**empty_checkpoint(), "channel_values": {"note": value}, "channel_versions": {"note": "1"}}
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}, checkpoint, {"source": "input", "step": 0},
                      {"note": "1"})
        got = {ns: saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}) for ns in (A, B)}
        listed = sorted(c.config["configurable"]["checkpoint_ns"] for c in saver.list({"configurable": {"thread_id": "t"}}))
    assert {ns: t.checkpoint["channel_values"] for ns, t in got.items() if t is not None} == {A: {"note": "alpha"},
                                                                                              B: {"note": "beta"}}
    assert listed == sorted([A, B])
