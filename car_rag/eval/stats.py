"""Rates with Wilson score intervals: honest error bars for the small n of benchmark slices."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Rate", "mcnemar_exact", "wilson"]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial rate (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """``successes`` out of ``n``, with its Wilson 95% interval."""

    successes: int
    n: int

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.successes, self.n)

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.interval
        return {"value": round(self.value, 4), "successes": self.successes, "n": self.n, "ci95": [round(lo, 4), round(hi, 4)]}

    def __str__(self) -> str:
        lo, hi = self.interval
        return f"{self.value:.3f} [{lo:.3f}, {hi:.3f}]"


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for paired yes/no outcomes: of the pairs that
    disagree, ``only_a`` were yes under A alone and ``only_b`` under B alone."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)
