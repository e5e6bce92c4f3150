"""What one fault-free order of three steps costs (S2, D3, D4, D6, E4, E5, R2, C6).

The aim for a happy order of the step workflow: at most 7 state-store writes and the orders
database's one, 2 store reads, and 2 Service Bus messages per step plus the order's status
messages and its submission.
- Writes: the order (S2), and in the state store its record (S2), the claim (D3), one fenced
  write per step that sets its CompleteBy and records the step before it completed (D4, D6,
  C1), the last step's completion with Processed and the statuses it owes (E5, C6), and the
  write that clears them from the record's outbox once they went out (C6).
- Reads: the starter's query page that served the record (D1) and the orchestration's one
  load of the order, which then travels with the attempt (D6).
- Messages: per step the agent's request and its response (E1, E3); the statuses
  `received`, `in-progress` per step and `completed` (R2); the client's submission.
The starter's and supervisor's polls of an empty store are the price of their cadence (U7),
paid whether or not orders flow, so they are counted apart: queries that served no record.
"""

from pathlib import Path

from devhost.testing import eventually

import bootstrap
from domain.ports import OperationKind
from domain.workflow import DEFAULT_ORDER_STEPS
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    ORDERS,
    REPLIES,
    order_body,
    running_pipeline,
)

STEPS = len(DEFAULT_ORDER_STEPS)
STATUSES = 1 + STEPS + 1  # received, in-progress per step, completed
MAX_STATE_WRITES = 7
MAX_WRITES = MAX_STATE_WRITES + 1  # and the orders database's
MAX_READS = 2
MAX_MESSAGES = 2 * STEPS + STATUSES + 1  # and the submission


async def test_one_fault_free_order_stays_within_its_cost_budget(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-cost"), message_id="o-cost")
        await e2e.statuses("o-cost", "completed")
        await e2e.drained(AGENT_RESPONSES, "the agents' answers were consumed")
        # The client may hear `completed` before the app's sender has counted it.
        await eventually(
            lambda: e2e.app_sent()[REPLIES] >= STATUSES,
            "the app counted every status it sent",
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
    assert sent[REPLIES] == STATUSES
    assert [sent[queue] for queue in AGENT_REQUESTS] == [1] * STEPS
    assert sent[AGENT_RESPONSES] == STEPS
    assert e2e.sent_by_client == {ORDERS: 1}
