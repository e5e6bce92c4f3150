"""Index a Functions app with the Python worker's own code and print what the host receives.

Run as ``python worker_index.py APP_DIR SCRIPT_FILE`` in a process of its own, as the worker
indexes an app in a fresh interpreter: it puts APP_DIR first on ``sys.path``, loads the binding
registry and runs ``azure_functions_runtime.handle_event.index_functions`` (the worker's answer
to the host's metadata request) with the devhost's ``FunctionRpc`` message types. Prints one
JSON document: ``{"functions": [...]}`` with each function's bindings, raw binding JSON,
settlement argument and deferred-binding flag, or ``{"error": "..."}`` with the worker's message.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def index(app_dir: Path, script_file: str) -> dict[str, Any]:
    from azure_functions_runtime import handle_event
    from azure_functions_runtime.bindings import meta
    from devhost.function_rpc import protos

    handle_event.protos = protos
    meta.load_binding_registry()
    try:
        metadata = handle_event.index_functions(str(app_dir / script_file), str(app_dir))
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    functions = []
    for function in metadata:
        info = handle_event._functions.get_function(function.function_id)
        functions.append(
            {
                "name": function.name,
                "bindings": {
                    name: {
                        "type": binding.type,
                        "direction": protos.BindingInfo.Direction.Name(binding.direction),
                        "data_type": protos.BindingInfo.DataType.Name(binding.data_type),
                    }
                    for name, binding in function.bindings.items()
                },
                "raw_bindings": [json.loads(raw) for raw in function.raw_bindings],
                "settlement_client_arg": info.settlement_client_arg,
                "deferred_bindings_enabled": info.deferred_bindings_enabled,
                "is_async": info.is_async,
            }
        )
    return {"functions": functions}


def main() -> None:
    app_dir = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(app_dir))
    os.chdir(app_dir)
    print(json.dumps(index(app_dir, sys.argv[2])))


if __name__ == "__main__":
    main()
