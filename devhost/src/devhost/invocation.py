"""Calling a user function the way the Python worker does.

Sync functions run on a bounded thread pool (the worker's PYTHON_THREADPOOL_THREAD_COUNT),
async ones on the host's event loop. A parameter named ``context`` receives the invocation
context, and each input binding the host provides (``durableClient``: the client binding
JSON) is filled in by type. Each invocation is logged with its function name and invocation
id so a failure can be traced to the trigger that caused it, and runs inside the host's span of
it (``devhost.telemetry.host_span``), child of the trace context its trigger carried;
``context.trace_context`` is that span's (C9).

``FunctionInvoker`` calls in this process; ``WorkerFunctionInvoker`` sends the same arguments
to a language worker process (``devhost/language_workers.py``), where arguments that cannot
travel as they are (``DeferredArgument``: the SDK-type message, the actions client) are made.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import SpanKind

from devhost.indexing import IndexedFunction
from devhost.telemetry import TraceContext, host_span

log = logging.getLogger("devhost.invocation")


@dataclass(frozen=True)
class InvocationContext:
    """What the worker passes as ``context`` (the subset function code relies on)."""

    invocation_id: str
    function_name: str
    function_directory: str
    retry_context: None = None
    trace_context: TraceContext | None = None
    thread_local_storage: Any = field(default=None, compare=False)


@functools.cache
def _takes_context(user_function: Callable[..., Any]) -> bool:
    """Whether the function has a ``context`` parameter (asked once per function, not per call)."""
    return "context" in inspect.signature(user_function).parameters


# The host's span kind per trigger (OpenTelemetry's FaaS conventions).
_SPAN_KINDS = {
    "httpTrigger": SpanKind.SERVER,
    "serviceBusTrigger": SpanKind.CONSUMER,
}


def default_thread_count() -> int:
    configured = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT")
    return int(configured) if configured else min(32, (os.cpu_count() or 1) + 4)


class DeferredArgument(ABC):
    """An argument made where the function runs: in this process, or in a language worker
    after this small description of it travelled there (an SDK-type message is sent as the
    host's encoded bytes; the actions client, which holds a gRPC channel, is made anew)."""

    @abstractmethod
    def materialize(self) -> Any: ...


class FunctionError(Exception):
    """Function code raised in a worker process: what it raised, and its traceback there."""

    def __init__(self, summary: str, details: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.details = details


class RemoteCalls(Protocol):
    """Where a worker-process invoker sends its calls (``devhost.language_workers``)."""

    async def invoke(self, function_name: str, arguments: dict[str, Any]) -> Any: ...


class FunctionInvoker:
    def __init__(
        self,
        app_root: str,
        max_threads: int | None = None,
        input_bindings: Mapping[str, Callable[[], Any]] | None = None,
    ) -> None:
        self._app_root = app_root
        self._input_bindings = dict(input_bindings or {})
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads or default_thread_count(), thread_name_prefix="function"
        )

    async def invoke(
        self,
        function: IndexedFunction,
        arguments: Mapping[str, Any],
        parent: Mapping[str, str] | None = None,
    ) -> Any:
        """Call ``function``; ``parent`` is the W3C trace context its trigger carried (a new
        trace without one)."""
        invocation_id = str(uuid.uuid4())
        with host_span(
            function.name,
            parent=parent,
            kind=_SPAN_KINDS.get(function.trigger_type, SpanKind.INTERNAL),
            attributes={
                "faas.name": function.name,
                "faas.trigger": function.trigger_type,
                "faas.invocation_id": invocation_id,
            },
        ) as trace_context:
            return await self._invoke(function, arguments, invocation_id, trace_context)

    async def _invoke(
        self,
        function: IndexedFunction,
        arguments: Mapping[str, Any],
        invocation_id: str,
        trace_context: TraceContext,
    ) -> Any:
        kwargs = self._arguments(function, arguments, invocation_id, trace_context)
        log.debug("invoking function=%s invocation_id=%s", function.name, invocation_id)
        try:
            return await self._call(function, kwargs)
        except FunctionError as error:
            log.error(
                "function failed function=%s invocation_id=%s error=%s\n%s",
                function.name,
                invocation_id,
                error.summary,
                error.details,
            )
            raise
        except Exception:
            log.exception(
                "function failed function=%s invocation_id=%s", function.name, invocation_id
            )
            raise

    def _arguments(
        self,
        function: IndexedFunction,
        arguments: Mapping[str, Any],
        invocation_id: str,
        trace_context: TraceContext,
    ) -> dict[str, Any]:
        """The trigger's arguments plus the host-provided input bindings and ``context``."""
        user_function = function.user_function
        kwargs = dict(arguments)
        for binding in function.bindings:
            provide = self._input_bindings.get(str(binding["type"]))
            if provide is not None and binding is not function.trigger:
                kwargs.setdefault(str(binding["name"]), provide())
        if _takes_context(user_function):
            kwargs.setdefault(
                "context",
                InvocationContext(
                    invocation_id, function.name, self._app_root, trace_context=trace_context
                ),
            )
        return kwargs

    async def _call(self, function: IndexedFunction, kwargs: dict[str, Any]) -> Any:
        return await call_user_function(
            function.user_function, materialized(kwargs), self._executor
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


async def call_user_function(
    function: Callable[..., Any], kwargs: Mapping[str, Any], executor: Executor
) -> Any:
    """Await an async function; run a sync one on ``executor`` with the caller's contextvars."""
    if inspect.iscoroutinefunction(function):
        return await function(**kwargs)
    call = functools.partial(contextvars.copy_context().run, function, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


def materialized(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with every ``DeferredArgument`` made."""
    return {
        name: value.materialize() if isinstance(value, DeferredArgument) else value
        for name, value in arguments.items()
    }


class WorkerFunctionInvoker(FunctionInvoker):
    """Invokes in language worker processes: the arguments travel, the function runs there.

    The host builds every argument as for an in-process call (trigger data, durableClient
    binding JSON, ``context``); a ``DeferredArgument`` travels as it is and is made in the
    worker. A function that raises there raises ``FunctionError`` here.
    """

    def __init__(self, app_root: str, workers: RemoteCalls, **options: Any) -> None:
        super().__init__(app_root, **options)
        self._workers = workers

    async def _call(self, function: IndexedFunction, kwargs: dict[str, Any]) -> Any:
        return await self._workers.invoke(function.name, kwargs)
