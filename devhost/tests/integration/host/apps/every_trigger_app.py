"""An example app with every trigger type the devhost runs.

A Service Bus message starts a job orchestration; the orchestration calls an activity, then
races an approval event against a ten-minute durable timer. HTTP endpoints read a job's
status and approve it, and one starts a job as the Durable quickstart does, answering with
the status links of create_check_status_response; a timer trigger ticks every thirty seconds.
"""

import datetime as dt
import json
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

ticks: list[func.TimerRequest] = []


@app.service_bus_queue_trigger(arg_name="msg", queue_name="%JOBS_QUEUE%", connection="SB")
@app.durable_client_input(client_name="client")
async def submit_job(msg: func.ServiceBusMessage, client: df.DurableOrchestrationClient) -> None:
    job = msg.get_body().decode()
    await client.start_new("job_flow", instance_id=job, client_input={"value": len(job)})


@app.orchestration_trigger(context_name="context")
def job_flow(context: df.DurableOrchestrationContext) -> Any:
    doubled = yield context.call_activity("double", context.get_input()["value"])
    deadline = context.current_utc_datetime + dt.timedelta(minutes=10)
    timer = context.create_timer(deadline)
    approval = context.wait_for_external_event("Approval")
    winner = yield context.task_any([approval, timer])
    if winner == timer:
        return {"doubled": doubled, "outcome": "timed-out"}
    timer.cancel()
    return {"doubled": doubled, "outcome": "approved", "by": approval.result}


@app.activity_trigger(input_name="value")
def double(value: int) -> int:
    return value * 2


@app.route(route="jobs", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_job(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    job = req.get_body().decode()
    await client.start_new("job_flow", instance_id=job, client_input={"value": len(job)})
    return client.create_check_status_response(req, job)


@app.route(route="jobs/{job}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def job_status(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    status = await client.get_status(req.route_params["job"])
    if status.runtime_status is None:
        return func.HttpResponse(status_code=404)
    body = {"status": status.runtime_status.value, "output": status.output}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@app.route(route="jobs/{job}/approve", methods=["POST"])
@app.durable_client_input(client_name="client")
async def approve_job(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    await client.raise_event(req.route_params["job"], "Approval", req.get_body().decode())
    return func.HttpResponse(status_code=202)


@app.timer_trigger(schedule="*/30 * * * * *", arg_name="timer")
def tick(timer: func.TimerRequest) -> None:
    ticks.append(timer)
