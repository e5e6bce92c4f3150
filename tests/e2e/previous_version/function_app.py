"""The previous version of the app, for the upgrade test (C7): today's functions but for its
orchestrator, the order workflow as version 1 was released (``previous_workflow``)."""

import azure.durable_functions as df
import azure.functions as func
import previous_workflow

import bootstrap
from activities import agent_bridge, starter, steps, submission
from order_agents import functions as agents
from supervisor import dead_letter_watch, sweep

bootstrap.check_settings()

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (
    submission.bp,
    starter.bp,
    previous_workflow.bp,
    steps.bp,
    agent_bridge.bp,
    agents.bp,
    sweep.bp,
    dead_letter_watch.bp,
):
    app.register_functions(blueprint)
