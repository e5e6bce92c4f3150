"""An upgrade with orders in flight: every order finishes on the version it began with (C7).

The previous version of the app (``tests/e2e/previous_version``: today's functions with the
order workflow as version 1 was released) runs under ``python -m devhost start`` and accepts
orders, whose first step the stock service holds for a while; the host is killed with those
orders in flight. The current app then starts on the same state store, orders database,
Durable histories and broker. Every order the previous version started must end Processed
on the workflow version its instance was started with, each side effect done once, while an
order submitted after the upgrade starts on the current app's default version.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TextIO

import pytest
from devhost.durable.history import EventType
from devhost.host import DevHost, HostOptions
from devhost.servicebus.config import load_config
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import eventually, eventually_true

import bootstrap
from adapters.sqlite_store import open_sqlite_stores
from domain.ports import StateStore, StoreMetrics
from domain.records import ProcessState, StateRecord, StepState
from domain.workflow import WORKFLOW_VERSION
from orchestrators.order_workflow import orchestration_version
from tests.e2e.e2e_helpers import STEP_SERVICES, record_summary, submit_orders, within
from tools.demo.pipeline import BROKER_CONFIG, LOCAL_SETTINGS, REPOSITORY, sample_settings
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SimulatedServices

# A backstop only: every stage below has its own bound, so a stall fails naming its stage.
pytestmark = pytest.mark.timeout(480)

PREVIOUS_APP = Path(__file__).parent / "previous_version"
PREVIOUS_VERSION = "1.0"
"""The orchestration version the previous app's host.json gave new instances."""
OLD_ORDERS = [f"o-old-{index}" for index in range(8)]
PATIENCE = {"STEP_TIMEOUT_SECONDS": "120", "CLAIM_TIMEOUT_SECONDS": "120"}
"""Deadlines no restart outlasts on a loaded machine: an old order that does not finish in
its first attempt failed its replay, it did not run out of time."""
NEW_ORDER = "o-new"
SETTLE_SECONDS = 120
STAGE_BOUND_SECONDS = 60.0
SDK_TIMEOUT_SECONDS = 30.0


def previous_app(target: Path) -> Path:
    """The previous version's app root: its function app, its orchestrator, and host.json as
    it shipped, new instances at PREVIOUS_VERSION."""
    target.mkdir()
    for module in ("function_app.py", "previous_workflow.py"):
        shutil.copy2(PREVIOUS_APP / module, target / module)
    host = json.loads((REPOSITORY / "host.json").read_text(encoding="utf-8"))
    host["extensions"]["durableTask"]["defaultVersion"] = PREVIOUS_VERSION
    (target / "host.json").write_text(json.dumps(host, indent=2), encoding="utf-8")
    return target


@pytest.fixture
def broker() -> Iterator[ServiceBusBroker]:
    running = ServiceBusBroker(load_config(BROKER_CONFIG))
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def services() -> AsyncIterator[SimulatedServices]:
    # Each old order's reservation takes 3 s, so the orders are in flight when the host dies.
    slow = FaultRule(FaultKind.LATENCY, order_id="o-old-*", operation="reserve", delay_seconds=3)
    running = SimulatedServices({"stock": FaultPlan(rules=(slow,))})
    await running.start()
    yield running
    await running.stop()


def app_settings(
    tmp_path: Path, broker: ServiceBusBroker, services: SimulatedServices
) -> dict[str, str]:
    return {
        **sample_settings(),
        **LOCAL_SETTINGS,
        "ServiceBusConnection": broker.connection_string,
        **{f"{name.upper()}_SERVICE_URL": services.url(name) for name in STEP_SERVICES},
        "SQLITE_DIRECTORY": str(tmp_path / "stores"),
        **PATIENCE,
    }


