"""Calling a user function the way the Python worker does.

Sync functions run on a bounded thread pool (the worker's PYTHON_THREADPOOL_THREAD_COUNT),
async ones on the host's event loop. A parameter named ``context`` receives the invocation
context, and each input binding the host provides (``durableClient``: the client binding
JSON) is filled in by type. Each invocation is logged with its function name and invocation
id so a failure can be traced to the trigger that caused it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from devhost.indexing import IndexedFunction

log = logging.getLogger("devhost.invocation")


@dataclass(frozen=True)
class InvocationContext:
    """What the worker passes as ``context`` (the subset function code relies on)."""

    invocation_id: str
    function_name: str
    function_directory: str
    retry_context: None = None
    trace_context: None = None
    thread_local_storage: Any = field(default=None, compare=False)


@functools.cache
def _takes_context(user_function: Callable[..., Any]) -> bool:
    """Whether the function has a ``context`` parameter (asked once per function, not per call)."""
    return "context" in inspect.signature(user_function).parameters


def default_thread_count() -> int:
    configured = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT")
    return int(configured) if configured else min(32, (os.cpu_count() or 1) + 4)


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

    async def invoke(self, function: IndexedFunction, arguments: Mapping[str, Any]) -> Any:
        user_function = function.user_function
        kwargs = dict(arguments)
        for binding in function.bindings:
            provide = self._input_bindings.get(str(binding["type"]))
            if provide is not None and binding is not function.trigger:
                kwargs.setdefault(str(binding["name"]), provide())
        invocation_id = str(uuid.uuid4())
        if _takes_context(user_function):
            kwargs.setdefault(
                "context", InvocationContext(invocation_id, function.name, self._app_root)
            )
        log.debug("invoking function=%s invocation_id=%s", function.name, invocation_id)
        try:
            if inspect.iscoroutinefunction(user_function):
                return await user_function(**kwargs)
            call = functools.partial(contextvars.copy_context().run, user_function, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except Exception:
            log.exception(
                "function failed function=%s invocation_id=%s", function.name, invocation_id
            )
            raise

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
