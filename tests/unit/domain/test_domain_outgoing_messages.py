"""Status messages and operator alerts as they leave the app (R2, E4, S3, E8, U4): the
properties a consumer reads are the contract's, and stay the same on every resend."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from domain.contracts import AlertKind, OrderStatus, operator_alert, status_message
from domain.outgoing_messages import alert_outgoing, status_outgoing

NOW = datetime(2026, 6, 1, 8, 30, tzinfo=UTC)


def test_a_status_message_goes_to_its_reply_queue_with_the_contract_properties_r2() -> None:
    status = status_message(
        queue="replies-a",
        order_id="order-1",
        status=OrderStatus.COMPLETED,
        attempt=2,
        reason=None,
        at=NOW,
    )

    outgoing = status_outgoing(status)

    assert outgoing.queue == "replies-a"
    assert outgoing.message_id == "order-1:completed:2"
    assert outgoing.correlation_id == "order-1"
    assert outgoing.subject == "completed"
    assert dict(outgoing.application_properties) == {}
    assert json.loads(outgoing.body) == {
        "schemaVersion": 1,
        "orderId": "order-1",
        "status": "completed",
        "attempt": 2,
        "step": None,
        "reason": None,
        "at": "2026-06-01T08:30:00.000000Z",
    }
    assert status_outgoing(status) == outgoing  # a resend is the same message (E4)


def test_an_alert_goes_to_the_alerts_queue_correlated_by_its_order_and_kind() -> None:
    alert = operator_alert(
        kind=AlertKind.ORDER_ERROR, order_id="order-1", reason="refused", at=NOW, attempt=3
    )

    outgoing = alert_outgoing(alert, "operator-alerts")

    assert outgoing.queue == "operator-alerts"
    assert outgoing.message_id == "order-error:order-1:3"
    assert outgoing.correlation_id == "order-1"
    assert outgoing.subject == "order-error"
    assert json.loads(outgoing.body) == {
        "schemaVersion": 1,
        "kind": "order-error",
        "orderId": "order-1",
        "reason": "refused",
        "at": "2026-06-01T08:30:00.000000Z",
        "attempt": 3,
    }


def test_an_alert_about_a_message_without_an_order_id_has_no_correlation_id() -> None:
    alert = operator_alert(
        kind=AlertKind.INVALID_MESSAGE, order_id=None, reason="not JSON", at=NOW, message_id="m-7"
    )

    outgoing = alert_outgoing(alert, "operator-alerts")

    assert outgoing.message_id == "m-7"
    assert outgoing.correlation_id is None
    assert outgoing.subject == "invalid-message"
