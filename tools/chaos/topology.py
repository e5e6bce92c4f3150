"""The chaos run's devhosts: three processes over one state store and orders database, each
running part of the app's triggers (``AzureWebJobs__<name>__Disabled`` stops the rest, as on
the Functions host), each with a durable store of its own (the devhost's durable store has no
leases, so two hosts never share one; as two apps with two task hubs would not).

- ``scheduler``: submission, the starter, the supervisor, the catch-up sweep, the dead-letter
  watch, the agent-response receiver and the console; its orchestrations call their agents
  over Service Bus (E1, E3).
- ``agents``: the agents behind their request queues only; they answer on
  `AGENT_RESPONSES_RELAYED`, from which `chaos.relay` forwards (or loses, duplicates, delays,
  reorders) each answer to the scheduler's queue.
- ``second-scheduler``: only the starter and the supervisor, competing with the first for
  the same Pending records (D3) and the same expired ones (U6); its orchestrations call their
  agents as activities (E1), since agent answers go to the first scheduler's task hub.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path

from devhost.indexing import load_app

from tools.demo.pipeline import REPOSITORY

SCHEDULER = "scheduler"
AGENTS = "agents"
SECOND_SCHEDULER = "second-scheduler"
AGENT_TRIGGERS = frozenset({"stock_agent", "payment_agent", "shipping_agent"})
SECOND_SCHEDULER_TRIGGERS = frozenset({"start_pending_orders", "supervise_orders"})
AGENT_RESPONSES_RELAYED = "chaos-agent-responses"
# Called by a durable client or an orchestration, never disabled by a setting.
_DURABLE_TRIGGERS = frozenset({"activityTrigger", "orchestrationTrigger", "entityTrigger"})


def triggered_functions() -> list[str]:
    """The app's functions with a trigger of their own (timer, Service Bus, HTTP). The app is
    loaded afresh (`devhost.indexing.load_app`): the SDK lets one app object list its
    functions only once, and another part of this process may have done so already."""
    names: list[str] = []
    for function in load_app("function_app:app", REPOSITORY).get_functions():
        trigger, name = function.get_trigger(), function.get_function_name()
        if trigger is not None and name and trigger.get_binding_name() not in _DURABLE_TRIGGERS:
            names.append(name)
    return sorted(names)


def _disabled(names: Collection[str]) -> dict[str, str]:
    return {f"AzureWebJobs__{name}__Disabled": "true" for name in names}


def host_settings(
    values: Mapping[str, str], *, second_scheduler: bool
) -> dict[str, dict[str, str]]:
    """Each devhost's settings by role, from the settings every one of them shares."""
    triggered = triggered_functions()
    hosts = {
        SCHEDULER: {**values, **_disabled(AGENT_TRIGGERS)},
        AGENTS: {
            **values,
            **_disabled(set(triggered) - AGENT_TRIGGERS),
            "AGENT_RESPONSES_QUEUE": AGENT_RESPONSES_RELAYED,
        },
    }
    if second_scheduler:
        hosts[SECOND_SCHEDULER] = {
            **values,
            **_disabled(set(triggered) - SECOND_SCHEDULER_TRIGGERS),
            "AGENT_TRANSPORT": "activity",
        }
    return hosts


def broker_config(base: Path, target: Path) -> Path:
    """``base`` (the app's broker config) plus the relayed agent-responses queue, at ``target``."""
    document = json.loads(base.read_text(encoding="utf-8"))
    queues = document["UserConfig"]["Namespaces"][0]["Queues"]
    responses = next(q for q in queues if q["Name"] == "agent-responses")
    queues.append({**responses, "Name": AGENT_RESPONSES_RELAYED})
    target.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return target
