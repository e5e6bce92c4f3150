"""Microsoft's Durable Functions Python samples, as the devhost's tests run them.

``samples-v2`` of azure-functions-durable-python comes from the source distribution of the
installed SDK version on PyPI (``make setup`` downloads it; nothing of it is in this
repository). A sample is extracted unchanged, ``devhost start`` runs it from a folder, and
its quickstart is followed: POST the HTTP starter, then the ``statusQueryGetUri`` it answers
with until the orchestration ends.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devhost import child_process
from devhost.testing import eventually_true
from devhost_tests_support import TESTS_ROOT

VERSION = importlib.metadata.version("azure-functions-durable")
SDIST_NAME = f"azure_functions_durable-{VERSION}.tar.gz"
SDIST_SETTING = "DURABLE_SAMPLES_SDIST"
READY_SECONDS = 60.0
FINISH_SECONDS = 60.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)


def sdist() -> Path:
    """The SDK's source distribution: DURABLE_SAMPLES_SDIST, else where make setup puts it."""
    configured = os.environ.get(SDIST_SETTING)
    path = Path(configured) if configured else TESTS_ROOT.parents[1] / ".devhost" / "sdk-sources"
    path = path / SDIST_NAME if path.is_dir() else path
    if not path.is_file():
        pytest.fail(
            f"{path} is missing: run make setup, or `pip download azure-functions-durable=="
            f"{VERSION} --no-binary :all: --no-deps -d DIR` and set {SDIST_SETTING}=DIR"
        )
    return path


def extracted(name: str, root: Path) -> Path:
    """The sample's folder as the SDK ships it, extracted under `root`."""
    prefix = f"azure_functions_durable-{VERSION}/samples-v2/{name}/"
    with tarfile.open(sdist()) as archive:
        members = [member for member in archive.getmembers() if member.name.startswith(prefix)]
        assert members, f"{SDIST_NAME} has no samples-v2/{name}"
        archive.extractall(root, members=members, filter="data")
    folder = root / prefix
    assert (folder / "function_app.py").is_file()
    return folder


@contextmanager
def start_devhost(
    cwd: Path,
    data: Path,
    *options: str,
    command: tuple[str, ...] = (sys.executable, "-m", "devhost"),
    env: dict[str, str] | None = None,
) -> Iterator[int]:
    """``devhost start`` in `cwd` (`command` runs the devhost; `env` is the whole
    environment, this process's by default) until the block ends; yields its HTTP port."""
    process = subprocess.Popen(
        [*command, "start", "--http-port", "0", "--data", str(data), *options],
        cwd=cwd,
        env=dict(os.environ) if env is None else env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = child_process.first_lines(process, 1, READY_SECONDS)
        assert lines, f"devhost start did not get ready (exit {process.poll()})"
        assert lines[0].startswith("devhost ready: "), lines
        yield int(lines[0].split("http port ")[1].split(",")[0])
    finally:
        child_process.stop(process)


async def run_to_completion(http_port: int, orchestrator: str, body: object = None) -> Any:
    """POST the sample's starter as its quickstart does and follow the status link it
    answers with to the orchestration's output."""
    base = f"http://127.0.0.1:{http_port}"
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
        async with session.post(f"{base}/api/orchestrators/{orchestrator}", json=body) as response:
            assert response.status == 202, await response.text()
            links = await response.json()
        status_uri = links["statusQueryGetUri"]
        assert status_uri.startswith(f"{base}/runtime/webhooks/durabletask/instances/")

        async def status() -> dict[str, Any]:
            async with session.get(status_uri) as answer:
                assert answer.status in (200, 202), await answer.text()
                return dict(await answer.json())

        async def finished() -> bool:
            return (await status())["runtimeStatus"] in ("Completed", "Failed")

        await eventually_true(
            finished, f"the sample's {orchestrator} to finish", bound=FINISH_SECONDS
        )
        final = await status()
        assert final["runtimeStatus"] == "Completed", final
        return final["output"]
