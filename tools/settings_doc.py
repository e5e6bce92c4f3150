"""The settings reference, docs/settings.md, made from config.py's declarations.

Each app setting is declared once in config.py with its name, default, parser and meaning;
this module renders those declarations, in their order, and the host's and connections'
settings that config.py does not declare (the Functions host, the worker and the SDK clients
read them). tests/unit/test_settings_doc.py fails when docs/settings.md is not what `render`
makes. Regenerate it with:

    python -m tools.settings_doc > docs/settings.md
"""

from __future__ import annotations

import sys

from config import Declaration, declarations

COMMAND = "python -m tools.settings_doc > docs/settings.md"

HOST_SETTINGS: tuple[tuple[str, str], ...] = (
    ("FUNCTIONS_WORKER_RUNTIME", "`python`, the language worker the Functions host starts."),
    (
        "PYTHON_ISOLATE_WORKER_DEPENDENCIES",
        "`1`, so that the Python worker loads the app's pinned protobuf and grpcio before its own "
        "older copies, which the Service Bus settlement extension cannot use "
        "([architecture.md](architecture.md#dead-lettering-from-a-python-trigger)). Set it "
        "in the function app's settings too; the devhost needs no such setting.",
    ),
    (
        "AzureWebJobsStorage",
        "the host's storage account: locally Azurite's `UseDevelopmentStorage=true` (or its "
        "full connection string, as the emulators' profile has it; the "
        "devhost does not need it), on Azure `AzureWebJobsStorage__blobServiceUri` with "
        "`AzureWebJobsStorage__credential` = `managedidentity` and "
        "`AzureWebJobsStorage__clientId`.",
    ),
    (
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
        "the Durable Task Scheduler that keeps the orchestrations (host.json "
        "`storageProvider` `azureManaged`): the emulator's "
        "`Endpoint=http://localhost:8080;Authentication=None` locally, "
        "`Endpoint=https://…;Authentication=ManagedIdentity;ClientID=…` on Azure. The "
        "devhost keeps its own histories but requires the setting, as the host does.",
    ),
    ("TASKHUB_NAME", "the task hub, host.json's `hubName` `%TASKHUB_NAME%`."),
    (
        "ServiceBusConnection",
        "a connection string locally (the embedded broker's, the Service Bus emulator's or a "
        "namespace's); on Azure "
        "`ServiceBusConnection__fullyQualifiedNamespace` with `ServiceBusConnection__credential`"
        " = `managedidentity` and `ServiceBusConnection__clientId` (a user-assigned identity; "
        "without it the system-assigned one). The host's triggers and the app's publisher "
        "read them alike (`adapters/identity_connection.py`).",
    ),
    (
        "CosmosConnection",
        "with `STATE_STORE=cosmos`: a connection string with an account key locally "
        "(`AccountEndpoint=https://…/;AccountKey=…;`; the emulator's is `http://localhost:8081/`), "
        "with which the app creates the database "
        "and its containers when missing; on Azure `CosmosConnection__accountEndpoint` with "
        "`CosmosConnection__credential` = `managedidentity` and `CosmosConnection__clientId`, "
        "and no key anywhere: the infrastructure creates the containers "
        "(`python -m tools.cosmos_containers` prints their definition).",
    ),
)
"""The settings local.settings.sample.json holds that config.py does not declare."""

INTRO = f"""\
# Settings

This page is generated from [config.py](../config.py) by `{COMMAND}`;
`tests/unit/test_settings_doc.py` fails when it differs from what that command makes. Edit a
setting's declaration in config.py, then run the command.

Every setting is in [local.settings.sample.json](../local.settings.sample.json) with its
local value, and in
[emulators/local.settings.emulators.json](../emulators/local.settings.emulators.json) with
its connections pointed at the official emulators
([deployment.md](deployment.md#with-core-tools-and-the-official-emulators)). The devhost
reads `local.settings.json`'s `Values` (copy the sample) and the environment, which wins; on
Azure the function app's settings hold them, and
[infra/app-settings.json](../infra/app-settings.json) sets each declared one to its default
(`azd provision` puts the file's value back). The app reads each setting once, through
`config.Settings`, and a bad value stops it at start-up with the setting's name and what it
accepts. The devhost's own settings (`DEVHOST_*`, `AzureWebJobs.<function>.Disabled`) are in
[devhost/README.md](../devhost/README.md#settings).

## App settings

Declared in config.py, in its order: the name, its default, and what it means, with the
rule ids it serves.

"""

HOST_INTRO = """
## Host and connection settings

Read by the Functions host, the Python worker or the adapters' SDK clients, not by
`config.Settings`:

"""


def default_text(declared: Declaration) -> str | None:
    """The default as the setting's text, which its parser reads back; None when unset."""
    default = declared.default
    if default is None or default == frozenset() or default == ():
        return None
    if isinstance(default, frozenset):
        return ",".join(sorted(str(each) for each in default))
    if isinstance(default, tuple):
        return ",".join(str(each) for each in default)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def setting_line(declared: Declaration) -> str:
    default = default_text(declared)
    shown = "no default" if default is None else f"default `{default}`"
    return f"- `{declared.name}` ({shown}): {declared.meaning}.\n"


def render() -> str:
    """docs/settings.md as the declarations make it."""
    app = "".join(setting_line(declared) for declared in declarations())
    host = "".join(f"- `{name}`: {meaning}\n" for name, meaning in HOST_SETTINGS)
    return INTRO + app + HOST_INTRO + host


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
