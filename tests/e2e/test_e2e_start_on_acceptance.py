"""An accepted order starts in the submission that accepted it (D3, C5, C4), through the
real pipeline: with the starter's timer never firing, an order runs to completion; at the
running cap the submission leaves it Pending and the starter starts it later; a start that
fails while the Durable backend is down leaves it to the starter, the message settled and
nothing in Error.

The starter's timer is off (`NEVER`); the tests run its tick themselves when they want one.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from azure.functions.timer import TimerRequest
from devhost.testing import eventually

import bootstrap
from domain.records import ProcessState
from tests.e2e.e2e_helpers import E2E, NEVER, ORDERS, QUICK_RECOVERY, order_body, running_pipeline

NO_STARTER = {**QUICK_RECOVERY, "STARTER_SCHEDULE": NEVER}
STARTER = "start_pending_orders"
LOOK = timedelta(minutes=2)
"""Virtual time a test lets pass to see that nothing starts an order."""


async def _processed(e2e: E2E, order_id: str) -> None:
    await e2e.wait_for_record(
        order_id, lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
    )


async def _let_time_pass() -> None:
    began = bootstrap.now()
    await eventually(lambda: bootstrap.now() >= began + LOOK, "two minutes of virtual time")


async def test_an_accepted_order_completes_without_a_starter_tick_d3(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path, settings=NO_STARTER, virtual_time=True) as e2e:
        await e2e.submit(order_body("o-now"), message_id="o-now")
        await _processed(e2e, "o-now")
        await e2e.statuses("o-now", "completed")

        record = await e2e.record("o-now")
        assert record is not None
        assert (record.attempt, record.failure_count) == (1, 0), record


async def test_at_the_running_cap_the_submission_leaves_the_order_to_the_starter_c5(
    tmp_path: Path,
) -> None:
    # One running order fills the cap; the instance counts once and then adds the orders it
    # started itself, so its view holds the first order as running for the whole test.
    settings = {**NO_STARTER, "MAX_RUNNING_ORDERS": "1", "BACKLOG_RECOUNT_SECONDS": "3600"}
    async with running_pipeline(tmp_path, settings=settings, virtual_time=True) as e2e:
        await e2e.submit(order_body("o-first"), message_id="o-first")
        await _processed(e2e, "o-first")

        await e2e.submit(order_body("o-capped"), message_id="o-capped")
        await e2e.statuses("o-capped", "received")
        await _let_time_pass()
        waiting = await e2e.record("o-capped")
        assert waiting is not None
        assert (waiting.process_state, waiting.attempt) == (ProcessState.PENDING, 0), waiting

        await e2e.pipeline.host.invoke(STARTER, TimerRequest(past_due=False))
        await _processed(e2e, "o-capped")
        await e2e.statuses("o-capped", "completed")


async def test_a_start_that_fails_in_the_submission_leaves_the_order_to_the_starter_d3_c4(
    tmp_path: Path,
) -> None:
    async with running_pipeline(tmp_path, settings=NO_STARTER, virtual_time=True) as e2e:
        management = e2e.pipeline.host.management
        assert management is not None
        management.unavailable = True
        await e2e.submit(order_body("o-outage"), message_id="o-outage")
        # The submission claimed the record and gave the claim back when the start failed;
        # the attempt number stays spent (D4), the failure budget does not (C4).
        await e2e.wait_for_record(
            "o-outage",
            lambda r: r.process_state is ProcessState.PENDING and r.attempt == 1,
            "the claim released",
        )
        await e2e.drained(ORDERS, "the submission settled its message")
        assert await e2e.peek(ORDERS, dead_letters=True) == []
        await _let_time_pass()
        during = await e2e.record("o-outage")
        assert during is not None
        assert during.process_state is ProcessState.PENDING, during

        management.unavailable = False
        await e2e.pipeline.host.invoke(STARTER, TimerRequest(past_due=False))
        await _processed(e2e, "o-outage")

        record = await e2e.record("o-outage")
        assert record is not None
        assert (record.attempt, record.failure_count) == (2, 0), record
