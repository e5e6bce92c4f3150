"""What a committed transition owes is never lost, through the real pipeline (C6, R2, E8,
U4, C1, C2): a final status whose send fails past the activity's retries, and the alerts,
statuses and compensation start of supervisor recoveries whose sweep crashed on a store
error or could not send, all go out later through the supervisor's relay, each once by its
stable id. On SQLite and on the Cosmos DB API server.

Sends fail by a fault put in the app's own publisher (a queue the app cannot reach); the
embedded broker, the devhost's Durable engine and the stores run for real.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from azure.functions.timer import TimerRequest
from devhost.durable.status import RuntimeStatus
from devhost.testing import eventually_true

import bootstrap
from adapters.servicebus_publisher import ServiceBusPublisher
from domain.outgoing_messages import OutgoingMessage
from domain.ports import StoreUnavailable
from domain.records import ProcessState
from services.operator import resubmit_order
from services.supervisor import sweep
from tests.e2e.e2e_helpers import (
    ALERTS,
    NEVER,
    QUICK_RECOVERY,
    REPLIES,
    Delivered,
    order_body,
    running_pipeline,
)
from tests.support.failing_stores import FailsFromPage
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

GRACE_SECONDS = 20
"""OUTBOX_GRACE_SECONDS of these runs: longer than an activity's three tries."""


