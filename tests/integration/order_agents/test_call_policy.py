"""An agent's call policy against the real simulated stock service (E7, E8, E9, C4, C8).

The agent's time is injected: its sleeps move a fake clock instead of waiting, while every
call goes over HTTP to the running service, whose ledger proves what happened remotely.
"""

import datetime as dt
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from config import Settings
from domain.agent_messages import AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import CircuitBreaker
from order_agents.call_policy import request_call, run_agent
from order_agents.remote_services import STEP_SERVICES
from order_agents.service_client import ServiceClient
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SimulatedServices

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
POLICY = Settings().agent_policy
TRIES = 4
"""What each delivery of a request below may spend (C4)."""
ORDER = Order("o-1", "c-1", (OrderItem("sku-1", 2),), "EUR")


class FakeTime:
    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def __call__(self) -> dt.datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += dt.timedelta(seconds=seconds)


class Stock:
    """The simulated stock service as the tests below steer and read it."""

    def __init__(self, services: SimulatedServices) -> None:
        self._services = services

    def replace_fault_plan(self, plan: FaultPlan) -> None:
        self._services.replace_fault_plan("stock", plan)

    def stats(self) -> dict[str, Any]:
        return self._services.stats("stock")


@pytest.fixture
def service(services: SimulatedServices) -> Stock:
    return Stock(services)


@pytest.fixture
def client(services: SimulatedServices, session: aiohttp.ClientSession) -> ServiceClient:
    return ServiceClient(STEP_SERVICES["stock"], services.url("stock"), session)


def request(attempt: int = 1, deadline_seconds: float = 30) -> AgentRequest:
    return AgentRequest(
        instance_id=f"o-1:{attempt}",
        step="reserve-stock",
        order=ORDER,
        deadline=T0 + dt.timedelta(seconds=deadline_seconds),
    )


def breaker(time: FakeTime, threshold: int = 5) -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=threshold,
        reset_seconds=30,
        clock=lambda: (time.now - T0).total_seconds(),
    )


async def run(
    client: ServiceClient,
    time: FakeTime,
    req: AgentRequest,
    guard: CircuitBreaker | None = None,
    tries: int = TRIES,
) -> AgentResponse:
    return await run_agent(
        req,
        request_call(client, req),
        guard or breaker(time),
        POLICY,
        tries=tries,
        now=time,
        sleep=time.sleep,
        jitter=lambda: 0.5,
    )


def reservations(service: Stock) -> int:
    return int(service.stats()["reservations"])


async def test_success_first_try(service: Stock, client: ServiceClient) -> None:
    response = await run(client, FakeTime(), request())
    assert response.outcome is AgentOutcome.SUCCEEDED
    assert response.reference
    assert response.message_id == "o-1:1:reserve-stock:response"
    assert reservations(service) == 1


async def test_transient_faults_are_retried_with_backoff_e9(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.TRANSIENT, times=2),)))
    time = FakeTime()
    response = await run(client, time, request())
    assert response.outcome is AgentOutcome.SUCCEEDED
    assert service.stats()["requests"] == 3
    assert time.slept == [0.05, 0.1]  # full jitter at 0.5 of base 0.1 x 2^(n-1)
    assert reservations(service) == 1


async def test_lost_response_then_retry_performs_the_side_effect_once_c8(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.LOST_RESPONSE, times=1),)))
    response = await run(client, FakeTime(), request())
    assert response.outcome is AgentOutcome.SUCCEEDED
    assert service.stats()["replays"] == 1
    assert service.stats()["double_side_effects"] == 0
    assert reservations(service) == 1


async def test_a_newer_attempt_replays_the_older_attempts_side_effect_e7(
    service: Stock, client: ServiceClient
) -> None:
    first = await run(client, FakeTime(), request(attempt=1))
    second = await run(client, FakeTime(), request(attempt=2))
    assert second.outcome is AgentOutcome.SUCCEEDED
    assert second.reference == first.reference
    assert service.stats()["double_side_effects"] == 0


async def test_a_stale_attempt_is_refused_by_the_service_e7(
    service: Stock, client: ServiceClient
) -> None:
    await run(client, FakeTime(), request(attempt=2))
    stale = await run(client, FakeTime(), request(attempt=1))
    assert stale.outcome is AgentOutcome.SUPERSEDED
    assert service.stats()["stale_writes_refused"] == 1


async def test_permanent_failure_is_reported_not_retried_e8(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.PERMANENT),)))
    response = await run(client, FakeTime(), request())
    assert response.outcome is AgentOutcome.FAILED
    assert service.stats()["requests"] == 1
    assert reservations(service) == 0


async def test_tries_stop_at_the_agents_share_of_the_retry_budget_c4(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.TRANSIENT),)))
    response = await run(client, FakeTime(), request(deadline_seconds=3600))
    assert response.outcome is AgentOutcome.GAVE_UP
    assert service.stats()["requests"] == TRIES


async def test_a_request_granted_no_try_is_failed_for_good_without_a_call_c4(
    service: Stock, client: ServiceClient
) -> None:
    """Its order's retry budget is spent: the agent calls nothing and answers `failed`, so
    the order goes to an operator instead of waiting for its deadline (E8, C2)."""
    response = await run(client, FakeTime(), replace(request(), tries=0))
    assert response.outcome is AgentOutcome.FAILED
    assert "retry budget is spent" in str(response.detail)
    assert service.stats()["requests"] == 0


async def test_a_delivery_whose_share_went_to_earlier_ones_gives_up_without_a_call_c4(
    service: Stock, client: ServiceClient
) -> None:
    """A redelivery of a request granted one try: the first delivery had it."""
    response = await run(client, FakeTime(), replace(request(), tries=1), tries=0)
    assert response.outcome is AgentOutcome.GAVE_UP
    assert service.stats()["requests"] == 0


async def test_no_new_call_starts_after_the_deadline_e7(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.TRANSIENT),)))
    time = FakeTime()
    response = await run(client, time, request(deadline_seconds=0.04))
    assert response.outcome is AgentOutcome.GAVE_UP
    assert service.stats()["requests"] == 1  # the next try would start after the deadline
    assert time.now < T0 + dt.timedelta(seconds=0.04)


async def test_an_open_breaker_keeps_calls_away_from_a_failing_service_e9(
    service: Stock, client: ServiceClient
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.TRANSIENT),)))
    time = FakeTime()
    guard = breaker(time, threshold=2)
    response = await run(client, time, request(deadline_seconds=3600), guard)
    assert response.outcome is AgentOutcome.GAVE_UP
    assert service.stats()["requests"] == 2  # tries 3 and 4 were refused by the open breaker
