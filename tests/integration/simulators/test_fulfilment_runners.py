"""Fulfilment simulator runners: the command, a background thread, and the ledger file that
keeps idempotency and fences across restarts, even after ``kill -9`` (E7, C8)."""

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests

from tests.integration.simulators.service_calls import post_fulfilment
from tests.integration.simulators.simulator_process import SimulatorProcess
from tools.simulators.fulfilment import FulfilmentService, FulfilmentServiceThread
from tools.simulators.services.journal import CorruptJournal

ITEMS: list[dict[str, Any]] = [{"sku": "sku-1", "quantity": 1}]


async def fulfil(
    session: aiohttp.ClientSession, base_url: str, key: str, attempt: int, order_id: str = "o-1"
) -> tuple[int, dict[str, Any]]:
    return await post_fulfilment(
        session, base_url, key=key, order_id=order_id, attempt=attempt, items=ITEMS
    )


async def test_command_announces_its_port_and_exits_cleanly_on_sigterm(
    session: aiohttp.ClientSession,
) -> None:
    simulator = await SimulatorProcess.start("--faults", "default", "--seed", "5")
    try:
        async with session.get(f"{simulator.base_url}/faults") as response:
            plan = await response.json()
        assert plan["probabilities"]["lost-response"] > 0
    finally:
        exit_code = await simulator.end(signal.SIGTERM)

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
        _, performed = await fulfil(session, first.base_url, "o-1:fulfil", attempt=1)
        assert (await fulfil(session, first.base_url, "o-1:fulfil", attempt=2))[0] == 200
    finally:
        await first.end(signal.SIGKILL)
    with ledger.open("a") as file:
        file.write('{"event": "fulfilment", "orderId": "o-')  # a line cut short by the kill

    second = await SimulatorProcess.start("--ledger", str(ledger))
    try:
        replayed = await fulfil(session, second.base_url, "o-1:fulfil", attempt=2)
        stale = await fulfil(session, second.base_url, "o-1:late", attempt=1)
        fresh = await fulfil(session, second.base_url, "o-2:fulfil", attempt=1, order_id="o-2")
        async with session.get(f"{second.base_url}/stats") as response:
            stats = await response.json()
    finally:
        assert await second.end(signal.SIGTERM) == 0

    assert replayed == (200, {**performed, "replayed": True})
    assert stale[0] == 409
    assert fresh[0] == 201
    assert fresh[1]["fulfilmentId"] != performed["fulfilmentId"]
    assert (stats["fulfilments"], stats["double_side_effects"]) == (2, 0)


async def test_in_process_restart_on_the_same_ledger_file_replays(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    before = FulfilmentService(ledger_path=ledger)
    await before.start()
    try:
        _, performed = await fulfil(session, before.base_url, "o-1:fulfil", attempt=1)
    finally:
        await before.stop()

    after = FulfilmentService(ledger_path=ledger)
    await after.start()
    try:
        again = await fulfil(session, after.base_url, "o-1:fulfil", attempt=1)
        entries = after.ledger_entries()
    finally:
        await after.stop()

    assert again == (200, {**performed, "replayed": True})
    assert [e.fulfilment_id for e in entries] == [performed["fulfilmentId"]]


def test_background_thread_serves_blocking_clients_from_many_threads() -> None:
    def post(key: str) -> tuple[int, str]:
        response = requests.post(
            f"{service.base_url}/fulfilments",
            json={"orderId": "o-7", "attempt": 1, "items": ITEMS},
            headers={"Idempotency-Key": key},
            timeout=10,
        )
        return response.status_code, response.json()["fulfilmentId"]

    with FulfilmentServiceThread(seed=1) as service, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, ["o-7:fulfil"] * 16))
        stats = service.stats()

    assert sorted(status for status, _ in answers) == [200] * 15 + [201]
    assert len({fulfilment_id for _, fulfilment_id in answers}) == 1
    assert (stats["fulfilments"], stats["replays"], stats["double_side_effects"]) == (1, 15, 0)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{service.base_url}/stats", timeout=5)


def test_background_thread_reports_a_port_already_taken() -> None:
    with (
        FulfilmentServiceThread() as taken,
        pytest.raises(OSError, match="address"),
        FulfilmentServiceThread(port=taken.port),
    ):
        pass


@pytest.mark.parametrize(
    "damage", ['{"event": "fulfil\n', '{"event": "fulfilment"}\n'], ids=["not-json", "not-a-fact"]
)
async def test_a_damaged_ledger_file_is_refused_naming_it(tmp_path: Path, damage: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(damage + '{"event": "fence", "orderId": "o-1", "attempt": 1}\n')

    with pytest.raises(CorruptJournal, match=r"ledger\.jsonl:1"):
        await FulfilmentService(ledger_path=ledger).start()
