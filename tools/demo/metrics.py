"""The demo report's metrics section, read from the run's OTLP JSON metric lines (C9).

Every process that runs app code (the devhost and each language worker) exports its own
``ExportMetricsServiceRequest`` lines to the one file (`devhost.telemetry`), periodically and
once more at shutdown. Merging them right:

- a cumulative series (the SDK's default temporality) is identified by its process (the
  resource), its metric, its attribute set and its start time; each export repeats the total
  so far, so only the latest point of a series counts, never the sum of the exports;
- a delta series counts every point;
- the series of one metric and attribute set are then added across processes: counters
  summed, histograms bucket by bucket (with their count, sum, min and max);
- gauges keep every point: the report gives the largest value seen and the last one.

Latency percentiles come from histogram buckets (linear interpolation inside the bucket that
holds the rank, bounded by the series' min and max), so they are estimates to within a
bucket's width; the report says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observability import metrics as names

DELTA = 1
"""OTLP AggregationTemporality of a delta series (2 is cumulative)."""
LATENCY_NOTE = "bucket-estimated from the sas.*.duration histograms (p50/p95 within a bucket)"

Attributes = tuple[tuple[str, str], ...]


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    buckets: list[int]
    count: int = 0
    total: float = 0.0
    minimum: float | None = None
    maximum: float | None = None

    def add(self, other: Histogram) -> None:
        if other.bounds != self.bounds:
            raise ValueError(f"histogram bounds differ: {self.bounds} and {other.bounds}")
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.count += other.count
        self.total += other.total
        self.minimum = _extreme(min, self.minimum, other.minimum)
        self.maximum = _extreme(max, self.maximum, other.maximum)

    def quantile(self, fraction: float) -> float | None:
        """The value below which ``fraction`` of the observations fall, estimated from the
        buckets; None without observations."""
        if self.count == 0:
            return None
        rank = fraction * self.count
        seen = 0
        for index, in_bucket in enumerate(self.buckets):
            if in_bucket == 0 or seen + in_bucket < rank:
                seen += in_bucket
                continue
            lower = self.bounds[index - 1] if index > 0 else (self.minimum or 0.0)
            upper = self.bounds[index] if index < len(self.bounds) else self.maximum
            if upper is None:
                upper = lower
            if self.minimum is not None:
                lower = max(lower, self.minimum)
            if self.maximum is not None:
                upper = min(upper, self.maximum)
            return lower + (upper - lower) * max(0.0, rank - seen) / in_bucket
        return self.maximum


def _extreme(pick: Any, a: float | None, b: float | None) -> float | None:
    present = [value for value in (a, b) if value is not None]
    return pick(present) if present else None


@dataclass
class MetricsFile:
    """The merged metrics of one run, by metric name and attribute set."""

    counters: dict[str, dict[Attributes, float]] = field(default_factory=dict)
    histograms: dict[str, dict[Attributes, Histogram]] = field(default_factory=dict)
    gauges: dict[str, dict[Attributes, list[tuple[int, float]]]] = field(default_factory=dict)
    processes: int = 0

    def total(self, name: str) -> float:
        return sum(self.counters.get(name, {}).values())

    def by(self, name: str, *keys: str) -> dict[str, Any]:
        """A counter's totals nested by the values of ``keys`` (``{}`` when never counted)."""
        nested: dict[str, Any] = {}
        for attributes, value in sorted(self.counters.get(name, {}).items()):
            found = dict(attributes)
            node = nested
            for key in keys[:-1]:
                node = node.setdefault(found.get(key, "unspecified"), {})
            last = found.get(keys[-1], "unspecified")
            node[last] = _number(node.get(last, 0) + value)
        return nested

    def histogram_by(self, name: str, key: str) -> dict[str, Histogram]:
        """A histogram merged over every attribute but ``key``."""
        merged: dict[str, Histogram] = {}
        for attributes, histogram in sorted(self.histograms.get(name, {}).items()):
            value = dict(attributes).get(key, "unspecified")
            if value in merged:
                merged[value].add(histogram)
            else:
                merged[value] = _copy(histogram)
        return merged

    def gauge(self, name: str) -> dict[str, float | None]:
        """The largest value any process reported and the latest one."""
        points = [point for series in self.gauges.get(name, {}).values() for point in series]
        if not points:
            return {"max": None, "final": None}
        latest = max(points, key=lambda point: point[0])
        return {
            "max": _number(max(value for _, value in points)),
            "final": _number(latest[1]),
        }


def _copy(histogram: Histogram) -> Histogram:
    return Histogram(
        histogram.bounds,
        list(histogram.buckets),
        histogram.count,
        histogram.total,
        histogram.minimum,
        histogram.maximum,
    )


def _number(value: float) -> float:
    return int(value) if float(value).is_integer() else round(value, 3)


def _value(attribute_value: Mapping[str, Any]) -> str:
    for kind in ("stringValue", "intValue", "boolValue", "doubleValue"):
        if kind in attribute_value:
            return str(attribute_value[kind])
    return json.dumps(attribute_value, sort_keys=True)


def _attributes(items: Iterable[Mapping[str, Any]]) -> Attributes:
    return tuple(sorted((item["key"], _value(item.get("value", {}))) for item in items))


def _point_number(point: Mapping[str, Any]) -> float:
    if "asInt" in point:
        return float(int(point["asInt"]))
    return float(point.get("asDouble", 0.0))


def _histogram(point: Mapping[str, Any]) -> Histogram:
    return Histogram(
        bounds=tuple(float(bound) for bound in point.get("explicitBounds", [])),
        buckets=[int(count) for count in point.get("bucketCounts", [])],
        count=int(point.get("count", 0)),
        total=float(point.get("sum", 0.0)),
        minimum=float(point["min"]) if "min" in point else None,
        maximum=float(point["max"]) if "max" in point else None,
    )


