"""host.json asks the platform for an extension bundle that runs orchestration versioning (C7).

The app relies on `defaultVersion` with `versionMatchStrategy` `CurrentOrOlder` so that a host
of an older version never runs an instance a newer one started. For a non-.NET app that works
only from Extension Bundle 4.30.0 on (and azure-functions-durable 1.5.0 on): "Orchestration
versioning", section Prerequisites,
https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-orchestration-versioning.
A range whose lower bound is older lets the platform pick a bundle that ignores the settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
VERSIONING_BUNDLE = Version("4.30.0")
VERSIONING_SDK = Version("1.5.0")
# A NuGet version range as host.json takes it: "[low, high)" (the low end may be "4.*").
RANGE = re.compile(r"^\[(?P<low>[^,\]]+),\s*(?P<high>[^\])]+)\)$")


def host() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    return document


def test_the_bundle_range_starts_at_the_version_orchestration_versioning_needs_c7() -> None:
    bundle = host()["extensionBundle"]
    assert bundle["id"] == "Microsoft.Azure.Functions.ExtensionBundle"
    match = RANGE.match(bundle["version"])
    assert match is not None, f"not a bounded range: {bundle['version']}"
    assert "*" not in match["low"], "a wildcard lower bound admits any 4.x bundle"
    assert Version(match["low"]) >= VERSIONING_BUNDLE
    assert Version(match["high"]) > Version(match["low"])
    assert host()["extensions"]["durableTask"]["defaultVersion"]


def test_the_locked_durable_sdk_supports_orchestration_versioning_c7() -> None:
    lock = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    match = re.search(r"^azure-functions-durable==(\S+)", lock, re.MULTILINE)
    assert match is not None
    assert Version(match[1]) >= VERSIONING_SDK
