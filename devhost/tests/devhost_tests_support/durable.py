"""The durable engine tests' shared pieces: the semantics app indexed once per session
(``app.get_functions()`` may be called only once per app) and the engines' start time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import cache

from azure.functions.decorators.function_app import Function

from devhost.durable import DurableEngine
from devhost_tests_support.durable_apps import semantics_app

START = dt.datetime(2030, 1, 1, 8, 0, tzinfo=dt.UTC)


@cache
def semantics_functions() -> tuple[Function, ...]:
    return tuple(semantics_app.app.get_functions())


EngineFactory = Callable[..., DurableEngine]
