"""Latency percentiles and this process's memory, as the scale benchmark's phases write them
(``evals/perf/measure.py``, ``evals/serve/stage2_sql.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def percentiles(values_ms: list[float]) -> dict[str, float]:
    """Count, p50, p95, p99 (numpy's linear interpolation) and mean of ``values_ms``."""
    v = np.asarray(values_ms)
    return {
        "n": len(v),
        "p50": float(np.percentile(v, 50)),
        "p95": float(np.percentile(v, 95)),
        "p99": float(np.percentile(v, 99)),
        "mean": float(v.mean()),
    }


def proc_status_mb(field: str) -> float:
    """A memory field of this process (``VmRSS``, ``VmHWM``) in MiB, from /proc/self/status (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")
