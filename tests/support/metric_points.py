"""The app's metric points as tests read them: an OpenTelemetry SDK provider with the SDK's
in-memory reader bound to the app's instruments (observability.metrics), and lookups by
instrument name and attributes (C9)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from observability import metrics


@contextmanager
def bound_reader() -> Iterator[InMemoryMetricReader]:
    """The app's instruments bound to an SDK provider that the caller reads."""
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    metrics.bind(provider)
    try:
        yield memory
    finally:
        metrics.bind(None)
        provider.shutdown()


Points = dict[str, list[Any]]


def points(reader: InMemoryMetricReader) -> Points:
    """Every data point by instrument name, from the scope of the app."""
    data = reader.get_metrics_data()
    found: Points = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == metrics.SCOPE
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def total(found: Points, name: str, **attributes: str) -> float:
    """The sum of a counter's points whose attributes include `attributes`."""
    return sum(
        point.value
        for point in found.get(name, [])
        if isinstance(point, NumberDataPoint)
        and all(point.attributes.get(key) == value for key, value in attributes.items())
    )


def histogram(found: Points, name: str, **attributes: str) -> HistogramDataPoint:
    (point,) = [
        point
        for point in found.get(name, [])
        if all(point.attributes.get(key) == value for key, value in attributes.items())
    ]
    assert isinstance(point, HistogramDataPoint)
    return point


def gauge(found: Points, name: str) -> float:
    (point,) = found[name]
    assert isinstance(point, NumberDataPoint)
    return float(point.value)
