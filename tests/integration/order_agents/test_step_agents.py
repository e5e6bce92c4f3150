"""The step agents against the real simulated services: do, undo by reference, undo of a
step in doubt by its idempotency key, and an undo that cannot be done (E7, E8, C1, C3, C8).

Each agent's calls go over HTTP to the running services, whose ledgers prove what happened.
"""

from __future__ import annotations

import datetime as dt

import aiohttp
import pytest

from config import Settings
from domain.agent_messages import AgentOperation, AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import CircuitBreaker
from order_agents import functions as agent_functions
from order_agents.call_policy import request_call, run_agent
from order_agents.remote_services import STEP_SERVICES
from order_agents.service_client import ServiceClient
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SimulatedServices

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
POLICY = Settings().agent_policy
TRIES = 4
ORDER = Order("o-1", "c-1", (OrderItem("sku-1", 2), OrderItem("sku-2", 1)), "EUR")
AGENT_OF = {"reserve-stock": "stock", "charge-payment": "payment", "ship-order": "shipping"}


def request(step: str, attempt: int = 1, **changes: object) -> AgentRequest:
    fields: dict[str, object] = {
        "instance_id": f"o-1:{attempt}",
        "step": step,
        "order": ORDER,
        "deadline": T0 + dt.timedelta(days=3650),
    }
    fields.update(changes)
    return AgentRequest(**fields)  # type: ignore[arg-type]


async def ask(
    services: SimulatedServices, session: aiohttp.ClientSession, req: AgentRequest
) -> AgentResponse:
    agent = AGENT_OF[req.step]
    client = ServiceClient(STEP_SERVICES[agent], services.url(agent), session)
    breaker = CircuitBreaker(failure_threshold=5, reset_seconds=30, clock=lambda: 0.0)
    return await run_agent(
        req,
        request_call(client, req),
        breaker,
        POLICY,
        tries=TRIES,
        now=lambda: T0,
        jitter=lambda: 0.0,
    )


def net_effect(services: SimulatedServices, agent: str) -> int:
    entries = services.ledger_entries(agent, "o-1")
    return sum(1 if entry.role == "action" else -1 for entry in entries)


@pytest.mark.parametrize("step", list(AGENT_OF))
async def test_each_agent_does_its_step_once_and_undoes_it_by_reference_c1_c8(
    services: SimulatedServices, session: aiohttp.ClientSession, step: str
) -> None:
    done = await ask(services, session, request(step))
    again = await ask(services, session, request(step, attempt=2))
    assert (done.outcome, again.outcome) == (AgentOutcome.SUCCEEDED, AgentOutcome.SUCCEEDED)
    assert done.reference is not None
    assert again.reference == done.reference
    assert net_effect(services, AGENT_OF[step]) == 1
    undo = request(step, attempt=3, operation=AgentOperation.UNDO, reference=done.reference)
    undone = await ask(services, session, undo)
    assert undone.outcome is AgentOutcome.SUCCEEDED
    assert net_effect(services, AGENT_OF[step]) == 0


async def test_an_undo_in_doubt_finds_the_side_effect_by_its_key_c1(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    charged = await ask(services, session, request("charge-payment"))
    undo = request("charge-payment", attempt=2, operation=AgentOperation.UNDO)
    undone = await ask(services, session, undo)
    assert undone.outcome is AgentOutcome.SUCCEEDED
    assert undone.reference == charged.reference
    assert net_effect(services, "payment") == 0


async def test_after_an_undo_in_doubt_a_late_try_of_the_step_does_nothing_e7_c1(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    undo = request("reserve-stock", attempt=2, operation=AgentOperation.UNDO)
    assert (await ask(services, session, undo)).outcome is AgentOutcome.SUCCEEDED
    late = await ask(services, session, request("reserve-stock", attempt=1))
    assert late.outcome is AgentOutcome.SUPERSEDED
    assert services.ledger_entries("stock", "o-1") == []


async def test_a_reference_cannot_name_another_path_of_the_service_host_c1(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    """The reference comes from the service's answer, through a queue: written into the
    undo's path as it is, `../../stock/...?` would release a reservation from the payment
    agent. Encoded, it is one path segment the payment service does not know."""
    reserved = await ask(services, session, request("reserve-stock"))
    crafted = f"../../stock/reservations/{reserved.reference}/release?"
    undo = request("charge-payment", attempt=2, operation=AgentOperation.UNDO, reference=crafted)

    refused = await ask(services, session, undo)

    assert refused.outcome is AgentOutcome.FAILED
    assert net_effect(services, "stock") == 1, "the reservation was released from elsewhere"


async def test_a_dispatched_shipment_cannot_be_undone_c2(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    services.replace_fault_plan(
        "shipping", FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="ship"),))
    )
    shipped = await ask(services, session, request("ship-order"))
    assert shipped.outcome is AgentOutcome.SUCCEEDED
    undo = request(
        "ship-order", attempt=2, operation=AgentOperation.UNDO, reference=shipped.reference
    )
    refused = await ask(services, session, undo)
    assert refused.outcome is AgentOutcome.FAILED
    assert "already-dispatched" in (refused.detail or "")
    assert net_effect(services, "shipping") == 1


async def test_a_charge_names_an_amount_and_a_currency_only_c3(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await ask(services, session, request("charge-payment"))
    ledger = await session.get(f"{services.url('payment')}/ledger")
    assert ledger.status == 200
    [entry] = services.ledger_entries("payment", "o-1")
    assert entry.order_id == "o-1"
    assert "customer" not in str(await ledger.json()).lower()


async def test_an_agent_that_fails_inside_an_activity_gives_up_after_one_run_c4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The activity that begins a step and runs its agent is retried for its store write
    only: an agent that raises gives up instead, so no retry of the activity runs it again
    and spends more than its share of the budget (C4); the supervisor retries the attempt."""
    runs: list[AgentRequest] = []

    async def broken(req: AgentRequest, tries: int) -> AgentResponse:
        runs.append(req)
        raise RuntimeError("a bug in the agent")

    monkeypatch.setattr(agent_functions, "run_step_agent", broken)
    req = request("charge-payment", tries=TRIES)

    response = await agent_functions.run_step_agent_once(req)

    assert runs == [req]
    assert (response.request_id, response.outcome) == (req.request_id, AgentOutcome.GAVE_UP)
    assert response.detail == "the agent failed: RuntimeError"
