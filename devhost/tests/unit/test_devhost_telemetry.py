"""The devhost's telemetry (C9): the OTLP JSON lines it exports and the trace context it
reads from a trigger, as the Functions host reads it (``devhost/telemetry.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from devhost.telemetry import (
    CONSOLE,
    JsonLines,
    _exporters,
    carrier_of_headers,
    carrier_of_message,
    host_span,
)

HEX_TRACE_ID = re.compile(r"[0-9a-f]{32}")
HEX_SPAN_ID = re.compile(r"[0-9a-f]{16}")
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"


def _lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in document["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_spans_are_written_one_export_request_per_line_with_hex_ids(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.jsonl"
    sink = JsonLines(str(path))
    spans, _ = _exporters(sink)
    provider = TracerProvider(resource=Resource.create({"service.name": "unit"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("scheduler_agent_supervisor")
    with (
        tracer.start_as_current_span("parent") as parent,
        tracer.start_as_current_span("child", attributes={"attempt": 2, "step": "x"}),
    ):
        pass
    provider.shutdown()
    sink.close()

    lines = _lines(path)
    assert len(lines) == 2  # one ExportTraceServiceRequest per export (per span here)
    child, parent_span = (_spans(line)[0] for line in lines)
    context = parent.get_span_context()
    assert parent_span["traceId"] == f"{context.trace_id:032x}"
    assert parent_span["spanId"] == f"{context.span_id:016x}"
    assert HEX_TRACE_ID.fullmatch(child["traceId"])
    assert HEX_SPAN_ID.fullmatch(child["spanId"])
    assert child["parentSpanId"] == parent_span["spanId"]
    assert child["traceId"] == parent_span["traceId"]
    assert {a["key"]: a["value"] for a in child["attributes"]} == {
        "attempt": {"intValue": "2"},
        "step": {"stringValue": "x"},
    }
    assert lines[0]["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] == (
        "scheduler_agent_supervisor"
    )


def test_metrics_are_written_as_export_metrics_requests(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.jsonl"
    sink = JsonLines(str(path))
    _, metrics = _exporters(sink)
    reader = PeriodicExportingMetricReader(metrics, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("scheduler_agent_supervisor").create_counter("sas.orders.received").add(3)
    provider.shutdown()  # flushes: the last collection is exported at shutdown
    sink.close()

    (line,) = _lines(path)
    (metric,) = [
        metric
        for resource in line["resourceMetrics"]
        for scope in resource["scopeMetrics"]
        for metric in scope["metrics"]
    ]
    assert metric["name"] == "sas.orders.received"
    assert metric["sum"]["dataPoints"][0]["asInt"] == "3"


def test_console_export_writes_lines_to_standard_error(capfd: pytest.CaptureFixture[str]) -> None:
    sink = JsonLines(CONSOLE)
    sink.write({"resourceSpans": []})
    sink.write({"resourceSpans": []})
    err = capfd.readouterr().err
    assert err.splitlines() == ['{"resourceSpans":[]}', '{"resourceSpans":[]}']


def test_a_message_parent_is_its_diagnostic_id_before_its_traceparent() -> None:
    # As received through the SDK: AMQP application property keys and values may be bytes.
    properties: dict[Any, Any] = {
        b"Diagnostic-Id": PARENT.encode(),
        b"traceparent": OTHER.encode(),
        b"tracestate": b"vendor=1",
        "other": 5,
    }
    assert carrier_of_message(properties) == {"traceparent": PARENT, "tracestate": "vendor=1"}


def test_a_message_with_only_a_traceparent_uses_it() -> None:
    assert carrier_of_message({"traceparent": OTHER}) == {"traceparent": OTHER}


def test_a_message_without_trace_properties_has_no_parent() -> None:
    assert carrier_of_message(None) == {}
    assert carrier_of_message({"Diagnostic-Id": ""}) == {}


def test_http_headers_are_read_in_any_case() -> None:
    headers = {"TraceParent": PARENT, "TRACESTATE": "a=b", "Content-Type": "text/plain"}
    assert carrier_of_headers(headers) == {"traceparent": PARENT, "tracestate": "a=b"}


def test_the_host_span_continues_the_trace_it_was_given() -> None:
    with host_span("f", parent={"traceparent": PARENT}) as context:
        assert context.trace_parent.split("-")[1] == PARENT.split("-")[1]


def test_without_a_parent_the_host_span_starts_no_trace_from_the_caller() -> None:
    with (
        host_span("outer", parent={"traceparent": PARENT}),
        host_span("timer", parent=None) as context,
    ):
        assert PARENT.split("-")[1] not in context.trace_parent
