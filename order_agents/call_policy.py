"""An agent's call policy (E7, E9, C4, C8): one request, tried until the service answers for good.

`run_agent` retries with full-jitter backoff within the tries its delivery of the request may
spend (C4) and the step's deadline, after which it starts no new call (E7); every try
carries the same idempotency key and fencing token (C8), through a circuit breaker per
service (E9). It only reports (`respond`); it never changes the state record.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import Awaitable, Callable

from domain.agent_messages import (
    AgentOperation,
    AgentOutcome,
    AgentRequest,
    AgentResponse,
    clip_detail,
)
from domain.policies import AgentPolicy, CircuitBreaker, next_retry_delay
from observability import logs, metrics
from order_agents.service_client import (
    Done,
    PermanentFailure,
    RemoteResult,
    ServiceClient,
    Superseded,
)

log = logs.get_logger("app.agents.call_policy")

CALL_TIMEOUT_SECONDS = 10.0

Call = Callable[[float], Awaitable[RemoteResult]]
"""One try of the request, given how many seconds it may take."""


async def run_agent(
    request: AgentRequest,
    call: Call,
    breaker: CircuitBreaker,
    policy: AgentPolicy,
    *,
    tries: int,
    now: Callable[[], dt.datetime],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    jitter: Callable[[], float] = random.random,
) -> AgentResponse:
    """Run the request to its answer, making at most `tries` calls, this delivery's share of
    the request's tries (C4), and record it (C9): the time from request to answer by step
    and outcome, each retry, and an answer other than success as a step failure.

    A request granted no try at all finds its order's retry budget spent: it is answered
    `failed`, for good, without a call, so the order goes to an operator (E8, C2)."""
    started = now()
    if request.tries == 0:
        response = respond(request, AgentOutcome.FAILED, BUDGET_SPENT)
    else:
        response = await _tried(
            request, call, breaker, policy, tries=tries, now=now, sleep=sleep, jitter=jitter
        )
    seconds = (now() - started).total_seconds()
    metrics.step_answered(request.step, response.outcome.value, seconds)
    if response.outcome in (AgentOutcome.FAILED, AgentOutcome.GAVE_UP):
        metrics.step_failed(request.step, response.outcome.value)
    return response


BUDGET_SPENT = (
    "the order's retry budget is spent: no try was left for this request (RETRY_BUDGET, C4)"
)


async def _tried(
    request: AgentRequest,
    call: Call,
    breaker: CircuitBreaker,
    policy: AgentPolicy,
    *,
    tries: int,
    now: Callable[[], dt.datetime],
    sleep: Callable[[float], Awaitable[None]],
    jitter: Callable[[], float],
) -> AgentResponse:
    if tries < 1:
        return respond(
            request, AgentOutcome.GAVE_UP, "no try left for this delivery: earlier ones had them"
        )
    made = 0
    last_problem = "no try was started"
    while True:
        remaining = (request.deadline - now()).total_seconds()
        if remaining <= 0:
            return respond(request, AgentOutcome.GAVE_UP, f"deadline passed; {last_problem}")
        made += 1
        if breaker.allow_request():
            result = await call(min(remaining, CALL_TIMEOUT_SECONDS))
            if isinstance(result, Done):
                breaker.record_success()
                return respond(request, AgentOutcome.SUCCEEDED, reference=result.reference)
            if isinstance(result, PermanentFailure):
                breaker.record_success()  # the service answered: it is healthy, the order is not
                return respond(request, AgentOutcome.FAILED, result.reason)
            if isinstance(result, Superseded):
                breaker.record_success()
                return respond(request, AgentOutcome.SUPERSEDED, result.reason)
            breaker.record_failure()
            last_problem = f"try {made}: {result.reason}"
        else:
            last_problem = f"try {made}: circuit breaker open"
        log.info(
            "agent retrying",
            instance_id=request.instance_id,
            step=request.step,
            operation=request.operation.value,
            problem=last_problem,
        )
        delay = next_retry_delay(
            tries_done=made,
            max_tries=tries,
            now=now(),
            deadline=request.deadline,
            base_seconds=policy.backoff_base_seconds,
            max_seconds=policy.backoff_max_seconds,
            random=jitter,
        )
        if delay is None:
            return respond(
                request, AgentOutcome.GAVE_UP, f"stopped after {made} tries; {last_problem}"
            )
        metrics.step_retried(request.step)
        await sleep(delay)


def respond(
    request: AgentRequest,
    outcome: AgentOutcome,
    detail: str | None = None,
    *,
    reference: str | None = None,
) -> AgentResponse:
    return AgentResponse(
        request_id=request.request_id,
        instance_id=request.instance_id,
        outcome=outcome,
        detail=clip_detail(detail),
        reference=reference,
    )


def request_call(client: ServiceClient, request: AgentRequest) -> Call:
    """One try of the request at its service: the action, or for an ``undo`` its
    compensation (C1)."""

    async def call(timeout_seconds: float) -> RemoteResult:
        if request.operation is AgentOperation.UNDO:
            return await client.undo(
                request.order,
                reference=request.reference,
                attempt=request.attempt,
                idempotency_key=request.idempotency_key,
                timeout_seconds=timeout_seconds,
            )
        return await client.perform(
            request.order,
            attempt=request.attempt,
            idempotency_key=request.idempotency_key,
            timeout_seconds=timeout_seconds,
        )

    return call
