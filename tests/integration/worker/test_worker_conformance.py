"""The app loads on the real Python worker, and the devhost refuses what the worker refuses.

The Python worker validates every function while it indexes an app (parameters against
bindings, annotations, ``context``, the settlement client argument) and one rejected function
fails the whole app: nothing of it runs on Azure. These tests index the app and the devhost's
own test apps with the worker library itself (``azure-functions-runtime``, pinned in
requirements-worker.txt), each in a fresh interpreter as the worker does, and hold the devhost's
indexing to the same verdicts and messages (S1, S3: the SDK-type Service Bus binding and its
settlement client must reach the functions that settle their own messages).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from devhost.indexing import IndexingError, index_app, load_app
from devhost.settings import AppSettings

from config import Settings, declarations
from orchestrators.order_workflow import ACTIVITIES
from tools.emulators import EMULATOR_PROFILE

ROOT = Path(__file__).resolve().parents[3]
WORKER_INDEX = ROOT / "tests" / "support" / "worker_index.py"
INDEX_BOUND_SECONDS = 60

ORDER_APP_FUNCTIONS = {
    "receive_order": "serviceBusTrigger",
    "start_pending_orders": "timerTrigger",
    "order_workflow": "orchestrationTrigger",
    "receive_agent_response": "serviceBusTrigger",
    "begin_step": "activityTrigger",
    "run_step_in_activity": "activityTrigger",
    "finish_steps": "activityTrigger",
    "fail_step": "activityTrigger",
    "begin_undo": "activityTrigger",
    "run_undo_in_activity": "activityTrigger",
    "finish_undo": "activityTrigger",
    "undo_failed": "activityTrigger",
    "stock_agent": "serviceBusTrigger",
    "payment_agent": "serviceBusTrigger",
    "shipping_agent": "serviceBusTrigger",
    "supervise_orders": "timerTrigger",
    "catch_up_orders": "timerTrigger",
    "console_page": "httpTrigger",
    "console_list_orders": "httpTrigger",
    "console_show_order": "httpTrigger",
    "console_resubmit": "httpTrigger",
    "console_retry_compensation": "httpTrigger",
    "console_cancel": "httpTrigger",
    "console_dead_letter_queues": "httpTrigger",
    "console_list_dead_letters": "httpTrigger",
    "console_act_on_dead_letter": "httpTrigger",
    "watch_dead_letter_queues": "timerTrigger",
}
# Every app module the devhost's own tests run (devhost/tests/**/*_app.py).
DEVHOST_TEST_APPS = sorted((ROOT / "devhost" / "tests").rglob("*_app.py"))


def worker_index(script: Path, settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the worker answers the host's metadata request for the app in ``script``, with
    ``settings`` as app settings (the environment the host gives the worker)."""
    result = subprocess.run(
        [sys.executable, str(WORKER_INDEX), str(script.parent), script.name],
        capture_output=True,
        text=True,
        timeout=INDEX_BOUND_SECONDS,
        env={**os.environ, **(settings or {}), "PYTHONPATH": str(ROOT)},
        check=True,
    )
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def loaded(script: Path, settings: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    answer = worker_index(script, settings)
    assert "error" not in answer, answer.get("error")
    return {function["name"]: function for function in answer["functions"]}


def trigger_of(function: dict[str, Any]) -> dict[str, Any]:
    (trigger,) = [b for b in function["raw_bindings"] if b["type"].endswith("Trigger")]
    return trigger


@pytest.fixture(scope="module")
def order_app() -> dict[str, dict[str, Any]]:
    return loaded(ROOT / "function_app.py")


def test_every_function_of_the_order_app_loads_on_the_worker(
    order_app: dict[str, dict[str, Any]],
) -> None:
    assert {name: trigger_of(f)["type"] for name, f in order_app.items()} == ORDER_APP_FUNCTIONS


def test_the_orchestrator_calls_exactly_the_activities_the_app_registers(
    order_app: dict[str, dict[str, Any]],
) -> None:
    """The orchestrator module alone names its activities: a name it calls that no activity
    trigger carries would fail every order at that step, on Azure as here."""
    registered = {
        name for name, f in order_app.items() if trigger_of(f)["type"] == "activityTrigger"
    }
    assert set(ACTIVITIES) == registered


@pytest.mark.parametrize(
    "name", ["receive_order", "receive_agent_response", "stock_agent", "payment_agent"]
)
def test_service_bus_triggers_get_the_sdk_type_message_and_the_settlement_client_s1(
    order_app: dict[str, dict[str, Any]], name: str
) -> None:
    function = order_app[name]
    trigger = trigger_of(function)
    assert trigger["properties"] == {"SupportsDeferredBinding": True}
    assert trigger["autoCompleteMessages"] is False
    assert function["deferred_bindings_enabled"] is True
    assert function["settlement_client_arg"] == "message_actions"
    assert "message_actions" not in function["bindings"]


@pytest.mark.parametrize(
    "name",
    ["start_pending_orders", "receive_agent_response", "supervise_orders", "catch_up_orders"],
)
def test_starters_get_a_durable_client_binding(
    order_app: dict[str, dict[str, Any]], name: str
) -> None:
    assert order_app[name]["bindings"]["client"] == {
        "type": "durableClient",
        "direction": "in",
        "data_type": "undefined",
    }


def test_settings_stay_expressions_for_the_host_to_resolve(
    order_app: dict[str, dict[str, Any]],
) -> None:
    queues = {trigger_of(order_app[n])["queueName"] for n in ("receive_order", "stock_agent")}
    assert queues == {"%ORDERS_QUEUE%", "%STOCK_REQUESTS_QUEUE%"}
    assert trigger_of(order_app["supervise_orders"])["schedule"] == "%SUPERVISOR_SCHEDULE%"
    assert trigger_of(order_app["catch_up_orders"])["schedule"] == "%SUPERVISOR_CATCHUP_SCHEDULE%"
    watch = trigger_of(order_app["watch_dead_letter_queues"])
    assert watch["schedule"] == "%DEADLETTER_WATCH_SCHEDULE%"


def test_the_host_accepts_the_order_app_with_the_sample_settings() -> None:
    """Past the worker, the host checks names and resolves every %SETTING% expression: the
    devhost applies the host's rules to the worker's answer, with local.settings.sample.json."""
    sample = json.loads((ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    functions = index_app(load_app("function_app:app", ROOT), AppSettings(sample["Values"]))
    assert {f.name: f.trigger_type for f in functions} == ORDER_APP_FUNCTIONS


def test_the_order_app_indexes_with_the_emulator_profile() -> None:
    """`func start` with emulators/local.settings.emulators.json: the app's settings check
    passes on import (STATE_STORE=cosmos, the emulators' connections), the worker loads every
    function and the host resolves every %SETTING% expression from the profile."""
    profile = json.loads(EMULATOR_PROFILE.read_text(encoding="utf-8"))["Values"]
    by_worker = loaded(ROOT / "function_app.py", profile)
    assert {name: trigger_of(f)["type"] for name, f in by_worker.items()} == ORDER_APP_FUNCTIONS
    functions = index_app(load_app("function_app:app", ROOT), AppSettings(profile))
    assert {f.name: f.trigger_type for f in functions} == ORDER_APP_FUNCTIONS


def test_the_devhost_test_apps_are_found() -> None:
    # An empty list would skip the check below without a failure.
    assert {path.stem for path in DEVHOST_TEST_APPS} >= {
        "every_trigger_app",
        "restart_app",
        "crash_app",
        "semantics_app",
        "versioning_app",
    }


@pytest.mark.parametrize("script", DEVHOST_TEST_APPS, ids=lambda path: path.stem)
def test_the_devhost_test_apps_load_on_the_worker_as_the_devhost_indexes_them(
    script: Path,
) -> None:
    by_worker = loaded(script)
    expressions = re.findall(
        r"%(\w+)%", json.dumps([f["raw_bindings"] for f in by_worker.values()])
    )
    settings = AppSettings({name: name.lower() for name in expressions})
    by_devhost = index_app(load_app(f"{script.stem}:app", script.parent), settings)
    assert {f.name: f.settlement_parameter for f in by_devhost} == {
        name: f["settlement_client_arg"] for name, f in by_worker.items()
    }
    for function in by_devhost:
        worker_bindings = by_worker[function.name]["raw_bindings"]
        assert [b["type"] for b in function.bindings] == [b["type"] for b in worker_bindings]


REFUSED_APPS = {
    "builtin generic annotation": (
        """
        @app.activity_trigger(input_name="payload")
        def step(payload: dict[str, Any]) -> str:
            return "x"
        """,
        "cannot load the step function: binding payload has invalid non-type annotation "
        "dict[str, typing.Any]",
    ),
    "parameter no binding fills": (
        """
        @app.timer_trigger(schedule="0 * * * * *", arg_name="timer")
        def tick(timer: func.TimerRequest, extra: str) -> None: ...
        """,
        "cannot load the tick function: the following parameters are declared in Python but "
        "not in the function definition",
    ),
    "context of the wrong type": (
        """
        @app.timer_trigger(schedule="0 * * * * *", arg_name="timer")
        def tick(timer: func.TimerRequest, context: str) -> None: ...
        """,
        'cannot load the tick function: the "context" parameter is expected to be of type '
        "azure.functions.Context",
    ),
    "annotation the binding cannot convert": (
        """
        @app.timer_trigger(schedule="0 * * * * *", arg_name="timer")
        def tick(timer: func.HttpRequest) -> None: ...
        """,
        'cannot load the tick function: binding type "\'timer\'" and dataType "timerTrigger" '
        "in the binding decorator do not match the corresponding function parameter's Python "
        "type annotation HttpRequest",
    ),
}


def write_app(root: Path, body: str) -> Path:
    script = root / f"app_{uuid.uuid4().hex}.py"
    header = """
        from typing import Any
        import azure.functions as func
        import azure.durable_functions as df
        app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
    """
    script.write_text(textwrap.dedent(header) + textwrap.dedent(body), encoding="utf-8")
    return script


@pytest.mark.parametrize("case", REFUSED_APPS.keys())
def test_the_devhost_refuses_what_the_worker_refuses_with_its_message(
    tmp_path: Path, case: str
) -> None:
    body, message = REFUSED_APPS[case]
    script = write_app(tmp_path, body)

    refusal = worker_index(script)["error"]
    assert message in refusal

    with pytest.raises(IndexingError) as refused:
        index_app(load_app(f"{script.stem}:app", tmp_path), AppSettings({}))
    assert f"the Python worker refuses the app: {refusal.partition(': ')[2]}" == str(refused.value)


def test_devhost_start_fails_where_the_worker_would(tmp_path: Path) -> None:
    body, message = REFUSED_APPS["builtin generic annotation"]
    script = write_app(tmp_path, body)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "devhost", "start", "--app", f"{script.stem}:app"),
            *("--app-root", str(tmp_path), "--data", str(tmp_path / "data")),
        ],
        capture_output=True,
        text=True,
        timeout=INDEX_BOUND_SECONDS,
        cwd=ROOT,
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_two_apps_in_one_script_are_refused_by_both(tmp_path: Path) -> None:
    script = write_app(tmp_path, "second = func.FunctionApp()\n")
    assert (
        "More than one DFApp or other top level function app instances are defined"
        in (worker_index(script)["error"])
    )
    with pytest.raises(IndexingError, match="More than one DFApp or other top level function"):
        load_app(f"{script.stem}:app", tmp_path)


def _top_level_imports(package: Path) -> set[str]:
    names: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_bytes())):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return names


def test_no_app_package_shadows_a_module_the_functions_libraries_import() -> None:
    """A top-level package of the app named like a module that the Durable SDK or the worker
    imports (the SDK probes ``agents`` for its openai-agents integration) would run on that
    import, and be shadowed once the library is installed."""
    import azure.durable_functions
    import azure.functions
    import azure_functions_runtime

    imported: set[str] = set()
    for library in (azure.durable_functions, azure.functions, azure_functions_runtime):
        imported |= _top_level_imports(Path(library.__file__).parent)
    app_packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    app_packages |= {path.stem for path in ROOT.glob("*.py")}
    assert app_packages & imported == set()


def test_the_dead_letter_watcher_covers_every_queue_a_service_bus_trigger_consumes_s3(
    order_app: dict[str, dict[str, Any]],
) -> None:
    """Settings.consumed_queues - the queues whose dead letters the watcher alerts on and an
    operator triages - are exactly the queues of the app's Service Bus triggers."""
    by_name = {declared.name: declared.default for declared in declarations()}
    triggered = {
        by_name[trigger_of(function)["queueName"].strip("%")]
        for function in order_app.values()
        if trigger_of(function)["type"] == "serviceBusTrigger"
    }
    assert triggered == set(Settings().consumed_queues)
