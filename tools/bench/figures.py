"""What the benchmarks print: the spread of repeated runs and a Markdown summary table.

The machine the benchmarks run on is shared and noisy, so every figure is a median over
runs, shown with its min and max; the table is meant to be pasted into tools/bench/README.md.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The benchmarks run `python -m devhost ...` from here, whatever the caller's directory.
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Spread:
    """Median, min and max of one figure over the runs of a benchmark."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one run's value")
        return cls(statistics.median(values), min(values), max(values), len(values))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def machine() -> str:
    """What the figures were measured on, printed with them."""
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )
