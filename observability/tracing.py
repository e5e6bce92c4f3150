"""Spans of the app, through the OpenTelemetry API only (C9): one trace per order.

`order_span` opens one hop's span with the correlation attributes (``order.id``,
``instance.id``, ``attempt``, ``step``), under a stored ``traceparent`` when given one;
`current_traceparent` is what the submission keeps in the record (``TraceParent``), and
`inject` adds the context to an HTTP call's headers. Without a provider every call is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind

SCOPE = "scheduler_agent_supervisor"
ORDER_ID = "order.id"
INSTANCE_ID = "instance.id"
ATTEMPT = "attempt"
STEP = "step"
TRACEPARENT = "traceparent"


def tracer() -> trace.Tracer:
    return trace.get_tracer(SCOPE)


def correlation(
    *,
    order_id: str | None = None,
    instance_id: object | None = None,
    attempt: int | None = None,
    step: str | None = None,
) -> dict[str, str | int]:
    """The correlation attributes that are known; never personal data."""
    attributes: dict[str, str | int] = {}
    if order_id is not None:
        attributes[ORDER_ID] = order_id
    if instance_id is not None:
        attributes[INSTANCE_ID] = str(instance_id)
    if attempt is not None:
        attributes[ATTEMPT] = int(attempt)
    if step is not None:
        attributes[STEP] = step
    return attributes


@contextlib.contextmanager
def order_span(
    name: str,
    *,
    order_id: str | None = None,
    instance_id: object | None = None,
    attempt: int | None = None,
    step: str | None = None,
    parent: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span]:
    """A span for one hop of an order, current while the block runs.

    ``parent`` is a W3C ``traceparent`` (the record's ``TraceParent``) for hops that start
    from a timer rather than from a message of the order: the span joins the order's trace
    instead of the timer's. Without it the span is a child of the current context.
    """
    context = None if not parent else propagate.extract({TRACEPARENT: parent})
    attributes = correlation(order_id=order_id, instance_id=instance_id, attempt=attempt, step=step)
    with tracer().start_as_current_span(
        name, context=context, kind=kind, attributes=attributes
    ) as span:
        yield span


@contextlib.contextmanager
def status_span(order_id: str, status: str, step: str | None = None) -> Iterator[Span]:
    """The span of sending one status message (R2) to the submitting app."""
    with order_span("status.send", order_id=order_id, step=step) as span:
        span.set_attribute("status", status)
        yield span


def annotate(
    span: Span,
    *,
    order_id: str | None = None,
    instance_id: object | None = None,
    attempt: int | None = None,
    step: str | None = None,
) -> None:
    """Add correlation attributes learnt after the span started (a parsed order id)."""
    if span.is_recording():
        span.set_attributes(
            correlation(order_id=order_id, instance_id=instance_id, attempt=attempt, step=step)
        )


def current_traceparent() -> str | None:
    """The current span's W3C ``traceparent``, or None outside any valid span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get(TRACEPARENT)


def inject(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` plus the current trace context, for an outgoing HTTP call (the global
    propagator: W3C ``traceparent`` / ``tracestate``)."""
    traced = dict(headers)
    propagate.inject(traced)
    return traced
