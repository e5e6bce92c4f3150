"""A worker process that replays orchestrations: ``python -m devhost.durable.replay_worker``.

Started by ``WorkerProcessOrchestrators`` with the app as ``module:attribute``, its root and
the devhost's log level. It imports the app as the Python worker does and answers episode
requests read from stdin (``frames.py``), one at a time in the order they came: a request is
``(id, EpisodeRequest)``, the answer ``(id, EpisodeOutcome)`` or ``(id, error text)``. The
whole episode is decided here (replays, buffered-event deliveries, translation of the
actions); the devhost only commits. The app's prints and logs go to stderr, so nothing but
frames ever reaches the devhost on stdout.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any, BinaryIO

from devhost.durable.frames import encode_frame, read_frame
from devhost.durable.registry import FunctionRegistry
from devhost.durable.replay import EpisodeOutcome, decide_episode
from devhost.indexing import load_app

# Replaying re-reads the whole history on every episode, and the SDK parses every event's
# timestamp with dateutil and builds a namedtuple class per replay: together half of a
# worker's CPU. Both are pure functions of their arguments, so the worker remembers their
# results; what the SDK computes is unchanged (only the in-process runner keeps the SDK as
# shipped, which the tests compare against).
SDK_MEMO_SIZE = 65_536


def remember_sdk_pure_functions() -> None:
    history_module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    executor_module = importlib.import_module(
        "azure.durable_functions.models.TaskOrchestrationExecutor"
    )
    parse = functools.lru_cache(maxsize=SDK_MEMO_SIZE)(history_module.dt_parse)
    setattr(history_module, "dt_parse", parse)  # noqa: B010 - the module's own global
    setattr(executor_module, "namedtuple", functools.lru_cache(maxsize=64)(namedtuple))  # noqa: B010


def serve(registry: FunctionRegistry, requests: BinaryIO, answers: BinaryIO) -> None:
    def replay(name: str, context_json: str) -> dict[str, Any]:
        return registry.orchestrator(name).invoke(context_json)

    while (request := read_frame(requests)) is not None:
        request_id, episode = request
        answer: EpisodeOutcome | str
        try:
            answer = decide_episode(episode, replay)
        except Exception as error:  # a devhost bug, not the orchestrator's (that is an outcome)
            answer = f"{type(error).__name__}: {error}"
        answers.write(encode_frame((request_id, answer)))
        answers.flush()


def main(argv: list[str]) -> int:
    app, app_root, log_level = argv
    # The devhost's log level and format: the worker's records read like the host's own.
    logging.basicConfig(
        level=log_level,
        stream=sys.stderr,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    # The protocol owns the real stdout; whatever the app prints lands on stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    registry = FunctionRegistry.from_functions(load_app(app, Path(app_root)).get_functions())
    remember_sdk_pure_functions()
    serve(registry, sys.stdin.buffer, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
