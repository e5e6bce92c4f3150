"""host.json for production: the Durable Task Scheduler backend and tracing, and Service Bus
settings consistent with the retry budget (C4) and the queues' lock durations.

The agent splits a request's tries over AGENT_DELIVERY_ATTEMPTS deliveries (C4), checked here
against the agent request queues' MaxDeliveryCount (servicebus.config.json) instead of the
setting that claims to match it. Lock renewal must outlast the longest agent invocation, so
no lock expires under a running agent (a lost lock is one more delivery of the request), and
a prefetched message, whose lock nobody renews while it waits, must never wait longer than
its lock.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from devhost.host_config import HostConfig, HostConfigError, parse_timespan
from devhost.servicebus.config import parse_duration

from adapters.message_settlement import SETTLEMENT_DEADLINE_SECONDS
from adapters.servicebus_publisher import OPEN_TIMEOUT_SECONDS, SEND_TIMEOUT_SECONDS
from config import Settings
from domain.policies import delivery_tries
from domain.workflow import step_list

ROOT = Path(__file__).resolve().parents[2]


def host_json() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    return document


def sample() -> dict[str, str]:
    document = json.loads((ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    return {name: str(value) for name, value in document["Values"].items()}


def queues() -> dict[str, dict[str, Any]]:
    document = json.loads((ROOT / "servicebus.config.json").read_text(encoding="utf-8"))
    (namespace,) = document["UserConfig"]["Namespaces"]
    return {queue["Name"]: queue["Properties"] for queue in namespace["Queues"]}


def agent_request_queues(settings: Settings) -> list[str]:
    agents = {step.agent for step in step_list(settings.order_steps)}
    return [settings.agent_queue(agent) for agent in agents]


def longest_agent_invocation_seconds(settings: Settings) -> float:
    """An agent invocation: tries until its request's deadline (a step's or a compensation's,
    the call in flight bounded by it), then the answer sent and the request settled."""
    deadline = max(settings.step_timeout_seconds, settings.compensation_timeout_seconds)
    return deadline + OPEN_TIMEOUT_SECONDS + SEND_TIMEOUT_SECONDS + SETTLEMENT_DEADLINE_SECONDS


def test_durable_functions_run_on_the_durable_task_scheduler_with_tracing() -> None:
    durable = host_json()["extensions"]["durableTask"]
    assert durable["hubName"] == "%TASKHUB_NAME%"
    assert durable["storageProvider"] == {
        "type": "azureManaged",
        "connectionStringName": "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
    }
    assert durable["tracing"] == {"distributedTracingEnabled": True, "version": "V2"}
    values = sample()
    assert values["DURABLE_TASK_SCHEDULER_CONNECTION_STRING"] == (
        "Endpoint=http://localhost:8080;Authentication=None"
    )
    assert HostConfig.load(ROOT, values).durable_task.hub_name == values["TASKHUB_NAME"]


def test_every_agent_request_is_delivered_at_most_as_often_as_the_budget_allows_c4() -> None:
    """Every delivery the queue makes spends its share of the request's tries, and the
    shares of all MaxDeliveryCount deliveries add up to no more than the request drew."""
    settings = Settings.from_environ(sample())
    granted = settings.tries_per_request
    for queue in agent_request_queues(settings):
        deliveries = int(queues()[queue]["MaxDeliveryCount"])
        assert deliveries == settings.agent_delivery_attempts, queue
        shares = [
            delivery_tries(granted, delivery=d, deliveries=settings.agent_delivery_attempts)
            for d in range(1, deliveries + 1)
        ]
        assert sum(shares) <= granted, queue
        assert min(shares) >= 1, f"{queue}: a redelivery would get no try"


def test_lock_renewal_outlasts_the_longest_agent_invocation() -> None:
    settings = Settings.from_environ(sample())
    renewal = parse_timespan(
        host_json()["extensions"]["serviceBus"]["maxAutoLockRenewalDuration"], ""
    )
    assert renewal.total_seconds() >= longest_agent_invocation_seconds(settings)


def test_no_prefetched_message_waits_past_its_lock() -> None:
    settings = Settings.from_environ(sample())
    service_bus = host_json()["extensions"]["serviceBus"]
    prefetch = int(service_bus["prefetchCount"])
    concurrency = int(service_bus["maxConcurrentCalls"])
    shortest_lock = min(
        parse_duration(properties["LockDuration"]).total_seconds()
        for properties in queues().values()
    )
    # A prefetched message starts once a running invocation ends: the last one in the buffer
    # waits for ceil(prefetch / concurrency) rounds of the longest invocation.
    wait = math.ceil(prefetch / concurrency) * longest_agent_invocation_seconds(settings)
    assert wait < shortest_lock, (
        f"prefetchCount {prefetch} can hold a message {wait:.0f}s, "
        f"past its {shortest_lock:.0f}s lock"
    )


def test_the_host_and_the_worker_export_opentelemetry_and_the_devhost_accepts_it_c9() -> None:
    # telemetryMode is the host's (Flex Consumption): the worker's OpenTelemetry goes to
    # Application Insights; the devhost reads the same host.json and ignores the setting.
    assert host_json()["telemetryMode"] == "OpenTelemetry"
    assert HostConfig.load(ROOT, sample()).durable_task.hub_name == sample()["TASKHUB_NAME"]


def test_the_apps_host_json_loads_with_the_sample_settings_and_not_without() -> None:
    sample = json.loads((ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    config = HostConfig.load(ROOT, sample["Values"])
    assert config.durable_task.hub_name == sample["Values"]["TASKHUB_NAME"]
    assert config.durable_task.storage_provider == "AzureManaged"
    without = {
        name: value
        for name, value in sample["Values"].items()
        if name != "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
    }
    with pytest.raises(HostConfigError, match="DURABLE_TASK_SCHEDULER_CONNECTION_STRING"):
        HostConfig.load(ROOT, without)
