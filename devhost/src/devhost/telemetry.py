"""The devhost's OpenTelemetry: host-side invocation spans, trace context, local export (C9).

Like the Functions host, the devhost hands every invocation a trace context: the parent comes
from the trigger (a Service Bus message's ``Diagnostic-Id`` / ``traceparent`` application
property, an HTTP request's ``traceparent`` header, the ``traceparent`` the durable client sent
with ``start_new`` for everything of that orchestration instance; a timer starts a new trace),
the host records its own span for the invocation, and the context handed to the function is
that span's. Without a configured provider the OpenTelemetry API is a no-op, so this costs
nothing when telemetry is off; a parent context still travels unchanged.

Export (``DEVHOST_TELEMETRY_EXPORT``, or ``devhost start --telemetry-export``): a file path,
or ``console`` for standard error. The devhost process and each language worker then configure
an SDK TracerProvider and MeterProvider that append OTLP JSON to it, one
``ExportTraceServiceRequest`` or ``ExportMetricsServiceRequest`` object per line (ids in hex, as
OTLP/JSON requires), metrics exported periodically and flushed at shutdown; azure-core tracing
is switched to OpenTelemetry so the azure-servicebus SDK stamps ``Diagnostic-Id`` /
``traceparent`` on every message it sends, as azure-monitor-opentelemetry does on Azure.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("devhost.telemetry")

EXPORT_SETTING = "DEVHOST_TELEMETRY_EXPORT"
"""Where the devhost and its workers export telemetry: a file path, or ``console``."""
ENABLE_OPENTELEMETRY_SETTING = "PYTHON_ENABLE_OPENTELEMETRY"
"""The Python worker's switch: attach the invocation's trace context before calling."""
CONSOLE = "console"
SCOPE = "devhost"
METRIC_EXPORT_INTERVAL_MS = 5_000
SPAN_EXPORT_DELAY_MS = 500

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"

_PROPAGATOR = TraceContextTextMapPropagator()
_OTLP_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


@dataclass(frozen=True)
class TraceContext:
    """What ``context.trace_context`` holds, as azure.functions.TraceContext: the W3C
    ``traceparent`` and ``tracestate`` of the invocation's host span."""

    trace_parent: str
    trace_state: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def carrier(self) -> dict[str, str]:
        carrier = {TRACEPARENT: self.trace_parent} if self.trace_parent else {}
        if self.trace_state:
            carrier[TRACESTATE] = self.trace_state
        return carrier


def _text(value: Any) -> str | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def carrier_of_message(properties: Mapping[Any, Any] | None) -> dict[str, str]:
    """The W3C carrier of a Service Bus message, read as the host's Service Bus extension
    does: ``Diagnostic-Id`` (what the SDKs stamp), else ``traceparent``; plus ``tracestate``."""
    found: dict[str, str] = {}
    for key, value in (properties or {}).items():
        name, text = _text(key), _text(value)
        if name is not None and text:
            found[name] = text
    parent = found.get(DIAGNOSTIC_ID) or found.get(TRACEPARENT)
    carrier = {TRACEPARENT: parent} if parent else {}
    if found.get(TRACESTATE):
        carrier[TRACESTATE] = found[TRACESTATE]
    return carrier


def carrier_of_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The W3C carrier of HTTP headers (names in any case)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    return {name: lowered[name] for name in (TRACEPARENT, TRACESTATE) if lowered.get(name)}


def current_carrier() -> dict[str, str]:
    """The current span's context as W3C headers (empty without a valid span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def trace_context_of(carrier: Mapping[str, str]) -> TraceContext:
    return TraceContext(carrier.get(TRACEPARENT, ""), carrier.get(TRACESTATE, ""))


@contextlib.contextmanager
def host_span(
    name: str,
    *,
    parent: Mapping[str, str] | None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: Mapping[str, str | int] | None = None,
) -> Iterator[TraceContext]:
    """The host's span of one invocation, child of ``parent`` (a W3C carrier; None or empty
    starts a new trace), current while the block runs; yields its trace context."""
    parent_context = _PROPAGATOR.extract(dict(parent)) if parent else context_api.Context()
    tracer = trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        name, context=parent_context, kind=kind, attributes=dict(attributes or {})
    ):
        yield trace_context_of(current_carrier())


@contextlib.contextmanager
def attached(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """``carrier``'s context is the current one while the block runs."""
    if not carrier:
        yield
        return
    token = context_api.attach(_PROPAGATOR.extract(dict(carrier)))
    try:
        yield
    finally:
        context_api.detach(token)


