"""Function indexing: load ``module:app`` and index its functions as the Python worker does.

The worker imports the script, finds its one top-level function app, calls
``app.get_functions()`` and validates every function (parameters against bindings, parameter
and return annotations, ``context``, the settlement client argument, deferred bindings) before
it answers the host's metadata request; one rejected function fails the whole app. The
devhost runs that validation through the worker library itself (``azure-functions-runtime``),
with the worker's own messages, and takes each function's binding JSON from the worker's
answer, as the host does. It then resolves ``%SETTING%`` expressions like the host and
refuses any trigger or binding it cannot run, naming the function and the cause, instead of
starting a host that silently ignores part of the app. Function and binding names follow the
host's own rules, with its messages.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.functions.decorators.function_app import Function, FunctionRegister
from azure_functions_runtime import loader
from azure_functions_runtime.bindings import meta
from azure_functions_runtime.functions import FunctionLoadError, Registry

from devhost.function_rpc import protos
from devhost.settings import AppSettings, SettingsError

TRIGGERS = frozenset(
    {"orchestrationTrigger", "activityTrigger", "serviceBusTrigger", "timerTrigger", "httpTrigger"}
)
BINDINGS = frozenset({"durableClient", "http"})
# The host's rules for the names in the worker's answer (Utility.FunctionNameValidationRegex,
# BindingNameValidationRegex): an app that breaks them does not start on Azure either.
FUNCTION_NAME = re.compile(r"^[a-z][a-z0-9_\-]{0,127}$(?<!^host$)", re.IGNORECASE)
BINDING_NAME = re.compile(r"^([a-zA-Z][a-zA-Z0-9]{0,127}|\$return)$")


class IndexingError(Exception):
    """The app cannot be loaded or one of its functions cannot run on the devhost."""


@dataclass(frozen=True)
class IndexedFunction:
    name: str
    trigger: Mapping[str, Any]
    bindings: tuple[Mapping[str, Any], ...]
    function: Function
    settlement_parameter: str | None = None
    """The parameter the worker fills with the Service Bus settlement client, if any."""

    @property
    def trigger_type(self) -> str:
        return str(self.trigger["type"])

    @property
    def user_function(self) -> Callable[..., Any]:
        return self.function.get_user_function()

    def binding_of_type(self, binding_type: str) -> Mapping[str, Any] | None:
        return next((b for b in self.bindings if b["type"] == binding_type), None)


def load_app(spec: str, app_root: Path) -> FunctionRegister:
    """Import the module of ``module[:attribute]`` from ``app_root`` and return its FunctionApp.

    Without an attribute, the app is the module's one top-level FunctionApp (or DFApp),
    whatever its name, as the Python worker finds it
    (``azure_functions_runtime.loader.index_function_app``); more than one, or none, is the
    worker's error. The module comes from ``app_root`` even when the current directory or
    an earlier load holds a module of the same name.
    """
    module_name, _, attribute = spec.partition(":")
    root = str(app_root.resolve())
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)
    loaded = sys.modules.get(module_name)
    if loaded is not None and not _is_under(getattr(loaded, "__file__", None), root):
        del sys.modules[module_name]
        loaded = None
    try:
        # A second load in one process (tests starting several hosts) gets a fresh app:
        # get_functions() may be called only once per app object.
        module = importlib.reload(loaded) if loaded else importlib.import_module(module_name)
    except Exception as error:
        detail = "".join(traceback.format_exception_only(error)).strip()
        raise IndexingError(f"cannot import {module_name!r} from {root}: {detail}") from error
    apps = [value for value in vars(module).values() if isinstance(value, FunctionRegister)]
    if not attribute and not apps:
        # The worker's rule and message, as for what follows.
        raise IndexingError(f"Could not find top level function app instances in {module_name}.py.")
    app = getattr(module, attribute, None) if attribute else apps[0]
    if not isinstance(app, FunctionRegister):
        raise IndexingError(
            f"{module_name}.{attribute} is {type(app).__name__}, not a FunctionApp or DFApp"
        )
    if len(apps) > 1:
        # The worker's rule and message (azure_functions_runtime.loader.index_function_app).
        raise IndexingError(
            f"More than one {type(apps[0]).__name__} or other top level function app "
            "instances are defined."
        )
    return app


def _is_under(path: str | None, root: str) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root)


def index_app(app: FunctionRegister, settings: AppSettings) -> list[IndexedFunction]:
    """Every function of the app as the worker indexes it, bindings resolved; IndexingError on
    the first problem, with the worker's message where the worker refuses the app."""
    try:
        functions = app.get_functions()
    except ValueError as error:  # the SDK's own check, e.g. duplicate function names
        raise IndexingError(f"the app's functions cannot be indexed: {error}") from error
    meta.load_binding_registry()
    registry = Registry()
    try:
        indexed, _ = loader.process_indexed_function(protos, registry, functions, "")
    except FunctionLoadError as error:
        raise IndexingError(f"the Python worker refuses the app: {error}") from error
    return [
        _index_function(function, metadata, registry, settings)
        for function, metadata in zip(functions, indexed, strict=True)
    ]


def _index_function(
    function: Function, metadata: Any, registry: Registry, settings: AppSettings
) -> IndexedFunction:
    name = str(metadata.name)
    if not FUNCTION_NAME.match(name):
        raise IndexingError(f"'{name}' is not a valid function name.")
    bindings = tuple(_resolve(json.loads(raw), settings, name) for raw in metadata.raw_bindings)
    for binding in bindings:
        if not BINDING_NAME.match(str(binding.get("name", ""))):
            raise IndexingError(
                f"function {name!r}: The binding name {binding.get('name')} is invalid. "
                "Please assign a valid name to the binding."
            )
    triggers = [b for b in bindings if str(b["type"]).endswith("Trigger")]
    if len(triggers) != 1:
        raise IndexingError(f"function {name!r} has {len(triggers)} triggers; it needs exactly one")
    trigger = triggers[0]
    if trigger["type"] not in TRIGGERS:
        raise IndexingError(
            f"function {name!r} uses trigger type {trigger['type']!r}, which the devhost does "
            f"not run (supported: {', '.join(sorted(TRIGGERS))})"
        )
    for binding in bindings:
        if binding is not trigger and binding["type"] not in BINDINGS:
            raise IndexingError(
                f"function {name!r} uses binding type {binding['type']!r}, which the devhost "
                f"does not provide (supported: {', '.join(sorted(BINDINGS))})"
            )
    info = registry.get_function(metadata.function_id)
    settlement = info.settlement_client_arg if info is not None else None
    return IndexedFunction(name, trigger, bindings, function, settlement)


def _resolve(binding: dict[str, Any], settings: AppSettings, function_name: str) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for key, value in binding.items():
        if isinstance(value, str):
            try:
                value = settings.resolve(value, where=f"function {function_name!r} ({key})")
            except SettingsError as error:
                raise IndexingError(str(error)) from error
        resolved[key] = value
    return resolved
