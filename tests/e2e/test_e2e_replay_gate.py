"""The replay gate on a running app (C7): the devhost's Durable HTTP API gives the gate the
histories of the instances in flight, with the extension's system key, as a predeploy check
reads a deployed app's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from domain.records import ProcessState
from tests.e2e.e2e_helpers import order_body, running_pipeline
from tools.replay.command import CANNOT_RUN, CLEAN, main
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

ORDER = "o-in-flight"


async def test_c7_the_gate_replays_the_instances_a_running_app_has_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stock service never answers, so the order's first attempt stays in flight.
    stock = FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id=ORDER, operation="reserve"),))
    async with running_pipeline(tmp_path, service_faults={"stock": stock}) as e2e:
        await e2e.submit(order_body(ORDER), message_id=ORDER)
        await e2e.wait_for_record(
            ORDER,
            lambda r: r.process_state is ProcessState.PROCESSING and r.current_step is not None,
            "Processing, its first step begun",
        )
        host = e2e.pipeline.host
        assert host.http is not None
        assert host.keys is not None
        url = f"http://127.0.0.1:{host.http.port}"

        code = await asyncio.to_thread(main, ["--url", url, f"--key={host.keys.durable_extension}"])
        out, err = capsys.readouterr()
        refused = await asyncio.to_thread(main, ["--url", url, "--key", "not-the-key"])
        refusal = capsys.readouterr().err

    assert code == CLEAN, out + err
    assert f"replays           {ORDER}:1" in out
    assert "1 of 1 instances replay" in out
    assert refused == CANNOT_RUN
    assert "give the extension's system key" in refusal
