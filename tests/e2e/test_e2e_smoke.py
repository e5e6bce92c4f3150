"""One order through the whole local pipeline: every step, then completed (S1, D1-D6, E1-E5,
R1-R2, C1)."""

import json
from pathlib import Path

from azure.servicebus.aio import ServiceBusClient

from demo.pipeline import DEMO_REPLY_QUEUE, local_pipeline
from tests.e2e.e2e_helpers import submit_orders


async def test_an_order_is_received_and_completed(tmp_path: Path) -> None:
    async with local_pipeline(tmp_path) as pipeline:
        client = ServiceBusClient.from_connection_string(pipeline.connection_string)
        async with client:
            await submit_orders(pipeline.connection_string, ["o-1"])
            receiver = client.get_queue_receiver(DEMO_REPLY_QUEUE)
            statuses: list[dict[str, object]] = []
            async with receiver:
                for _ in range(60):
                    for message in await receiver.receive_messages(max_wait_time=1):
                        statuses.append(json.loads(b"".join(message.body)))
                        await receiver.complete_message(message)
                    if len(statuses) == 5:
                        break
        assert [(s["status"], s["step"]) for s in statuses] == [
            ("received", None),
            ("in-progress", "reserve-stock"),
            ("in-progress", "charge-payment"),
            ("in-progress", "ship-order"),
            ("completed", None),
        ]
        assert statuses[-1]["orderId"] == "o-1"
        assert statuses[-1]["attempt"] == 1
        for service in ("stock", "payment", "shipping"):
            assert len(pipeline.services.ledger_entries(service, "o-1")) == 1
        assert pipeline.host.listener_failures == []
