"""devhost.sdk_compat, the devhost's one door to SDK internals: the installed SDKs are the
ones it was written for, every private name it uses resolves, and a version that moved under
it is reported with what to adapt. Nothing else in the devhost reaches into an SDK."""

from __future__ import annotations

import ast
from pathlib import Path

from devhost import sdk_compat

DEVHOST = Path(sdk_compat.__file__).resolve().parent
SDK_PACKAGES = ("azure", "azurefunctions", "azure_functions_runtime", "grpc", "proton")


def test_the_installed_sdks_are_the_pinned_ones_and_every_internal_resolves() -> None:
    assert sdk_compat.check() == []


def test_a_version_that_moved_under_the_devhost_is_named_with_what_to_adapt() -> None:
    problems = sdk_compat.check({"azure-servicebus": "7.0.0", "no-such-sdk": "1.0"})

    moved, missing = problems
    assert moved.startswith(
        "azure-servicebus is 7.15.0, devhost/sdk_compat.py was written for 7.0.0"
    )
    assert "update PINNED" in moved
    assert missing.startswith("no-such-sdk is not installed")


def _private_sdk_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] in SDK_PACKAGES and any(part.startswith("_") for part in parts):
                found.append(f"{path.relative_to(DEVHOST)}: {name}")
    return found


def test_no_devhost_module_but_sdk_compat_imports_an_sdk_internal() -> None:
    private = [
        found
        for path in sorted(DEVHOST.rglob("*.py"))
        if path.name != "sdk_compat.py"
        for found in _private_sdk_imports(path)
    ]
    assert private == []
    # The check sees what it looks for: sdk_compat itself imports four internals.
    assert len(_private_sdk_imports(DEVHOST / "sdk_compat.py")) >= 4