SeriesKey = tuple[Attributes, str, Attributes, str]
"""Resource, metric name, point attributes, start time: one cumulative series."""


def merge(lines: Iterable[str], scope: str = names.SCOPE) -> MetricsFile:
    """Merge the metric lines (other lines, e.g. spans, are skipped) of instrumentation
    scope ``scope`` into one view of the run."""
    latest: dict[SeriesKey, tuple[int, float | Histogram]] = {}
    deltas: dict[tuple[str, Attributes], list[float | Histogram]] = defaultdict(list)
    merged = MetricsFile()
    resources: set[Attributes] = set()
    for line in lines:
        if '"resourceMetrics"' not in line:
            continue
        for resource_metrics in json.loads(line).get("resourceMetrics", []):
            resource = _attributes(resource_metrics.get("resource", {}).get("attributes", []))
            for scope_metrics in resource_metrics.get("scopeMetrics", []):
                if scope_metrics.get("scope", {}).get("name") != scope:
                    continue
                resources.add(resource)
                for metric in scope_metrics.get("metrics", []):
                    _take(metric, resource, latest, deltas, merged)
    merged.processes = len(resources)
    for (_, name, attributes, _), (_, value) in latest.items():
        _fold(merged, name, attributes, value)
    for (name, attributes), values in deltas.items():
        for value in values:
            _fold(merged, name, attributes, value)
    return merged


def _take(
    metric: Mapping[str, Any],
    resource: Attributes,
    latest: dict[SeriesKey, tuple[int, float | Histogram]],
    deltas: dict[tuple[str, Attributes], list[float | Histogram]],
    merged: MetricsFile,
) -> None:
    name = str(metric.get("name"))
    if "gauge" in metric:
        for point in metric["gauge"].get("dataPoints", []):
            series = merged.gauges.setdefault(name, {}).setdefault(
                _attributes(point.get("attributes", [])), []
            )
            series.append((int(point.get("timeUnixNano", 0)), _point_number(point)))
        return
    for kind in ("sum", "histogram"):
        if kind not in metric:
            continue
        data = metric[kind]
        delta = data.get("aggregationTemporality") == DELTA
        for point in data.get("dataPoints", []):
            attributes = _attributes(point.get("attributes", []))
            value: float | Histogram = _point_number(point) if kind == "sum" else _histogram(point)
            if delta:
                deltas[(name, attributes)].append(value)
                continue
            key = (resource, name, attributes, str(point.get("startTimeUnixNano", "")))
            time = int(point.get("timeUnixNano", 0))
            if key not in latest or latest[key][0] <= time:
                latest[key] = (time, value)


def _fold(merged: MetricsFile, name: str, attributes: Attributes, value: float | Histogram) -> None:
    if isinstance(value, Histogram):
        histograms = merged.histograms.setdefault(name, {})
        if attributes in histograms:
            histograms[attributes].add(value)
        else:
            histograms[attributes] = _copy(value)
    else:
        counters = merged.counters.setdefault(name, {})
        counters[attributes] = counters.get(attributes, 0.0) + value


def read(path: Path) -> MetricsFile:
    with path.open(encoding="utf-8") as lines:
        return merge(lines)


def _latency(histogram: Histogram) -> dict[str, float | int | None]:
    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * 1000, 1)

    return {
        "count": histogram.count,
        "p50_ms": ms(histogram.quantile(0.5)),
        "p95_ms": ms(histogram.quantile(0.95)),
    }


def section(run: MetricsFile) -> dict[str, Any]:
    """The report's ``metrics`` section: the contract's instruments, merged over the run."""
    orders = {
        "received": _number(run.total(names.ORDERS_RECEIVED)),
        "completed": _number(run.total(names.ORDERS_COMPLETED)),
        "failed": _number(run.total(names.ORDERS_FAILED)),
        "compensated": _number(run.total(names.ORDERS_COMPENSATED)),
        "compensation_failed": _number(run.total(names.ORDERS_COMPENSATION_FAILED)),
        "rejected": _number(run.total(names.ORDERS_REJECTED)),
    }
    by_state = run.histogram_by(names.ORDER_DURATION, "order.state")
    end_to_end: Histogram | None = None
    for histogram in by_state.values():
        if end_to_end is None:
            end_to_end = _copy(histogram)
        else:
            end_to_end.add(histogram)
    return {
        "processes": run.processes,
        "orders": orders,
        "rejected_by_reason": run.by(names.ORDERS_REJECTED, "reason"),
        "latency_note": LATENCY_NOTE,
        "order_latency": {
            "all": _latency(end_to_end or Histogram((), [0])),
            **{state: _latency(h) for state, h in by_state.items()},
        },
        "step_latency": {
            step: _latency(h) for step, h in run.histogram_by(names.STEP_DURATION, "step").items()
        },
        "step_retries": run.by(names.STEP_RETRIES, "step"),
        "step_failures": run.by(names.STEP_FAILURES, "step", "reason"),
        "dead_letters": run.by(names.DEADLETTERS, "queue", "reason"),
        "supervisor": {
            "items_read": _number(run.total(names.SUPERVISOR_ITEMS_READ)),
            "request_charge": _number(run.total(names.SUPERVISOR_REQUEST_CHARGE)),
            "giveups": _number(run.total(names.SUPERVISOR_GIVEUPS)),
        },
        "backlog": {
            "pending": run.gauge(names.BACKLOG_PENDING),
            "unfinished": run.gauge(names.BACKLOG_UNFINISHED),
            "oldest_pending_age_s": run.gauge(names.BACKLOG_OLDEST_PENDING_AGE),
        },
    }
