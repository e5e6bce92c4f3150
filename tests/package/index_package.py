"""Import the deployed app and index every function as the Python worker does, in the fresh
virtual environment of the deployment package (run by ``test_deployment_package.py``).

Run as ``python index_package.py PACKAGE_DIR``. It puts PACKAGE_DIR first on ``sys.path``,
as the worker does with the app's folder, imports ``function_app`` and runs the worker
library's ``handle_event.index_functions`` (its answer to the host's metadata request), then
prints one JSON document: ``{"functions": [names], "outside": [modules loaded from outside
the package and the environment]}`` or ``{"error": "..."}`` with the worker's message.

The worker fills the metadata with message types of the host's ``FunctionRpc.proto``; only
their names and enum values matter to indexing, so plain stand-ins serve here, which keeps
this script free of the devhost and of everything else the package does not contain.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class _Message:
    """A stand-in for one protobuf message of FunctionRpc: it keeps its fields."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class BindingInfo(_Message):
    # Direction and DataType, with the proto's values.
    in_, out, inout = 0, 1, 2
    undefined, string, binary, stream = 0, 1, 2, 3


setattr(BindingInfo, "in", 0)  # "in" is a keyword: the generated code sets it so too

PROTOS = SimpleNamespace(
    BindingInfo=BindingInfo,
    RpcRetryOptions=type("RpcRetryOptions", (_Message,), {}),
    RpcFunctionMetadata=type("RpcFunctionMetadata", (_Message,), {}),
)


def index(package: Path) -> dict[str, Any]:
    from azure_functions_runtime import handle_event
    from azure_functions_runtime.bindings import meta

    handle_event.protos = PROTOS
    meta.load_binding_registry()
    try:
        metadata = handle_event.index_functions(str(package / "function_app.py"), str(package))
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {
        "functions": sorted(function.name for function in metadata),
        "outside": outside(package),
    }


def outside(package: Path) -> list[str]:
    """Modules loaded from anywhere but the package, this environment and the standard library."""
    allowed = [
        str(package.resolve()),
        str(Path(sys.prefix).resolve()),
        str(Path(sysconfig.get_paths()["stdlib"]).resolve()),
    ]
    found = []
    for name, module in list(sys.modules.items()):
        if name == "__main__":
            continue  # this script
        location = getattr(module, "__file__", None)
        if location and not any(str(Path(location).resolve()).startswith(a) for a in allowed):
            found.append(f"{name}: {location}")
    return sorted(found)


def main() -> None:
    package = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(package))
    os.chdir(package)
    print(json.dumps(index(package)))


if __name__ == "__main__":
    main()
