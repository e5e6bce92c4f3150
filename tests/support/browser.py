"""The headless Chromium the browser tests drive (Debian's ``chromium``, through
``playwright-core`` from npm). ``make setup`` installs both; missing, a browser test skips
locally and fails under CI (CI=true), so CI never passes without having run it.
"""

from __future__ import annotations

import os
import shutil

import pytest

from demo.pipeline import REPOSITORY

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
