"""One durable retry budget per order (C4): against services that fail for good, no service
is ever called more often for an order than RETRY_BUDGET, however agent tries, deliveries,
supervisor retries, compensation resumes and operator actions add up.

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
"""Three steps and MAX_FAILURES=3: eight requests of 2 tries, three of them kept to undo, so
the steps' requests may draw 10 tries (five requests)."""
STEP_REQUESTS = 5
SETTINGS = {
    **QUICK_RECOVERY,
    "COMPENSATION_TIMEOUT_SECONDS": "10",
    "RETRY_BUDGET": str(RETRY_BUDGET),
    "AGENT_DELIVERY_ATTEMPTS": "2",
}
SPENT = "retry budget is spent"
"""What a refused operator action says."""
GAVE_UP_SPENT = "retry budget for its steps is spent (RETRY_BUDGET)"
STALLED_SPENT = "retry budget for its undos is spent (RETRY_BUDGET)"
UNDONE_BY_KEY = "undid its steps by their idempotency keys"
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
    """The order's record once it reached `state` with `why` in its last error, and its writer
    cleared what it owed: an operator acting before the clear would race that write."""
    return await e2e.wait_for_record(
        order_id,
        lambda r: r.process_state is state and why in (r.last_error or "") and r.owed is None,
        f"{state} because {why!r}",
        bound=BOUND,
    )


async def run_ended(e2e: E2E, order_id: str, resubmits: int) -> StateRecord:
    """The order's record once its run after `resubmits` resubmits ended in Error and its
    outbox was cleared."""
    return await e2e.wait_for_record(
        order_id,
        lambda r: (
            r.process_state is ProcessState.ERROR and r.resubmits == resubmits and r.owed is None
        ),
        f"Error after {resubmits} resubmits",
        bound=BOUND,
    )


@pytest.mark.parametrize("transport", ["servicebus", "activity"])
async def test_no_service_is_called_for_an_order_more_often_than_its_budget_c4(
    tmp_path: Path, transport: str
) -> None:
    """`o-declined`: its reservation is declined, so each run ends in Error at once (E8) and
    an operator resubmits it; every run draws a request's tries, so after five runs the
    next resubmit is refused (409) and the budget names what spent it.

    `o-error`: its first three reservations are declined (three runs, resubmitted), then
    every one answers 503. The supervisor retries the fourth run once and then gives up below
    MAX_FAILURES, since its steps spent their part of the budget; the reservation in doubt
    is undone by key from the part kept to undo (U4), and the order ends in Error, where a
    resubmit is refused because its key is undone.

    `o-undo`: its charge always fails, and so does every undo: given up, it compensates,
    each stalled run resumed until MAX_FAILURES (CompensationFailed); an operator's retry
    runs on what is left, then the undos' part is spent too and the next retry is refused
    (409). No order ever made more calls to all the services together than RETRY_BUDGET."""
    faults = {
        "stock": FaultPlan(
            rules=(
                FaultRule(FaultKind.PERMANENT, order_id="o-declined", operation="reserve"),
                FaultRule(FaultKind.PERMANENT, order_id="o-error", operation="reserve", times=3),
                FaultRule(FaultKind.TRANSIENT, order_id="o-error", operation="reserve"),
                FaultRule(FaultKind.TRANSIENT, order_id="o-undo", operation="release"),
            )
        ),
        "payment": always_down(("o-undo", "charge"), ("o-undo", "refund")),
    }
    settings = {**SETTINGS, "AGENT_TRANSPORT": transport}
    async with running_pipeline(
        tmp_path, service_faults=faults, settings=settings, virtual_time=True
    ) as e2e:
        for order_id in ("o-declined", "o-error", "o-undo"):
            await e2e.submit(order_body(order_id), message_id=order_id)

        for resubmits in range(STEP_REQUESTS):
            declined = await run_ended(e2e, "o-declined", resubmits)
            status, answer = await console(e2e, "POST", "/orders/o-declined/resubmit")
            if resubmits < STEP_REQUESTS - 1:
                assert status == 200, answer
        assert (status, declined.tries_left) == (409, 0), answer
        assert SPENT in answer["error"]

        for resubmits in range(3):
            await run_ended(e2e, "o-error", resubmits)
            status, answer = await console(e2e, "POST", "/orders/o-error/resubmit")
            assert status == 200, answer
        gave_up = await until(e2e, "o-error", ProcessState.ERROR, GAVE_UP_SPENT)
        assert gave_up.failure_count == 2, "given up for the budget, before MAX_FAILURES"
        assert gave_up.tries_left == 0
        assert gave_up.compensation_ends_in is ProcessState.ERROR
        assert gave_up.undo_tries_spent > 0, "its undo by key drew on the budget"
        status, answer = await console(e2e, "POST", "/orders/o-error/resubmit")
        assert status == 409, answer
        assert UNDONE_BY_KEY in answer["error"]

        stalled = await until(e2e, "o-undo", ProcessState.COMPENSATION_FAILED, "MAX_FAILURES=3")
        assert stalled.undo_tries_left > 0
        status, retried = await console(e2e, "POST", "/orders/o-undo/retry-compensation")
        assert status == 202, retried
        spent = await until(e2e, "o-undo", ProcessState.COMPENSATION_FAILED, STALLED_SPENT)
        assert spent.undo_tries_left == 0
        status, refused = await console(e2e, "POST", "/orders/o-undo/retry-compensation")
        assert status == 409, refused
        assert SPENT in refused["error"]

        calls = {
            service: e2e.pipeline.services.stats(service)["requests_per_order"]
            for service in SERVICES
        }
    for order_id in ("o-declined", "o-error", "o-undo"):
        per_service = {service: counts.get(order_id, 0) for service, counts in calls.items()}
        assert sum(per_service.values()) <= RETRY_BUDGET, (order_id, per_service)
    assert calls["stock"]["o-declined"] == STEP_REQUESTS, "one call per run, each declined"
    assert calls["stock"]["o-error"] >= 6, "every run, attempt and undo by key tried"
    assert calls["payment"]["o-undo"] >= 7, "every charge and every refund tried"
