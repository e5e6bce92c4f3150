"""Properties of agent responses over both real stores (E3, E4, E8, C1, C8, S3, the bounds of
contracts.md).

A response body is taken in (`from_json(body, AgentResponse)` of the app's codec, what the
bridge does) or refused with a `PayloadError` whose text the bridge dead-letters it with
(S3), never another exception. A response taken in is applied as the workflow applies it -
a success records the step Completed with its reference and logs it for compensation (C1),
a failure writes its detail as the order's error (E8) - and the record a second host reads
back is the record written, reference and detail unchanged. The same response applied
twice (a redelivery, an activity run twice, C8) leaves the record as once.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.codec import PayloadError, from_json, to_json
from domain import transitions
from domain.agent_messages import AgentMessageError, AgentOutcome, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import Timeouts, compensation_deadline, step_deadline
from domain.ports import OrderStore, StateStore
from domain.records import InstanceId, ProcessState, StateRecord, StepState
from domain.transitions import new_record
from domain.workflow import Step
from services import steps
from services.steps import Written
from tests.integration.stores.store_backends import StoreFactory
from tests.property.conftest import unique_order_id
from tests.property.strategies import agent_response_documents

NOW = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
TIMEOUTS = Timeouts(claim_seconds=60, step_seconds=30, compensation_seconds=30)
STEPS = ("reserve-stock", "charge-payment")


@pytest.fixture(scope="module")
def stores(backend: StoreFactory) -> tuple[StateStore, OrderStore, StateStore]:
    states, orders = backend.open_stores()
    fresh_states, _ = backend.open_stores()
    return states, orders, fresh_states


def running_first_step(states: StateStore, orders: OrderStore) -> tuple[InstanceId, StateRecord]:
    """A new order claimed by its first attempt, its first step running (D3, D6)."""
    order_id = unique_order_id()
    orders.create(Order(order_id, "c-1", (OrderItem("sku-1", 1),), "EUR"))
    created = states.create(new_record(order_id, "replies-a", NOW, STEPS)).record
    claimed = states.replace(
        transitions.claim(created, now=NOW, claim_deadline=NOW + timedelta(seconds=60))
    )
    instance = InstanceId(order_id, claimed.attempt)
    started = steps.begin_step(
        states,
        instance,
        Step(0, STEPS[0]),
        done=None,
        now=NOW,
        complete_by=step_deadline(NOW, TIMEOUTS),
    )
    assert started.record is not None
    return instance, started.record


def apply(
    states: StateStore, instance: InstanceId, response: AgentResponse, now: datetime
) -> Written:
    """The workflow's write for the answer to step 0 (E5, E8, C1)."""
    if response.outcome is AgentOutcome.SUCCEEDED:
        return steps.begin_step(
            states,
            instance,
            Step(1, STEPS[1]),
            done=Step(0, STEPS[0], response.reference),
            now=now,
            complete_by=step_deadline(now, TIMEOUTS),
        )
    return steps.fail_step(
        states,
        instance,
        Step(0, STEPS[0]),
        reason=response.detail or response.outcome.value,
        now=now,
        compensate_by=compensation_deadline(now, TIMEOUTS),
    )


@given(data=st.data(), ascii_only=st.booleans())
def test_a_response_is_taken_or_refused_and_what_is_taken_round_trips_through_the_record(
    stores: tuple[StateStore, OrderStore, StateStore], data: st.DataObject, ascii_only: bool
) -> None:
    """E3, E8, C1, C8, S3: a response is taken in or refused with a reason naming what is
    wrong; one taken in reaches the record unchanged, and applying it twice is once."""
    states, orders, fresh_states = stores
    instance, running = running_first_step(states, orders)
    request_id = f"{instance}:{STEPS[0]}"
    document: Any = data.draw(agent_response_documents(str(instance), request_id))
    body = json.dumps(document, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        response = from_json(body, AgentResponse)
    except PayloadError as refused:
        reason = str(refused)  # the dead letter's description (activities.agent_bridge)
        assert reason
        assert fresh_states.get(instance.order_id) == running
        return
    assert from_json(body, AgentResponse) == response
    assert from_json(to_json(response), AgentResponse) == response
    if response.request_id != request_id or response.instance_id != str(instance):
        # The orchestrator takes only the answer to its own request (E3); the bridge routes
        # by instance id, so a stray answer changes nothing here.
        if response.request_id != request_id:
            with pytest.raises(AgentMessageError, match="came for request"):
                response.answering(request_id)
        with pytest.raises(AgentMessageError, match="came for request"):
            replace(response, request_id=request_id + "x").answering(request_id)
        assert fresh_states.get(instance.order_id) == running
        return
    assert response.answering(request_id) == response
    first = apply(states, instance, response, NOW + timedelta(seconds=1))
    assert first.applied
    written = first.record
    assert written is not None
    read_back = fresh_states.get(instance.order_id)
    assert read_back == written
    assert read_back is not None
    if response.outcome is AgentOutcome.SUCCEEDED:
        assert read_back.steps[0].state is StepState.COMPLETED
        assert read_back.steps[0].reference == response.reference
        assert [entry.reference for entry in read_back.compensation_log] == [response.reference]
    else:
        assert read_back.process_state is ProcessState.ERROR
        assert read_back.last_error == (response.detail or response.outcome.value)
    apply(states, instance, response, NOW + timedelta(seconds=2))
    again = fresh_states.get(instance.order_id)
    assert again is not None
    assert replace(again, updated_at=written.updated_at) == written, (
        "the same answer applied twice changed the record"
    )


@pytest.mark.parametrize("field", ["request_id", "instance_id", "detail", "reference"])
def test_a_body_that_is_no_utf_8_is_refused_with_a_reason_s3(field: str) -> None:
    """S3: the property's rarest broken body, always: a lone surrogate written into the body
    raw rather than as a JSON escape, so the bytes are no UTF-8. It is refused with a
    `PayloadError`, the bridge's dead letter with a reason, like any other broken body."""
    document = {
        "schema_version": 1,
        "request_id": "o-1:1:reserve-stock",
        "instance_id": "o-1:1",
        "outcome": AgentOutcome.FAILED.value,
        "detail": None,
        "reference": None,
        field: "a\ud800",
    }
    body = json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")
    with pytest.raises(PayloadError) as refused:
        from_json(body, AgentResponse)
    assert str(refused.value)
