"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance) against
`ThreadlogSaver`: every base capability and the extended ones (copy_thread,
delete_for_runs, prune) must be detected and pass, and the log must still verify."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.integrations.langgraph import ThreadlogSaver  # noqa: E402


def test_conformance_suite_passes_every_capability(tmp_path: Path) -> None:
    stores: list[Store] = []

    @checkpointer_test(name="ThreadlogSaver")
    async def saver() -> AsyncIterator[ThreadlogSaver]:
        store = Store(tmp_path / f"suite-{len(stores)}.db")
        stores.append(store)
        yield ThreadlogSaver(store)

    report = asyncio.run(validate(saver))
    failures = {name: result.failures for name, result in report.results.items() if not result.passed}
    assert not failures, failures
    assert {name for name, result in report.results.items() if result.detected} == {c.value for c in ALL_CAPABILITIES}
    for store in stores:
        store.verify()  # deletions were redactions: every chain still holds
        store.close()
