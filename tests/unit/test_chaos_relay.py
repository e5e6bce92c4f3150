"""The chaos relay tells an answer to a step's action from one to its compensation (C1)."""

from __future__ import annotations

from datetime import UTC, datetime

from domain.agent_messages import AgentOperation, AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from tools.chaos.relay import answered_operation

ORDER = Order("order-5", "customer-1", (OrderItem("sku-1", 2),), "EUR")


def request(operation: AgentOperation) -> AgentRequest:
    return AgentRequest(
        "order-5:2", "charge-payment", ORDER, datetime(2026, 9, 1, tzinfo=UTC), operation
    )


def test_a_responses_message_id_tells_a_do_from_an_undo_c1() -> None:
    """Whoever carries a response (a relay, a dead-letter reader) knows from its id alone
    whether it answers a step's action or its compensation."""
    for operation in AgentOperation:
        sent = request(operation)
        answer = AgentResponse(sent.request_id, sent.instance_id, AgentOutcome.SUCCEEDED)
        assert answered_operation(answer.message_id) is operation
    assert answered_operation(request(AgentOperation.DO).message_id) is None
    assert answered_operation(None) is None
