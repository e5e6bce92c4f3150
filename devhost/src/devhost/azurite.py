"""Start and stop Azurite's blob service (npm ``azurite``): local Azure Storage for
``AzureWebJobsStorage``.

An app whose functions read or write blobs through ``AzureWebJobsStorage`` (Microsoft's
``fan_in_fan_out`` Durable sample does) runs under the devhost against it unchanged: the
connection string is Azurite's well-known development account, on a loopback port of its
own. The package is found as ``devhost.node_service`` finds one (``npm install azurite`` in
the project's root). It keeps its data in a folder of the caller's.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from devhost.node_service import NodeService, NodeServiceMissing

PACKAGE = "azurite"
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's well-known development account key (public, as the Storage emulator's)."""
READY_BOUND_SECONDS = 30.0


class AzuriteMissing(NodeServiceMissing):
    """node or the npm package is not installed where the devhost looks."""


class Azurite(NodeService):
    """Azurite's blob service on 127.0.0.1, data in `location`."""

    package = PACKAGE
    title = "Azurite"
    missing = AzuriteMissing

    def __init__(self, location: Path) -> None:
        super().__init__()
        self.location = location
        self._port = 0

    @property
    def connection_string(self) -> str:
        """The ``AzureWebJobsStorage`` setting for this blob service."""
        if self.port is None:
            raise RuntimeError("Azurite is not running")
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def _launch(self, node: str, modules: Path) -> subprocess.Popen[str]:
        # Azurite prints nothing to wait for: it gets a free port and is ready once it listens.
        self._port = _free_port()
        self.location.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            [
                node,
                str(modules / PACKAGE / "dist" / "src" / "blob" / "main.js"),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self._port),
                "--location",
                str(self.location),
                "--silent",
                "--skipApiVersionCheck",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _ready(self, process: subprocess.Popen[str]) -> int:
        deadline = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"Azurite exited with code {process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self._port), timeout=1):
                    return self._port
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(
            f"Azurite did not listen on port {self._port} within {READY_BOUND_SECONDS:.0f} s"
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