# -- OTLP JSON export ---------------------------------------------------------------------


def otlp_json(message: Any) -> dict[str, Any]:
    """An OTLP protobuf request as OTLP/JSON: lowerCamelCase names, enums as integers, and
    trace and span ids as hex strings (protobuf's JSON mapping would write them base64)."""
    from google.protobuf import json_format

    document: dict[str, Any] = json_format.MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(document)
    return document


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _OTLP_ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


class JsonLines:
    """Appends one JSON object per line to a file (several processes may share it: each line
    is one ``write`` on an ``O_APPEND`` descriptor) or writes it to standard error."""

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self._lock = threading.Lock()
        self._fd: int | None = None
        if destination != CONSOLE:
            self._fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, document: Mapping[str, Any]) -> None:
        line = (json.dumps(document, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                sys.stderr.buffer.write(line)
                sys.stderr.flush()
                return
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _exporters(sink: JsonLines) -> tuple[Any, Any]:
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
    )
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class OtlpJsonSpanExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            sink.write(otlp_json(encode_spans(spans)))
            return SpanExportResult.SUCCESS

    class OtlpJsonMetricExporter(MetricExporter):
        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if metrics_data.resource_metrics:
                sink.write(otlp_json(encode_metrics(metrics_data)))
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    return OtlpJsonSpanExporter(), OtlpJsonMetricExporter()


@dataclass
class Telemetry:
    """The providers this process configured; ``shutdown`` flushes and closes them."""

    destination: str
    _closers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                log.exception("telemetry shutdown failed destination=%s", self.destination)
        self._closers.clear()


_configured: Telemetry | None = None


def export_destination(settings: Mapping[str, str]) -> str | None:
    return settings.get(EXPORT_SETTING) or None


def configure(destination: str, service_name: str) -> Telemetry:
    """Make this process export traces and metrics to ``destination`` (a path or ``console``).

    Once per process. A process that already has an SDK tracer provider (a test's, or one
    configured by azure-monitor-opentelemetry) keeps it and gets the file exporter added.
    """
    global _configured
    if _configured is not None:
        return _configured
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    sink = JsonLines(destination)
    span_exporter, metric_exporter = _exporters(sink)
    telemetry = Telemetry(destination, [sink.close])
    resource = Resource.create({SERVICE_NAME: service_name, "process.pid": os.getpid()})
    processor = BatchSpanProcessor(span_exporter, schedule_delay_millis=SPAN_EXPORT_DELAY_MS)
    existing = trace.get_tracer_provider()
    if isinstance(existing, TracerProvider):
        existing.add_span_processor(processor)
        telemetry._closers.append(processor.shutdown)
    else:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        telemetry._closers.append(provider.shutdown)
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        reader = PeriodicExportingMetricReader(
            metric_exporter, export_interval_millis=METRIC_EXPORT_INTERVAL_MS
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        metrics.set_meter_provider(meter_provider)
        telemetry._closers.append(meter_provider.shutdown)
    if enable_azure_sdk_tracing():
        telemetry._closers.insert(0, disable_azure_sdk_tracing)
    _configured = telemetry
    log.info("telemetry export destination=%s service=%s", destination, service_name)
    return telemetry


def shutdown() -> None:
    """Flush and close what ``configure`` set up in this process (idempotent)."""
    global _configured
    if _configured is not None:
        _configured.shutdown()
        _configured = None


def enable_azure_sdk_tracing() -> bool:
    """Azure SDKs (azure-servicebus among them) trace through OpenTelemetry: each message
    sent carries ``Diagnostic-Id`` / ``traceparent`` of its send span. False when the process
    had chosen a tracing implementation already (it stays)."""
    from azure.core.settings import settings

    if settings.tracing_implementation() is not None:
        return False
    settings.tracing_implementation = "opentelemetry"
    return True


def disable_azure_sdk_tracing() -> None:
    from azure.core.settings import settings

    settings.tracing_implementation.unset_value()
