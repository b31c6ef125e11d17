"""What the scale benchmarks share: a power-law fit of cost against size (the log-log slope
and the extrapolation it gives), memory of this process or a child, timing samples, the
machine line and markdown tables. Pure functions apart from the process probes."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import machine as _machine
from bench.common import peak_rss_mb

__all__ = [
    "Fit",
    "fit_power",
    "machine",
    "markdown_table",
    "peak_rss_mb",
    "rss_mb",
    "run_child",
    "summarize_ms",
    "time_each",
]


class Fit:
    """``value = a * size ** slope``, fitted by least squares on log-log axes. A slope of 0
    is a cost independent of size, 1 a cost linear in it."""

    def __init__(self, sizes: Sequence[float], values: Sequence[float]):
        pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True) if v > 0]
        if len(pts) < 2:
            raise ValueError(f"a fit needs two sizes with positive values, got {list(values)}")
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        self.slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
        self.log_a = my - self.slope * mx

    def at(self, size: float) -> float:
        """The fitted value at ``size`` (an extrapolation beyond the sizes measured)."""
        return math.exp(self.log_a + self.slope * math.log(size))


def fit_power(sizes: Sequence[float], values: Sequence[float]) -> Fit:
    return Fit(sizes, values)


def machine() -> str:
    """The machine line of bench.common plus the load average at the time of the call."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{_machine()}; load average {load}"


def rss_mb() -> float:
    """This process's resident set now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def time_each(fn: Callable[[int], object], items: Sequence[int]) -> list[float]:
    """Call ``fn(item)`` for each item; the wall time of each call in milliseconds."""
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summarize_ms(samples: Sequence[float]) -> dict[str, float]:
    """Mean, median, 95th percentile and max of timings in ms."""
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "mean": statistics.fmean(ordered),
        "p50": ordered[len(ordered) // 2],
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        "max": ordered[-1],
    }


def run_child(args: Sequence[str], *, env: dict | None = None, timeout: float = 3600) -> dict:
    """Run ``python -m <args>`` in a fresh interpreter (its peak memory is its own) and
    return the JSON object it prints as its last line of stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats with 3 significant digits, ints with separators."""

    def cell(v: object) -> str:
        if isinstance(v, bool) or v is None:
            return str(v)
        if isinstance(v, int):
            return f"{v:,}"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
