"""Ordinary v2-model Durable Functions code exercising every Durable Task semantic the
devhost engine must honour.  Test knobs live in module-level state keyed by the
orchestration input, so tests running in one process do not disturb each other.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections import Counter
from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

ATTEMPTS: Counter[str] = Counter()
"""How many times each keyed activity ran."""

RELEASES: dict[str, asyncio.Event] = {}
"""Async activities keyed here block until the event is set."""

CODE_VERSION = {"evolving": 1}
"""Flipped by the determinism test to simulate a deployment under a running instance."""


class BackoffRetryOptions(df.RetryOptions):
    """RetryOptions with the DTFx fields SDK 1.7 does not expose (JS SDK field names)."""

    def __init__(
        self,
        first_retry_interval_in_milliseconds: int,
        max_number_of_attempts: int,
        backoff_coefficient: float = 1.0,
        max_retry_interval_in_milliseconds: int | None = None,
        retry_timeout_in_milliseconds: int | None = None,
    ) -> None:
        super().__init__(first_retry_interval_in_milliseconds, max_number_of_attempts)
        self.extra: dict[str, Any] = {"backoffCoefficient": backoff_coefficient}
        if max_retry_interval_in_milliseconds is not None:
            self.extra["maxRetryIntervalInMilliseconds"] = max_retry_interval_in_milliseconds
        if retry_timeout_in_milliseconds is not None:
            self.extra["retryTimeoutInMilliseconds"] = retry_timeout_in_milliseconds

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), **self.extra}


@app.activity_trigger(input_name="payload")
def echo(payload: Any) -> Any:
    return {"echo": payload}


@app.activity_trigger(input_name="payload")
def flaky(payload: Any) -> str:
    """Fails the first ``fail_times`` runs for ``key``."""
    key = payload["key"]
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] <= payload["fail_times"]:
        raise RuntimeError(f"flaky failure {ATTEMPTS[key]} for {key}")
    return f"ok after {ATTEMPTS[key]}"


@app.activity_trigger(input_name="key")
async def gated(key: str) -> str:
    """Counts its runs, then waits until the test releases it."""
    ATTEMPTS[key] += 1
    await RELEASES[key].wait()
    return f"released {key}"


@app.activity_trigger(input_name="together")
async def loop_executor_threads(together: int) -> int | str:
    """Sends twice ``together`` blocking calls to the loop's default executor, ``together``
    waiting for each other at a time: the number of threads that ran them, or "too few
    threads" when the executor could not run ``together`` at once."""
    barrier = threading.Barrier(together, timeout=5)

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    try:
        names = await asyncio.gather(*(asyncio.to_thread(meet) for _ in range(2 * together)))
    except threading.BrokenBarrierError:
        return "too few threads"
    return len(set(names))


@app.orchestration_trigger(context_name="context")
def executor_threads(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    return (yield context.call_activity(loop_executor_threads, context.get_input()))


@app.orchestration_trigger(context_name="context")
def sequence(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    first = yield context.call_activity(echo, "one")
    context.set_custom_status({"stage": "between", "first": first})
    second = yield context.call_activity("echo", "two")
    context.set_custom_status({"stage": "done"})
    return [first, second]


@app.orchestration_trigger(context_name="context")
def race(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """An event against a timeout; the losing timer is cancelled."""
    minutes = context.get_input()["timeout_minutes"]
    timeout = context.create_timer(context.current_utc_datetime + dt.timedelta(minutes=minutes))
    answer = context.wait_for_external_event("Answer")
    winner = yield context.task_any([answer, timeout])
    if winner == answer:
        timeout.cancel()
        return {"winner": "event", "answer": answer.result}
    return {"winner": "timer", "at": context.current_utc_datetime.isoformat()}


@app.orchestration_trigger(context_name="context")
def uncancelled_race(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Like ``race`` but forgets to cancel: the stale timer still fires, harmlessly."""
    timeout = context.create_timer(context.current_utc_datetime + dt.timedelta(minutes=5))
    answer = context.wait_for_external_event("Answer")
    winner = yield context.task_any([answer, timeout])
    if winner == answer:
        again = yield context.wait_for_external_event("Again")
        return ["event", answer.result, again]
    return ["timer"]


@app.orchestration_trigger(context_name="context")
def sequential_events(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Work first, then three waits for the same event name, one after the other."""
    ready = yield context.call_activity(echo, "ready")
    first = yield context.wait_for_external_event("Step")
    second = yield context.wait_for_external_event("Step")
    third = yield context.wait_for_external_event("Step")
    return [ready["echo"], first, second, third]


@app.orchestration_trigger(context_name="context")
def fan_out(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    items = context.get_input()
    results = yield context.task_all([context.call_activity(echo, item) for item in items])
    fastest = yield context.task_any(
        [context.call_activity(echo, "a"), context.call_activity(echo, "b")]
    )
    return {"all": [r["echo"] for r in results], "any": fastest.result["echo"]}


@app.orchestration_trigger(context_name="context")
def fan_out_failure(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    key = context.get_input()
    try:
        yield context.task_all(
            [
                context.call_activity(echo, "fine"),
                context.call_activity(flaky, {"key": key, "fail_times": 99}),
            ]
        )
    except Exception as error:
        return f"caught: {error}"
    return "not reached"


@app.orchestration_trigger(context_name="context")
def retrying(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    spec = context.get_input()
    options = BackoffRetryOptions(**spec["retry"])
    try:
        result = yield context.call_activity_with_retry(flaky, options, spec["activity"])
    except Exception as error:
        return {"failed": str(error)}
    after = yield context.call_activity(echo, "after")
    return {"result": result, "after": after["echo"]}


@app.orchestration_trigger(context_name="context")
def retry_in_parallel(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Two retried activities side by side: retry ids interleave with the other branch."""
    keys = context.get_input()
    options = df.RetryOptions(1000, 3)
    results = yield context.task_all(
        [
            context.call_activity_with_retry(flaky, options, {"key": keys[0], "fail_times": 2}),
            context.call_activity_with_retry(flaky, options, {"key": keys[1], "fail_times": 1}),
        ]
    )
    last = yield context.call_activity(echo, "last")
    return [*results, last["echo"]]


@app.orchestration_trigger(context_name="context")
def stale_retry(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """A retried activity loses a race against a timer and keeps retrying in the background
    while the orchestration moves on: its retry ids interleave with later top-level calls."""
    key = context.get_input()
    retried = context.call_activity_with_retry(
        flaky, df.RetryOptions(10 * 60 * 1000, 3), {"key": key, "fail_times": 2}
    )
    deadline = context.create_timer(context.current_utc_datetime + dt.timedelta(minutes=1))
    first = yield context.task_any([retried, deadline])
    after = yield context.call_activity(echo, "after the race")
    done = yield context.wait_for_external_event("Done")
    return {
        "timer_won": first == deadline,
        "after": after["echo"],
        "retried": retried.result,
        "done": done,
    }


@app.orchestration_trigger(context_name="context")
def reused_wait(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """One event task raced against a fresh reminder timer per round until the event comes."""
    answer = context.wait_for_external_event("Answer")
    rounds = 0
    while True:
        rounds += 1
        reminder = context.create_timer(context.current_utc_datetime + dt.timedelta(hours=1))
        winner = yield context.task_any([answer, reminder])
        if winner == answer:
            reminder.cancel()
            break
        yield context.call_activity(echo, f"reminder {rounds}")
    confirmed = yield context.call_activity(echo, answer.result)
    return {"rounds": rounds, "confirmed": confirmed["echo"]}


@app.orchestration_trigger(context_name="context")
def two_waits_at_once(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    values = yield context.task_all(
        [context.wait_for_external_event("Vote"), context.wait_for_external_event("Vote")]
    )
    return sorted(values)


@app.orchestration_trigger(context_name="context")
def child(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    spec = context.get_input()
    if spec.get("fail"):
        raise ValueError(f"child refuses {spec['value']}")
    doubled = yield context.call_activity(echo, spec["value"] * 2)
    return {"child_of": context.parent_instance_id, "value": doubled["echo"]}


@app.orchestration_trigger(context_name="context")
def parent(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    spec = context.get_input()
    good = yield context.call_sub_orchestrator(child, {"value": spec["value"]})
    try:
        yield context.call_sub_orchestrator("child", {"value": 1, "fail": True}, "failing-child")
        failure = None
    except Exception as error:
        failure = str(error)
    retried = yield context.call_sub_orchestrator_with_retry(
        "child", df.RetryOptions(1000, 2), {"value": 5, "fail": spec.get("retry_fails", False)}
    )
    return {"good": good, "failure": failure, "retried": retried}


@app.orchestration_trigger(context_name="context")
def counter(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Adds one event value per generation and continues as new until the total is 10+."""
    total = context.get_input() or 0
    context.set_custom_status({"total": total})
    if total >= 10:
        return total
    increment = yield context.wait_for_external_event("Add")
    context.continue_as_new(total + increment)
    return None


@app.orchestration_trigger(context_name="context")
def catches_activity_failure(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    key = context.get_input()
    try:
        yield context.call_activity(flaky, {"key": key, "fail_times": 1})
    except Exception as error:
        context.set_custom_status("recovered")
        return {"caught": str(error)}
    return {"caught": None}


@app.orchestration_trigger(context_name="context")
def unhandled_failure(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    value = yield context.call_activity(echo, "before")
    raise RuntimeError(f"orchestrator gave up after {value['echo']}")


@app.orchestration_trigger(context_name="context")
def evolving(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Version 1 calls ``echo`` first; version 2 calls ``flaky`` instead; version 3 no longer
    calls any activity (both are code changes under a running instance)."""
    if CODE_VERSION["evolving"] == 1:
        first = yield context.call_activity(echo, "v1")
    elif CODE_VERSION["evolving"] == 2:
        first = yield context.call_activity(flaky, {"key": "evolving", "fail_times": 0})
    else:
        first = None
    go = yield context.wait_for_external_event("Go")
    return [first, go]


@app.orchestration_trigger(context_name="context")
def waits_forever(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    first = yield context.call_activity(echo, "started")
    go = yield context.wait_for_external_event("Go")
    return [first["echo"], go]


@app.orchestration_trigger(context_name="context")
def short_sleep(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    milliseconds = context.get_input()
    yield context.create_timer(
        context.current_utc_datetime + dt.timedelta(milliseconds=milliseconds)
    )
    return "woke up"


@app.orchestration_trigger(context_name="context")
def calls_http(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    response = yield context.call_http("GET", "https://example.invalid/")
    return response


@app.orchestration_trigger(context_name="context")
def gated_fan_out(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    results = yield context.task_all([context.call_activity(gated, k) for k in context.get_input()])
    return results


@app.orchestration_trigger(context_name="context")
def gated_once(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    result = yield context.call_activity(gated, context.get_input())
    return result


@app.route(route="orders/start", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    """An ordinary durableClient starter: the host passes ``client`` as the binding JSON."""
    instance_id = await client.start_new("sequence", None, req.get_json())
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def chatty(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Prints on every replay, as debugging code does; output must not disturb the engine."""
    print("chatty is replaying")
    value = yield context.call_activity(echo, "spoken")
    return value
