"""The devhost is a distribution of its own: every module it imports is the standard library,
the devhost itself, or a distribution its pyproject.toml declares (or the Python worker
library, installed beside it as its README says) - never the code of an app it runs."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import devhost

SOURCE = Path(devhost.__file__).resolve().parent
PYPROJECT = SOURCE.parents[1] / "pyproject.toml"
# Installed on its own with --no-deps --ignore-requires-python (README, "Install").
BESIDE = {"azure-functions-runtime"}
# What pytest_plugin needs when pytest loads it; pytest is then there by definition.
TEST_TIME = {"pytest"}


def _name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_levels(source: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


def _undeclared(source: Path) -> dict[str, list[str]]:
    """The top-level modules `source` imports that nothing allowed provides, with the files."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    declared = {_name(requirement) for requirement in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for top_level, files in _imported_top_levels(source).items():
        if top_level in sys.stdlib_module_names or top_level == "devhost":
            continue
        providers = {_name(dist) for dist in distributions.get(top_level, [])}
        if not providers & (declared | BESIDE | TEST_TIME):
            undeclared[top_level] = sorted(files)
    return undeclared


def test_every_import_is_the_stdlib_the_devhost_or_a_declared_dependency() -> None:
    assert _undeclared(SOURCE) == {}


def test_an_import_of_an_app_s_module_is_reported(tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(
        "import json\nimport aiohttp\nfrom orchestrators.order_workflow import ORCHESTRATOR\n",
        encoding="utf-8",
    )
    assert _undeclared(tmp_path) == {"orchestrators": ["runner.py"]}
