"""The replay gate on a running app (C7): the histories of the instances in flight, read as a
predeploy check reads a deployed app's: from its Durable Task Scheduler with Microsoft's
``durabletask`` client, or through the Durable HTTP API with the extension's system key."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from devhost.durable import RuntimeStatus
from devhost.testing import eventually_true

from domain.agent_messages import AgentOperation
from domain.records import ProcessState
from orchestrators import order_workflow
from tests.e2e.e2e_helpers import E2E, order_body, running_pipeline
from tests.infra.azure_yaml import hook
from tests.infra.bicep import ROOT
from tools.replay.command import CANNOT_RUN, CLEAN, main
from tools.replay.gate import judge, load
from tools.replay.sources import InstanceHistory
from tools.replay.verdicts import Kind
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

ORDER = "o-in-flight"


# The stock service never answers, so the order's first attempt stays in flight.
HANGS = FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id=ORDER, operation="reserve"),))


async def in_flight(e2e: E2E) -> None:
    await e2e.submit(order_body(ORDER), message_id=ORDER)
    await e2e.wait_for_record(
        ORDER,
        lambda r: r.process_state is ProcessState.PROCESSING and r.current_step is not None,
        "Processing, its first step begun",
    )


async def test_c7_the_gate_reads_the_instances_in_flight_from_the_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_pipeline(tmp_path, service_faults={"stock": HANGS}) as e2e:
        await in_flight(e2e)
        scheduler = e2e.pipeline.host.scheduler
        assert scheduler is not None
        hub = scheduler.task_hub

        code = await asyncio.to_thread(main, ["--scheduler", scheduler.endpoint, "--task-hub", hub])
        out, err = capsys.readouterr()
        elsewhere = await asyncio.to_thread(
            main, ["--scheduler", scheduler.endpoint, "--task-hub", "another-hub"]
        )
        refusal = capsys.readouterr().err
        # azd's predeploy hook, with the outputs a deployment gives it.
        predeploy = await asyncio.to_thread(
            subprocess.run,
            ["sh", "-c", hook("predeploy")["posix"][1]],
            cwd=ROOT,
            env={
                **os.environ,
                "DURABLE_TASK_SCHEDULER_ENDPOINT": scheduler.endpoint,
                "TASKHUB_NAME": hub,
            },
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert code == CLEAN, out + err
    assert f"replays           {ORDER}:1" in out
    assert "1 of 1 instances replay" in out
    assert elsewhere == CANNOT_RUN
    assert "NOT_FOUND: task hub 'another-hub' does not exist here" in refusal
    assert predeploy.returncode == 0, predeploy.stdout + predeploy.stderr
    assert f"replays           {ORDER}:1" in predeploy.stdout


async def test_c7_the_durable_http_api_shows_a_summary_the_gate_will_not_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the Durable extension on Azure, the devhost's HTTP API shows a history's summary:
    the gate refuses to guess from it and names the source to use instead."""
    async with running_pipeline(tmp_path, service_faults={"stock": HANGS}) as e2e:
        await in_flight(e2e)
        host = e2e.pipeline.host
        assert host.http is not None
        assert host.keys is not None
        url = f"http://127.0.0.1:{host.http.port}"

        code = await asyncio.to_thread(main, ["--url", url, f"--key={host.keys.durable_extension}"])
        summary = capsys.readouterr().err
        refused = await asyncio.to_thread(main, ["--url", url, "--key=not-the-key"])
        unauthorised = capsys.readouterr().err

    assert code == CANNOT_RUN
    assert f"{ORDER}:1 is a summarised history" in summary
    assert "(--scheduler)" in summary
    assert refused == CANNOT_RUN
    assert "give the extension's system key" in unauthorised


async def test_c7_the_gates_verdict_is_the_error_the_engine_fails_the_order_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The devhost's fidelity: an order in flight, judged by the gate after a change, and
    then replayed live by the engine under that change, meet the same words."""
    async with running_pipeline(
        tmp_path, service_faults={"stock": HANGS}, virtual_time=True
    ) as e2e:
        await in_flight(e2e)
        status = await e2e.instance(f"{ORDER}:1")
        assert status is not None
        assert status.history is not None
        recorded = InstanceHistory(f"{ORDER}:1", status.history, "the running devhost")

        renamed = dict(order_workflow._BEGIN)
        renamed[AgentOperation.DO] = ("start_step", order_workflow.RUN_STEP)
        monkeypatch.setattr(order_workflow, "_BEGIN", renamed)
        [verdict] = await judge(load("function_app:app", ROOT), [recorded])

        async def failed() -> bool:
            live = await e2e.instance(f"{ORDER}:1")
            return live is not None and live.runtime_status is RuntimeStatus.FAILED

        # The step's timer fires: the engine replays the instance under the changed code.
        await eventually_true(failed, "the engine failing the changed instance")
        live = await e2e.instance(f"{ORDER}:1")

    assert verdict.kind is Kind.NON_DETERMINISTIC
    assert live is not None
    assert verdict.detail in str(live.output)
    assert "asks for activity 'start_step'" in verdict.detail
