"""`usage`: the tokens a thread and each fork below it spent, and what the prompt cache saved.

Each assistant message recorded from the API carries the response's `usage`. A thread is
charged for its own messages only (a fork does not re-count what it inherited), so the rows
of a subtree add up to what the whole tree's answers cost (the token counts a
`compaction.recorded` may carry, for the call that wrote its summary, are not added).
`cache_read_input_tokens` are the input tokens served from the prompt cache: sibling forks
that share a request prefix read it.
A message imported from a pi session keeps pi's own names for the same counts (`input`,
`output`, `cacheRead`, `cacheWrite`): they are read where the API's names are missing.
A count is a whole number from 0 to 2**63 - 1: anything else an event's `usage` may hold
(a bool, a float, text, a negative number, one of 4,000 digits) counts nothing, and the answer
holding it is counted in `left_out`, so the totals do not pass for whole; the event keeps it
as recorded (a null is no count, and is not left out).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeGuard

from eventstore import Store

FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
# The same counts as a pi session records them (threadlog/importers/pi.py stores its usage as it is).
_PI_NAMES = dict(zip(FIELDS, ("input", "output", "cacheRead", "cacheWrite")))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token totals of one thread's own assistant messages (`messages` counts those with usage;
    `left_out`, those among them whose usage holds a count that is not counted)."""

    thread: str
    parent_id: str | None
    depth: int
    kind: str
    messages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    left_out: int = 0

    @property
    def cached_share(self) -> float:
        """The share of input tokens read from the cache (0 when there was no input)."""
        total = self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens
        return self.cache_read_input_tokens / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict, with `cached_share` (as `--json` prints it)."""
        return {**asdict(self), "cached_share": round(self.cached_share, 4)}


def usage(store: Store, thread: str) -> list[Usage]:
    """One row per thread of `thread`'s subtree (itself first, then its forks in creation
    order), each summing its own messages' usage."""
    out = []
    for info in store.subtree(thread):
        sums = dict.fromkeys(FIELDS, 0)
        count = left_out = 0
        for _, type_, data in store.read_data(info.id, info.base):
            spent = data.get("usage") if type_ == "message.appended" else None
            if isinstance(spent, dict):
                count += 1
                whole = True
                for key in FIELDS:
                    value = spent.get(key, spent.get(_PI_NAMES[key]))
                    if _count(value):
                        sums[key] += value
                    elif value is not None:  # a null is no count
                        whole = False
                left_out += not whole
        out.append(Usage(info.id, info.parent_id, info.depth, info.kind, count, **sums, left_out=left_out))
    return out


def _count(value: Any) -> TypeGuard[int]:
    """Whether `value` is a token count a response could hold: not a bool (an int to Python);
    bounded, or two huge ones add up to a number past the digits Python will print."""
    return type(value) is int and 0 <= value < 2**63


def total(rows: list[Usage], thread: str) -> Usage:
    """The rows added up, as one row for the subtree's root."""
    sums = {key: sum(getattr(r, key) for r in rows) for key in FIELDS}
    first = rows[0]
    return Usage(thread, first.parent_id, first.depth, "total", sum(r.messages for r in rows), **sums,
                 left_out=sum(r.left_out for r in rows))
