"""An app for the kill -9 test: its activity blocks forever on its first run (after
leaving a marker file) and finishes on any later run."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="spec")
def blocking_step(spec: Any) -> str:
    directory = Path(spec["dir"])
    run = len(list(directory.glob("started-*"))) + 1
    (directory / f"started-{run}").write_text("started")
    if run == 1:
        threading.Event().wait()  # never returns: the test kills the process here
    return f"finished on run {run}"


@app.orchestration_trigger(context_name="context")
def crash_workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    deadline = context.current_utc_datetime + dt.timedelta(minutes=10)
    results = yield context.task_all(
        [context.call_activity(blocking_step, context.get_input()), context.create_timer(deadline)]
    )
    approval = yield context.wait_for_external_event("Approval")
    return {"step": results[0], "approval": approval}
