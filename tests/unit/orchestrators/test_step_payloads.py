"""The step workflow's payloads cross the Durable Functions boundary as JSON (C7, C10).

Histories keep them: what one version of the app wrote must read back the same in the next.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from orchestrators.step_payloads import StepRef, StepsAttempt, StepWrite, StepWritten

ORDER = {"OrderID": "o-1", "CustomerID": "c-1", "Items": [{"sku": "s-1", "quantity": 2}]}
REQUEST = {"requestId": "o-1:1:charge-payment", "deadline": "2026-08-01T12:00:30.000000Z"}


def test_a_step_write_reads_back_from_its_json_unchanged() -> None:
    write = StepWrite(
        order_id="o-1",
        attempt=2,
        at="2026-08-01T12:00:00.000000Z",
        step=StepRef(1, "charge-payment"),
        done=StepRef(0, "reserve-stock", "res-1"),
        order=ORDER,
        agent_transport="servicebus",
    )
    document = json.loads(json.dumps(write.to_dict()))
    assert StepWrite.from_dict(document) == write
    # The hand-built dictionary holds every field, as dataclasses.asdict would.
    assert document == asdict(write)


def test_a_step_answer_carries_the_order_inside_its_request() -> None:
    written = StepWritten(applied=True, request={**REQUEST, "order": ORDER})
    document = json.loads(json.dumps(written.to_dict()))
    assert document == asdict(written)
    assert StepWritten.from_dict(document) == written
    assert StepWritten.from_dict(document).order == ORDER
    assert StepWritten(applied=False).order is None


def test_an_answer_recorded_with_the_order_beside_the_request_still_replays_c7() -> None:
    recorded = {"applied": True, "request": {**REQUEST, "order": ORDER}, "order": ORDER, "undo": []}
    written = StepWritten.from_dict(recorded)
    assert written.applied
    assert written.order == ORDER
    assert written.request == recorded["request"]


def test_an_attempt_to_undo_reads_back_with_its_steps_in_order() -> None:
    attempt = StepsAttempt(
        order_id="o-1",
        attempt=3,
        steps=("reserve-stock", "charge-payment"),
        agent_transport="activity",
        resume_at=2,
        undo=(StepRef(1, "charge-payment", "pay-1"), StepRef(0, "reserve-stock", "res-1")),
    )
    assert StepsAttempt.from_dict(json.loads(json.dumps(attempt.to_dict()))) == attempt
