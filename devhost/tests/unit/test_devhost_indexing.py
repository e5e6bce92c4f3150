"""Indexing an app the way the Python worker does, with errors that name function and cause."""

import re
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.indexing import IndexingError, index_app, load_app
from devhost.settings import AppSettings, SettingsError

HEADER = """
import azure.functions as func
import azure.durable_functions as df
app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
"""


def write_app(root: Path, body: str) -> str:
    module = f"app_{uuid.uuid4().hex}"
    (root / f"{module}.py").write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    return f"{module}:app"


def test_every_trigger_type_is_indexed_with_settings_resolved(tmp_path: Path) -> None:
    spec = write_app(
        tmp_path,
        """
        @app.service_bus_queue_trigger(arg_name="msg", queue_name="%Q%", connection="SB")
        @app.durable_client_input(client_name="client")
        async def submit(msg: func.ServiceBusMessage, client) -> None: ...

        @app.timer_trigger(schedule="%EVERY%", arg_name="timer")
        def tick(timer: func.TimerRequest) -> None: ...

        @app.route(route="ops")
        def ops(req: func.HttpRequest) -> func.HttpResponse: ...

        @app.orchestration_trigger(context_name="context")
        def flow(context):
            yield context.call_activity("step", None)

        @app.activity_trigger(input_name="payload")
        def step(payload: dict) -> dict:
            return payload
        """,
    )
    settings = AppSettings({"Q": "orders", "EVERY": "*/5 * * * * *"})
    functions = {f.name: f for f in index_app(load_app(spec, tmp_path), settings)}

    assert {name: f.trigger_type for name, f in functions.items()} == {
        "submit": "serviceBusTrigger",
        "tick": "timerTrigger",
        "ops": "httpTrigger",
        "flow": "orchestrationTrigger",
        "step": "activityTrigger",
    }
    assert functions["submit"].trigger["queueName"] == "orders"
    assert functions["submit"].binding_of_type("durableClient") is not None
    assert functions["tick"].trigger["schedule"] == "*/5 * * * * *"
    assert functions["step"].user_function({"x": 1}) == {"x": 1}


def test_missing_setting_names_function_and_setting(tmp_path: Path) -> None:
    spec = write_app(
        tmp_path,
        """
        @app.timer_trigger(schedule="%NOT_SET%", arg_name="timer")
        def tick(timer: func.TimerRequest) -> None: ...
        """,
    )
    with pytest.raises(IndexingError, match=r"function 'tick'.*%NOT_SET%"):
        index_app(load_app(spec, tmp_path), AppSettings({}))


def test_import_error_names_module_and_cause(tmp_path: Path) -> None:
    spec = write_app(tmp_path, "import no_such_module_here\n")
    with pytest.raises(
        IndexingError, match=r"cannot import.*No module named 'no_such_module_here'"
    ):
        load_app(spec, tmp_path)


def test_attribute_that_is_not_an_app_is_refused(tmp_path: Path) -> None:
    spec = write_app(tmp_path, "not_an_app = 42\n").replace(":app", ":not_an_app")
    with pytest.raises(IndexingError, match="int, not a FunctionApp"):
        load_app(spec, tmp_path)


def test_duplicate_function_names_are_refused(tmp_path: Path) -> None:
    spec = write_app(
        tmp_path,
        """
        @app.function_name("same")
        @app.activity_trigger(input_name="a")
        def one(a: str) -> str:
            return a

        @app.function_name("same")
        @app.activity_trigger(input_name="b")
        def two(b: str) -> str:
            return b
        """,
    )
    with pytest.raises(IndexingError, match="same does not have a unique function name"):
        index_app(load_app(spec, tmp_path), AppSettings({}))


def test_unsupported_trigger_type_names_function_and_type(tmp_path: Path) -> None:
    spec = write_app(
        tmp_path,
        """
        @app.blob_trigger(arg_name="blob", path="c/{name}", connection="Storage")
        def on_blob(blob: func.InputStream) -> None: ...
        """,
    )
    with pytest.raises(IndexingError, match=r"'on_blob' uses trigger type 'blobTrigger'"):
        index_app(load_app(spec, tmp_path), AppSettings({}))


