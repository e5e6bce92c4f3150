"""Function code and the service layer send through the `MessagePublisher` port (R2, E4).

Only the composition root (bootstrap.py) knows that messages go over Service Bus: the
Functions modules, the orchestrators, the service layer and the domain import the port and
`domain.outgoing_messages`, never the Service Bus adapter, and that adapter is a
`MessagePublisher`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from azure.servicebus.aio import ServiceBusClient

from adapters.servicebus_publisher import ServiceBusPublisher
from domain.ports import MessagePublisher

REPOSITORY = Path(__file__).resolve().parents[2]
PORT_ONLY_PACKAGES = (
    "activities",
    "orchestrators",
    "order_agents",
    "supervisor",
    "services",
    "domain",
)
ADAPTER = "adapters.servicebus_publisher"
# A well-formed connection string; building a client from it opens no connection.
CONNECTION_STRING = "Endpoint=sb://localhost/;SharedAccessKeyName=app;SharedAccessKey=unused"


def adapter_import_lines(source: str) -> list[int]:
    """The line numbers of the imports of the Service Bus adapter in ``source``, any form."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(name == ADAPTER or name.startswith(f"{ADAPTER}.") for name in names):
            lines.append(node.lineno)
    return lines


def test_no_function_service_or_domain_module_imports_the_service_bus_adapter() -> None:
    files = [
        path for package in PORT_ONLY_PACKAGES for path in (REPOSITORY / package).rglob("*.py")
    ]
    assert len(files) > len(PORT_ONLY_PACKAGES)  # the packages are where this test looks

    offenders = [
        f"{path.relative_to(REPOSITORY)}:{line}"
        for path in files
        for line in adapter_import_lines(path.read_text(encoding="utf-8"))
    ]

    assert offenders == [], (
        f"these modules import {ADAPTER}; send through domain.ports.MessagePublisher "
        f"(bootstrap.publisher()) and build messages with domain.outgoing_messages: {offenders}"
    )


def test_the_import_check_sees_every_form_of_importing_the_adapter() -> None:
    source = "\n".join(
        [
            "import adapters.servicebus_publisher",
            "from adapters.servicebus_publisher import ServiceBusPublisher",
            "from adapters import servicebus_publisher",
            "import adapters.sqlite_store",
            "from domain.outgoing_messages import OutgoingMessage",
        ]
    )

    assert adapter_import_lines(source) == [1, 2, 3]


async def test_the_service_bus_publisher_is_a_message_publisher() -> None:
    publisher = ServiceBusPublisher(ServiceBusClient.from_connection_string(CONNECTION_STRING))
    try:
        assert isinstance(publisher, MessagePublisher)
    finally:
        await publisher.close()
