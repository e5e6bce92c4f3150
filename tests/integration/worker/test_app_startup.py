"""The app refuses to load with settings it cannot run with, as the host would report it (C4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
START_BOUND_SECONDS = 60
# The local settings a user copies to local.settings.json (the host-level ones included).
SAMPLE_VALUES: dict[str, str] = json.loads(
    (ROOT / "local.settings.sample.json").read_text(encoding="utf-8")
)["Values"]


def test_a_retry_budget_too_small_for_its_factors_stops_the_app_loading_c4(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "devhost", "start", "--app-root", str(ROOT)),
            *("--data", str(tmp_path / "data"), "--http-port", "0"),
        ],
        capture_output=True,
        text=True,
        timeout=START_BOUND_SECONDS,
        cwd=ROOT,
        env={
            **os.environ,
            **SAMPLE_VALUES,
            "RETRY_BUDGET": "5",
            "MAX_FAILURES": "3",
            "AGENT_DELIVERY_ATTEMPTS": "2",
            "PYTHONPATH": str(ROOT),
        },
    )
    assert result.returncode != 0
    assert (
        "RETRY_BUDGET=5 gives a request no try: an order of 3 steps (ORDER_STEPS) with "
        "MAX_FAILURES=3 needs at least 8"
    ) in result.stderr
