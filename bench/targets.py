"""The performance targets of the issues, as ratios, and how a run is judged against them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .timing import Measure


@dataclass(frozen=True)
class Target:
    id: str
    what: str
    threshold: float
    at_least: bool  # True: the ratio must be >= threshold; False: <= threshold

    def judge(self, ratio: float) -> bool:
        return ratio >= self.threshold if self.at_least else ratio <= self.threshold

    @property
    def wanted(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.threshold:g}x"


TARGETS = [
    Target("append_full", "single append vs raw sqlite3, synchronous=FULL (speed)", 0.7, True),
    Target("append_normal", "single append vs raw sqlite3, synchronous=NORMAL (speed)", 0.4, True),
    Target("batch", "batch append of 1,000 vs raw executemany (speed)", 0.5, True),
    Target("fork_growth", "fork of the largest thread vs fork of 10 events (cost)", 1.5, False),
    Target("thread_state", "thread_state of 100k events, messages viewed, vs SELECT + json.loads (speed)", 0.5, True),
    Target("snapshot", "thread_state one event past a snapshot vs full rebuild (cost; 'well under 1%')", 0.01, False),
    Target("chain_read", "read at fork depth 1,000 vs flat read of the same events (cost)", 2.0, False),
    Target("chain_tail", "read of the last 10 events at fork depth 1,000 vs the same of a flat thread (cost)", 1.5, False),
    Target("chain_fork", "fork at the head at fork depth 1,000 vs a fork of a flat thread (cost)", 1.5, False),
    Target("transcript", "transcript of ~4 MB of text vs reading its events (cost)", 2.0, False),
    Target("request", "anthropic_request of 1,000 messages vs thread_state with messages viewed (cost)", 2.0, False),
    Target("turn_record", "recording a turn's events vs its 1 ms budget (cost)", 1.0, False),
    Target("import_speed", "import of the largest Claude Code session vs json.loads of its lines (speed; 20 MB/s)", 0.07, True),
    Target("import_memory", "peak memory importing ~200 MB of sessions vs the bytes imported (cost; < 200 MB)", 1.0, False),
    Target("search_like", "search of 1,000,000 indexed messages vs a LIKE '%…%' scan of them (times faster)", 100.0, True),
    Target("search_append", "single append with the search index in use vs without (cost)", 1.1, False),
    Target("search_catch_up", "catching up 100,000 new events vs 20,000 events/s (cost)", 1.0, False),
    Target("fork_agents", "fork vs Agents SDK create_branch_from_turn at 1,000 messages (times faster)", 10.0, True),
    Target("cli_content", "cold CLI append --content (text, tool_use, tool_result) vs cold append --text (cost)", 1.5, False),
    Target("cli_ls", "cold CLI ls vs a cold python -c running the same SELECT with sqlite3 (cost)", 8.0, False),
    Target("pg_append", "PostgreSQL: single append vs raw psycopg INSERT + COMMIT, same run (speed)", 0.6, True),
    Target("pg_batch", "PostgreSQL: batch of 1,000 vs raw psycopg COPY (speed)", 0.5, True),
    Target("pg_writers", "PostgreSQL: 8 writer processes on distinct threads vs 1, events/s (speed)", 2.0, True),
    Target("pg_fork", "PostgreSQL: fork of a large thread vs fork of 10 events (cost)", 1.5, False),
    Target("pg_tail", "PostgreSQL: a tailing reader during the 8-writer run, 1 + skipped + out of order (cost)", 1.0, False),
    Target("web_thread_page", "web viewer: first page of a 200,000-message thread, server time, vs 100 ms (cost)", 1.0, False),
    Target("web_replay_page", "web viewer: replay of the last messages of a 200,000-message thread, server time, vs 500 ms (cost)",
           1.0, False),
    Target("web_thread_list", "web viewer: thread list of 200,000 threads, server time, vs 100 ms (cost)", 1.0, False),
    Target("size_langgraph", "database size after 1,000 messages vs LangGraph SqliteSaver (times smaller)", 100.0, True),
    Target("size_langgraph_saver", "ThreadlogSaver database size after 1,000 messages vs SqliteSaver (times smaller)", 100.0, True),
    Target("fork_langgraph_saver", "ThreadlogSaver copy_thread at 1,000 messages vs SqliteSaver's rows copied (times faster)",
           100.0, True),
    Target("agents_add_items", "ThreadlogSession.add_items vs the Agents SDK's SQLiteSession (speed)", 1.0, True),
    Target("agents_branch", "ThreadlogSession branch vs AdvancedSQLiteSession.create_branch_from_turn at 1,000 items (times faster)",
           10.0, True),
    Target("scale_batch", "at scale: batch append of 1,000 vs the lean raw table at the same size (speed)", 0.5, True),
    Target("scale_append", "at scale: single append, synchronous=NORMAL, vs the lean raw table (speed)", 0.5, True),
    Target("scale_size", "at scale: file size vs the lean raw table of the same rows (cost)", 1.5, False),
    Target("scale_fork", "at scale: fork vs a fork at 10 events in a small file (cost)", 1.5, False),
    Target("scale_state", "at scale: thread_state of a 100-event thread vs the same in a small file (cost)", 2.0, False),
    Target("scale_ls", "at scale: first page of threadlog ls vs 50 ms (cost)", 1.0, False),
    Target("scale_verify_speed", "at scale: full verify vs 200,000 events/s (speed)", 1.0, True),
    Target("scale_verify_memory", "at scale: peak memory of a full verify vs 200 MB (cost)", 1.0, False),
    Target("scale_since", "at scale: verify --since after 1,000 new events vs a full verify (cost; under 1%)", 0.01, False),
]


def judge(measures: list[Measure], mode: str) -> list[dict[str, Any]]:
    """One verdict per target: the worst ratio among the measures that carry its id.

    Smoke mode's sizes are too small to say anything, so it reports ratios without verdicts.
    """
    verdicts: list[dict[str, Any]] = []
    for target in TARGETS:
        ratios = [(m.ratio, m.name) for m in measures if m.extra.get("target") == target.id and m.ratio is not None]
        if not ratios:
            verdicts.append({"target": target.id, "what": target.what, "wanted": target.wanted, "ratio": None,
                             "pass": None, "measured_by": []})
            continue
        worst = min(ratios) if target.at_least else max(ratios)
        verdicts.append({"target": target.id, "what": target.what, "wanted": target.wanted, "ratio": worst[0],
                         "pass": target.judge(worst[0]) if mode != "smoke" else None, "measured_by": [name for _, name in ratios]})
    return verdicts
