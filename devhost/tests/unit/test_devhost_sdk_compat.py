"""devhost.sdk_compat, the devhost's one door to SDK internals: the installed SDKs are the
ones it was written for, every private name it uses resolves, and a version that moved under
it is reported with what to adapt. Nothing else in the distribution, its tests included,
reaches into an SDK."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from devhost import sdk_compat

# devhost/: the package's source and these tests, which must keep to the same door.
DISTRIBUTION = Path(__file__).resolve().parents[2]
DEVHOST = DISTRIBUTION / "src" / "devhost"
SDK_PACKAGES = (
    "azure",
    "azurefunctions",
    "azure_functions_runtime",
    "proton",
    "uamqp",
    "grpc",
    "google.protobuf",
)
# Dunder modules every Python file may import; no SDK's internals.
PUBLIC_DUNDERS = frozenset({"__future__", "__main__"})
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


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


def _is_sdk(module: str) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in SDK_PACKAGES)


def _is_private(name: str) -> bool:
    return any(part.startswith("_") and part not in PUBLIC_DUNDERS for part in name.split("."))


def _root_name(node: ast.expr) -> str | None:
    """The name an expression like ``a.b().c[0]`` starts from."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _private_sdk_uses(path: Path, root: Path = DISTRIBUTION) -> list[str]:
    """What `path` reaches of the SDKs' private names that the source shows: imports of a
    private module or name, a private attribute of a name an SDK import bound (``getattr``
    with a constant name included), and a private SDK module named in a string (for
    ``importlib``). Private attributes of SDK objects held in other names are beyond a scan."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    sdk_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_sdk(node.module):
                sdk_names.update(alias.asname or alias.name for alias in node.names)
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                found.extend((node.lineno, name) for name in names if _is_private(name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_sdk(alias.name):
                    sdk_names.add(alias.asname or alias.name.split(".")[0])
                    if _is_private(alias.name):
                        found.append((node.lineno, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            target, attribute = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            target, attribute = node.args[0], node.args[1].value
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and DOTTED.fullmatch(node.value)
            and _is_sdk(node.value)
            and _is_private(node.value)
        ):
            found.append((node.lineno, repr(node.value)))
            continue
        else:
            continue
        if _root_name(target) in sdk_names:
            found.append((node.lineno, f"{ast.unparse(target)}.{attribute}"))
    where = path.relative_to(root)
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_nothing_in_the_distribution_but_sdk_compat_reaches_an_sdk_internal() -> None:
    private = [
        found
        for path in sorted(DISTRIBUTION.rglob("*.py"))
        if path != DEVHOST / "sdk_compat.py"
        for found in _private_sdk_uses(path)
    ]
    assert private == []
    # The scan covers the package and its tests, and sees sdk_compat's own imports of four.
    assert DEVHOST.is_relative_to(DISTRIBUTION)
    assert (DISTRIBUTION / "tests" / "unit").is_dir()
    assert len(_private_sdk_uses(DEVHOST / "sdk_compat.py")) >= 4


def test_each_way_of_reaching_an_sdk_internal_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "reaching.py"
    source.write_text(
        "from __future__ import annotations\n"
        "import importlib\n"
        "import grpc\n"
        "import azure.servicebus._pyamqp.types\n"
        "from azure.functions._durable_functions import df_dumps\n"
        "from azurefunctions.extensions.bindings.servicebus import _private_helper\n"
        "from google.protobuf.internal import _parameterized\n"
        "from azure.durable_functions.models.utils import http_utils\n"
        "from azure.servicebus import ServiceBusReceiver\n"
        "import proton\n"
        "http_utils._close_session()\n"
        "getattr(grpc, '_channel')\n"
        "ServiceBusReceiver.get_instance()._handler\n"
        "importlib.import_module('uamqp._encode')\n"
        "mine = object()\n"
        "mine._private, proton.Message\n",
        encoding="utf-8",
    )
    assert _private_sdk_uses(source, tmp_path) == [
        "reaching.py:4: azure.servicebus._pyamqp.types",
        "reaching.py:5: azure.functions._durable_functions",
        "reaching.py:5: azure.functions._durable_functions.df_dumps",
        "reaching.py:6: azurefunctions.extensions.bindings.servicebus._private_helper",
        "reaching.py:7: google.protobuf.internal._parameterized",
        "reaching.py:11: http_utils._close_session",
        "reaching.py:12: grpc._channel",
        "reaching.py:13: ServiceBusReceiver.get_instance()._handler",
        "reaching.py:14: 'uamqp._encode'",
    ]
