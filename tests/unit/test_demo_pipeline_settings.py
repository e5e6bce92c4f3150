"""What a local pipeline run takes from the environment over its local defaults.

The store's settings (STATE_STORE, CosmosConnection*, COSMOS_*) and the workflow's
(ORDER_STEPS, AGENT_TRANSPORT), so `ORDER_STEPS=ship-order python -m tools.demo` runs the
one-step workflow; nothing else of the environment becomes an app setting.
"""

from __future__ import annotations

from tools.demo.pipeline import pipeline_settings_from


def test_a_run_takes_the_store_and_workflow_settings_of_the_environment() -> None:
    environ = {
        "STATE_STORE": "cosmos",
        "CosmosConnection": "AccountEndpoint=https://localhost:8081/;AccountKey=a2V5;",
        "CosmosConnection__accountEndpoint": "https://account.documents.azure.com:443/",
        "COSMOS_DATABASE": "kept",
        "ORDER_STEPS": "ship-order",
        "AGENT_TRANSPORT": "activity",
    }

    assert pipeline_settings_from(environ) == environ


def test_a_run_takes_nothing_else_of_the_environment() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/user",
        "MAX_FAILURES": "9",
        "STEP_TIMEOUT_SECONDS": "1",
        "order_steps": "ship-order",
    }

    assert pipeline_settings_from(environ) == {}
