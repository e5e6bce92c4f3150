"""Runners of every simulated service on one port: the command, a background thread, and the
ledger file that keeps each service's idempotency, fences and dispatches across restarts,
even after ``kill -9``, and is refused when damaged (E7, C8, C2)."""

import json
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest
import requests

from tests.integration.simulators.service_calls import (
    PAYLOADS,
    get_json,
    post_action,
    post_compensation,
    put_faults,
)
from tests.integration.simulators.simulator_process import SimulatorProcess
from tools.simulators.services import (
    PAYMENT,
    SERVICES,
    SHIPPING,
    STOCK,
    CorruptJournal,
    FaultKind,
    FaultPlan,
    FaultRule,
    SimulatedServices,
    SimulatedServicesThread,
    preset_plans,
)


async def test_command_serves_every_service_under_its_prefix_with_the_preset(
    session: aiohttp.ClientSession,
) -> None:
    simulator = await SimulatorProcess.start("--faults", "compensation-faults", "--seed", "3")
    try:
        served = {
            name: FaultPlan.from_json(
                await get_json(session, f"{simulator.base_url}{service.path_prefix}/faults"), name
            )
            for name, service in SERVICES.items()
        }
        await put_faults(session, f"{simulator.base_url}/stock", {"preset": "none"})
        reserved = await post_action(session, simulator.base_url, STOCK, "o-1")
    finally:
        exit_code = await simulator.end(signal.SIGTERM)

    assert served == preset_plans("compensation-faults")
    assert reserved[0] == 201
    assert exit_code == 0


async def test_command_exits_cleanly_on_sigint() -> None:
    simulator = await SimulatorProcess.start()

    assert await simulator.end(signal.SIGINT) == 0


async def test_ledger_file_keeps_idempotency_and_fences_across_kill_9(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = await SimulatorProcess.start("--ledger", str(ledger))
    try:
        _, performed = await post_action(session, first.base_url, STOCK, "o-1", attempt=1)
        assert (await post_action(session, first.base_url, STOCK, "o-1", attempt=2))[0] == 200
    finally:
        await first.end(signal.SIGKILL)
    with ledger.open("a") as file:
        file.write('{"service": "stock", "event": "reservation", "orderId": "o-')  # cut by a kill

    second = await SimulatorProcess.start("--ledger", str(ledger))
    try:
        replayed = await post_action(session, second.base_url, STOCK, "o-1", attempt=2)
        stale = await post_action(session, second.base_url, STOCK, "o-1", attempt=1, key="late")
        fresh = await post_action(session, second.base_url, STOCK, "o-2", attempt=1)
        stats = await get_json(session, f"{second.base_url}{STOCK.path_prefix}/stats")
    finally:
        assert await second.end(signal.SIGTERM) == 0

    assert replayed == (200, {**performed, "replayed": True})
    assert stale[0] == 409
    assert fresh[0] == 201
    assert fresh[1]["reservationId"] != performed["reservationId"]
    assert (stats["reservations"], stats["double_side_effects"]) == (2, 0)


async def test_ledger_file_keeps_every_service_across_a_restart(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    dispatching = FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="ship"),))
    before = SimulatedServices({SHIPPING.name: dispatching}, ledger_path=ledger)
    await before.start()
    try:
        performed = {
            step.name: (await post_action(session, before.base_url, step, "o-1", attempt=2))[1]
            for step in SERVICES.values()
        }
    finally:
        await before.stop()

    after = SimulatedServices(ledger_path=ledger)
    await after.start()
    try:
        replayed = {
            step.name: await post_action(session, after.base_url, step, "o-1", attempt=2)
            for step in SERVICES.values()
        }
        stale = await post_action(session, after.base_url, PAYMENT, "o-1", attempt=1, key="late")
        shipment_id = performed[SHIPPING.name]["shipmentId"]
        cancel = await post_compensation(session, after.base_url, SHIPPING, shipment_id, 2)
        refund = await post_compensation(
            session, after.base_url, PAYMENT, performed[PAYMENT.name]["paymentId"], 2
        )
        stats = {name: after.stats(name) for name in SERVICES}
    finally:
        await after.stop()

    assert replayed == {name: (200, {**body, "replayed": True}) for name, body in performed.items()}
    assert stale[0] == 409
    assert (cancel[0], cancel[1]["error"]) == (422, "already-dispatched")
    assert refund[0] == 201
    assert [stats[name]["double_side_effects"] for name in SERVICES] == [0, 0, 0]
    services_in_file = {json.loads(line)["service"] for line in ledger.read_text().splitlines()}
    assert services_in_file == set(SERVICES)


@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        ('{"service": "stock", "event": "reserv\n', "not a JSON line"),
        ('{"service": "stock", "event": "reservation"}\n', "not a ledger fact"),
        ('{"service": "teleport", "event": "fence", "orderId": "o", "attempt": 1}\n', "teleport"),
        ('{"event": "fence", "orderId": "o", "attempt": 1}\n', "unknown service None"),
    ],
    ids=["not-json", "not-a-fact", "unknown-service", "no-service"],
)
async def test_a_damaged_ledger_file_is_refused_naming_the_line(
    tmp_path: Path, damage: str, complaint: str
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    fence = '{"service": "stock", "event": "fence", "orderId": "o-1", "attempt": 1}\n'
    ledger.write_text(damage + fence)

    with pytest.raises(CorruptJournal, match=r"ledger\.jsonl:1 ") as refused:
        await SimulatedServices(ledger_path=ledger).start()

    assert complaint in str(refused.value)


def test_background_thread_serves_every_service_to_blocking_clients() -> None:
    def charge(key: str) -> tuple[int, str]:
        response = requests.post(
            f"{running.url(PAYMENT.name)}/payments",
            json={"orderId": "o-7", "attempt": 1, **PAYLOADS[PAYMENT.name]},
            headers={"Idempotency-Key": key},
            timeout=10,
        )
        return response.status_code, response.json()["paymentId"]

    with (
        SimulatedServicesThread(SimulatedServices(seed=1)) as running,
        ThreadPoolExecutor(8) as pool,
    ):
        answers = list(pool.map(charge, ["o-7:charge"] * 16))
        stats = running.stats(PAYMENT.name)
        others = [running.stats(name)["requests"] for name in (STOCK.name, SHIPPING.name)]

    assert sorted(status for status, _ in answers) == [200] * 15 + [201]
    assert len({payment_id for _, payment_id in answers}) == 1
    assert (stats["payments"], stats["replays"], stats["double_side_effects"]) == (1, 15, 0)
    assert others == [0, 0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{running.base_url}/stats", timeout=5)


def test_background_thread_reports_a_port_already_taken() -> None:
    with (
        SimulatedServicesThread(SimulatedServices()) as taken,
        pytest.raises(OSError, match="address"),
        SimulatedServicesThread(SimulatedServices(port=taken.port)),
    ):
        pass
