"""Following pi sessions and SWE-agent trajectories while they are written (`follow_pi`,
`follow_swe_agent`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from threadlog import Store, import_swe_agent
from threadlog.importers.follow import follow_swe_agent

Held = list[tuple[str, int, str, str, str]]


def _events(store: Store) -> Held:
    """Every event `store` holds, by thread and offset (a follower writes the threads of a
    session in another order than one import does), with its data and meta."""
    return sorted((e.stream_id, e.offset, e.event_id, e.type, json.dumps([e.data, e.meta], sort_keys=True))
                  for e in store.read_all())


def test_a_refused_trajectory_is_reported_once_and_read_again_when_it_changes(tmp_path: Path) -> None:
    """A trajectory the follower cannot import (not JSON, and quiet too long to be one being
    written) is passed to `on_refused` once, however many polls find it so, while the one beside
    it is imported; fixed, it is imported at the next poll."""
    runs = tmp_path / "runs"
    runs.mkdir()
    good, bad = runs / "good.traj", runs / "bad.traj"
    good.write_text(json.dumps({"history": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]}))
    bad.write_text('{"history": [nope')
    os.utime(bad, (time.time() - 3600, time.time() - 3600))  # an hour old: a run killed while it wrote
    refused: list[tuple[Any, str]] = []
    polls = iter(range(12))

    def stop() -> bool:
        n = next(polls, None)
        if n == 6:
            bad.write_text(json.dumps({"history": [{"role": "user", "content": "fixed"}]}))
        return n is None

    store = Store(":memory:")
    follow_swe_agent(store, [runs], interval=0.01, settle=3600, stop=stop,
                     on_refused=lambda path, error: refused.append((path, str(error))))
    assert [(path, why.split(": ", 1)[0]) for path, why in refused] == [(bad, str(bad))], refused
    expected = Store(":memory:")
    import_swe_agent(expected, [good, bad])
    assert _events(store) == _events(expected)
