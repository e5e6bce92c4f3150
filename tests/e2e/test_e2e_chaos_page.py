"""The chaos report's page (`chaos.report_page`) in a real browser.

Headless Chromium (Debian's ``chromium``, driven by ``playwright-core`` through
``chaos_page_browser.mjs``) opens the page ``make chaos`` writes beside its JSON report, from a
``file://`` URL as a person would: the chart's SVG draws the three series (submitted, in flight,
finished) as lines of some length, a visible marker per crash over its time on the time axis
with its number above it, and the timed faults' strip with a cell over each second that had
any; the page runs no script and requests nothing else, and a screenshot of the whole page is
left in the test's temporary directory. Under CI (CI=true) a missing browser fails the test rather
than skipping it.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.browser import chromium_path, run_browser_script
from tools.chaos.report_page import write_page

SCRIPT = Path(__file__).with_name("chaos_page_browser.mjs")
BROWSER_TIMEOUT_SECONDS = 90.0
AGENT_ANSWERS = ("lost", "duplicated", "late", "reordered")


def a_run(seconds: int = 150, orders: int = 1500, answers: int = 300) -> dict[str, Any]:
    """A report shaped as ``make chaos`` writes it: a second-by-second series, one crash of
    every kind and more, and a few hundred agent answers lost, duplicated, late or reordered."""
    draw = random.Random(14)
    series = []
    submitted = finished = 0.0
    for t in range(seconds):
        submitted = min(float(orders), submitted + 15.0)
        finished = min(submitted, finished + draw.uniform(8.0, 18.0))
        series.append(
            {
                "t": t + 0.05,
                "submitted": submitted,
                "in_flight": submitted - finished,
                "finished": finished,
            }
        )
    crashes = [
        {"kind": kind, "at": at, "restartedAt": at + down, "recoverySeconds": recovery}
        for kind, at, down, recovery in (
            ("services-kill", 21.5, 1.6, 1.9),
            ("crash-between-claim-and-start", 37.9, 1.0, None),
            ("devhost-kill", 48.0, 7.9, 3.1),
            ("devhost-kill", 77.2, 6.3, 5.0),
            ("broker-kill", 84.0, 1.5, 3.0),
            ("broker-kill", 125.9, 1.6, 1.8),
        )
    ]
    events = [{"t": c["at"], "kind": c["kind"]} for c in crashes] + [
        {
            "t": round(draw.uniform(0, 100), 2),
            "kind": f"agent-response-{draw.choice(AGENT_ANSWERS)}",
        }
        for _ in range(answers)
    ]
    return {
        "orders": orders,
        "seed": 14,
        "submitted": {"order": orders, "resend": 30, "conflict": 25, "malformed": 20},
        "final_states": {
            "Processed": 1200,
            "Compensated": 170,
            "Error": 110,
            "CompensationFailed": 20,
        },
        "rejected": 0,
        "invariants": {
            "lost": {"held": True, "violations": 0, "examples": []},
            "no_side_effect_after_compensation_began": {
                "held": False,
                "violations": 1,
                "examples": ["order-1-00042: payment performed after compensation began"],
            },
        },
        "broken_invariants": ["no_side_effect_after_compensation_began: 1"],
        "faults_injected": {
            "transient": {"do": 1800, "undo": 200, "total": 2000},
            "permanent": {"do": 280, "undo": 20, "total": 300},
        },
        "service_faults": {"payment": {"transient": 2000, "permanent": 300}},
        "crashes": crashes,
        "claims_abandoned": ["order-1-00548:1"],
        "crashes_survived": len(crashes),
        "recovery_seconds": {"p50": 2.5, "p95": 5.0},
        "recovery_seconds_by_kind": {},
        "timeline": {
            "note": "seconds after the first submission",
            "series": series,
            "events": events,
        },
        "duration_seconds": float(seconds),
        "settings": {"rate": 15.0, "state_store": "sqlite"},
        "result": "failed",
    }


async def look_at(page: Path, browser: str, profile: Path, screenshot: Path) -> dict[str, Any]:
    return await run_browser_script(
        SCRIPT,
        page.as_uri(),
        browser,
        str(profile),
        str(screenshot),
        seconds=BROWSER_TIMEOUT_SECONDS,
    )


async def test_the_chaos_page_charts_the_orders_and_marks_every_crash_in_a_browser(
    tmp_path: Path,
) -> None:
    browser = chromium_path()
    report = a_run()
    page = write_page(report, tmp_path / "chaos.json")
    assert page == tmp_path / "chaos.html"
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    screenshot = tmp_path / "chaos-page.png"

    seen = await look_at(page, browser, profile, screenshot)

    assert seen["title"] == "Chaos run: seed 14, 1,500 orders (failed)"
    assert seen["verdict"] == "FAILED"
    assert seen["svg"]["width"] > 900
    assert seen["svg"]["height"] > 400
    assert [s["name"] for s in seen["series"]] == ["submitted", "in_flight", "finished"]
    x_at = scale(seen["ticks"]["xtick"], "x")
    # The strip's row labels are ticks on their own axis, and not numbers.
    orders_at = scale([t for t in seen["ticks"]["ytick"] if t["value"] is not None], "y")
    first, last = report["timeline"]["series"][0], report["timeline"]["series"][-1]
    # Each line runs from the first sample to the last, ending at the run's last figures (up
    # and down, a label's middle is the font's: a few pixels of leeway).
    for line in seen["series"]:
        assert abs(line["start"]["x"] - x_at(first["t"])) < 1, line
        assert abs(line["end"]["x"] - x_at(last["t"])) < 1, line
        assert abs(line["end"]["y"] - orders_at(last[line["name"]])) < 3, line
        assert line["length"] > 500
    assert len({line["stroke"] for line in seen["series"]}) == 3
    crashes = report["crashes"]
    assert [m["number"] for m in seen["crashes"]] == list(range(1, len(crashes) + 1))
    for marker, crash in zip(seen["crashes"], crashes, strict=True):
        assert abs(marker["x"] - x_at(crash["at"])) < 1, crash
        assert marker["width"] > 5
        assert marker["height"] > 5
        assert any(
            t["text"] == str(marker["number"])
            and abs(t["x"] - marker["x"]) < 2
            and t["y"] < marker["y"]
            for t in seen["texts"]
        ), f"crash {marker['number']} is not numbered above its marker"
    assert seen["crashRows"] == [c["kind"] for c in crashes]
    answers = [e for e in report["timeline"]["events"] if e["kind"].startswith("agent-response")]
    labels = {
        label.group(1): (int(label.group(2)), t["y"])
        for t in seen["texts"]
        if (label := re.fullmatch(r"answer (\w+) \((\d+)\)", t["text"]))
    }
    assert {fate: total for fate, (total, _) in labels.items()} == {
        fate: sum(1 for e in answers if e["kind"] == f"agent-response-{fate}")
        for fate in AGENT_ANSWERS
    }
    # A cell in the row of its kind over each second with any answer of that kind.
    second = x_at(1) - x_at(0)
    drawn = set()
    for cell in seen["cells"]:
        fate = min(labels, key=lambda f: abs(labels[f][1] - cell["y"]))
        assert abs(labels[fate][1] - cell["y"]) < 3, cell
        start = round((cell["x"] - x_at(0)) / second - 0.5)
        assert abs(cell["x"] - x_at(start + 0.5)) < 1, cell
        assert cell["width"] > 0
        assert cell["height"] > 0
        assert 0.3 < cell["opacity"] <= 1
        drawn.add((fate, start))
    assert drawn == {
        (e["kind"].removeprefix("agent-response-"), math.floor(e["t"])) for e in answers
    }
    words = {t["text"] for t in seen["texts"]}
    assert {"submitted", "in flight", "finished", "down until restart"} <= words
    assert {c["kind"] for c in crashes} <= words
    assert seen["invariantRows"] == [
        ["lost", "held"],
        ["no_side_effect_after_compensation_began", "violated"],
    ]
    assert seen["scripts"] == 0
    assert seen["external"] == []
    assert seen["errors"] == []
    assert screenshot.read_bytes().startswith(b"\x89PNG")


def scale(ticks: list[dict[str, float]], across: str) -> Callable[[float], float]:
    """Where a value is on the screen along an axis, from where its first and last labels are."""
    first, last = ticks[0], ticks[-1]
    per_unit = (last[across] - first[across]) / (last["value"] - first["value"])
    return lambda value: first[across] + (value - first["value"]) * per_unit
