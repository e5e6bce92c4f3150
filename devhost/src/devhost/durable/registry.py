"""Orchestrator and activity functions of a v2-model app, invoked the way the worker does.

Built from the ``Function`` objects of ``app.get_functions()`` (which may be called only
once per app, so the caller passes the list in).  Orchestrators are called with an
``azure.functions.OrchestrationContext`` and return the SDK's JSON state; activities get
their input decoded and their output encoded by the worker's own
``ActivityTriggerConverter``, as the host's activityTrigger binding does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import azure.functions as func
from azure.functions.decorators.function_app import Function
from azure.functions.durable_functions import ActivityTriggerConverter
from azure.functions.meta import Datum

ORCHESTRATION_TRIGGER = "orchestrationTrigger"
ACTIVITY_TRIGGER = "activityTrigger"
_OUT_OF_PROC_LABEL = "\n\n$OutOfProcData$:"


class OrchestratorStateError(Exception):
    """The SDK did not return an orchestrator state the engine can read."""


@dataclass(frozen=True)
class OrchestratorFunction:
    """An orchestrator as the DFApp registered it (the SDK's ``Orchestrator.create`` handle)."""

    name: str
    handle: Callable[..., Any]

    def invoke(self, context_json: str) -> dict[str, Any]:
        """Run one replay; return the SDK state, also when the orchestrator raised.

        The SDK reports an orchestrator failure as an exception whose message carries the
        state after an ``$OutOfProcData$:`` label, exactly what the worker forwards.
        """
        try:
            result = self.handle(func.OrchestrationContext(context_json))
        except Exception as error:
            message = str(error)
            if _OUT_OF_PROC_LABEL not in message:
                raise
            result = message.split(_OUT_OF_PROC_LABEL, 1)[1]
        state = json.loads(result)
        if not isinstance(state, dict):
            raise OrchestratorStateError(
                f"orchestrator '{self.name}' returned {result!r}, not an orchestrator state"
            )
        return state


@dataclass(frozen=True)
class ActivityFunction:
    """An activity function and the name of its trigger parameter."""

    name: str
    function: Callable[..., Any]
    input_parameter: str

    def decode_input(self, input_json: str | None) -> Any:
        """Decode the scheduled input exactly as the worker's converter does."""
        if input_json is None:
            return None
        return ActivityTriggerConverter.decode(Datum(input_json, "json"), trigger_metadata=None)

    @staticmethod
    def encode_output(output: Any) -> str:
        """Encode the return value exactly as the worker's converter does."""
        datum = ActivityTriggerConverter.encode(output, expected_type=None)
        return str(datum.value)


class FunctionRegistry:
    """Lookup of an app's durable functions by name."""

    def __init__(
        self,
        orchestrators: dict[str, OrchestratorFunction],
        activities: dict[str, ActivityFunction],
    ) -> None:
        self.orchestrators = orchestrators
        self.activities = activities

    @classmethod
    def from_functions(cls, functions: Iterable[Function]) -> FunctionRegistry:
        """Index orchestration and activity triggers; other trigger types are left to the host."""
        orchestrators: dict[str, OrchestratorFunction] = {}
        activities: dict[str, ActivityFunction] = {}
        for function in functions:
            trigger = function.get_trigger()
            name = function.get_function_name()
            if trigger is None or name is None:
                continue
            binding = trigger.get_binding_name()
            if binding == ORCHESTRATION_TRIGGER:
                orchestrators[name] = OrchestratorFunction(name, function.get_user_function())
            elif binding == ACTIVITY_TRIGGER:
                activities[name] = ActivityFunction(
                    name, function.get_user_function(), trigger.name
                )
        return cls(orchestrators, activities)

    def orchestrator(self, name: str) -> OrchestratorFunction:
        try:
            return self.orchestrators[name]
        except KeyError:
            raise UnknownFunctionError("orchestrator", name, sorted(self.orchestrators)) from None

    def activity(self, name: str) -> ActivityFunction:
        try:
            return self.activities[name]
        except KeyError:
            raise UnknownFunctionError("activity", name, sorted(self.activities)) from None


class UnknownFunctionError(LookupError):
    """A durable function name that the app does not define."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        super().__init__(
            f"the app has no {kind} function named '{name}' "
            f"(known {kind} functions: {', '.join(known) or 'none'})"
        )
        self.kind = kind
        self.name = name
