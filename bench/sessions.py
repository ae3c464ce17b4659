"""`ThreadlogSession` beside the OpenAI Agents SDK's own sessions, through the Session API.

The same 1,000 items (alternating user and assistant messages, text) go to each session by
`add_items`, one call per item, in its own SQLite file: threadlog's `ThreadlogSession`, the
SDK's `SQLiteSession` and its `AdvancedSQLiteSession`, written in chunks of 100, the
sessions interleaved chunk by chunk. The SDK's sessions run at SQLite's default
`synchronous=FULL` (they set none), so threadlog runs at `FULL` too. No model is called.

Figures: `add_items` per item (target: at least as fast as `SQLiteSession`, both at
`FULL`; also each at its default, what the one-line switch gives: threadlog's `NORMAL` is
durable across a process crash, not a power loss), and
`create_branch_from_turn` at the last user turn (threadlog: a fork; the SDK: a copy of the
branch's rows; target: 10x faster), each branch followed, untimed, by a switch back to
`main`. The branch is timed twice for threadlog: by the session object that wrote the items
(it knows their turns) and by a new one, as in a new process: it reads the turns from the
snapshot the first new one (in the dropped warm-up round) saved after reading every item.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventstore.sqlite import SQLiteBackend
from threadlog import Store

from .alternatives import available
from .threads import text_of
from .timing import Measure, compare, interleave

GROUP = "sessions"

# (items, chunk, branch rounds) per mode
SIZES = {"smoke": (40, 10, 3), "quick": (1_000, 100, 15), "full": (1_000, 100, 25)}


class _Side:
    """One session, driven from its own event loop."""

    def __init__(self, session: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.session = session

    def add(self, item: dict[str, Any]) -> None:
        self.loop.run_until_complete(self.session.add_items([item]))

    def branch_sample(self, turn: int) -> Callable[[], float]:
        names = itertools.count(1)

        def sample() -> float:
            name = f"branch-{next(names)}"  # named: the SDK's and our default names probe for a free one
            start = time.perf_counter()
            self.loop.run_until_complete(self.session.create_branch_from_turn(turn, name))
            seconds = time.perf_counter() - start
            self.loop.run_until_complete(self.session.switch_to_branch("main"))  # not timed
            return seconds
        return sample

    def close(self) -> None:
        self.session.close()
        self.loop.close()


def _writes(sides: dict[str, _Side], script: list[dict[str, Any]], chunk: int) -> tuple[dict[str, float], dict[str, float]]:
    """Every side gets the script, one `add_items` per item, in chunks interleaved side by side;
    returns the seconds per item, and the CPU seconds per item (the process's, every thread's:
    the SDK's sessions run their SQLite calls on worker threads), which a loaded machine's
    slow fsyncs do not inflate. Starts from a flushed page cache (`os.sync`), so one phase's
    writes (a `NORMAL` writer's dirty pages above all) do not land in another phase's fsyncs."""
    os.sync()
    written = {name: 0 for name in sides}
    cpu = {name: 0.0 for name in sides}

    def chunk_writer(name: str) -> Callable[[], float]:
        def sample() -> float:
            side, begin = sides[name], written[name]
            start, start_cpu = time.perf_counter(), time.process_time()
            for item in script[begin:begin + chunk]:
                side.add(item)
            written[name] = begin + chunk
            cpu[name] += time.process_time() - start_cpu
            return time.perf_counter() - start
        return sample

    appends = interleave({name: chunk_writer(name) for name in sides}, len(script) // chunk, warmup=0)
    return ({name: sum(seconds) / len(script) for name, seconds in appends.items()},
            {name: seconds / len(script) for name, seconds in cpu.items()})


def run(mode: str, workdir: Path) -> list[Measure]:
    if "openai-agents" not in available():
        return [Measure(GROUP, "Agents SDK sessions", 0.0, "s", extra={"skipped": "not installed (pip install -e '.[openai-agents]')"})]
    from agents.extensions.memory import AdvancedSQLiteSession
    from agents.memory.sqlite_session import SQLiteSession

    from threadlog.integrations.openai_agents import ThreadlogSession

    count, chunk, rounds = SIZES[mode]
    script = [{"role": "user" if i % 2 == 0 else "assistant", "content": text_of(80, i)} for i in range(count)]
    threadlog = _Side(ThreadlogSession("bench", Store(SQLiteBackend(workdir / "threadlog.db", synchronous="FULL"))))
    advanced = _Side(AdvancedSQLiteSession(session_id="bench", db_path=workdir / "advanced.db", create_tables=True))
    # Both at synchronous=FULL: the SDK's sessions set none, and SQLite's default is FULL.
    full, full_cpu = _writes({"threadlog": threadlog, "sqlite": _Side(SQLiteSession("bench", workdir / "sqlite.db")),
                    "advanced": advanced}, script, chunk)
    # Each at its default: what the one-line switch gives (threadlog's NORMAL: durable across
    # a process crash, not across a power loss).
    defaults, _ = _writes({"threadlog": _Side(ThreadlogSession("bench", workdir / "threadlog-default.db")),
                        "sqlite": _Side(SQLiteSession("bench", workdir / "sqlite-default.db"))}, script, chunk)
    os.sync()
    last_turn = (count + 1) // 2  # the SDK numbers a branch's user turns from 1
    # A second threadlog session object on the same file: what a new process would branch with.
    fresh_store = Store(SQLiteBackend(workdir / "threadlog.db", synchronous="FULL"))
    fresh_loop = asyncio.new_event_loop()
    fresh_names = itertools.count(1)

    def fresh_branch() -> float:
        session, name = ThreadlogSession("bench", fresh_store), f"fresh-{next(fresh_names)}"
        start = time.perf_counter()
        fresh_loop.run_until_complete(session.create_branch_from_turn(last_turn, name))
        return time.perf_counter() - start

    branches = interleave({"threadlog": threadlog.branch_sample(last_turn), "fresh": fresh_branch,
                           "advanced": advanced.branch_sample(last_turn)}, rounds)
    for side in (threadlog, advanced):
        side.close()
    fresh_loop.close()
    fresh_store.close()
    context = {"items": count, "synchronous": "FULL", "journal_mode": "wal", "versions": available()}
    return [
        Measure(GROUP, "add_items per item vs Agents SDK SQLiteSession", full["threadlog"], "s", "Agents SDK SQLiteSession",
                full["sqlite"], "faster", count // chunk,
                {**context, "target": "agents_add_items", "cpu_seconds_per_item": full_cpu, "load_average": os.getloadavg()}),
        Measure(GROUP, "add_items CPU time per item vs Agents SDK SQLiteSession (FULL; fsync waits left out)", full_cpu["threadlog"],
                "s", "Agents SDK SQLiteSession", full_cpu["sqlite"], "faster", count // chunk),
        Measure(GROUP, "add_items per item vs Agents SDK AdvancedSQLiteSession", full["threadlog"], "s",
                "Agents SDK AdvancedSQLiteSession", full["advanced"], "faster", count // chunk),
        Measure(GROUP, "add_items per item, each at its default synchronous (NORMAL vs FULL), vs SQLiteSession",
                defaults["threadlog"], "s", "Agents SDK SQLiteSession", defaults["sqlite"], "faster", count // chunk),
        compare(GROUP, f"create_branch_from_turn({last_turn}) vs AdvancedSQLiteSession", branches, "threadlog", "advanced",
                label="Agents SDK AdvancedSQLiteSession", kind="faster", target="agents_branch"),
        compare(GROUP, f"create_branch_from_turn({last_turn}) by a new session object vs AdvancedSQLiteSession", branches,
                "fresh", "advanced", label="Agents SDK AdvancedSQLiteSession", kind="faster"),
    ]
