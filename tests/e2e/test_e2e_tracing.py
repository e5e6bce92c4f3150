"""One order, one connected trace across every process it crosses (C9).

A client app sends a three-step order inside its own span (the test's SDK provider with the
in-memory exporter; azure-core tracing on, so the Service Bus SDK stamps the message with
``Diagnostic-Id`` / ``traceparent``). The devhost runs the app in a language worker process
and exports what the workers record to its OTLP JSON file (``DEVHOST_TELEMETRY_EXPORT``); the
devhost's own host spans and the simulated services' server spans are recorded in this
process. Together they must form ONE trace: the client's trace id everywhere, every span's
parent present, from the submission through the starter, the orchestration, each step's
agent and remote service and the response, to the status message - with ``order.id``,
``instance.id``, ``attempt`` and ``step`` on the app's spans.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from azure.core.settings import settings as azure_settings
from azure.servicebus.aio import ServiceBusClient
from devhost.telemetry import EXPORT_SETTING
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.e2e.e2e_helpers import E2E, order_body
from tools.demo.pipeline import local_pipeline

STEPS = ("reserve-stock", "charge-payment", "ship-order")
AGENTS = ("stock", "payment", "shipping")
SERVICE_PATHS = ("/stock/reservations", "/payment/payments", "/shipping/shipments")
ORDER_ID = "order-traced-1"
INSTANCE_ID = f"{ORDER_ID}:1"


@dataclass(frozen=True)
class SpanRecord:
    """A span as either source gives it: ids in hex."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: int
    attributes: dict[str, Any]
    service: str


@pytest.fixture
def client_spans() -> Iterator[InMemorySpanExporter]:
    """The test process's provider (the client app's, and the in-process devhost's and
    services'), with azure-core tracing on as azure-monitor-opentelemetry turns it on."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    azure_settings.tracing_implementation = "opentelemetry"
    try:
        yield exporter
    finally:
        azure_settings.tracing_implementation.unset_value()
        exporter.clear()
        processor.shutdown()


def _value(value: dict[str, Any]) -> Any:
    (kind, content), *_ = value.items()
    return int(content) if kind == "intValue" else content


def spans_in_file(path: Path) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        document = json.loads(line)
        for resource_spans in document.get("resourceSpans", []):
            resource = {
                a["key"]: _value(a["value"]) for a in resource_spans["resource"]["attributes"]
            }
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    spans.append(
                        SpanRecord(
                            trace_id=span["traceId"],
                            span_id=span["spanId"],
                            parent_id=span.get("parentSpanId") or None,
                            name=span["name"],
                            kind=int(span.get("kind", 0)),
                            attributes={
                                a["key"]: _value(a["value"]) for a in span.get("attributes", [])
                            },
                            service=str(resource["service.name"]),
                        )
                    )
    return spans


def span_in_memory(span: ReadableSpan) -> SpanRecord:
    context, parent = span.get_span_context(), span.parent
    assert context is not None
    return SpanRecord(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=None if parent is None else f"{parent.span_id:016x}",
        name=span.name,
        # OTLP's numbering: the API's SpanKind + 1 (0 is unspecified).
        kind=span.kind.value + 1,
        attributes=dict(span.attributes or {}),
        service=str(span.resource.attributes.get("service.name")),
    )


def named(spans: list[SpanRecord], name: str) -> list[SpanRecord]:
    return [span for span in spans if span.name == name]


@pytest.mark.timeout(180)
async def test_one_order_is_one_connected_trace_across_processes(
    tmp_path: Path, client_spans: InMemorySpanExporter
) -> None:
    file = tmp_path / "telemetry.jsonl"
    tracer = trace.get_tracer("tests.client")
    # Leaving the pipeline stops the devhost: its workers flush their spans as they exit.
    async with local_pipeline(
        tmp_path, settings={EXPORT_SETTING: str(file)}, worker_processes=1
    ) as pipeline:
        client = ServiceBusClient.from_connection_string(pipeline.connection_string)
        async with client:
            e2e = E2E(pipeline, client)
            try:
                with tracer.start_as_current_span(
                    "client.submit", kind=SpanKind.PRODUCER
                ) as submit:
                    await e2e.submit(order_body(ORDER_ID), message_id=ORDER_ID)
                statuses = await e2e.statuses(ORDER_ID, "completed")
            finally:
                await e2e.close()
    assert [status.body["status"] for status in statuses][-1] == "completed"

    trace_id = f"{submit.get_span_context().trace_id:032x}"
    recorded = {
        span.span_id: span for span in map(span_in_memory, client_spans.get_finished_spans())
    }
    assert await asyncio.to_thread(file.exists)
    recorded.update({span.span_id: span for span in await asyncio.to_thread(spans_in_file, file)})
    spans = [span for span in recorded.values() if span.trace_id == trace_id]

    # One connected trace: the client's span is its only root and every parent is there.
    roots = [span for span in spans if span.parent_id is None]
    assert [root.name for root in roots] == ["client.submit"]
    orphans = [(s.name, s.service) for s in spans if s.parent_id and s.parent_id not in recorded]
    assert orphans == []
    assert {span.service for span in spans} >= {"devhost-language-worker"}

    # Every hop: submission -> starter -> orchestration -> agents -> services -> responses
    # -> the status message.
    (submission,) = named(spans, "order.submission")
    assert submission.attributes["order.id"] == ORDER_ID
    (start,) = named(spans, "starter.start")
    assert start.attributes == {"order.id": ORDER_ID, "instance.id": INSTANCE_ID, "attempt": 1}
    assert named(spans, "order_workflow"), "the orchestration's episodes"
    for step, agent, path in zip(STEPS, AGENTS, SERVICE_PATHS, strict=True):
        (serve,) = [s for s in named(spans, "agent.serve") if s.attributes["step"] == step]
        assert serve.attributes == {
            "order.id": ORDER_ID,
            "instance.id": INSTANCE_ID,
            "attempt": 1,
            "step": step,
        }
        (run,) = named(spans, f"agent.{agent}")
        assert run.parent_id == serve.span_id
        (server,) = named(spans, f"POST {path}")
        assert server.kind == SpanKind.SERVER.value + 1
        (begin,) = [s for s in named(spans, "step.begin_step") if s.attributes["step"] == step]
        assert begin.attributes["instance.id"] == INSTANCE_ID
    responses = named(spans, "agent.response")
    assert len(responses) == len(STEPS)
    assert all(r.attributes["order.id"] == ORDER_ID for r in responses)
    sent = {s.attributes["status"] for s in named(spans, "status.send")}
    assert sent == {"received", "in-progress", "completed"}
