"""One order through the whole local pipeline: every step, then completed (S1, D1-D6, E1-E5,
R1-R2, C1)."""

from pathlib import Path

from tests.e2e.e2e_helpers import STEP_SERVICES, order_body, running_pipeline


async def test_an_order_is_received_and_completed(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-1"), message_id="o-1")
        statuses = [reply.body for reply in await e2e.statuses("o-1", "completed")]
        ledgers = {s: e2e.pipeline.services.ledger_entries(s, "o-1") for s in STEP_SERVICES}

    assert [(s["status"], s["step"]) for s in statuses] == [
        ("received", None),
        ("in-progress", "reserve-stock"),
        ("in-progress", "charge-payment"),
        ("in-progress", "ship-order"),
        ("completed", None),
    ]
    assert statuses[-1]["orderId"] == "o-1"
    assert statuses[-1]["attempt"] == 1
    assert {service: len(entries) for service, entries in ledgers.items()} == {
        service: 1 for service in STEP_SERVICES
    }
