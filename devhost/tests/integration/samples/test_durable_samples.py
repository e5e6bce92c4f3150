"""Microsoft's own Durable Functions Python samples, unchanged, under ``devhost start``.

``samples-v2`` of azure-functions-durable-python, taken from the source distribution of the
pinned SDK on PyPI (``make setup`` downloads it; nothing of it is in this repository), run as
their quickstarts say. ``function_chaining``: started from the sample's own folder, an HTTP
POST starts the orchestration, and the ``statusQueryGetUri`` the starter answers with reports
it completed, on the host's HTTP port; started from another app's folder with
``--app-root``, it is the sample's app that runs, not the folder's. ``fan_in_fan_out``: its
activities copy files to blobs through ``AzureWebJobsStorage``, here Azurite from npm, and the
orchestration sums what they copied.
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
from azure.storage.blob import BlobServiceClient
from devhost_tests_support import TESTS_ROOT

from devhost import child_process
from devhost.azurite import Azurite
from devhost.testing import eventually_true

VERSION = importlib.metadata.version("azure-functions-durable")
SDIST_NAME = f"azure_functions_durable-{VERSION}.tar.gz"
SDIST_SETTING = "DURABLE_SAMPLES_SDIST"
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


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extracted("function_chaining", tmp_path_factory.mktemp("samples"))


@contextmanager
def start_devhost(
    cwd: Path, data: Path, *options: str, environ: dict[str, str] | None = None
) -> Iterator[int]:
    command = [sys.executable, "-m", "devhost", "start", "--http-port", "0", "--data", str(data)]
    process = subprocess.Popen(
        [*command, *options],
        cwd=cwd,
        env={**os.environ, **(environ or {})},
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


@pytest.fixture(params=["from-its-folder", "app-root-from-another-app"])
def http_port(request: pytest.FixtureRequest, sample: Path, tmp_path: Path) -> Iterator[int]:
    if request.param == "from-its-folder":
        started = start_devhost(sample, tmp_path / "data")
    else:
        elsewhere = tmp_path / "another-app"
        elsewhere.mkdir()
        (elsewhere / "function_app.py").write_text(DECOY, encoding="utf-8")
        started = start_devhost(elsewhere, tmp_path / "data", "--app-root", str(sample))
    with started as port:
        yield port


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

        await eventually_true(finished, f"the sample's {orchestrator} to finish", bound=60)
        final = await status()
        assert final["runtimeStatus"] == "Completed", final
        return final["output"]


async def test_function_chaining_completes_and_its_status_link_answers(http_port: int) -> None:
    output = await run_to_completion(http_port, "my_orchestrator")
    assert output == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


@pytest.fixture
def azurite(tmp_path: Path) -> Iterator[Azurite]:
    with Azurite(tmp_path / "azurite") as running:
        yield running


async def test_fan_in_fan_out_copies_every_file_to_blobs_in_azurite(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, azurite: Azurite
) -> None:
    folder = extracted("fan_in_fan_out", tmp_path_factory.mktemp("samples"))
    site = tmp_path / "site"
    backed_up = {"E2_Copy/__init__.py": b"print('one')\n", "E2_Copy/function.json": b"{}\n"}
    for name, content in {**backed_up, "other/__init__.py": b"not copied\n"}.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(content)
    environ = {"AzureWebJobsStorage": azurite.connection_string}

    with start_devhost(folder, tmp_path / "data", environ=environ) as port:
        total = await run_to_completion(port, "E2_BackupSiteContent", str(site))

    assert total == sum(len(content) for content in backed_up.values())
    blobs = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = blobs.get_container_client("backups")
    copied = {
        blob.name: container.download_blob(blob.name, timeout=10).readall()
        for blob in container.list_blobs(timeout=10)
    }
    assert copied == {name.replace("/", "_"): content for name, content in backed_up.items()}
