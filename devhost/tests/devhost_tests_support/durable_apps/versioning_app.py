"""Orchestrations that branch on ``context.version``, as an app adopting orchestration
versioning does: an HTTP starter that passes an optional ``version`` to ``start_new``, an
orchestrator with a path per version (and one for instances that have none), sub-orchestrations
with and without a version of their own, and a ``continue_as_new`` loop.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="start/{name}/{instance_id}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start ``name`` as ``instance_id``; ``?version=`` names the version, else the host's
    defaultVersion applies."""
    body = req.get_body()
    instance_id = await client.start_new(
        req.route_params["name"],
        instance_id=req.route_params["instance_id"],
        client_input=req.get_json() if body else None,
        version=req.params.get("version"),
    )
    return client.create_check_status_response(req, instance_id)


@app.activity_trigger(input_name="payload")
def step_v1(payload: Any) -> str:
    return "v1"


@app.activity_trigger(input_name="payload")
def step_v2(payload: Any) -> str:
    return "v2"


@app.activity_trigger(input_name="payload")
def step_unversioned(payload: Any) -> str:
    return "unversioned"


def step_for(version: str | None) -> str:
    """Version "1" keeps the original step, later versions take the new one, and instances
    created before there was a defaultVersion (no version, or "") keep theirs."""
    if not version:
        return "step_unversioned"
    return "step_v1" if version == "1" else "step_v2"


@app.orchestration_trigger(context_name="context")
def versioned(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    step = yield context.call_activity(step_for(context.version), None)
    return {"version": context.version, "step": step}


@app.orchestration_trigger(context_name="context")
def paused(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Takes its version's step, waits for "Continue", then starts two children: one with
    the version its input names, one without (it gets the defaultVersion of the host that
    starts it)."""
    step = yield context.call_activity(step_for(context.version), None)
    yield context.wait_for_external_event("Continue")
    explicit = yield context.call_sub_orchestrator(
        "child", version=(context.get_input() or {}).get("child_version")
    )
    default = yield context.call_sub_orchestrator("child")
    return {
        "version": context.version,
        "step": step,
        "explicit_child": explicit,
        "default_child": default,
    }


@app.orchestration_trigger(context_name="context")
def child(context: df.DurableOrchestrationContext) -> Any:
    return context.version


@app.orchestration_trigger(context_name="context")
def renewing(context: df.DurableOrchestrationContext) -> Any:
    """Continues as new once; the second generation reports its version."""
    generation = context.get_input() or 0
    if generation < 1:
        context.continue_as_new(generation + 1)
        return None
    return {"version": context.version, "generation": generation}
