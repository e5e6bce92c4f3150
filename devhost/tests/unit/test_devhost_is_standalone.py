"""The devhost is a distribution of its own: every module it imports is the standard library,
the devhost itself, or a distribution its pyproject.toml declares (or the Python worker
library, installed beside it as its README says) - never the code of an app it runs. Its
tests keep to the same, with their test extras and the test apps and helpers beside them."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Set
from pathlib import Path

import devhost

SOURCE = Path(devhost.__file__).resolve().parent
PYPROJECT = SOURCE.parents[1] / "pyproject.toml"
TESTS = Path(__file__).resolve().parents[1]
# Installed on its own with --no-deps --ignore-requires-python (README, "Install").
BESIDE = {"azure-functions-runtime"}
# What pytest_plugin needs when pytest loads it; pytest is then there by definition.
TEST_TIME = {"pytest"}


def _name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(*, extras: bool) -> set[str]:
    """The distributions pyproject.toml asks for: its dependencies, and with ``extras`` its
    optional ones (the test extra) too."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    if extras:
        requirements += [r for group in project["optional-dependencies"].values() for r in group]
    return {_name(requirement) for requirement in requirements}


def _imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    # importlib.import_module("name") and __import__("name") import as surely as a statement.
    if (
        isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
        in {"import_module", "__import__"}
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def _imported_top_levels(source: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for name in _imported_modules(node):
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(source)))
    return found


def _own_modules(tests: Path) -> set[str]:
    """What the tests import by bare name: their helpers and test apps, modules and packages
    in folders under ``tests`` that pytest (``pythonpath``) or a test puts on sys.path."""
    modules = {path.stem for path in tests.rglob("*.py")}
    return modules | {init.parent.name for init in tests.rglob("__init__.py")}


def _undeclared(
    source: Path, *, extras: bool = False, own: Set[str] = frozenset()
) -> dict[str, list[str]]:
    """The top-level modules `source` imports that nothing allowed provides, with the files."""
    allowed = _declared(extras=extras) | BESIDE | TEST_TIME
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for top_level, files in _imported_top_levels(source).items():
        if top_level in sys.stdlib_module_names or top_level == "devhost" or top_level in own:
            continue
        providers = {_name(dist) for dist in distributions.get(top_level, [])}
        if not providers & allowed:
            undeclared[top_level] = sorted(files)
    return undeclared


def test_every_import_is_the_stdlib_the_devhost_or_a_declared_dependency() -> None:
    assert _undeclared(SOURCE) == {}


def test_the_tests_import_no_app_only_what_the_distribution_declares_and_their_own() -> None:
    assert (TESTS / "unit" / Path(__file__).name).is_file()
    assert _undeclared(TESTS, extras=True, own=_own_modules(TESTS)) == {}


def test_an_import_of_an_app_s_module_is_reported(tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(
        "import json\nimport aiohttp\nfrom orchestrators.order_workflow import ORCHESTRATOR\n",
        encoding="utf-8",
    )
    assert _undeclared(tmp_path) == {"orchestrators": ["runner.py"]}


def test_a_test_importing_an_app_s_module_is_reported_its_own_apps_are_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "queue_app.py").write_text("import azure.functions\n", encoding="utf-8")
    (tmp_path / "test_settling.py").write_text(
        "import importlib\nimport pytest_asyncio\nimport queue_app\n"
        "from adapters import message_settlement\n"
        "importlib.import_module('bootstrap')\n",
        encoding="utf-8",
    )
    assert _undeclared(tmp_path, extras=True, own=_own_modules(tmp_path)) == {
        "adapters": ["test_settling.py"],
        "bootstrap": ["test_settling.py"],
    }
    # pytest-asyncio is a test extra: the package's own modules may not import it.
    assert "pytest_asyncio" in _undeclared(tmp_path, own=_own_modules(tmp_path))
