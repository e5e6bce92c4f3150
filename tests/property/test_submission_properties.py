"""Properties of submission over both real stores (S1-S4, C6, R1, contracts.md bounds).

Every submission message - valid, broken in one field, past a bound, any JSON value, any
bytes - is either accepted exactly once or dead-lettered with a reason (S3), never an
exception; the same message twice is the same as once (S2, S4, C6); whatever is accepted
reads back unchanged from both stores, through store objects other than those that wrote
it (a second host). The service layer (`services.submission.submit_order`) is driven
directly, as the Functions trigger calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.ports import OrderStore, StateStore
from domain.records import ORDER_ID_PATTERN, ProcessState
from services.admission import BacklogGate
from services.submission import (
    INVALID_MESSAGE_REASON,
    ORDER_CONFLICT_REASON,
    Accepted,
    DeadLetter,
    submit_order,
)
from tests.integration.stores.store_backends import StoreFactory
from tests.property.conftest import unique_order_id
from tests.property.strategies import REPLY_QUEUE, Message, submissions, valid_documents

NOW = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
REPLY_QUEUES = frozenset({REPLY_QUEUE})
STEPS = ("reserve-stock", "charge-payment", "ship-order")


@dataclass
class Hosts:
    """Two hosts over one backend: `states`/`orders` write, `fresh_*` only read back."""

    states: StateStore
    orders: OrderStore
    fresh_states: StateStore
    fresh_orders: OrderStore
    admission: BacklogGate

    def submit(self, body: str | bytes, reply_to: str | None, message_id: str) -> Any:
        return submit_order(
            body,
            reply_to=reply_to,
            message_id=message_id,
            orders=self.orders,
            states=self.states,
            admission=self.admission,
            reply_queues=REPLY_QUEUES,
            now=NOW,
            steps=STEPS,
        )


@pytest.fixture(scope="module")
def hosts(backend: StoreFactory) -> Hosts:
    states, orders = backend.open_stores()
    fresh_states, fresh_orders = backend.open_stores()
    gate = BacklogGate(
        lambda at_most: states.count_backlog(at_most=at_most), bound=10**6, recount_seconds=3600
    )
    return Hosts(states, orders, fresh_states, fresh_orders, gate)


def _own_order_id(document: Any) -> Any:
    """`document` with a readable orderId made unique to this example (still a valid id), so
    examples sharing the backend never meet; anything else is left as it is."""
    if isinstance(document, dict):
        order_id = document.get("orderId")
        if isinstance(order_id, str) and ORDER_ID_PATTERN.fullmatch(order_id):
            return {**document, "orderId": unique_order_id(order_id)}
    return document


@given(message=submissions())
def test_every_submission_is_accepted_once_or_dead_lettered_and_accepted_ones_round_trip(
    hosts: Hosts, message: Message
) -> None:
    """S1-S4, C6, R1 and the bounds of contracts.md: accepted exactly once, or dead-lettered
    with a reason (S3); twice is the same as once; what is accepted reads back unchanged."""
    document = _own_order_id(message.document)
    body = message.body(document)
    first = hosts.submit(body, message.reply_to, "m-1")
    again = hosts.submit(body, message.reply_to, "m-1")
    assert isinstance(first, Accepted | DeadLetter)
    if isinstance(first, DeadLetter):
        assert first.reason == INVALID_MESSAGE_REASON
        assert first.description
        assert first.alert.body["kind"] == "invalid-message"
        assert again == first
        order_id = document.get("orderId") if isinstance(document, dict) else None
        if isinstance(order_id, str) and ORDER_ID_PATTERN.fullmatch(order_id):
            assert hosts.fresh_states.get(order_id) is None
            assert hosts.fresh_orders.get(order_id) is None
        return
    assert first.order_created
    assert first.state_created
    assert isinstance(again, Accepted)
    assert not again.order_created
    assert not again.state_created
    assert (again.order, again.record) == (first.order, first.record)
    assert first.record.process_state is ProcessState.PENDING
    submitted = {key: value for key, value in document.items() if key != "schemaVersion"}
    assert first.order.immutable_data() == submitted
    order_id = first.order.order_id
    assert hosts.fresh_orders.get(order_id) == first.order
    stored = hosts.fresh_states.get(order_id)
    assert stored == first.record
    assert stored is not None
    assert stored.to_document() == first.record.to_document()


@given(first=valid_documents(), second=valid_documents(), stem=st.text("abc", min_size=1))
def test_a_different_order_under_an_accepted_id_is_a_conflict_and_changes_nothing(
    hosts: Hosts, first: dict[str, Any], second: dict[str, Any], stem: str
) -> None:
    """S2, S3: a resend must carry the same immutable data; one that does not is
    dead-lettered (OrderConflict) and the stored order and record stay as they were."""
    order_id = unique_order_id(stem)
    first, second = {**first, "orderId": order_id}, {**second, "orderId": order_id}
    accepted = hosts.submit(Message(first).body(first), None, "m-1")
    assert isinstance(accepted, Accepted)
    result = hosts.submit(Message(second).body(second), None, "m-2")
    if {**first, "schemaVersion": 1} == {**second, "schemaVersion": 1}:
        assert isinstance(result, Accepted)
    else:
        assert isinstance(result, DeadLetter)
        assert result.reason == ORDER_CONFLICT_REASON
    assert hosts.fresh_orders.get(order_id) == accepted.order
    assert hosts.fresh_states.get(order_id) == accepted.record
