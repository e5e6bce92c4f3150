"""requirements.txt is the lock of what the deployed app installs: every package, transitive
ones included, pinned with the hashes of its files, compiled by `make lock` from the direct
list in requirements.in. The Functions remote build runs `pip install -r requirements.txt`,
and one hash in a file puts pip in hash-checking mode for all of it, so a line without one
would fail the build.

These tests read the files and the development environment; they need no network.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.package.test_deployment_package import ROOT, package_files

LOCK = ROOT / "requirements.txt"
DIRECT = ROOT / "requirements.in"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def requirement_lines(path: Path) -> list[str]:
    """The requirements of a pip requirements file, each with its continuation lines joined."""
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def pins(path: Path) -> dict[str, str]:
    """name (canonical) -> pinned version of every requirement of `path`."""
    found: dict[str, str] = {}
    for line in requirement_lines(path):
        match = PIN.match(line)
        assert match is not None, f"{path.name}: not an exact pin: {line}"
        found[canonicalize_name(match["name"])] = match["version"]
    return found


@cache
def modules_by_distribution() -> dict[str, set[str]]:
    """Module paths ("azure.servicebus", "aiohttp.web") -> the distributions that install the
    module's own file (its .py or its package's __init__), for every distribution here."""
    provided: dict[str, set[str]] = {}
    for distribution in metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        for file in distribution.files or ():
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] == "..":
                continue
            module = [*parts[:-1], parts[-1].split(".", 1)[0]]
            if module[-1] == "__init__":
                module.pop()
            provided.setdefault(".".join(module), set()).add(name)
    return provided


def imported_modules() -> set[str]:
    """Every absolute module the deployed package's Python files import."""
    found: set[str] = set()
    for relative in package_files(ROOT):
        if relative.suffix != ".py":
            continue
        tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"), str(relative))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from opentelemetry import trace` imports a module of a namespace package.
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def own_modules() -> set[str]:
    return {path.parts[0].removesuffix(".py") for path in package_files(ROOT)}


def distribution_of(module: str) -> set[str]:
    """The distributions that provide `module`, or the deepest package above it that one
    provides (`from azure.core.credentials import X` names azure-core, not the extensions that
    install files under azure/core/)."""
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        providers = modules_by_distribution().get(".".join(parts[:depth]))
        if providers:
            return providers
    return set()


def test_every_line_of_the_lock_is_pinned_with_a_hash() -> None:
    lines = requirement_lines(LOCK)
    assert lines
    for line in lines:
        assert PIN.match(line), f"not an exact pin: {line}"
        assert "--hash=sha256:" in line, f"no hash: {line}"


def test_the_lock_pins_each_direct_requirement_at_its_version() -> None:
    """A hand edit of requirements.in that `make lock` did not carry into requirements.txt."""
    locked = pins(LOCK)
    for name, version in pins(DIRECT).items():
        assert locked.get(name) == version, f"{name}=={version}: run `make lock`"


def test_the_lock_holds_every_package_its_packages_require() -> None:
    """Every dependency each locked package declares for Linux and Python 3.11 is locked too,
    at a version its specifier admits: nothing the remote build installs is left unpinned."""
    locked = pins(LOCK)
    environment = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11"}
    for name in locked:
        for text in metadata.requires(name) or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(
                {**environment, "extra": ""}
            ):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in locked, f"{name} requires {text}: not in the lock"
            assert requirement.specifier.contains(locked[dependency], prereleases=True), (
                f"{name} requires {text}; locked {locked[dependency]}"
            )


def test_every_package_the_app_imports_is_a_direct_requirement() -> None:
    """A module the deployed code imports comes from a package requirements.in names: one
    pulled in by another package may go with that package's next release."""
    direct = set(pins(DIRECT))
    standard = sys.stdlib_module_names | {"__future__"}
    missing: dict[str, set[str]] = {}
    for module in sorted(imported_modules()):
        top = module.split(".")[0]
        if top in standard or top in own_modules():
            continue
        providers = distribution_of(module)
        assert providers, f"{module}: no installed package provides it"
        if not providers & direct:
            missing[module] = providers
    assert not missing, f"imported, but not in requirements.in: {missing}"


def test_the_development_environment_runs_the_locked_versions() -> None:
    """`make setup` installs the lock, then the development packages over it: none of those may
    have moved a locked package, or the tests would run other code than the deployment."""
    moved = {
        name: (version, metadata.version(name))
        for name, version in pins(LOCK).items()
        if metadata.version(name) != version
    }
    assert not moved, f"locked -> installed: {moved}"
