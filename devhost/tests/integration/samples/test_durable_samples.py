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

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient
from devhost_tests_support.samples import extracted, run_to_completion, start_devhost

from devhost.azurite import Azurite

DECOY = """
import azure.functions as func
app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

@app.route(route="orchestrators/{functionName}")
def not_the_sample(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("the folder's app ran, not the sample's", status_code=500)
"""


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extracted("function_chaining", tmp_path_factory.mktemp("samples"))


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
    environ = {**os.environ, "AzureWebJobsStorage": azurite.connection_string}

    with start_devhost(folder, tmp_path / "data", env=environ) as port:
        total = await run_to_completion(port, "E2_BackupSiteContent", str(site))

    assert total == sum(len(content) for content in backed_up.values())
    blobs = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = blobs.get_container_client("backups")
    copied = {
        blob.name: container.download_blob(blob.name, timeout=10).readall()
        for blob in container.list_blobs(timeout=10)
    }
    assert copied == {name.replace("/", "_"): content for name, content in backed_up.items()}
