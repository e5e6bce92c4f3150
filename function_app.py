"""The Functions app: a composition of blueprints, one per role of the pattern.

- activities.submission    S1-S4  Service Bus trigger on ORDERS_QUEUE
- activities.starter       D1-D3  timer: claim Pending records, start attempts
- orchestrators            D4-D6, E2, E5, E6  the order workflow (the Scheduler)
- activities.order_steps   D4, E5, E8, R2  fenced state writes + status replies
- activities.agent_bridge  E1, E3, E4  agent requests out, responses in -> external events
- order_agents.worker      E1, E7, E9  the fulfilment agent (queue worker and activity)
- supervisor.sweep         U1-U7  timer: bounded sweeps for expired attempts
"""

import azure.durable_functions as df
import azure.functions as func

from activities import agent_bridge, order_steps, starter, submission
from orchestrators import order_workflow
from order_agents import worker
from supervisor import sweep

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)

for blueprint in (
    submission.bp,
    starter.bp,
    order_workflow.bp,
    order_steps.bp,
    agent_bridge.bp,
    worker.bp,
    sweep.bp,
):
    app.register_functions(blueprint)
