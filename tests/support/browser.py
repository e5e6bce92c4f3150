"""The headless Chromium the browser tests drive (Debian's ``chromium``, through
``playwright-core`` from npm). ``make setup`` installs both; missing, a browser test skips
locally and fails under CI (CI=true), so CI never passes without having run it. A test's
playwright script (``tests/e2e/*.mjs``) runs under node and prints what it saw as its last
line of JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tools.demo.pipeline import REPOSITORY

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_path() -> str:
    """The Chromium to drive; missing, a skip locally and a failure under CI."""
    found = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    node = shutil.which("node")
    playwright = REPOSITORY / "node_modules" / "playwright-core"
    missing = [
        what
        for what, present in (
            ("chromium (apt-get install chromium)", found),
            ("node", node),
            ("node_modules/playwright-core (npm ci)", playwright.exists()),
        )
        if not present
    ]
    if missing:
        message = f"missing {', '.join(missing)}: run make setup"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert found is not None
    return found


async def run_browser_script(script: Path, *arguments: str, seconds: float) -> dict[str, Any]:
    """Run a playwright script under node, bounded by `seconds`; its last line of
    standard output, a JSON object, is what it saw. A failing script fails the test with its
    standard error."""
    process = await asyncio.create_subprocess_exec(
        "node",
        str(script),
        *arguments,
        cwd=REPOSITORY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, err.decode()
    seen: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return seen
