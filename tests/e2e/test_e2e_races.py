"""Racing starters and supervisors through the real Functions code (D3, U2, U4, U6).

Two hosts' timers firing at the same moment are played by invoking the app's own starter or
supervisor function twice at once (what the host's admin endpoint does), against the
embedded stores, broker and durable engine. The schedules are set to once a year so that
only the invocations under test run.
"""

import asyncio
import datetime as dt
from pathlib import Path

from azure.functions.timer import TimerRequest

import bootstrap
from domain.records import ProcessState
from domain.transitions import claim, new_record
from domain.workflow import DEFAULT_ORDER_STEPS
from services.submission import Accepted, submit_order
from tests.e2e.e2e_helpers import order_body, running_pipeline

NEVER_ON_ITS_OWN = {"STARTER_SCHEDULE": "0 0 0 1 1 *", "SUPERVISOR_SCHEDULE": "0 0 0 1 1 *"}


def timer() -> TimerRequest:
    return TimerRequest(past_due=False)


def submit(order_ids: list[str]) -> None:
    """Accept orders straight through the submission service (no reply queue), each to run
    the ORDER_STEPS step workflow as a submitted order does."""
    app = bootstrap.services()
    for order_id in order_ids:
        body = order_body(order_id, items=[("sku-1", 1)])
        result = submit_order(
            body,
            reply_to=None,
            message_id=order_id,
            orders=app.orders,
            states=app.states,
            admission=app.admission,
            reply_queues=app.settings.reply_queues,
            now=bootstrap.now(),
            steps=app.settings.order_steps,
        )
        assert isinstance(result, Accepted)


def expired_claims(order_ids: list[str]) -> None:
    """Step-workflow state records whose first attempt was claimed a minute ago and expired
    since, before any step began."""
    app = bootstrap.services()
    past = bootstrap.now() - dt.timedelta(minutes=1)
    for order_id in order_ids:
        record = new_record(order_id, None, past, app.settings.order_steps)
        created = app.states.create(record).record
        app.states.replace(claim(created, now=past, claim_deadline=past + dt.timedelta(seconds=1)))


async def test_two_starters_at_once_start_each_attempt_once_d3(tmp_path: Path) -> None:
    order_ids = [f"race-{index:02d}" for index in range(60)]
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(submit, order_ids)
        host = e2e.pipeline.host
        await asyncio.gather(
            host.invoke("start_pending_orders", timer()),
            host.invoke("start_pending_orders", timer()),
        )
        assert host.engine is not None
        started = await host.engine.get_status_by()
        instances = sorted(status.instance_id for status in started)
        assert instances == [f"{order_id}:1" for order_id in order_ids]
        assert {tuple(status.input["steps"]) for status in started} == {DEFAULT_ORDER_STEPS}
        records = [await e2e.record(order_id) for order_id in order_ids]
        assert all(record is not None and record.attempt == 1 for record in records)


async def test_two_supervisors_at_once_count_each_failure_once_u4_u6(tmp_path: Path) -> None:
    order_ids = [f"expired-{index:02d}" for index in range(40)]
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(expired_claims, order_ids)
        host = e2e.pipeline.host
        await asyncio.gather(
            host.invoke("supervise_orders", timer()),
            host.invoke("supervise_orders", timer()),
        )
        records = [await e2e.record(order_id) for order_id in order_ids]
        assert [r.failure_count for r in records if r is not None] == [1] * 40
        assert {r.process_state for r in records if r is not None} == {ProcessState.PENDING}
        assert all(r is not None and r.locked_by is None for r in records)


async def test_each_sweep_is_bounded_and_the_next_one_continues_u2(tmp_path: Path) -> None:
    order_ids = [f"backlog-{index:02d}" for index in range(25)]
    bounds = {**NEVER_ON_ITS_OWN, "STORE_PAGE_SIZE": "4", "SUPERVISOR_MAX_ITEMS": "10"}
    async with running_pipeline(tmp_path, settings=bounds) as e2e:
        await asyncio.to_thread(expired_claims, order_ids)
        host = e2e.pipeline.host

        async def recovered() -> int:
            records = [await e2e.record(order_id) for order_id in order_ids]
            return sum(1 for r in records if r is not None and r.failure_count == 1)

        await host.invoke("supervise_orders", timer())
        assert await recovered() == 10
        await host.invoke("supervise_orders", timer())
        assert await recovered() == 20
        await host.invoke("supervise_orders", timer())
        assert await recovered() == 25