def test_unsupported_binding_type_names_function_and_type(tmp_path: Path) -> None:
    spec = write_app(
        tmp_path,
        """
        @app.timer_trigger(schedule="0 * * * * *", arg_name="timer")
        @app.blob_output(arg_name="out", path="c/x", connection="Storage")
        def tick(timer: func.TimerRequest, out: func.Out[str]) -> None: ...
        """,
    )
    with pytest.raises(IndexingError, match=r"'tick' uses binding type 'blob'"):
        index_app(load_app(spec, tmp_path), AppSettings({}))


def test_environment_wins_over_local_settings(tmp_path: Path) -> None:
    (tmp_path / "local.settings.json").write_text(
        '{"IsEncrypted": false, "Values": {"A": "file", "B": "file"}}', encoding="utf-8"
    )
    settings = AppSettings.load(tmp_path, environ={"B": "env"})
    assert (settings.get("A"), settings.get("B")) == ("file", "env")
    assert settings.resolve("%A%-%B%", where="test") == "file-env"


def test_unreadable_local_settings_is_reported(tmp_path: Path) -> None:
    (tmp_path / "local.settings.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SettingsError, match="cannot read app settings"):
        AppSettings.load(tmp_path, environ={})


def test_export_overrides_and_restores_the_environment() -> None:
    environ = {"KEEP": "x", "B": "old"}
    restore = AppSettings({"A": "1", "B": "new"}).export(environ)
    assert environ == {"KEEP": "x", "A": "1", "B": "new"}
    restore()
    assert environ == {"KEEP": "x", "B": "old"}


@pytest.mark.parametrize("name", ["host", "1st", "has space", "x" * 129])
def test_function_names_the_host_refuses_are_refused(tmp_path: Path, name: str) -> None:
    spec = write_app(
        tmp_path,
        f"""
        @app.function_name({name!r})
        @app.activity_trigger(input_name="payload")
        def step(payload: str) -> str:
            return payload
        """,
    )
    with pytest.raises(IndexingError, match=re.escape(f"'{name}' is not a valid function name.")):
        index_app(load_app(spec, tmp_path), AppSettings({}))


def test_binding_names_the_host_refuses_are_refused(tmp_path: Path) -> None:
    """The host takes letters and digits only: a Python-style ``arg_name`` fails on Azure."""
    spec = write_app(
        tmp_path,
        """
        @app.timer_trigger(schedule="0 * * * * *", arg_name="my_timer")
        def tick(my_timer: func.TimerRequest) -> None: ...
        """,
    )
    with pytest.raises(IndexingError, match="The binding name my_timer is invalid"):
        index_app(load_app(spec, tmp_path), AppSettings({}))


@pytest.fixture(autouse=True)
def _own_function_app_module() -> Iterator[None]:
    """The function_app module these tests load is theirs alone: whatever the process had
    under that name before is back afterwards."""
    before = sys.modules.get("function_app")
    yield
    sys.modules.pop("function_app", None)
    if before is not None:
        sys.modules["function_app"] = before


def _function_app(root: Path, variable: str, function: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "function_app.py").write_text(
        textwrap.dedent(
            f"""
            import azure.functions as func
            {variable} = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

            @{variable}.route(route="{function}")
            def {function}(req: func.HttpRequest) -> func.HttpResponse: ...
            """
        ),
        encoding="utf-8",
    )
    return root


def test_without_an_attribute_the_module_s_one_app_is_found_whatever_its_name(
    tmp_path: Path,
) -> None:
    # Microsoft's Durable samples name theirs myApp; the Python worker finds it all the same.
    root = _function_app(tmp_path / "sample", "myApp", "hello")
    functions = index_app(load_app("function_app", root), AppSettings({}))
    assert [f.name for f in functions] == ["hello"]


def test_the_app_root_s_module_is_loaded_over_one_of_the_same_name_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started from another app's folder (on sys.path first, as `python -m` puts it), or after
    another app's function_app.py was loaded, the devhost still indexes --app-root's."""
    here = _function_app(tmp_path / "current-directory", "app", "from_cwd")
    sample = _function_app(tmp_path / "sample", "app", "from_sample")
    monkeypatch.syspath_prepend(str(here))
    assert [f.name for f in index_app(load_app("function_app", here), AppSettings({}))] == [
        "from_cwd"
    ]
    loaded = index_app(load_app("function_app", sample), AppSettings({}))
    assert [f.name for f in loaded] == ["from_sample"]


def test_a_module_without_an_app_gets_the_worker_s_error(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text("VALUE = 1\n", encoding="utf-8")
    with pytest.raises(IndexingError, match="Could not find top level function app instances"):
        load_app("function_app", tmp_path)
