"""How a figure is taken: variants interleaved round-robin, medians, ratios.

The machines these run on are shared and noisy, so no figure stands alone: every variant
is measured beside its baseline, one sample of each per round, with the order rotated
every round so neither always runs first (warm caches, a neighbour's burst of I/O).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A sample returns the seconds one unit of work took (already divided by its count),
# so a variant may exclude its own set-up from the figure.
Sample = Callable[[], float]


def timed(fn: Callable[[], Any], count: int = 1) -> float:
    """Seconds per call of `fn`, run `count` times back to back."""
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count


def interleave(variants: dict[str, Sample], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run every variant once per round, rotating the order; returns the samples of each.

    The first `warmup` rounds are run and dropped. The garbage collector is paused during
    a sample and runs between samples as it would anyway, so one variant does not pay for
    another's garbage. (No forced `gc.collect()` before a sample: it leaves the allocator
    and the caches cold, which made a sub-millisecond sample ~3x slower than in a loop.)
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            gc.disable()
            try:
                seconds = variants[name]()
            finally:
                gc.enable()
            if r >= warmup:
                samples[name].append(seconds)
    return samples


def median(values: list[float]) -> float:
    return statistics.median(values)


@dataclass
class Measure:
    """One row of the table: a figure, and its baseline's figure from the same run.

    `ratio` is what the table and the targets read. `kind` says how: "speed" is
    baseline time / our time (higher is better: 0.5x means half the baseline's rate),
    "cost" is our time / baseline time (lower is better), "smaller" is baseline size /
    our size (higher is better), "faster" is baseline time / our time for a comparison
    where we are expected to win by a factor.
    """

    group: str
    name: str
    value: float
    unit: str
    baseline_name: str | None = None
    baseline_value: float | None = None
    kind: str = "speed"
    samples: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline_value is None or not self.value or not self.baseline_value:
            return None
        if self.kind == "cost":
            return self.value / self.baseline_value
        return self.baseline_value / self.value

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline_name,
            "baseline_value": self.baseline_value,
            "kind": self.kind,
            "ratio": self.ratio,
            "samples": self.samples,
            **({"extra": self.extra} if self.extra else {}),
        }


def compare(
    group: str, name: str, samples: dict[str, list[float]], ours: str, baseline: str,
    *, label: str | None = None, unit: str = "s", kind: str = "speed", **extra: Any,
) -> Measure:
    """A `Measure` of the medians of two interleaved variants (`label` names the baseline)."""
    return Measure(group, name, median(samples[ours]), unit, label or baseline, median(samples[baseline]), kind,
                   len(samples[ours]), extra)
