"""One end-to-end retry budget per order: a service that never answers well gets no more
calls than RETRY_BUDGET, however agent tries, redeliveries and supervisor retries add up (C4).
"""

from __future__ import annotations

from pathlib import Path

from domain.records import ProcessState
from tests.e2e.e2e_helpers import QUICK_RECOVERY, order_body, running_pipeline
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

RETRY_BUDGET = 12
SETTINGS = {
    **QUICK_RECOVERY,
    "COMPENSATION_TIMEOUT_SECONDS": "10",
    "RETRY_BUDGET": str(RETRY_BUDGET),
    "AGENT_DELIVERY_ATTEMPTS": "2",
}


async def test_calls_to_a_failing_service_never_exceed_the_retry_budget_c4(
    tmp_path: Path,
) -> None:
    """Every charge of this order fails transiently: the payment agent retries within its
    share, the supervisor retries the attempt up to MAX_FAILURES, then gives up and the
    reservation is undone - and the payment service saw at most RETRY_BUDGET charges."""
    always_down = FaultPlan(
        rules=(FaultRule(FaultKind.TRANSIENT, order_id="o-budget", operation="charge"),)
    )
    async with running_pipeline(tmp_path, settings=SETTINGS, virtual_time=True) as e2e:
        e2e.pipeline.services.replace_fault_plan("payment", always_down)
        await e2e.submit(order_body("o-budget"), message_id="o-budget")

        replies = await e2e.statuses("o-budget", "compensated", bound=120)

        assert replies[-1].body["status"] == "compensated"
        record = await e2e.record("o-budget")
        assert record is not None
        assert record.process_state is ProcessState.COMPENSATED
        assert record.failure_count == 3
        charges = e2e.pipeline.services.stats("payment")["faults_injected"]["transient"]
        assert 3 <= charges <= RETRY_BUDGET
        for service in ("stock", "payment", "shipping"):
            assert e2e.pipeline.services.stats(service)["requests"] <= RETRY_BUDGET, service
        assert len(e2e.pipeline.services.ledger_entries("stock", "o-budget")) == 2
