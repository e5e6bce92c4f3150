"""One durable retry budget per order (C4): against services that always answer 503, no
service is ever called more often for an order than RETRY_BUDGET, however agent tries,
deliveries, supervisor retries, compensation resumes and operator actions add up.

The real pipeline runs on skipping time; the operator acts through the console's HTTP
functions, as on Azure. Both shapes of agent (E1) spend the same budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.records import ProcessState, StateRecord
from tests.e2e.e2e_helpers import E2E, QUICK_RECOVERY, order_body, running_pipeline
from tests.e2e.test_e2e_console import console
from tools.simulators.services import SERVICES, FaultKind, FaultPlan, FaultRule

RETRY_BUDGET = 16
"""Three steps and MAX_FAILURES=3: eight requests of 2 tries, three of them kept to undo."""
SETTINGS = {
    **QUICK_RECOVERY,
    "COMPENSATION_TIMEOUT_SECONDS": "10",
    "RETRY_BUDGET": str(RETRY_BUDGET),
    "AGENT_DELIVERY_ATTEMPTS": "2",
}
SPENT = "retry budget is spent"
BOUND = 120.0


def always_down(*calls: tuple[str, str]) -> FaultPlan:
    """Every call of each (order, operation) answers 503, for good."""
    return FaultPlan(
        rules=tuple(
            FaultRule(FaultKind.TRANSIENT, order_id=order_id, operation=operation)
            for order_id, operation in calls
        )
    )


async def until(e2e: E2E, order_id: str, state: ProcessState, why: str) -> StateRecord:
    """The order's record once it reached `state` with `why` in its last error."""
    return await e2e.wait_for_record(
        order_id,
        lambda r: r.process_state is state and why in (r.last_error or ""),
        f"{state} because {why!r}",
        bound=BOUND,
    )


@pytest.mark.parametrize("transport", ["servicebus", "activity"])
async def test_no_service_is_called_for_an_order_more_often_than_its_budget_c4(
    tmp_path: Path, transport: str
) -> None:
    """`o-error`: its reservation always fails. The supervisor retries it up to MAX_FAILURES
    and gives up (Error); an operator resubmits it, and the supervisor gives up again once
    its steps spent their part of the budget, below MAX_FAILURES; the next resubmit is
    refused (409). `o-undo`: its charge always fails, and so does every undo: given up, it
    compensates, each stalled run resumed until MAX_FAILURES (CompensationFailed); an
    operator's retry runs on what is left, then the undos' part is spent too and the next
    retry is refused (409). No service ever counted more calls for either order than
    RETRY_BUDGET, nor all services together."""
    faults = {
        "stock": always_down(("o-error", "reserve"), ("o-undo", "release")),
        "payment": always_down(("o-undo", "charge"), ("o-undo", "refund")),
    }
    settings = {**SETTINGS, "AGENT_TRANSPORT": transport}
    async with running_pipeline(
        tmp_path, service_faults=faults, settings=settings, virtual_time=True
    ) as e2e:
        for order_id in ("o-error", "o-undo"):
            await e2e.submit(order_body(order_id), message_id=order_id)

        given_up = await until(e2e, "o-error", ProcessState.ERROR, "MAX_FAILURES=3")
        assert given_up.failure_count == 3
        status, resubmitted = await console(e2e, "POST", "/orders/o-error/resubmit")
        assert status == 200, resubmitted
        spent = await until(e2e, "o-error", ProcessState.ERROR, SPENT)
        assert spent.failure_count < 3, "given up for the budget, before MAX_FAILURES"
        assert spent.tries_left == 0
        status, refused = await console(e2e, "POST", "/orders/o-error/resubmit")
        assert status == 409, refused
        assert SPENT in refused["error"]

        stalled = await until(e2e, "o-undo", ProcessState.COMPENSATION_FAILED, "MAX_FAILURES=3")
        assert stalled.undo_tries_left > 0
        status, retried = await console(e2e, "POST", "/orders/o-undo/retry-compensation")
        assert status == 202, retried
        spent = await until(e2e, "o-undo", ProcessState.COMPENSATION_FAILED, SPENT)
        assert spent.undo_tries_left == 0
        status, refused = await console(e2e, "POST", "/orders/o-undo/retry-compensation")
        assert status == 409, refused

        calls = {
            service: e2e.pipeline.services.stats(service)["requests_per_order"]
            for service in SERVICES
        }
    for order_id in ("o-error", "o-undo"):
        per_service = {service: counts.get(order_id, 0) for service, counts in calls.items()}
        assert sum(per_service.values()) <= RETRY_BUDGET, (order_id, per_service)
    assert calls["stock"]["o-error"] >= 5, "every attempt, resubmitted ones too, tried"
    assert calls["payment"]["o-undo"] >= 7, "every charge and every refund tried"
