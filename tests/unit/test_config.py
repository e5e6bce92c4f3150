"""App settings: one declaration each, read from the environment, failing fast when bad.

Also that the declarations and local.settings.sample.json agree: every declared setting is
in the sample with its default, and every setting of the sample is declared or is one of the
host's and the connections' own settings, which the app does not parse. The settings
reference, docs/settings.md, is made from the declarations (tests/unit/test_settings_doc.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import pytest
from devhost.ncrontab import CronSchedule

from config import Settings, SettingsError, declarations
from domain.policies import AgentPolicy, ScanBounds, SupervisorPolicy, Timeouts

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "local.settings.sample.json"

HOST_AND_CONNECTION_SETTINGS = frozenset(
    {
        "FUNCTIONS_WORKER_RUNTIME",
        "AzureWebJobsStorage",
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
        "TASKHUB_NAME",
        "PYTHON_ISOLATE_WORKER_DEPENDENCIES",
        "ServiceBusConnection",
        "CosmosConnection",
    }
)
"""Read by the Functions host (host.json names the Durable ones), the worker or the adapters'
SDK clients, not parsed here."""

SET_FOR_THE_LOCAL_RUN = frozenset(
    {
        "REPLY_QUEUES",
        "STOCK_SERVICE_URL",
        "PAYMENT_SERVICE_URL",
        "SHIPPING_SERVICE_URL",
        "STARTER_SCHEDULE",
        "SUPERVISOR_SCHEDULE",
        "SUPERVISOR_CATCHUP_SCHEDULE",
        "DEADLETTER_WATCH_SCHEDULE",
    }
)
"""Sample values that point the local pipeline at its own pieces instead of the default, and
the timers' local cadence, quicker than Azure's (which lets an idle instance scale in)."""

CONTRACT_SETTINGS = frozenset(
    {
        "ORDERS_QUEUE",
        "AGENT_RESPONSES_QUEUE",
        "OPERATOR_ALERTS_QUEUE",
        "REPLY_QUEUES",
        "STATE_STORE",
        "COSMOS_DATABASE",
        "COSMOS_STATE_CONTAINER",
        "COSMOS_ORDERS_CONTAINER",
        "STARTER_SCHEDULE",
        "SUPERVISOR_SCHEDULE",
        "STEP_TIMEOUT_SECONDS",
        "MAX_FAILURES",
    }
)
"""The app settings of contracts.md that this app reads."""


def declared_names() -> list[str]:
    return [declared.name for declared in declarations()]


def sample_values() -> dict[str, str]:
    document = json.loads(SAMPLE.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in document["Values"].items()}


# --- reading the environment ---------------------------------------------------------------


def test_defaults_use_the_contract_names_and_values() -> None:
    settings = Settings.from_environ({})
    assert settings == Settings()
    assert settings.orders_queue == "orders"
    assert settings.agent_responses_queue == "agent-responses"
    assert settings.operator_alerts_queue == "operator-alerts"
    assert settings.state_store == "sqlite"
    assert settings.cosmos_database == "orderprocessing"
    assert (settings.cosmos_state_container, settings.cosmos_orders_container) == (
        "state",
        "orders",
    )
    assert settings.reply_queues == frozenset()
    assert set(declared_names()) >= CONTRACT_SETTINGS


def test_settings_are_read_from_the_environment() -> None:
    settings = Settings.from_environ(
        {
            "REPLY_QUEUES": " replies-a, replies-b ,,",
            "STEP_TIMEOUT_SECONDS": "2.5",
            "MAX_FAILURES": "5",
            "RETRY_BUDGET": "20",
            "AGENT_DELIVERY_ATTEMPTS": "1",
            "STATE_STORE": "cosmos",
            "SUPERVISOR_SCHEDULE": "0 */1 * * * *",
            "ORDERS_QUEUE": "orders-eu",
            "AGENT_TRANSPORT": "activity",
            "FINISHED_RETENTION_SECONDS": "3600",
            "COSMOS_READ_TIMEOUT_SECONDS": "2.5",
            "COSMOS_DEADLINE_INDEX_CONTAINER": "recovery",
            "STOCK_SERVICE_URL": " http://127.0.0.1:7072/stock ",
            "UNRELATED": "ignored",
        }
    )
    assert settings.reply_queues == frozenset({"replies-a", "replies-b"})
    assert settings.step_timeout_seconds == 2.5
    assert settings.max_failures == 5
    assert settings.tries_per_request == 2
    assert settings.state_store == "cosmos"
    assert settings.supervisor_schedule == "0 */1 * * * *"
    assert settings.orders_queue == "orders-eu"
    assert settings.agent_transport == "activity"
    assert settings.finished_retention_seconds == 3600
    assert settings.cosmos_read_timeout_seconds == 2.5
    assert settings.cosmos_deadline_index_container == "recovery"
    assert settings.service_url("stock") == "http://127.0.0.1:7072/stock"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MAX_FAILURES", "0", "MAX_FAILURES must be a positive integer, got '0'"),
        ("MAX_FAILURES", "three", "MAX_FAILURES must be a positive integer"),
        ("STEP_TIMEOUT_SECONDS", "-1", "STEP_TIMEOUT_SECONDS must be a number of seconds >= 0"),
        ("STEP_TIMEOUT_SECONDS", "nan", "STEP_TIMEOUT_SECONDS must be a number of seconds >= 0"),
        ("STEP_TIMEOUT_SECONDS", "soon", "STEP_TIMEOUT_SECONDS must be a number of seconds"),
        ("STATE_STORE", "postgres", "STATE_STORE must be 'sqlite' or 'cosmos'"),
        ("AGENT_TRANSPORT", "http", "AGENT_TRANSPORT must be 'servicebus' or 'activity'"),
        ("STARTER_SCHEDULE", "*/5 * * * *", "STARTER_SCHEDULE must be a six-field NCRONTAB"),
        ("ORDERS_QUEUE", "  ", "ORDERS_QUEUE must not be empty"),
        ("RETRY_BUDGET", "2", "RETRY_BUDGET=2 gives a request no try"),
        (
            "FINISHED_RETENTION_SECONDS",
            "soon",
            "FINISHED_RETENTION_SECONDS must be a whole number, got 'soon'",
        ),
        ("COSMOS_RETRY_TOTAL", "0", "COSMOS_RETRY_TOTAL must be > 0, got '0'"),
        ("COSMOS_READ_TIMEOUT_SECONDS", "-1", "COSMOS_READ_TIMEOUT_SECONDS must be > 0"),
        ("COSMOS_OPERATION_TIMEOUT_SECONDS", "x", "COSMOS_OPERATION_TIMEOUT_SECONDS must be a"),
    ],
)
def test_bad_settings_fail_fast_naming_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("*", r"\*").replace("(", r"\(")):
        Settings.from_environ({name: value})


def test_a_budget_that_leaves_a_request_no_try_names_the_settings_c4() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({"RETRY_BUDGET": "7", "AGENT_DELIVERY_ATTEMPTS": "2"})
    assert str(refused.value) == (
        "RETRY_BUDGET=7 gives a request no try: an order of 3 steps (ORDER_STEPS) with "
        "MAX_FAILURES=3 needs at least 8, one to do each step, one to undo it and one per "
        "retry; raise RETRY_BUDGET or lower the others"
    )
    with pytest.raises(SettingsError, match="raise RETRY_BUDGET"):
        Settings(retry_budget=2)
    assert Settings(retry_budget=8).tries_per_request == 1


def test_a_backlog_bound_below_the_running_cap_is_refused_naming_both_settings_c5() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({"MAX_RUNNING_ORDERS": "50", "MAX_BACKLOG_ORDERS": "40"})
    assert str(refused.value).startswith("MAX_BACKLOG_ORDERS=40 is below MAX_RUNNING_ORDERS=50")
    settings = Settings.from_environ({"MAX_RUNNING_ORDERS": "50", "MAX_BACKLOG_ORDERS": "50"})
    assert (settings.max_running_orders, settings.max_backlog_orders) == (50, 50)
    assert Settings().max_backlog_orders > Settings().max_running_orders


def test_a_catch_up_window_within_the_sweep_window_is_refused_naming_both_u2() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ(
            {"SUPERVISOR_WINDOW_SECONDS": "7200", "SUPERVISOR_CATCHUP_WINDOW_SECONDS": "7200"}
        )
    assert str(refused.value) == (
        "SUPERVISOR_CATCHUP_WINDOW_SECONDS=7200 must be longer than "
        "SUPERVISOR_WINDOW_SECONDS=7200: the catch-up looks past the sweep window"
    )


def test_blank_cosmos_adapter_settings_keep_their_defaults() -> None:
    blank = {
        declared.name: " " for declared in declarations() if declared.name.startswith("COSMOS_")
    }
    blank.pop("COSMOS_DATABASE")
    blank.pop("COSMOS_STATE_CONTAINER")
    blank.pop("COSMOS_ORDERS_CONTAINER")
    assert Settings.from_environ({**blank, "STOCK_SERVICE_URL": ""}) == Settings()


def test_an_agent_needs_its_service_url() -> None:
    settings = Settings.from_environ({"STOCK_SERVICE_URL": ""})
    with pytest.raises(SettingsError, match="the app setting STOCK_SERVICE_URL is not set"):
        settings.service_url("stock")


def test_the_service_layer_gets_the_settings_as_domain_values() -> None:
    settings = Settings.from_environ(
        {
            "CLAIM_TIMEOUT_SECONDS": "45",
            "STEP_TIMEOUT_SECONDS": "30",
            "COMPENSATION_TIMEOUT_SECONDS": "90",
            "STORE_PAGE_SIZE": "10",
            "STARTER_MAX_CLAIMS": "25",
            "STARTER_MAX_PAGES": "3",
            "SUPERVISOR_MAX_ITEMS": "50",
            "SUPERVISOR_MAX_PAGES": "4",
            "SUPERVISOR_WINDOW_SECONDS": "3600",
            "SUPERVISOR_CATCHUP_WINDOW_SECONDS": "86400",
            "MAX_FAILURES": "4",
            "RETRY_DELAY_SECONDS": "2",
            "LONG_WAIT_AFTER_FAILURES": "3",
            "LONG_RETRY_DELAY_SECONDS": "60",
            "RETRY_BUDGET": "16",
            "AGENT_DELIVERY_ATTEMPTS": "2",
            "AGENT_BACKOFF_BASE_SECONDS": "0.5",
            "AGENT_BACKOFF_MAX_SECONDS": "4",
        }
    )
    assert settings.timeouts == Timeouts(claim_seconds=45, step_seconds=30, compensation_seconds=90)
    assert settings.starter_scan == ScanBounds(page_size=10, max_items=25, max_pages=3)
    assert settings.supervisor_policy == SupervisorPolicy(
        max_failures=4,
        retry_delay_seconds=2,
        long_wait_after_failures=3,
        long_retry_delay_seconds=60,
        window_seconds=3600,
        catch_up_window_seconds=86400,
        scan=ScanBounds(page_size=10, max_items=50, max_pages=4),
    )
    assert settings.tries_per_request == 1
    assert settings.agent_policy == AgentPolicy(backoff_base_seconds=0.5, backoff_max_seconds=4)


# --- one declaration per setting -----------------------------------------------------------


def test_every_setting_is_declared_once_with_a_meaning() -> None:
    names = declared_names()
    assert len(set(names)) == len(names)
    assert all(declared.meaning.strip() for declared in declarations())


def test_every_default_is_a_value_its_setting_accepts() -> None:
    for declared in declarations():
        if declared.default is None:
            continue
        if isinstance(declared.default, frozenset):
            text = ",".join(sorted(declared.default))
        elif isinstance(declared.default, tuple):
            text = ",".join(declared.default)
        else:
            text = str(declared.default)
        assert declared.parse(text, declared.name) == declared.default, declared.name


def test_at_rest_the_default_timers_leave_the_app_idle_ten_minutes_at_a_time_u7() -> None:
    """On Azure (the defaults) every timer fires at the same moments, at least ten minutes
    apart, so a Flex Consumption instance with no orders can scale in between (U7)."""
    settings = Settings()
    schedules = [
        CronSchedule.parse(expression)
        for expression in (
            settings.starter_schedule,
            settings.supervisor_schedule,
            settings.supervisor_catchup_schedule,
            settings.deadletter_watch_schedule,
        )
    ]
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    wakes = []
    for _ in range(50):
        moment = min(schedule.next_after(moment) for schedule in schedules)
        wakes.append(moment)
    gaps = {later - earlier for earlier, later in itertools.pairwise(wakes)}
    assert min(gaps) >= dt.timedelta(minutes=10), sorted(gaps)


# --- the sample settings and the README ----------------------------------------------------


def test_every_declared_setting_is_in_the_sample_with_its_default() -> None:
    sample = sample_values()
    assert set(declared_names()) <= set(sample)
    for declared in declarations():
        if declared.name in SET_FOR_THE_LOCAL_RUN:
            continue
        assert declared.parse(sample[declared.name], declared.name) == declared.default, (
            declared.name
        )
    Settings.from_environ(sample)


def test_every_sample_setting_is_declared_or_the_hosts() -> None:
    undeclared = set(sample_values()) - set(declared_names())
    assert undeclared == HOST_AND_CONNECTION_SETTINGS


# --- the step workflow's settings (C1, E1) ------------------------------------------------


def test_order_steps_pick_known_steps_in_order() -> None:
    settings = Settings.from_environ({"ORDER_STEPS": " ship-order , reserve-stock "})
    assert settings.order_steps == ("ship-order", "reserve-stock")
    with pytest.raises(SettingsError, match="ORDER_STEPS: unknown step 'fly'"):
        Settings.from_environ({"ORDER_STEPS": "fly"})
    with pytest.raises(SettingsError, match="ORDER_STEPS: a workflow needs at least one step"):
        Settings.from_environ({"ORDER_STEPS": " , "})


def test_each_agent_has_its_queue_and_service_url() -> None:
    settings = Settings.from_environ(
        {"PAYMENT_REQUESTS_QUEUE": "pay-q", "PAYMENT_SERVICE_URL": "http://127.0.0.1:1/payment"}
    )
    assert settings.agent_queue("payment") == "pay-q"
    assert settings.agent_queue("stock") == "stock-requests"
    assert settings.service_url("payment") == "http://127.0.0.1:1/payment"
    with pytest.raises(SettingsError, match="SHIPPING_SERVICE_URL is not set"):
        settings.service_url("shipping")
    with pytest.raises(SettingsError, match="no agent 'fly'"):
        settings.agent_queue("fly")


def test_agent_request_queues_deliver_a_request_as_often_as_the_budget_counts_c4() -> None:
    """AGENT_DELIVERY_ATTEMPTS is the agent request queues' MaxDeliveryCount: the agent
    splits a request's tries over that many deliveries, so a queue that redelivered more
    often would let an order's calls exceed RETRY_BUDGET."""
    config = json.loads((ROOT / "servicebus.config.json").read_text(encoding="utf-8"))
    queues = {
        queue["Name"]: queue["Properties"]
        for namespace in config["UserConfig"]["Namespaces"]
        for queue in namespace["Queues"]
    }
    settings = Settings.from_environ(sample_values())
    agent_queues = [settings.agent_queue(agent) for agent in ("stock", "payment", "shipping")]
    for name in agent_queues:
        assert queues[name]["MaxDeliveryCount"] == settings.agent_delivery_attempts, name
