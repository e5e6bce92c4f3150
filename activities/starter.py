"""The start of attempts (D1-D3, C5, C7, U7): `start_claimed`, `give_back`, and the starter's
timer trigger `start_pending_orders`.

`start_claimed` starts one orchestration for a claim `services.starter` won, after the claim
is stored (D3), running the order's own workflow version (C7), and after delivering what the
record still owed, which the attempt's first write replaces (C6). A start (or that delivery)
that fails releases its claim for the starter's next tick, spending none of the order's
failure budget (C4). The submission starts the order it accepted with `start_claimed`; the
starter, every STARTER_SCHEDULE tick, starts what the submission did not: orders past the
running cap, waiting out a retry delay, or whose claim or start failed.
"""

from __future__ import annotations

import asyncio

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from activities.replies import deliver_owed
from adapters import blocking_calls
from observability import logs
from observability.tracing import order_span
from orchestrators.order_workflow import ORCHESTRATOR, attempt_input, orchestration_version
from services.starter import Claim, claim_pending, release

bp = df.Blueprint()
CONCURRENT_STARTS = 16
log = logs.get_logger("app.starter")


@bp.timer_trigger(schedule="%STARTER_SCHEDULE%", arg_name="timer")
@bp.durable_client_input(client_name="client")
async def start_pending_orders(
    timer: func.TimerRequest, client: df.DurableOrchestrationClient
) -> None:
    app = bootstrap.services()
    run = await blocking_calls.run(
        claim_pending,
        app.states,
        bootstrap.now(),
        bounds=app.settings.starter_scan,
        timeouts=app.settings.timeouts,
        max_running=app.settings.max_running_orders,
        max_backlog=app.settings.max_backlog_orders,
    )
    # Each claim is already won, so the starts may go out together (bounded): one after
    # another, a large page of claims would take longer than the starter's cadence.
    slots = asyncio.Semaphore(CONCURRENT_STARTS)

    async def start(claim: Claim) -> bool:
        async with slots:
            return await start_claimed(client, claim)

    started = sum(await asyncio.gather(*(start(claim) for claim in run.claims)))
    log.info(
        "starter run",
        running=run.running,
        pending=run.pending,
        claims=len(run.claims),
        started=started,
        pages=run.pages,
        items_read=run.items_read,
        lost_races=run.lost_races,
        refused=run.refused,
        stopped=run.stopped,
    )


async def start_claimed(client: df.DurableOrchestrationClient, claim: Claim) -> bool:
    """Start the attempt of a won `claim` (D3, C7); on failure release the claim (C4)."""
    app = bootstrap.services()
    try:
        with order_span(
            "starter.start",
            order_id=claim.instance_id.order_id,
            instance_id=claim.instance_id,
            attempt=claim.instance_id.attempt,
            parent=claim.record.trace_parent,
        ):
            await deliver_owed(claim.record, clear=False)
            await client.start_new(
                ORCHESTRATOR,
                instance_id=str(claim.instance_id),
                client_input=attempt_input(
                    claim.record, app.settings.agent_transport, app.settings.timeouts
                ),
                version=orchestration_version(claim.record.workflow_version),
            )
    except Exception:
        # No attempt ran, so none is spent: the claim goes back to the next tick.
        log.exception("could not start attempt", instance_id=claim.instance_id)
        await give_back(claim)
        return False
    return True


async def give_back(claim: Claim) -> None:
    """Release `claim` for the starter's next tick (D3, C4); if even that write fails, the
    claim's deadline brings the supervisor."""
    try:
        await blocking_calls.run(release, bootstrap.services().states, claim, bootstrap.now())
    except Exception:
        log.exception("could not release claim", instance_id=claim.instance_id)