class UnreachableQueues:
    """The app's publisher, with a fault: a send that `refuses` fails as an unreachable
    queue fails it, until `lifted`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.refuses: Callable[[OutgoingMessage], bool] = lambda message: False
        self.refused: collections.Counter[str] = collections.Counter()
        send = ServiceBusPublisher.send

        async def failing_send(publisher: ServiceBusPublisher, message: OutgoingMessage) -> None:
            if self.refuses(message):
                self.refused[message.message_id] += 1
                raise ConnectionError(f"queue {message.queue} cannot be reached")
            await send(publisher, message)

        monkeypatch.setattr(ServiceBusPublisher, "send", failing_send)

    def lifted(self) -> None:
        self.refuses = lambda message: False


def ids(messages: list[Delivered], order_id: str) -> list[str]:
    return [m.message_id or "" for m in messages if m.correlation_id == order_id]


async def past(moment: datetime) -> None:
    """Until the app's (virtual) clock is past `moment`: the starter's ticks move it."""

    async def passed() -> bool:
        return bootstrap.now() > moment

    await eventually_true(passed, f"the clock past {moment}", 60.0)


async def test_c6_r2_a_completed_status_whose_send_fails_past_the_retries_is_relayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]
) -> None:
    """The order's reply queue cannot be reached when its last step completes: Processed is
    written, `completed` is not sent, the activity's three tries fail and the orchestration
    fails. Once the queue is back, the supervisor's relay sends `completed` and clears the
    outbox: the app hears every status once."""
    queues = UnreachableQueues(monkeypatch)
    queues.refuses = lambda message: message.subject == "completed"
    settings = {**store_settings, "OUTBOX_GRACE_SECONDS": str(GRACE_SECONDS)}
    async with running_pipeline(tmp_path, settings=settings, virtual_time=True) as e2e:
        await e2e.submit(order_body("o-1"), message_id="o-1")

        failed = await e2e.finished_instance("o-1:1")
        assert failed.runtime_status is RuntimeStatus.FAILED
        assert queues.refused["o-1:completed:1"] == 3
        record = await e2e.record("o-1")
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED
        assert record.owed is not None, "what Processed owes stays in the record"
        queues.lifted()

        replies = await e2e.statuses("o-1", "completed")
        cleared = await e2e.wait_for_record("o-1", lambda r: r.owed is None, "outbox cleared")

        assert bootstrap.now() >= record.owed.due + timedelta(seconds=GRACE_SECONDS)
        assert ids(replies, "o-1") == [
            "o-1:received:-",
            "o-1:in-progress:reserve-stock",
            "o-1:in-progress:charge-payment",
            "o-1:in-progress:ship-order",
            "o-1:completed:1",
        ]
        assert await e2e.pending(REPLIES) == [], "each status once"
        assert cleared.process_state is ProcessState.PROCESSED


async def test_c6_u4_c1_what_recoveries_owe_survives_a_store_error_a_crash_and_failed_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]
) -> None:
    """Three orders' attempts expire (MAX_FAILURES 1), each with a step in doubt. A sweep
    gives up `o-error`, which owes the start of the compensation that undoes its step by key
    (U4), then the store fails on its next page: the sweep crashes before starting it. The
    next sweep gives up `o-unsent` and requests compensation for `o-undo` while no alert or
    reply can be sent: `o-undo`'s start, owed after the progress its dead attempt owed, is
    not made. Once the queues are back and the grace has passed, one sweep's relay delivers
    all of it: each alert and status once, and the compensation instances, which end
    `o-error` and `o-unsent` in Error and `o-undo` Compensated."""
    queues = UnreachableQueues(monkeypatch)
    hang = FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id="o-undo", operation="charge"),))
    stock = FaultPlan(
        rules=tuple(
            FaultRule(FaultKind.HANG, order_id=order, operation="reserve")
            for order in ("o-error", "o-unsent")
        )
    )
    settings = {
        **store_settings,
        **QUICK_RECOVERY,
        "MAX_FAILURES": "1",
        "RETRY_BUDGET": "6",
        "STORE_PAGE_SIZE": "1",
        "SUPERVISOR_SCHEDULE": NEVER,
        "OUTBOX_GRACE_SECONDS": str(GRACE_SECONDS),
    }
    async with running_pipeline(
        tmp_path,
        service_faults={"stock": stock, "payment": hang},
        settings=settings,
        virtual_time=True,
    ) as e2e:
        await e2e.submit(order_body("o-error"), message_id="o-error")
        await e2e.wait_for_record("o-error", lambda r: r.current_step is not None, "running")
        await past(bootstrap.now() + timedelta(seconds=1))  # its deadline comes first
        for order in ("o-undo", "o-unsent"):
            await e2e.submit(order_body(order), message_id=order)
        for order in ("o-error", "o-undo", "o-unsent"):
            await e2e.finished_instance(f"{order}:1")
        app = bootstrap.services()

        def crashing_sweep() -> None:
            sweep(
                FailsFromPage(app.states, page=2),  # type: ignore[arg-type]
                bootstrap.now(),
                policy=app.settings.supervisor_policy,
                timeouts=app.settings.timeouts,
            )

        with pytest.raises(StoreUnavailable):
            await asyncio.to_thread(crashing_sweep)
        error = await e2e.record("o-error")
        assert error is not None
        assert error.process_state is ProcessState.COMPENSATING
        assert error.owed is not None
        assert await e2e.instance("o-error:2") is None, "the crash started nothing"

        queues.refuses = lambda message: message.queue in (ALERTS, REPLIES)
        await e2e.pipeline.host.invoke("supervise_orders", TimerRequest(past_due=False))
        undo = await e2e.record("o-undo")
        unsent = await e2e.record("o-unsent")
        assert undo is not None
        assert undo.process_state is ProcessState.COMPENSATING
        assert unsent is not None
        # Its start owed nothing before it, so its undo may already have ended it in Error.
        assert (unsent.locked_by, unsent.compensation_ends_in) == ("o-unsent:2", ProcessState.ERROR)
        assert queues.refused["o-undo:in-progress:reserve-stock"] >= 1
        assert await e2e.instance("o-undo:2") is None, "started only after what it follows"
        assert await e2e.instance("o-error:2") is None, "left to the relay after its grace"
        queues.lifted()

        await past(bootstrap.now() + timedelta(seconds=GRACE_SECONDS))
        await e2e.pipeline.host.invoke("supervise_orders", TimerRequest(past_due=False))

        alerts = await e2e.count_of(ALERTS, 2)
        finals = {"o-error:failed:2", "o-unsent:failed:2", "o-undo:compensated:2"}
        replies = await e2e.receive(
            REPLIES,
            until=lambda taken: finals <= {m.message_id for m in taken},
            what="the final status of every order",
        )
        compensated = await e2e.wait_for_record(
            "o-undo", lambda r: r.process_state is ProcessState.COMPENSATED, "compensated"
        )
        replies += await e2e.pending(REPLIES)
        assert sorted(a.message_id or "" for a in alerts) == [
            "order-error:o-error:2",
            "order-error:o-unsent:2",
        ]
        assert await e2e.pending(ALERTS) == [], "each alert once"
        assert ids(replies, "o-error") == ["o-error:received:-", "o-error:failed:2"]
        assert ids(replies, "o-unsent") == ["o-unsent:received:-", "o-unsent:failed:2"]
        assert ids(replies, "o-undo") == [
            "o-undo:received:-",
            "o-undo:in-progress:reserve-stock",
            "o-undo:compensated:2",
        ]
        assert compensated.compensation_failures == 0, "started by the relay, not resumed"
        for order in ("o-error", "o-unsent"):
            record = await e2e.wait_for_record(order, lambda r: r.owed is None, "delivered")
            assert record.process_state is ProcessState.ERROR


async def test_c6_e8_the_starter_delivers_what_a_resubmitted_order_still_owed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]
) -> None:
    """The first step fails for good while the alerts queue cannot be reached: Error is
    written, its alert and `failed` status are not sent, the activity's tries fail. An
    operator resubmits at once, well inside the relay's grace: the starter sends what the
    record still owed before it starts the new attempt, whose first write replaces the
    outbox, so nothing is lost and the relay has nothing left."""
    queues = UnreachableQueues(monkeypatch)
    queues.refuses = lambda message: message.queue == ALERTS
    stock = FaultPlan(
        rules=(FaultRule(FaultKind.PERMANENT, order_id="o-1", operation="reserve", attempt=1),)
    )
    settings = {**store_settings, "OUTBOX_GRACE_SECONDS": "3600"}
    async with running_pipeline(
        tmp_path, service_faults={"stock": stock}, settings=settings, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-1"), message_id="o-1")
        failed = await e2e.finished_instance("o-1:1")
        assert failed.runtime_status is RuntimeStatus.FAILED
        assert queues.refused["order-error:o-1:1"] == 3
        queues.lifted()

        app = bootstrap.services()
        await asyncio.to_thread(
            resubmit_order,
            app.states,
            "o-1",
            bootstrap.now(),
        )
        replies = await e2e.receive(
            REPLIES,
            until=lambda taken: "o-1:completed:2" in {m.message_id for m in taken},
            what="the resubmitted order's completed status",
        )
        [alert] = await e2e.count_of(ALERTS, 1)

        assert alert.message_id == "order-error:o-1:1"
        assert ids(replies, "o-1") == [
            "o-1:received:-",
            "o-1:failed:1",
            "o-1:in-progress:reserve-stock",
            "o-1:in-progress:charge-payment",
            "o-1:in-progress:ship-order",
            "o-1:completed:2",
        ]
        assert await e2e.pending(ALERTS) == []
