"""Microsoft's own Durable Functions Python sample, unchanged, under ``devhost start``.

``samples-v2/function_chaining`` of azure-functions-durable-python, taken from the source
distribution of the pinned SDK on PyPI (``make setup`` downloads it; nothing of it is in this
repository), run as its quickstart says: started from the sample's own folder, an HTTP POST
starts the orchestration, and the ``statusQueryGetUri`` the starter answers with reports it
completed, on the host's HTTP port. And started from another app's folder with
``--app-root``, it is the sample's app that runs, not the folder's.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devhost_tests_support import TESTS_ROOT

from devhost import child_process
from devhost.testing import eventually_true

VERSION = importlib.metadata.version("azure-functions-durable")
SDIST_NAME = f"azure_functions_durable-{VERSION}.tar.gz"
SDIST_SETTING = "DURABLE_SAMPLES_SDIST"
SAMPLE = "function_chaining"
READY_SECONDS = 60.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)
DECOY = """
import azure.functions as func
app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

@app.route(route="orchestrators/{functionName}")
def not_the_sample(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("the folder's app ran, not the sample's", status_code=500)
"""


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


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's folder as the SDK ships it, extracted to a folder of its own."""
    root = tmp_path_factory.mktemp("samples")
    prefix = f"azure_functions_durable-{VERSION}/samples-v2/{SAMPLE}/"
    with tarfile.open(sdist()) as archive:
        members = [member for member in archive.getmembers() if member.name.startswith(prefix)]
        assert members, f"{SDIST_NAME} has no samples-v2/{SAMPLE}"
        archive.extractall(root, members=members, filter="data")
    folder = root / prefix
    assert (folder / "function_app.py").is_file()
    return folder


def start_devhost(cwd: Path, data: Path, *options: str) -> Iterator[int]:
    command = [sys.executable, "-m", "devhost", "start", "--http-port", "0", "--data", str(data)]
    process = subprocess.Popen(
        [*command, *options],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = child_process.first_lines(process, 1, READY_SECONDS)
        assert lines, f"devhost start did not get ready (exit {process.poll()})"
        assert lines[0].startswith("devhost ready: 3 functions"), lines
        yield int(lines[0].split("http port ")[1].split(",")[0])
    finally:
        child_process.stop(process)


@pytest.fixture(params=["from-its-folder", "app-root-from-another-app"])
def http_port(request: pytest.FixtureRequest, sample: Path, tmp_path: Path) -> Iterator[int]:
    if request.param == "from-its-folder":
        yield from start_devhost(sample, tmp_path / "data")
    else:
        elsewhere = tmp_path / "another-app"
        elsewhere.mkdir()
        (elsewhere / "function_app.py").write_text(DECOY, encoding="utf-8")
        yield from start_devhost(elsewhere, tmp_path / "data", "--app-root", str(sample))


async def test_function_chaining_completes_and_its_status_link_answers(http_port: int) -> None:
    base = f"http://127.0.0.1:{http_port}"
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
        async with session.post(f"{base}/api/orchestrators/my_orchestrator") as response:
            assert response.status == 202, await response.text()
            links = await response.json()
        status_uri = links["statusQueryGetUri"]
        assert status_uri.startswith(f"{base}/runtime/webhooks/durabletask/instances/")

        async def status() -> dict[str, Any]:
            async with session.get(status_uri) as answer:
                assert answer.status in (200, 202), await answer.text()
                return dict(await answer.json())

        async def completed() -> bool:
            return (await status())["runtimeStatus"] == "Completed"

        await eventually_true(completed, "the sample's orchestration to complete", bound=60)
        assert (await status())["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
