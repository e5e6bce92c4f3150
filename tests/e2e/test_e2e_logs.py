"""Structured logs through the real pipeline (C9, C3).

The devhost runs the app in a language worker process at the devhost's log level, here INFO,
and the worker writes its records to its standard error as ``level=... logger=... <event>
k=v ...``. A step-workflow order whose payment is declined for good compensates; the
worker's output then holds one key=value line per step activity and step write - each step
begun, the failed step, each undo begun and finished, the order finished - with the order's
id, the attempt and the step, and nowhere the customer's id.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import order_body, running_pipeline
from tests.unit.test_structured_logs import fields
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

ORDER = "o-logged"
CUSTOMER = "customer-logged-4711"
STEP_RECORD = re.compile(r"level=INFO logger=app\.steps (?P<event>[a-z ]+?) (?P<fields>\S+=.*)$")


@pytest.mark.timeout(180)
async def test_c9_the_step_activities_log_key_value_lines_with_the_ids_and_never_the_customer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # The level the devhost hands its language workers is this process's root level.
    caplog.set_level(logging.INFO)
    declined = FaultPlan(
        rules=(FaultRule(FaultKind.PERMANENT, order_id=ORDER, operation="charge"),)
    )
    async with running_pipeline(
        tmp_path, service_faults={"payment": declined}, worker_processes=1
    ) as e2e:
        await e2e.submit(order_body(ORDER, customer_id=CUSTOMER), message_id=ORDER)
        await e2e.statuses(ORDER, "compensated")
    # The worker has exited: everything it wrote is in the captured standard error.
    output = capfd.readouterr().err

    records = [
        (found["event"], fields(found["fields"]))
        for found in map(STEP_RECORD.search, output.splitlines())
        if found is not None
    ]
    ours = [(event, found) for event, found in records if found.get("order.id") == ORDER]
    assert ours, f"no app.steps record of {ORDER} in the worker's output:\n{output[-4000:]}"
    assert all(
        (found["instance.id"], found["attempt"]) == (f"{ORDER}:1", "1") for _, found in ours
    ), ours
    logged = {(event, found.get("step"), found.get("state")) for event, found in ours}
    assert logged >= {
        ("step begun", "reserve-stock", None),
        ("step begun", "charge-payment", None),
        ("step failed", "charge-payment", None),
        ("undo begun", "charge-payment", None),
        ("undo begun", "reserve-stock", None),
        ("undo finished", "charge-payment", None),
        ("undo finished", "reserve-stock", None),
        ("order finished", None, "Compensated"),
    }, sorted(logged, key=str)
    assert ("step begun", "ship-order", None) not in logged
    assert CUSTOMER not in output, "a log line carries the customer's id"
