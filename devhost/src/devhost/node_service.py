"""Local Azure services the devhost runs with node from an npm package (Azurite for Storage,
the Cosmos DB API server): where the package is found, the process's start, bounded by its
readiness, and its stop.

A package is looked for in the ``node_modules`` of the current directory or the nearest
folder above it that has one, as node resolves it, so a project installs it with ``npm
install <package>`` in its own root. Without node or the package, ``start`` raises the
service's ``missing`` error naming that command: tests fail with it, never skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from devhost import child_process


def node_modules_with(package: str, start: Path | None = None) -> Path | None:
    """The first ``node_modules`` holding `package`, from `start` (the current directory) up."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        modules = folder / "node_modules"
        if (modules / package / "package.json").is_file():
            return modules
    return None


class NodeServiceMissing(RuntimeError):
    """node or the service's npm package is not installed where the devhost looks."""


class NodeService:
    """One service process on 127.0.0.1; a context manager, or ``start``/``stop``."""

    package: ClassVar[str]
    title: ClassVar[str]
    """What the service is called in errors: "Azurite", "the Cosmos DB API server"."""
    missing: ClassVar[type[NodeServiceMissing]] = NodeServiceMissing

    def __init__(self) -> None:
        self.port: int | None = None
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> Self:
        node = shutil.which("node")
        modules = node_modules_with(self.package)
        if node is None or modules is None:
            raise self.missing(
                f"{self.title} needs node and the npm package {self.package} in the "
                f"node_modules of {Path.cwd()} or a folder above it: run `npm install "
                f"{self.package}` in the project's root (in this repository: make setup)"
            )
        self._process = self._launch(node, modules)
        try:
            self.port = self._ready(self._process)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, node: str, modules: Path) -> subprocess.Popen[str]:
        """The service's process, started."""
        raise NotImplementedError

    def _ready(self, process: subprocess.Popen[str]) -> int:
        """The port the started `process` serves on, once it does; raises if it never does."""
        raise NotImplementedError

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            child_process.stop(process)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
