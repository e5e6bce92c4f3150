"""The chaos run's hosts split the app's triggered functions by role, even in a process
that has already listed the app's functions (the SDK allows one listing per app object)."""

from __future__ import annotations

from devhost.indexing import load_app

from tools.chaos.topology import (
    AGENT_TRIGGERS,
    AGENTS,
    SCHEDULER,
    SECOND_SCHEDULER,
    SECOND_SCHEDULER_TRIGGERS,
    host_settings,
    triggered_functions,
)
from tools.demo.pipeline import REPOSITORY


def disabled(settings: dict[str, str]) -> set[str]:
    return {
        key.removeprefix("AzureWebJobs__").removesuffix("__Disabled")
        for key, value in settings.items()
        if key.endswith("__Disabled") and value == "true"
    }


def test_the_roles_split_the_triggers_after_the_app_was_already_listed() -> None:
    load_app("function_app:app", REPOSITORY).get_functions()  # as an earlier test may have
    triggered = set(triggered_functions())
    assert triggered >= AGENT_TRIGGERS | SECOND_SCHEDULER_TRIGGERS
    assert "receive_order" in triggered

    hosts = host_settings({"A": "1"}, second_scheduler=True)

    assert disabled(hosts[SCHEDULER]) == AGENT_TRIGGERS
    assert triggered - disabled(hosts[AGENTS]) == AGENT_TRIGGERS
    assert triggered - disabled(hosts[SECOND_SCHEDULER]) == SECOND_SCHEDULER_TRIGGERS
    assert all(settings["A"] == "1" for settings in hosts.values())