def start_devhost(
    app_root: Path, data_dir: Path, values: dict[str, str], log: TextIO
) -> subprocess.Popen[str]:
    """``python -m devhost start`` on the app in `app_root`; it prints a line once ready."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "devhost", "start", "--app-root", str(app_root)),
            *("--data", str(data_dir), "--http-port", "0"),
        ],
        cwd=REPOSITORY,
        env={**os.environ, **values, "PYTHONPATH": f"{app_root}{os.pathsep}{REPOSITORY}"},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def records(states: StateStore, order_ids: list[str]) -> dict[str, StateRecord | None]:
    return {order_id: states.get(order_id) for order_id in order_ids}


def unfinished(found: dict[str, StateRecord | None]) -> str:
    """The orders not Processed, each as an operator would read its record."""
    return "; ".join(
        record_summary(order_id, record)
        for order_id, record in found.items()
        if record is None or record.process_state is not ProcessState.PROCESSED
    )


async def failed_replays(host: DevHost, instance_ids: list[str]) -> dict[str, object]:
    """The instances among `instance_ids` that failed, each with what failed it."""
    assert host.engine is not None
    failed = {}
    for instance_id in instance_ids:
        status = await host.engine.get_status(instance_id, show_history=False)
        if status is not None and status.runtime_status.value == "Failed":
            failed[instance_id] = status.output
    return failed


async def started_version(host: DevHost, instance_id: str) -> str | None:
    """The version an instance was started with, as its ExecutionStarted event keeps it."""
    assert host.engine is not None
    status = await host.engine.get_status(instance_id, show_history=True)
    assert status is not None, f"no instance {instance_id}"
    (started,) = [e for e in status.history or [] if e["EventType"] == EventType.EXECUTION_STARTED]
    version = started.get("Version")
    return None if version is None else str(version)


async def test_orders_in_flight_during_an_upgrade_finish_on_the_version_they_began_with_c7(
    tmp_path: Path, broker: ServiceBusBroker, services: SimulatedServices
) -> None:
    values = app_settings(tmp_path, broker, services)
    data_dir = tmp_path / "devhost"
    states, orders = open_sqlite_stores(tmp_path / "stores", StoreMetrics())
    old_log = (tmp_path / "previous-version.log").open("w", encoding="utf-8")
    old_host = start_devhost(previous_app(tmp_path / "previous-app"), data_dir, values, old_log)
    try:
        assert old_host.stdout is not None
        ready = await within(
            asyncio.to_thread(old_host.stdout.readline),
            "starting the previous version's devhost",
            STAGE_BOUND_SECONDS,
        )
        assert ready.startswith("devhost ready"), (tmp_path / "previous-version.log").read_text()
        await submit_orders(broker.connection_string, OLD_ORDERS, bound=SDK_TIMEOUT_SECONDS)

        def in_flight() -> bool:
            """Every old order's instance started and began its first step: a claim whose
            start the kill cut off would only expire and be retried as a new attempt."""
            found = records(states, OLD_ORDERS).values()
            return all(r is not None and r.steps[0].state is StepState.RUNNING for r in found)

        await eventually(in_flight, "every old order's first step begun", bound=60)
    finally:
        os.kill(old_host.pid, signal.SIGKILL)
        await asyncio.to_thread(old_host.wait, 30)
        old_log.close()
    at_upgrade = records(states, OLD_ORDERS)
    assert all(r and r.process_state is ProcessState.PROCESSING for r in at_upgrade.values())

    services.replace_fault_plan("stock", FaultPlan.preset("none", "stock"))
    new_host = DevHost(
        HostOptions(app="function_app:app", app_root=REPOSITORY, data_dir=data_dir, http_port=0),
        AppSettings(values),
    )
    everyone = [*OLD_ORDERS, NEW_ORDER]
    try:
        await within(new_host.start(), "starting the current app's devhost", STAGE_BOUND_SECONDS)
        await submit_orders(broker.connection_string, [NEW_ORDER], bound=SDK_TIMEOUT_SECONDS)

        old_instances = [f"{order_id}:1" for order_id in OLD_ORDERS]

        async def all_processed_or_a_replay_failed() -> bool:
            return not unfinished(records(states, everyone)) or bool(
                await failed_replays(new_host, old_instances)
            )

        try:
            await eventually_true(
                all_processed_or_a_replay_failed,
                "every order Processed after the upgrade",
                SETTLE_SECONDS,
            )
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}: {unfinished(records(states, everyone))}") from None
        failed = await failed_replays(new_host, old_instances)
        assert not failed, (
            "instances the previous version started failed on the current code; keep their "
            f"version's code in WORKFLOWS and give the change a new version (C7): {failed}"
        )
        final = records(states, everyone)
        for order_id in OLD_ORDERS:
            record = final[order_id]
            assert record is not None
            assert record.workflow_version == 1
            # The instance the previous version started is the one that finished the order:
            # its history replayed on the current code, no attempt failed and none was retried.
            assert (record.attempt, record.failure_count) == (1, 0), record_summary(
                order_id, record
            )
            assert record.locked_by is not None
            assert await started_version(new_host, record.locked_by) == PREVIOUS_VERSION
            for service in STEP_SERVICES:
                assert len(services.ledger_entries(service, order_id)) == 1, (order_id, service)
        upgraded = final[NEW_ORDER]
        assert upgraded is not None
        assert upgraded.workflow_version == WORKFLOW_VERSION
        assert upgraded.locked_by is not None
        assert await started_version(new_host, upgraded.locked_by) == orchestration_version(
            WORKFLOW_VERSION
        )
        assert new_host.listener_failures == []
    finally:
        try:
            await within(new_host.stop(), "stopping the current app's devhost", STAGE_BOUND_SECONDS)
        finally:
            await within(bootstrap.shutdown(), "closing the app's clients", STAGE_BOUND_SECONDS)
            states.close()
            orders.close()
