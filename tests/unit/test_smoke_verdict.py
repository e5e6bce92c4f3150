"""The smoke test's verdict names the cause of each failure it can tell apart (S1, R1, R2, S3)."""

from __future__ import annotations

from azure.identity import CredentialUnavailableError
from azure.servicebus.exceptions import ServiceBusAuthorizationError, ServiceBusConnectionError

from domain.dead_letters import MAX_DELIVERY_COUNT_EXCEEDED
from tools.smoke.probe import is_auth_error
from tools.smoke.verdict import (
    Cause,
    Observation,
    OrdersMessage,
    Status,
    judge,
)

STEPS = ("reserve-stock", "charge-payment", "ship-order")
ALL = (
    Status("received"),
    *(Status("in-progress", step) for step in STEPS),
    Status("completed"),
)


def seen(**fields: object) -> Observation:
    return Observation("smoke-1", STEPS, **fields)  # type: ignore[arg-type]


def test_every_status_and_no_dead_letter_passes() -> None:
    verdict = judge(seen(statuses=ALL))
    assert verdict.passed
    assert all(ok for ok, _ in verdict.checks)
    assert verdict.report()[-1] == "smoke test passed"


def test_nothing_arrived_and_the_order_waits_on_its_queue_is_no_functions_indexed() -> None:
    verdict = judge(seen(orders_message=OrdersMessage.WAITING))
    assert verdict.cause is Cause.NO_FUNCTIONS_INDEXED
    assert "FAIL received" in verdict.report()


def test_a_redelivered_order_is_settlement_unavailable_even_with_statuses() -> None:
    """The function did its work and sent `received`, but could not complete the message."""
    verdict = judge(
        seen(statuses=ALL[:1], orders_message=OrdersMessage.REDELIVERED, delivery_count=3)
    )
    assert verdict.cause is Cause.SETTLEMENT_UNAVAILABLE
    assert "FAIL the orders message was delivered 3 times" in verdict.report()


def test_an_order_dead_lettered_after_its_deliveries_is_settlement_unavailable() -> None:
    verdict = judge(
        seen(
            orders_message=OrdersMessage.DEAD_LETTERED,
            delivery_count=10,
            dead_letter_reason=MAX_DELIVERY_COUNT_EXCEEDED,
        )
    )
    assert verdict.cause is Cause.SETTLEMENT_UNAVAILABLE
    assert "dead-lettered after 10 deliveries" in verdict.report()[-1]


def test_an_order_the_app_dead_lettered_is_refused_with_its_reason() -> None:
    verdict = judge(
        seen(
            orders_message=OrdersMessage.DEAD_LETTERED,
            delivery_count=1,
            dead_letter_reason="InvalidSubmission",
            dead_letter_description="reply_to is not an allow-listed reply queue",
        )
    )
    assert verdict.cause is Cause.ORDER_REFUSED
    assert "reply_to is not an allow-listed reply queue" in verdict.report()[-1]


def test_an_auth_error_is_identity_or_role_missing() -> None:
    verdict = judge(seen(auth_error="ServiceBusAuthorizationError: Unauthorized access"))
    assert verdict.cause is Cause.IDENTITY_OR_ROLE_MISSING
    assert verdict.report()[-1].startswith("smoke test FAILED: identity or role missing")


def test_received_without_the_rest_is_a_timeout_naming_the_last_status() -> None:
    verdict = judge(seen(statuses=ALL[:2]))
    assert verdict.cause is Cause.TIMEOUT
    assert "last status seen: in-progress reserve-stock" in verdict.detail
    assert "FAIL completed" in verdict.report()


def test_a_failed_order_is_named_with_its_reason() -> None:
    verdict = judge(seen(statuses=(*ALL[:2], Status("failed", reason="payment declined"))))
    assert verdict.cause is Cause.ORDER_FAILED
    assert "payment declined" in verdict.detail


def test_a_status_in_the_reply_dead_letter_queue_fails() -> None:
    verdict = judge(seen(statuses=ALL, reply_dead_letters=1))
    assert verdict.cause is Cause.STATUS_DEAD_LETTERED


def test_an_auth_error_is_recognised_through_the_errors_that_wrap_it() -> None:
    """The SDK can raise its own error from the credential's: either names the deployer's
    identity, and an error of another kind does not."""
    wrapped = ServiceBusConnectionError(message="could not open the link")
    wrapped.__cause__ = CredentialUnavailableError("no az login")
    assert is_auth_error(wrapped)
    assert is_auth_error(ServiceBusAuthorizationError(message="Unauthorized access"))
    assert not is_auth_error(ServiceBusConnectionError(message="connection refused"))
    assert not is_auth_error(TimeoutError())


def test_another_service_bus_error_is_named_as_such() -> None:
    verdict = judge(seen(service_error="MessagingEntityNotFoundError: no such queue"))
    assert verdict.cause is Cause.SERVICE_BUS_FAILED
    assert "no such queue" in verdict.report()[-1]


def test_an_order_the_app_still_holds_on_its_first_delivery_is_a_timeout_not_settlement() -> None:
    """A locked message already counts its delivery: one delivery is the app's first try."""
    verdict = judge(seen(orders_message=OrdersMessage.DELIVERED, delivery_count=1))
    assert verdict.cause is Cause.TIMEOUT
    assert "last status seen: none" in verdict.detail
    assert "the app holds the order" in verdict.detail
    assert "PASS the orders message was delivered once at most" in verdict.report()
