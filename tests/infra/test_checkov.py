"""checkov (its own venv, .venv-iac, made by `make setup`) scans infra/ offline and finds
nothing; every check it skips is skipped in the Bicep with a reason, and it parses every file
(its bundled Bicep parser is older than ours)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.infra.bicep import BICEP_FILES, INFRA, ROOT

CHECKOV = ROOT / ".venv-iac" / "bin" / "checkov"
TIMEOUT_SECONDS = 240
OPTIONS = ("--skip-download", "--compact", "-o", "json")


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run `make setup`")
    run = subprocess.run(
        [str(CHECKOV), "-d", str(INFRA), "--framework", "bicep", *OPTIONS],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        cwd=ROOT,
    )
    assert run.stdout.strip(), run.stderr
    document = json.loads(run.stdout)
    return dict(document[0] if isinstance(document, list) else document)


@pytest.mark.timeout(TIMEOUT_SECONDS + 30)
def test_checkov_finds_nothing_and_parses_every_file(report):
    summary = report["summary"]
    failed = report["results"]["failed_checks"]  # type: ignore[index]
    assert summary["failed"] == 0, [(c["check_id"], c["resource"]) for c in failed]  # type: ignore[index]
    assert summary["parsing_errors"] == 0  # type: ignore[index]
    assert summary["passed"] > 0  # type: ignore[index]
    scanned = {c["file_path"] for c in report["results"]["passed_checks"]}  # type: ignore[index]
    assert scanned, "checkov checked no resource"


@pytest.mark.timeout(TIMEOUT_SECONDS + 30)
def test_every_skip_carries_a_reason(report):
    for check in report["results"]["skipped_checks"]:  # type: ignore[index]
        reason = check.get("check_result", {}).get("suppress_comment", "")
        assert reason.strip(), check["check_id"]
        assert reason != "No comment provided", check["check_id"]
    assert BICEP_FILES
