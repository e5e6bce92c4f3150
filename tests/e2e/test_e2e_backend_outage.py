"""A Durable backend outage spends no order's failure budget (D3, U4, C4).

While the task hub's storage backend cannot be reached, every start of an orchestration
fails. The starter's claims are then released for the next tick instead of left to expire
as failed attempts, so five minutes of outage end no order in Error: once the backend is
back, each order starts and completes with its FailureCount untouched.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from devhost.testing import eventually

import bootstrap
from domain.records import ProcessState
from tests.e2e.e2e_helpers import QUICK_RECOVERY, order_body, running_pipeline

ORDERS = ["o-outage-1", "o-outage-2", "o-outage-3"]
OUTAGE = timedelta(minutes=5)


async def test_five_minutes_without_the_durable_backend_end_no_order_in_error_d3_c4(
    tmp_path: Path,
) -> None:
    async with running_pipeline(tmp_path, settings=QUICK_RECOVERY, virtual_time=True) as e2e:
        management = e2e.pipeline.host.management
        assert management is not None
        management.unavailable = True
        began = bootstrap.now()
        for order_id in ORDERS:
            await e2e.submit(order_body(order_id), message_id=order_id)

        await eventually(
            lambda: bootstrap.now() >= began + OUTAGE, "five minutes of outage", bound=120
        )
        during = [await e2e.record(order_id) for order_id in ORDERS]
        management.unavailable = False
        for order_id in ORDERS:
            await e2e.wait_for_record(
                order_id, lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
            )

        assert all(r is not None and r.process_state is not ProcessState.ERROR for r in during)
        for order_id in ORDERS:
            record = await e2e.record(order_id)
            assert record is not None
            assert record.failure_count == 0, record
