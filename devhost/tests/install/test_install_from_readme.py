"""The devhost installs as its README says and runs an app that is not this repository's.

The distribution's folder alone is copied out of the repository, and a fresh virtual
environment runs the README's "Install" commands as written, with the copy for
``path/to/devhost``. From that environment:

- ``devhost start`` (the console script) in the folder of Microsoft's ``function_chaining``
  sample, unchanged, and its quickstart: POST the starter, follow ``statusQueryGetUri``;
- the README's test example ("Tests against the devhost"), as written, under pytest;
- the distribution's own unit tests, with ``pytest`` in the copied folder as the README says
  (its integration tests need the SDK's source distribution and npm packages beside it).

Slow (a virtual environment is installed, from pip's cache after the first run); ``make
test`` runs it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from devhost_tests_support import TESTS_ROOT
from devhost_tests_support.samples import extracted, run_to_completion, start_devhost

DISTRIBUTION = TESTS_ROOT.parent
README = DISTRIBUTION / "README.md"
PLACEHOLDER = "path/to/devhost"
COMMAND_TIMEOUT_SECONDS = 900

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def section(title: str) -> str:
    """The README's text under ``## title``, up to the next heading of that level."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"the README has no section {title!r}"
    return match.group(1)


def code_block(title: str, language: str) -> str:
    match = re.search(rf"```{language}\n(.*?)```", section(title), re.S)
    assert match, f"the README's {title!r} has no {language} block"
    return match.group(1)


def install_commands(devhost: Path) -> list[list[str]]:
    """The ``pip install`` lines of the README's Install block, comments dropped."""
    commands = []
    for line in code_block("Install", "sh").splitlines():
        words = shlex.split(line.replace(PLACEHOLDER, str(devhost)), comments=True)
        if words:
            assert words[:2] == ["pip", "install"], f"not a pip install: {line}"
            commands.append(words[2:])
    return commands


def run(command: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class FreshInstall:
    """The devhost installed as its README says, from a copy of its folder alone."""

    venv: Path
    env: dict[str, str]
    """What its processes run with: nothing of this process's (no PYTHONPATH to the
    repository), only pip's index settings."""
    distribution: Path
    """The copied folder it was installed from."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> FreshInstall:
    """A fresh virtual environment with the devhost installed as the README says."""
    root = tmp_path_factory.mktemp("install")
    devhost = root / "devhost"
    shutil.copytree(
        DISTRIBUTION,
        devhost,
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", ".pytest_cache", "build"),
    )
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(root)),
        "PYTHONNOUSERSITE": "1",
        **{
            name: os.environ[name]
            for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CACHE_DIR", "PIP_CONFIG_FILE")
            if name in os.environ
        },
    }
    python = shutil.which("python3.11") or sys.executable
    run([python, "-m", "venv", str(root / "venv")], cwd=root, env=environment)
    commands = install_commands(devhost)
    assert len(commands) >= 2, "the README's Install block lost its commands"
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    for arguments in commands:
        run([*pip, "install", "--quiet", *arguments], cwd=root, env=environment)
    return FreshInstall(root / "venv", environment, devhost)


async def test_devhost_start_runs_microsofts_quickstart_from_a_fresh_install(
    installed: FreshInstall, tmp_path: Path
) -> None:
    environment, env = installed.venv, installed.env
    sample = extracted("function_chaining", tmp_path / "samples")
    devhost = (str(environment / "bin" / "devhost"),)
    with start_devhost(sample, tmp_path / "data", command=devhost, env=env) as port:
        output = await run_to_completion(port, "my_orchestrator")
    assert output == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def test_the_readme_test_example_passes_in_a_fresh_install(
    installed: FreshInstall, tmp_path: Path
) -> None:
    environment, env = installed.venv, installed.env
    (tmp_path / "test_readme_example.py").write_text(
        code_block("Tests against the devhost", "python"), encoding="utf-8"
    )
    python = str(environment / "bin" / "python")
    out = run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_readme_example.py"],
        cwd=tmp_path,
        env=env,
    )
    assert re.search(r"\b1 passed\b", out), out


def test_the_distributions_unit_tests_pass_in_a_fresh_install(
    installed: FreshInstall,
) -> None:
    """Among them: every devhost import is the standard library, the devhost or a declared
    dependency of this environment, and the SDK internals it uses are where it expects."""
    python = str(installed.venv / "bin" / "python")
    out = run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"],
        cwd=installed.distribution,
        env=installed.env,
    )
    assert re.search(r"\b\d+ passed\b", out), out
    assert "failed" not in out, out
