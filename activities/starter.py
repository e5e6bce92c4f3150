"""The starter (D1-D3): a timer trigger that claims Pending records and starts attempts.

Each claim is a conditional update made BEFORE its orchestration instance is scheduled
(D3), so two starters never start the same attempt. A crash between the claim and
``start_new`` leaves a Processing record with a provisional CompleteBy, which the
supervisor recovers. The cadence is STARTER_SCHEDULE (U7).
"""

from __future__ import annotations

import asyncio
import logging

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from orchestrators.payloads import AttemptInput
from services.starter import claim_pending

bp = df.Blueprint()
log = logging.getLogger("app.starter")


@bp.timer_trigger(schedule="%STARTER_SCHEDULE%", arg_name="timer")
@bp.durable_client_input(client_name="client")
async def start_pending_orders(
    timer: func.TimerRequest, client: df.DurableOrchestrationClient
) -> None:
    app = bootstrap.services()
    run = await asyncio.to_thread(claim_pending, app.states, app.settings, bootstrap.now())
    started = 0
    for claim in run.claims:
        attempt = AttemptInput(
            claim.instance_id.order_id, claim.instance_id.attempt, app.settings.agent_transport
        )
        try:
            await client.start_new(
                "order_workflow", instance_id=str(claim.instance_id), client_input=attempt.to_dict()
            )
            started += 1
        except Exception:
            # The claim stands with its provisional CompleteBy: the supervisor recovers it.
            log.exception("could not start attempt instance=%s", claim.instance_id)
    log.info(
        "starter run claims=%d started=%d pages=%d items_read=%d lost_races=%d stopped=%s",
        len(run.claims),
        started,
        run.pages,
        run.items_read,
        run.lost_races,
        run.stopped,
    )
