"""A language worker process: ``python -m devhost.language_worker APP APP_ROOT [--log-level L]``.

On Azure the Functions host keeps triggers, settlement and Durable histories, and runs the
function code in Python worker processes (``FUNCTIONS_WORKER_PROCESS_COUNT``). The devhost
does the same with ``--worker-processes N``: each worker imports and indexes the app as the
Python worker does and answers the devhost's requests, read from stdin as frames
(``worker_frames.py``), each ``(kind, id, *payload)``:

- ``replay``: run an orchestrator on its context JSON -> the SDK's state;
- ``activity``: run an activity on its input JSON -> its output JSON;
- ``invoke``: call a trigger function with the arguments the devhost built -> its result;
- ``call``: call ``module:function`` without arguments -> its result (the demo reads the
  app's own counters this way).

Every request also carries the W3C trace context of the host's span of it (C9). With
``PYTHON_ENABLE_OPENTELEMETRY`` true the worker attaches it before calling the function, as the
Python worker does (``azure_functions_runtime.otel.configure_opentelemetry``), so spans the app
starts are its children; with ``DEVHOST_TELEMETRY_EXPORT`` set the worker exports its own traces
and metrics there (``devhost.telemetry``) and flushes them when the devhost closes its stdin.

The answer is ``(id, "ok", result)`` or ``(id, "error", summary, details)``. Requests run
concurrently on the worker's event loop (sync functions on its thread pool), as invocations
do in the Python worker. The gRPC address of the host's settlement service comes on the
command line, as the host passes it. The app's prints and logs go to stderr, so nothing
but frames reaches the devhost on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import importlib
import logging
import os
import sys
import traceback
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from azure_functions_runtime import otel
from azure_functions_runtime.utils.app_setting_manager import is_envvar_true
from dateutil.parser import parse as dateutil_parse

from devhost import event_loop, telemetry
from devhost.durable.registry import FunctionRegistry
from devhost.durable.workers import InProcessActivities, InProcessOrchestrators
from devhost.indexing import IndexedFunction, index_app, load_app
from devhost.invocation import (
    InvocationContext,
    call_user_function,
    default_thread_count,
    materialized,
)
from devhost.sdk_compat import patch_durable_replay_helpers
from devhost.settings import AppSettings
from devhost.worker_frames import FRAME_HEADER, decode_payload, encode_frame

log = logging.getLogger("devhost.language_worker")

# Replaying re-reads the whole history on every episode, and the SDK parses every event's
# timestamp with dateutil and builds a namedtuple class per replay: together half of a
# worker's replay CPU. Both are pure functions of their arguments, so the worker remembers
# their results; what the SDK computes is unchanged (the in-process runner keeps the SDK as
# shipped, which the tests compare against).
SDK_MEMO_SIZE = 65_536
ZULU_SAMPLE = "2026-01-01T00:00:00.000000Z"
ENGINE_TIMESTAMP_LENGTH = len(ZULU_SAMPLE)


def history_timestamp(text: str) -> dt.datetime:
    """What dateutil's ``parse`` returns for `text`, fast for the engine's own timestamps.

    Every event is new to the memo once, and dateutil's general parser is slow: the fixed
    format the engine writes (``format_timestamp``) is read with ``fromisoformat`` instead,
    with the tzinfo dateutil gives a ``Z`` (``tzlocal()`` where local time is UTC, else
    ``tzutc()``), so the result is the same in every respect.
    """
    if len(text) == ENGINE_TIMESTAMP_LENGTH and text.endswith("Z"):
        try:
            return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=_zulu())
        except ValueError:
            pass
    moment: dt.datetime = dateutil_parse(text)
    return moment


@functools.cache
def _zulu() -> dt.tzinfo | None:
    sample: dt.datetime = dateutil_parse(ZULU_SAMPLE)
    return sample.tzinfo


def remember_sdk_pure_functions() -> None:
    patch_durable_replay_helpers(
        functools.lru_cache(maxsize=SDK_MEMO_SIZE)(history_timestamp),
        functools.lru_cache(maxsize=64)(namedtuple),
    )


class LanguageWorker:
    def __init__(self, functions: list[IndexedFunction], answers: BinaryIO) -> None:
        self._functions = {function.name: function for function in functions}
        registry = FunctionRegistry.from_functions([f.function for f in functions])
        self._answers = answers
        self._tasks: set[asyncio.Task[None]] = set()
        # Sync functions get the worker's own pool (PYTHON_THREADPOOL_THREAD_COUNT), as in
        # the Python worker; what async functions send to threads gets the loop's default
        # executor, which the Python worker leaves at asyncio's min(32, CPUs + 4) threads.
        self._functions_pool = ThreadPoolExecutor(
            max_workers=default_thread_count(), thread_name_prefix="function"
        )
        self._orchestrators = InProcessOrchestrators(registry)
        self._activities = InProcessActivities(registry, self._functions_pool)

    async def serve(self, requests: asyncio.StreamReader) -> None:
        while True:
            try:
                header = await requests.readexactly(FRAME_HEADER.size)
            except asyncio.IncompleteReadError:
                break  # the devhost closed the pipe: it stopped or died
            (length,) = FRAME_HEADER.unpack(header)
            request = decode_payload(await requests.readexactly(length))
            task = asyncio.create_task(self._answer(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for task in list(self._tasks):
            task.cancel()

    async def _answer(self, request: tuple[Any, ...]) -> None:
        kind, request_id, carrier, *payload = request
        # Each request runs in its own task, hence in its own copy of the context: what is
        # attached here is this invocation's alone.
        attach_trace_context(carrier)
        try:
            result = await self._run(kind, payload)
            answer: tuple[Any, ...] = (request_id, "ok", result)
        except Exception as error:
            summary = f"{type(error).__name__}: {error}"
            answer = (request_id, "error", summary, "".join(traceback.format_exception(error)))
        self._answers.write(encode_frame(answer))
        self._answers.flush()

    async def _run(self, kind: str, payload: list[Any]) -> Any:
        if kind == "replay":
            name, context_json = payload
            return await self._orchestrators.replay(name, context_json)
        if kind == "activity":
            name, input_json = payload
            return await self._activities.run_activity(name, input_json)
        if kind == "invoke":
            name, arguments = payload
            function = self._functions[name].user_function
            return await call_user_function(function, materialized(arguments), self._functions_pool)
        if kind == "call":
            (spec,) = payload
            module_name, _, attribute = spec.partition(":")
            return getattr(importlib.import_module(module_name), attribute)()
        raise ValueError(f"unknown request kind {kind!r}")


def attach_trace_context(carrier: dict[str, str]) -> None:
    """Make the host's span of this invocation the current context, with the Python worker's
    own code, when ``PYTHON_ENABLE_OPENTELEMETRY`` is on (``otel.update_opentelemetry_status``
    ran at start-up); otherwise nothing is attached, as in the worker."""
    if not carrier or not otel.otel_manager.get_otel_libs_available():
        return
    context = InvocationContext("", "", "", trace_context=telemetry.trace_context_of(carrier))
    otel.configure_opentelemetry(context)


def _start_telemetry() -> None:
    """What the Python worker does at start-up with ``PYTHON_ENABLE_OPENTELEMETRY``, and the
    devhost's local export when ``DEVHOST_TELEMETRY_EXPORT`` is set."""
    if is_envvar_true(telemetry.ENABLE_OPENTELEMETRY_SETTING):
        otel.otel_manager.set_otel_libs_available(True)
        otel.update_opentelemetry_status()
    destination = telemetry.export_destination(os.environ)
    if destination is not None:
        telemetry.configure(destination, service_name="devhost-language-worker")


async def _serve(app: str, app_root: str, answers: BinaryIO) -> None:
    _start_telemetry()
    functions = index_app(load_app(app, Path(app_root)), AppSettings(dict(os.environ)))
    remember_sdk_pure_functions()
    loop = asyncio.get_running_loop()
    requests = asyncio.StreamReader(limit=2**31 - 1)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(requests), os.fdopen(sys.stdin.fileno(), "rb")
    )
    await LanguageWorker(functions, answers).serve(requests)
    # The devhost is gone: nothing can receive a result any more, and a function blocked in
    # a thread must not keep this process alive as an orphan. What telemetry is buffered is
    # written first.
    answers.flush()
    telemetry.shutdown()
    os._exit(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devhost.language_worker")
    parser.add_argument("app")
    parser.add_argument("app_root")
    parser.add_argument("--log-level", default="WARNING")
    # The rest (the host's gRPC address) is read by the SDK-type binding from sys.argv.
    args, _ = parser.parse_known_args(argv)
    # The devhost's log level and format: the worker's records read like the host's own.
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    # The protocol owns the real stdout; whatever the app prints lands on stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    event_loop.run(_serve(args.app, args.app_root, answers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
