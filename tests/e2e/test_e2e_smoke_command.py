"""The post-deployment smoke test (`python -m tools.smoke`) against the local pipeline: one
order passes every check; with no app to run it, or with the settlement service refusing to
complete messages, the verdict names the cause (S1, R1, R2, C8)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from devhost.servicebus.config import load_config
from devhost.servicebus.server import ServiceBusBroker
from devhost.triggers.settlement import SettlementService

from tests.e2e.e2e_helpers import ORDERS, REPLIES, running_pipeline, within
from tools.demo.pipeline import BROKER_CONFIG, REPOSITORY
from tools.smoke.command import parser, smoke
from tools.smoke.verdict import Cause

SMOKE_BOUND_SECONDS = 45.0
NO_APP_BOUND_SECONDS = 3.0
_OVERALL_SLACK_SECONDS = 60.0


def options(connection_string: str, bound: float) -> list[str]:
    return [
        "--connection-string",
        connection_string,
        "--orders-queue",
        ORDERS,
        "--reply-queue",
        REPLIES,
        "--bound",
        str(bound),
    ]


async def test_the_smoke_test_passes_on_the_running_pipeline_r2(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path) as e2e:
        args = parser({}).parse_args(options(e2e.pipeline.connection_string, SMOKE_BOUND_SECONDS))
        verdict = await within(
            smoke(args), "the smoke test", SMOKE_BOUND_SECONDS + _OVERALL_SLACK_SECONDS
        )

    report = verdict.report()
    assert verdict.passed, "\n".join(report)
    assert report == [
        "PASS received",
        "PASS in-progress reserve-stock",
        "PASS in-progress charge-payment",
        "PASS in-progress ship-order",
        "PASS completed",
        "PASS no dead letter on the orders queue",
        "PASS no dead letter on the reply queue",
        "PASS the orders message was delivered once at most",
        "smoke test passed",
    ]


async def test_with_no_function_listening_the_command_exits_1_saying_no_functions_indexed() -> None:
    """`python -m tools.smoke` itself, as the postdeploy hook runs it, against a broker that no
    app listens to: the order waits on `orders`, never delivered."""
    broker = ServiceBusBroker(load_config(BROKER_CONFIG))
    await asyncio.to_thread(broker.start)
    try:
        command = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.smoke",
            *options(broker.connection_string, NO_APP_BOUND_SECONDS),
            cwd=REPOSITORY,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                command.communicate(), NO_APP_BOUND_SECONDS + _OVERALL_SLACK_SECONDS
            )
        finally:
            if command.returncode is None:
                command.kill()
                await command.wait()
    finally:
        await asyncio.to_thread(broker.stop)

    lines = out.decode().splitlines()
    assert command.returncode == 1, err.decode()
    assert "FAIL received" in lines
    assert lines[-1].startswith("smoke test FAILED: no functions indexed"), lines


async def test_when_messages_cannot_be_completed_the_smoke_test_says_settlement_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's settlement service refuses every complete, as on a plan where the SDK-type
    binding's settlement does not work: the app abandons the orders message after its work, the
    broker redelivers it until MaxDeliveryCount dead-letters it, and the smoke test names the
    cause. The order itself is not lost: it runs to `completed` (docs/deployment.md)."""
    settle = SettlementService.settle

    def refuse_complete(self: SettlementService, token: str, operation: str, **kw: Any) -> None:
        if operation == "complete":
            raise ValueError("settlement is not available")
        settle(self, token, operation, **kw)

    monkeypatch.setattr(SettlementService, "settle", refuse_complete)
    async with running_pipeline(tmp_path) as e2e:
        args = parser({}).parse_args(options(e2e.pipeline.connection_string, SMOKE_BOUND_SECONDS))
        verdict = await within(
            smoke(args), "the smoke test", SMOKE_BOUND_SECONDS + _OVERALL_SLACK_SECONDS
        )

    assert verdict.cause is Cause.SETTLEMENT_UNAVAILABLE, "\n".join(verdict.report())
    report = verdict.report()
    assert report[-1].startswith("smoke test FAILED: settlement unavailable on the plan")
    assert "FAIL the order was dead-lettered: MaxDeliveryCountExceeded" in report
    assert "PASS completed" in report


async def test_a_reply_queue_that_does_not_exist_is_a_failed_service_bus_call() -> None:
    broker = ServiceBusBroker(load_config(BROKER_CONFIG))
    await asyncio.to_thread(broker.start)
    try:
        args = parser({}).parse_args(
            [*options(broker.connection_string, NO_APP_BOUND_SECONDS), "--reply-queue", "nowhere"]
        )
        verdict = await within(
            smoke(args), "the smoke test", NO_APP_BOUND_SECONDS + _OVERALL_SLACK_SECONDS
        )
    finally:
        await asyncio.to_thread(broker.stop)

    assert verdict.cause is Cause.SERVICE_BUS_FAILED, "\n".join(verdict.report())
