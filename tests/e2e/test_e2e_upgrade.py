"""An upgrade with orders in flight: version-1 orders finish on version-1 logic (C7, C10).

The app as it was before the step workflow existed (its code taken from the repository's
history) runs under ``python -m devhost start`` and accepts orders; the host is killed with
orders in flight; the current app then starts on the same state store, orders database,
Durable histories and broker. Every order accepted by the old code must end Processed
through the one-step workflow it started with - its record still WorkflowVersion 1, its
fulfilment done once - while an order submitted after the upgrade runs the step workflow.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator, Iterator
from io import BytesIO
from pathlib import Path
from typing import TextIO

import pytest
from devhost.host import DevHost, HostOptions
from devhost.servicebus.config import load_config
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import eventually
from tools.simulators.fulfilment import FaultKind, FaultPlan, FaultRule, FulfilmentService

import bootstrap
from adapters.sqlite_store import open_sqlite_stores
from domain.ports import StateStore, StoreMetrics
from domain.records import WORKFLOW_ONE_STEP, WORKFLOW_STEPS, ProcessState, StateRecord
from tests.e2e.e2e_helpers import record_summary, submit_orders, within
from tools.demo.pipeline import (
    BROKER_CONFIG,
    LOCAL_SETTINGS,
    REPOSITORY,
    sample_settings,
)

# A backstop only: every stage below has its own bound, so a stall fails naming its stage.
pytestmark = pytest.mark.timeout(480)

VERSION_1_COMMIT = "d4b7f99ca40b43481e129a21e055fa807073f88c"
"""The last commit whose app knew only the one-step workflow."""
APP_FILES = (
    "function_app.py",
    "bootstrap.py",
    "host.json",
    "activities",
    "adapters",
    "domain",
    "orchestrators",
    "order_agents",
    "services",
    "supervisor",
)
OLD_ORDERS = [f"o-v1-{index}" for index in range(12)]
SETTLE_SECONDS = 120
STAGE_BOUND_SECONDS = 60.0
SDK_TIMEOUT_SECONDS = 30.0


def version_1_app(target: Path) -> Path:
    """The version-1 app's files from the repository's history, unpacked into `target`."""
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", "--format=tar", VERSION_1_COMMIT, *APP_FILES],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(
            f"the version-1 app (commit {VERSION_1_COMMIT[:12]}) is not in this clone's history: "
            f"{archive.stderr.decode().strip()} - the upgrade test needs a full clone"
        )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


@pytest.fixture
def broker() -> Iterator[ServiceBusBroker]:
    running = ServiceBusBroker(load_config(BROKER_CONFIG))
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def services() -> AsyncIterator[FulfilmentService]:
    # Every fulfilment of the old orders takes 3 s, so they are in flight when the host dies.
    running = FulfilmentService(
        FaultPlan(rules=(FaultRule(FaultKind.LATENCY, order_id="o-v1-*", delay_seconds=3),))
    )
    await running.start()
    yield running
    await running.stop()


def app_settings(
    tmp_path: Path, broker: ServiceBusBroker, services: FulfilmentService
) -> dict[str, str]:
    return {
        **sample_settings(),
        **LOCAL_SETTINGS,
        "ServiceBusConnection": broker.connection_string,
        "FULFILMENT_SERVICE_URL": services.base_url,
        "STOCK_SERVICE_URL": services.services.url("stock"),
        "PAYMENT_SERVICE_URL": services.services.url("payment"),
        "SHIPPING_SERVICE_URL": services.services.url("shipping"),
        "SQLITE_DIRECTORY": str(tmp_path / "stores"),
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
        env={**os.environ, **values, "PYTHONPATH": str(REPOSITORY)},
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


async def test_orders_in_flight_during_an_upgrade_finish_on_the_workflow_they_started_c7(
    tmp_path: Path, broker: ServiceBusBroker, services: FulfilmentService
) -> None:
    values = app_settings(tmp_path, broker, services)
    old_app = version_1_app(tmp_path / "version-1")
    data_dir = tmp_path / "devhost"
    states, orders = open_sqlite_stores(tmp_path / "stores", StoreMetrics())
    old_log = (tmp_path / "version-1.log").open("w", encoding="utf-8")
    old_host = start_devhost(old_app, data_dir, values, old_log)
    try:
        assert old_host.stdout is not None
        ready = await within(
            asyncio.to_thread(old_host.stdout.readline),
            "starting the version-1 devhost",
            STAGE_BOUND_SECONDS,
        )
        assert ready.startswith("devhost ready"), (tmp_path / "version-1.log").read_text()
        await submit_orders(broker.connection_string, OLD_ORDERS, bound=SDK_TIMEOUT_SECONDS)

        def in_flight() -> bool:
            found = records(states, OLD_ORDERS).values()
            return all(r is not None for r in found) and any(
                r is not None and r.process_state is ProcessState.PROCESSING for r in found
            )

        await eventually(in_flight, "every old order accepted, some of them in flight", bound=60)
    finally:
        os.kill(old_host.pid, signal.SIGKILL)
        await asyncio.to_thread(old_host.wait, 30)
        old_log.close()
    at_upgrade = records(states, OLD_ORDERS)
    assert {r.workflow_version for r in at_upgrade.values() if r} == {WORKFLOW_ONE_STEP}
    assert any(r and r.process_state is not ProcessState.PROCESSED for r in at_upgrade.values())

    services.replace_fault_plan(FaultPlan.preset("none"))
    new_host = DevHost(
        HostOptions(app="function_app:app", app_root=REPOSITORY, data_dir=data_dir, http_port=0),
        AppSettings(values),
    )
    everyone = [*OLD_ORDERS, "o-v2"]
    try:
        await within(new_host.start(), "starting the current app's devhost", STAGE_BOUND_SECONDS)
        await submit_orders(broker.connection_string, ["o-v2"], bound=SDK_TIMEOUT_SECONDS)

        def all_processed() -> bool:
            return not unfinished(records(states, everyone))

        try:
            await eventually(
                all_processed, "every order Processed after the upgrade", SETTLE_SECONDS
            )
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}: {unfinished(records(states, everyone))}") from None
        final = records(states, everyone)
        for order_id in OLD_ORDERS:
            record = final[order_id]
            assert record is not None
            assert (record.workflow_version, record.steps) == (WORKFLOW_ONE_STEP, ())
            assert len(services.ledger_entries(order_id)) == 1, order_id
        assert services.stats()["double_side_effects"] == 0
        upgraded = final["o-v2"]
        assert upgraded is not None
        assert upgraded.workflow_version == WORKFLOW_STEPS
        assert len(upgraded.compensation_log) == 3
        assert services.ledger_entries("o-v2") == []
        assert new_host.listener_failures == []
    finally:
        try:
            await within(new_host.stop(), "stopping the current app's devhost", STAGE_BOUND_SECONDS)
        finally:
            await within(bootstrap.shutdown(), "closing the app's clients", STAGE_BOUND_SECONDS)
            states.close()
            orders.close()


def test_the_version_1_app_is_the_one_step_app() -> None:
    """Guards the commit the upgrade test runs: its app knows the one-step workflow only."""
    shown = subprocess.run(
        ["git", "-C", str(REPOSITORY), "show", f"{VERSION_1_COMMIT}:function_app.py"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "step_activities" not in shown
    assert "order_steps" in shown
