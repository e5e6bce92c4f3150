"""The Functions app: a composition of blueprints, one per role of the pattern.

- activities.submission    S1-S4  Service Bus trigger on ORDERS_QUEUE
- activities.starter       D1-D3  timer: claim Pending records, start attempts
- orchestrators            D4-D6, E2, E5, E6, C1, C7  the versioned order workflow (the Scheduler)
- activities.steps         D4, E5, E8, C1, C2, R2  the workflow's fenced writes
- activities.agent_bridge  E1, E3, E4  agent responses in -> external events
- order_agents.functions   E1, E7, E9, C1  one agent per step's remote service
- supervisor.sweep         U1-U7  timer: bounded sweeps for expired attempts
- supervisor.dead_letter_watch  S3, E8  timer: one operator alert per new dead letter
- console.functions        E8, C2, C4  the operator console: admin HTTP functions and page
"""

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from activities import agent_bridge, starter, steps, submission
from console import functions as console
from orchestrators import order_workflow
from order_agents import functions as agents
from supervisor import dead_letter_watch, sweep

# A setting the app cannot run with (a retry budget too small for its factors, C4) stops the
# app from loading, on Azure as under the devhost, with a message that names it.
bootstrap.check_settings()

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)

for blueprint in (
    submission.bp,
    starter.bp,
    order_workflow.bp,
    steps.bp,
    agent_bridge.bp,
    agents.bp,
    sweep.bp,
    dead_letter_watch.bp,
    console.bp,
):
    app.register_functions(blueprint)
