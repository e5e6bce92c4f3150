"""Start and stop Azurite's blob service (npm ``azurite``): local Azure Storage for
``AzureWebJobsStorage``.

An app whose functions read or write blobs through ``AzureWebJobsStorage`` (Microsoft's
``fan_in_fan_out`` Durable sample does) runs under the devhost against it unchanged: the
connection string is Azurite's well-known development account, on a loopback port of its
own. Azurite is looked for as the Cosmos DB API server is (``cosmos_server``): in the
``node_modules`` of the current directory or above; ``npm install azurite`` installs it. It
keeps its data in a folder of the caller's.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from devhost import child_process
from devhost.cosmos_server import node_modules_with

PACKAGE = "azurite"
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's well-known development account key (public, as the Storage emulator's)."""
READY_BOUND_SECONDS = 30.0


class AzuriteMissing(RuntimeError):
    """node or the npm package is not installed where the devhost looks."""


class Azurite:
    """Azurite's blob service on 127.0.0.1, data in `location`."""

    def __init__(self, location: Path) -> None:
        self.location = location
        self.port: int | None = None
        self._process: subprocess.Popen[str] | None = None

    @property
    def connection_string(self) -> str:
        """The ``AzureWebJobsStorage`` setting for this blob service."""
        if self.port is None:
            raise RuntimeError("Azurite is not running")
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def start(self) -> Azurite:
        node = shutil.which("node")
        modules = node_modules_with(PACKAGE)
        if node is None or modules is None:
            raise AzuriteMissing(
                f"Azurite needs node and the npm package {PACKAGE} in the node_modules of "
                f"{Path.cwd()} or a folder above it: run `npm install {PACKAGE}` in the "
                "project's root (in this repository: make setup)"
            )
        self.port = _free_port()
        self.location.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [
                node,
                str(modules / PACKAGE / "dist" / "src" / "blob" / "main.js"),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.location),
                "--silent",
                "--skipApiVersionCheck",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._wait_until_listening(self._process, self.port)
        return self

    def stop(self) -> None:
        if self._process is not None:
            child_process.stop(self._process)
            self._process = None

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_until_listening(self, process: subprocess.Popen[str], port: int) -> None:
        deadline = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"Azurite exited with code {process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Azurite did not listen on port {port} within 30 s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
