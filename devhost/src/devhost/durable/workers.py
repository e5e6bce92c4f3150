"""Where the engine's function code runs: in the devhost's own process or in worker processes.

On Azure the Functions host keeps the histories and the Python worker runs the code: it
replays orchestrators (the host sends the context, the worker answers the orchestrator
state) and runs activities. The engine plays the host; what runs the code is a runner. In
one process (the default) tests start fast and share one clock. With language worker
processes (``devhost.language_workers``, ``--worker-processes N``) every replay and every
activity runs there, so function code stops competing for one GIL with the triggers and the
engine's bookkeeping (throughput on more than one core). The engine reads, translates and
commits in both cases; a worker only computes from what it was sent, so a worker that dies
loses nothing.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Protocol

from devhost.durable.registry import FunctionRegistry
from devhost.invocation import call_user_function


class OrchestratorRunner(Protocol):
    """Runs one replay: the orchestration trigger's context JSON in, the SDK's state out (the
    engine translates and decides, as the extension does for the Python worker)."""

    async def replay(self, name: str, context_json: str) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class ActivityRunner(Protocol):
    """Runs one activity on its input JSON; returns its output JSON or raises what it raised
    (``devhost.invocation.FunctionError`` when it ran in a worker process)."""

    async def run_activity(self, name: str, input_json: str | None) -> str: ...


class InProcessOrchestrators:
    """Replays in the calling thread, as the devhost does without worker processes."""

    def __init__(self, registry: FunctionRegistry) -> None:
        self._registry = registry

    async def replay(self, name: str, context_json: str) -> dict[str, Any]:
        return self._registry.orchestrator(name).invoke(context_json)

    async def close(self) -> None:
        pass


class InProcessActivities:
    """Runs activities here: async ones on the event loop, sync ones on ``executor``, with the
    worker's own (de)serialisation of inputs and outputs."""

    def __init__(self, registry: FunctionRegistry, executor: Executor) -> None:
        self._registry = registry
        self._executor = executor

    async def run_activity(self, name: str, input_json: str | None) -> str:
        activity = self._registry.activity(name)
        argument = activity.decode_input(input_json)
        result = await call_user_function(
            activity.function, {activity.input_parameter: argument}, self._executor
        )
        return activity.encode_output(result)
