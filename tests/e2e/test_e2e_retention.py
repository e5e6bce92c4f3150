"""Retirement of a finished order through the real pipeline (C3, S2, S3).

Past FINISHED_RETENTION_SECONDS the supervisor's sweep deletes the order document and purges
the orchestration histories of the order's attempts; the state record stays as a tombstone.
A resend of the same order then runs nothing and is answered with its final status again;
a different body under its OrderID is a conflict. Virtual time makes the retention pass in
a few real seconds.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from devhost.testing import eventually

import bootstrap
from domain.records import ProcessState
from tests.e2e.e2e_helpers import (
    E2E,
    ORDERS,
    REPLIES,
    STEP_SERVICES,
    order_body,
    running_pipeline,
)

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

RETENTION_SECONDS = 120
RETENTION = {
    "FINISHED_RETENTION_SECONDS": str(RETENTION_SECONDS),
    # Ticks of ten seconds: the clock jumps from tick to tick, so the retention passes in a
    # dozen moves rather than a hundred.
    "STARTER_SCHEDULE": "*/10 * * * * *",
    "SUPERVISOR_SCHEDULE": "*/10 * * * * *",
}


def side_effects(e2e: E2E, order_id: str) -> dict[str, list[tuple[str, int]]]:
    """What each step's service did for the order: its ledger, as (kind, attempt)."""
    return {
        service: [
            (entry.kind.value, entry.attempt)
            for entry in e2e.pipeline.services.ledger_entries(service, order_id)
        ]
        for service in STEP_SERVICES
    }


async def test_c3_s2_a_retired_order_is_answered_again_and_never_runs_again(
    tmp_path: Path, store_settings: dict[str, str]
) -> None:
    """C3, S2, S3: an order completes; once the retention has passed, the sweep retires it:
    its order document is gone, its instance's history purged, its record a tombstone. The
    same order sent again is answered with `completed` once more and no service sees a new
    call; a changed order under the same OrderID is dead-lettered as a conflict and leaves
    no order document."""
    order = "o-retired"
    async with running_pipeline(
        tmp_path, settings={**RETENTION, **store_settings}, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)
        replies = await e2e.statuses(order, "completed")
        assert replies[-1].message_id == f"{order}:completed:1"
        done = side_effects(e2e, order)
        assert all(len(entries) == 1 for entries in done.values()), done
        assert await e2e.stored_order(order) is not None
        assert await e2e.instance(f"{order}:1") is not None

        tombstone = await e2e.wait_for_record(
            order, lambda record: record.retired_at is not None, "retired"
        )

        assert tombstone.retired_at is not None
        assert tombstone.retired_at >= tombstone.updated_at + timedelta(seconds=RETENTION_SECONDS)
        assert (tombstone.process_state, tombstone.attempt) == (ProcessState.PROCESSED, 1)
        assert tombstone.body_hash is not None
        assert await e2e.stored_order(order) is None
        assert await e2e.instance(f"{order}:1") is None

        replied = e2e.app_sent()[REPLIES]
        await e2e.submit(order_body(order), message_id=f"{order}-resent")

        # The broker's duplicate detection keeps real time, in which the retention did not
        # pass, so it drops the copy: count what the app sent.
        await eventually(
            lambda: e2e.app_sent()[REPLIES] == replied + 1, "the final status sent again"
        )
        await e2e.drained(ORDERS, "the resend was handled")
        again = await e2e.record(order)
        assert again is not None
        assert (again.etag, again.attempt) == (tombstone.etag, 1)
        assert await e2e.stored_order(order) is None
        assert await e2e.instance(f"{order}:2") is None
        assert side_effects(e2e, order) == done

        await e2e.submit(order_body(order, currency="USD"), message_id=f"{order}-changed")

        [dead] = await e2e.count_of(ORDERS, 1, dead_letters=True)
        assert (dead.message_id, dead.dead_letter_reason) == (f"{order}-changed", "OrderConflict")
        assert await e2e.stored_order(order) is None
        assert side_effects(e2e, order) == done
        assert bootstrap.services().settings.state_store == store_settings["STATE_STORE"]
