"""The demo report's metrics section merges OTLP JSON metric lines right (C9): a cumulative
series counts its latest export only, series of different processes add up, delta points
all count, histograms merge bucket by bucket and their percentiles are bucket estimates;
lines of other scopes and span lines are skipped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observability.metrics import (
    BACKLOG_PENDING,
    ORDERS_COMPLETED,
    SCOPE,
    STEP_DURATION,
    STEP_FAILURES,
)
from tools.demo import metrics

CUMULATIVE = 2
DELTA = 1
BOUNDS = [0.01, 0.1, 1.0]


def attributes(**values: str) -> list[dict[str, Any]]:
    return [{"key": key, "value": {"stringValue": value}} for key, value in values.items()]


def counter(name: str, value: int, *, at: int, start: int = 1, temporality: int = CUMULATIVE,
            **labels: str) -> dict[str, Any]:  # fmt: skip
    point = {
        "startTimeUnixNano": str(start),
        "timeUnixNano": str(at),
        "asInt": str(value),
        "attributes": attributes(**labels),
    }
    return {"name": name, "sum": {"dataPoints": [point], "aggregationTemporality": temporality}}


def histogram(name: str, buckets: list[int], *, at: int, total: float, minimum: float,
              maximum: float, **labels: str) -> dict[str, Any]:  # fmt: skip
    point = {
        "startTimeUnixNano": "1",
        "timeUnixNano": str(at),
        "count": str(sum(buckets)),
        "sum": total,
        "bucketCounts": [str(count) for count in buckets],
        "explicitBounds": BOUNDS,
        "min": minimum,
        "max": maximum,
        "attributes": attributes(**labels),
    }
    return {
        "name": name,
        "histogram": {"dataPoints": [point], "aggregationTemporality": CUMULATIVE},
    }


def gauge(name: str, value: float, *, at: int) -> dict[str, Any]:
    return {"name": name, "gauge": {"dataPoints": [{"timeUnixNano": str(at), "asDouble": value}]}}


def line(pid: int, *found: dict[str, Any], scope: str = SCOPE) -> str:
    resource = {"attributes": [{"key": "process.pid", "value": {"intValue": str(pid)}}]}
    request = {
        "resourceMetrics": [
            {"resource": resource, "scopeMetrics": [{"scope": {"name": scope}, "metrics": found}]}
        ]
    }
    return json.dumps(request)


def test_cumulative_exports_count_once_per_process_and_processes_add_up() -> None:
    lines = [
        line(1, counter(ORDERS_COMPLETED, 2, at=10)),
        line(2, counter(ORDERS_COMPLETED, 1, at=11)),
        line(1, counter(ORDERS_COMPLETED, 5, at=20)),  # process 1's total so far: 5, not 2 + 5
        line(2, counter(ORDERS_COMPLETED, 1, at=21)),
        '{"resourceSpans": []}',
        line(3, counter(ORDERS_COMPLETED, 100, at=30), scope="devhost"),
    ]
    merged = metrics.merge(lines)
    assert merged.total(ORDERS_COMPLETED) == 6
    assert merged.processes == 2


def test_a_restarted_series_and_delta_points_each_count() -> None:
    lines = [
        line(1, counter(ORDERS_COMPLETED, 3, at=10, start=1)),
        line(1, counter(ORDERS_COMPLETED, 2, at=20, start=15)),  # a new series from 15 on
        line(2, counter(ORDERS_COMPLETED, 1, at=10, temporality=DELTA)),
        line(2, counter(ORDERS_COMPLETED, 1, at=20, temporality=DELTA)),
    ]
    assert metrics.merge(lines).total(ORDERS_COMPLETED) == 7


def test_counters_are_summed_per_attribute_set() -> None:
    lines = [
        line(1, counter(STEP_FAILURES, 2, at=10, step="charge-payment", reason="refused")),
        line(2, counter(STEP_FAILURES, 1, at=10, step="charge-payment", reason="refused")),
        line(2, counter(STEP_FAILURES, 4, at=10, step="ship-order", reason="gave-up")),
    ]
    assert metrics.merge(lines).by(STEP_FAILURES, "step", "reason") == {
        "charge-payment": {"refused": 3},
        "ship-order": {"gave-up": 4},
    }


def test_histograms_merge_by_bucket_and_estimate_percentiles_inside_a_bucket() -> None:
    lines = [
        # Process 1: an early export, then its total: 10 answers in (0.01, 0.1].
        line(
            1,
            histogram(
                STEP_DURATION,
                [0, 4, 0, 0],
                at=10,
                total=0.2,
                minimum=0.02,
                maximum=0.05,
                step="s",
                outcome="completed",
            ),
        ),
        line(
            1,
            histogram(
                STEP_DURATION,
                [0, 10, 0, 0],
                at=20,
                total=0.5,
                minimum=0.02,
                maximum=0.08,
                step="s",
                outcome="completed",
            ),
        ),
        # Process 2: 10 answers in (0.1, 1], the slowest 0.6 s; another outcome.
        line(
            2,
            histogram(
                STEP_DURATION,
                [0, 0, 10, 0],
                at=20,
                total=3.0,
                minimum=0.2,
                maximum=0.6,
                step="s",
                outcome="failed",
            ),
        ),
    ]
    [(step, merged)] = metrics.merge(lines).histogram_by(STEP_DURATION, "step").items()
    assert step == "s"
    assert merged.buckets == [0, 10, 10, 0]
    assert merged.count == 20
    assert merged.minimum == 0.02
    assert merged.maximum == 0.6
    # Rank 10 of 20 is the last of the (0.01, 0.1] bucket: its upper bound.
    assert merged.quantile(0.5) == pytest.approx(0.1)
    # Rank 19 is nine tenths into (0.1, 1], capped at the largest value seen, 0.6.
    assert merged.quantile(0.95) == pytest.approx(0.1 + (0.6 - 0.1) * 0.9)
    section = metrics.section(metrics.merge(lines))
    assert section["step_latency"] == {"s": {"count": 20, "p50_ms": 100.0, "p95_ms": 550.0}}
    assert section["latency_note"].startswith("bucket-estimated")


def test_gauges_report_the_largest_and_the_latest_value_of_any_process() -> None:
    lines = [
        line(1, gauge(BACKLOG_PENDING, 3, at=10)),
        line(2, gauge(BACKLOG_PENDING, 9, at=15)),
        line(1, gauge(BACKLOG_PENDING, 2, at=30)),
    ]
    assert metrics.merge(lines).gauge(BACKLOG_PENDING) == {"max": 9, "final": 2}


def test_a_run_without_metric_lines_reports_zeros_and_no_percentiles() -> None:
    section = metrics.section(metrics.merge([]))
    assert section["orders"]["completed"] == 0
    assert section["order_latency"]["all"] == {"count": 0, "p50_ms": None, "p95_ms": None}
    assert section["backlog"]["pending"] == {"max": None, "final": None}
    assert section["backlog"]["unfinished"] == {"max": None, "final": None}
