"""The lock (requirements.txt) holds no package with a known vulnerability.

pip-audit looks up every locked version, first in PyPI's advisory data, then in OSV's. A
vulnerable pin fails the test. A source that cannot be reached from this machine (no
network, a registry mirror without PyPI's JSON API) checks nothing: when no source checked
every package, the test is skipped with "vulnerability source unreachable: not checked" and
the packages left unchecked, so an offline run says what it did not do and does not fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.package.test_deployment_package import ROOT

SERVICES = ("pypi", "osv")
AUDIT_TIMEOUT_SECONDS = 300
REQUEST_TIMEOUT_SECONDS = 15
SHOWN_UNCHECKED = 5
# What pip-audit's traceback or error says when a service cannot be reached at all.
UNREACHABLE = re.compile(
    r"ConnectionError|ConnectTimeout|ReadTimeout|NameResolutionError|ProxyError|SSLError"
    r"|ServiceError|Max retries exceeded|your network may be blocking this service"
)

pytestmark = pytest.mark.timeout(2 * AUDIT_TIMEOUT_SECONDS)


@dataclass
class Audit:
    """One service's answer: the vulnerabilities it found and the packages it could not check."""

    vulnerable: dict[str, list[str]] = field(default_factory=dict)
    unchecked: set[str] = field(default_factory=set)


def audit(service: str) -> Audit | None:
    """pip-audit's findings over the lock from `service`; None when it could not be reached."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip_audit",
            "--disable-pip",
            "--require-hashes",
            "--requirement",
            str(ROOT / "requirements.txt"),
            "--vulnerability-service",
            service,
            "--format",
            "json",
            "--progress-spinner",
            "off",
            "--timeout",
            str(REQUEST_TIMEOUT_SECONDS),
        ],
        capture_output=True,
        text=True,
        timeout=AUDIT_TIMEOUT_SECONDS,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        assert UNREACHABLE.search(done.stderr), f"pip-audit failed:\n{done.stderr}"
        return None
    found = Audit()
    for dependency in report["dependencies"]:
        name = f"{dependency['name']}=={dependency.get('version', '?')}"
        if "skip_reason" in dependency:
            found.unchecked.add(dependency["name"])
        elif dependency["vulns"]:
            found.vulnerable[name] = [
                f"{each['id']} (fixed in {', '.join(each['fix_versions']) or 'no release'})"
                for each in dependency["vulns"]
            ]
    return found


def test_no_locked_package_has_a_known_vulnerability() -> None:
    unchecked: set[str] | None = None
    for service in SERVICES:
        found = audit(service)
        if found is None:
            continue
        assert not found.vulnerable, f"known vulnerabilities ({service}): {found.vulnerable}"
        unchecked = found.unchecked if unchecked is None else unchecked & found.unchecked
        if not unchecked:
            return
    left = "any package" if unchecked is None else f"{len(unchecked)} packages"
    if unchecked is not None and len(unchecked) <= SHOWN_UNCHECKED:
        left = ", ".join(sorted(unchecked))
    pytest.skip(f"vulnerability source unreachable: not checked ({left})")
