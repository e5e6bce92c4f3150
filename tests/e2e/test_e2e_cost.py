"""What one fault-free order costs (issue 4's performance budget; S2, D3, D4, D6, E4, E5, R2).

At most 5 store writes (order, state record, claim, CompleteBy, Processed), 2 store reads (the
starter's query page that served the record, the orchestration's load of the order) and 6
Service Bus messages (submission, `received`, agent request and response, `completed`). The
starter's and supervisor's polls of an empty store are the price of their cadence (U7), paid
whether or not orders flow, so they are counted apart: queries that served no record.
"""

from pathlib import Path

import bootstrap
from domain.ports import OperationKind
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    ORDERS,
    REPLIES,
    order_body,
    running_pipeline,
)
from tests.support.waiting import eventually

MAX_WRITES = 5
MAX_READS = 2
MAX_MESSAGES = 6


async def test_one_fault_free_order_stays_within_its_cost_budget(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-cost"), message_id="o-cost")
        await e2e.statuses("o-cost", "completed")
        await e2e.drained(AGENT_RESPONSES, "the agent's answer was consumed")
        # The client may hear `completed` before the app's sender has counted it.
        await eventually(
            lambda: sum(e2e.app_sent().values()) >= 4,
            "the app counted received, request, response and completed",
        )

        costs = bootstrap.services().metrics.snapshot()
        sent = e2e.app_sent()

    writes = sum(cost.writes for cost in costs.values())
    point_reads = sum(cost.reads for kind, cost in costs.items() if kind is not OperationKind.QUERY)
    records_served_by_queries = costs[OperationKind.QUERY].items_read
    messages = sum(sent.values()) + sum(e2e.sent_by_client.values())
    assert writes <= MAX_WRITES, f"store writes per order: {writes}; {costs}"
    assert point_reads + records_served_by_queries <= MAX_READS, f"store reads per order: {costs}"
    assert messages <= MAX_MESSAGES, f"Service Bus messages per order: {sent} + submission"
    assert (sent[REPLIES], sent[AGENT_REQUESTS], sent[AGENT_RESPONSES]) == (2, 1, 1)
    assert e2e.sent_by_client == {ORDERS: 1}
