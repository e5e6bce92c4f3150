"""The Functions app: the `DFApp` and one blueprint per role of the pattern.

Scheduler: `activities.submission` (S1-S4), `activities.starter` (D1-D3), `orchestrators`
(D4-D6, E2, E5, E6, C1, C7), `activities.steps` (D4, E5, E8, C1, C2, R2) and
`activities.agent_bridge` (E1, E3, E4). Agents: `order_agents.functions` (E1, E7, E9, C1).
Supervisor: `supervisor.sweep` (U1-U7) and `supervisor.dead_letter_watch` (S3, E8). The
operator console: `console.functions` (E8, C2, C4).
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
