"""The deployment package is the app alone, and it runs on what requirements.txt installs.

The package is built as ``func`` and azd build it: the app's folder minus what
``.funcignore`` excludes (gitignore syntax). It is copied to a fresh folder, a fresh virtual
environment gets ``requirements.txt`` and nothing else (plus the Python worker library that
the platform provides, installed as the Makefile does), and ``index_package.py`` imports
``function_app`` there and indexes every function with the worker's code. So the deployed
app needs nothing from devhost/, tools/, tests/ or the development requirements.
The package's size is printed.

Slow (a virtual environment is installed, from pip's cache after the first run); ``make
test`` runs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pathspec  # installed with mypy (requirements-dev.txt)
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("index_package.py")
# The figure of the package in docs/deployment.md: "the app alone (N files, about M KB".
DEPLOYMENT_PAGE = ROOT / "docs" / "deployment.md"
STATED_PACKAGE_SIZE = re.compile(r"the app alone \((\d+) files, about (\d+) KB")
STATED_TOLERANCE = 0.15
INSTALL_TIMEOUT_SECONDS = 900
LIST_FUNCTIONS = (
    "import json, function_app; "
    "print(json.dumps(sorted(f.get_function_name() for f in function_app.app.get_functions())))"
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def package_files(root: Path) -> list[Path]:
    """The files of ``root`` that ``.funcignore`` keeps, relative to ``root``."""
    rules = (root / ".funcignore").read_text(encoding="utf-8").splitlines()
    ignored = pathspec.GitIgnoreSpec.from_lines(rules)
    kept: list[Path] = []
    for directory, subdirectories, files in os.walk(root):
        relative = Path(directory).relative_to(root)
        subdirectories[:] = sorted(
            name for name in subdirectories if not ignored.match_file(f"{relative / name}/")
        )
        kept.extend(
            relative / name
            for name in sorted(files)
            if not ignored.match_file(str(relative / name))
        )
    return kept


def package_bytes(root: Path, files: list[Path]) -> int:
    return sum((root / relative).stat().st_size for relative in files)


def ignored_sample(rule: str) -> str:
    """A path a .gitignore rule ignores: a file for a name with a wildcard or an extension
    (`*.pyc`, `report.json`), else a file inside a folder of that name (`.venv`, `.data/`)."""
    name = rule.strip("/")
    looks_like_a_file = not rule.endswith("/") and ("*" in name or "." in name[1:])
    return name.replace("*", "x") if looks_like_a_file else f"{name}/x"


def run(command: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_package_is_the_app_alone() -> None:
    files = {path.as_posix() for path in package_files(ROOT)}
    assert {
        "function_app.py",
        "host.json",
        "requirements.txt",
        "bootstrap.py",
        "config.py",
    } <= files
    tops = {path.split("/")[0] for path in files}
    for excluded in ("devhost", "tools", "tests", "docs", "infra", "emulators"):
        assert excluded not in tops
    assert not any(path.endswith((".md", ".pyc")) or "local.settings" in path for path in files)


def test_local_state_git_ignores_is_never_deployed(tmp_path: Path) -> None:
    """What .gitignore keeps out of the repository (environments, caches, azd's environment
    values in .azure/, run reports, Hypothesis' database) is a developer's local state: a
    deployment from their working tree must not ship it either."""
    shutil.copy2(ROOT / ".funcignore", tmp_path / ".funcignore")
    (tmp_path / "function_app.py").write_text("", encoding="utf-8")
    rules = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    samples = [ignored_sample(rule) for rule in rules if rule.strip() and not rule.startswith("#")]
    assert ".azure/x" in samples
    for sample in samples:
        (tmp_path / sample).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / sample).write_text("local", encoding="utf-8")

    assert [path.as_posix() for path in package_files(tmp_path)] == ["function_app.py"]


# Local state that no .gitignore rule names, placed at the root and inside an app package:
# what azd or func would have left out without a .funcignore (virtual environments, vendored
# packages, .env secrets, Azurite's databases and blob, queue and table folders, caches).
LOCAL_STATE = (
    "venv/bin/python",
    "venv311/pyvenv.cfg",
    "env/lib/site.py",
    ".venv/pyvenv.cfg",
    ".python_packages/lib/site-packages/x.py",
    ".env",
    ".env.local",
    "__azurite_db_blob__.json",
    "__azurite_db_blob_extent__.json",
    "__azurite_db_queue__.json",
    "__azurite_db_table__.json",
    "__blobstorage__/x",
    "__queuestorage__/x",
    "__tablestorage__/x",
    ".azurite/x",
    "__pycache__/x.cpython-311.pyc",
    "x.pyo",
    ".cache/x",
    ".mypy_cache/x",
    ".pytest_cache/x",
    ".ruff_cache/x",
    ".hypothesis/x",
)


def test_virtual_environments_env_files_azurite_files_and_caches_never_deploy(
    tmp_path: Path,
) -> None:
    """.funcignore replaces the exclusions azd and func apply without one, so it must name the
    local state they would have kept out: a deployment from a working tree that has a venv, a
    .env with secrets or Azurite's files ships the app alone."""
    shutil.copy2(ROOT / ".funcignore", tmp_path / ".funcignore")
    kept = ["function_app.py", "domain/records.py"]
    for name in kept:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    for sample in LOCAL_STATE:
        for place in (tmp_path, tmp_path / "domain"):
            (place / sample).parent.mkdir(parents=True, exist_ok=True)
            (place / sample).write_text("local", encoding="utf-8")

    assert sorted(path.as_posix() for path in package_files(tmp_path)) == sorted(kept)


def test_the_deployment_page_states_the_package_size() -> None:
    """docs/deployment.md's figure of the deployed package (files, KB) is within 15% of the
    package these rules build: a figure that drifted further misleads a user sizing the
    deployment."""
    match = STATED_PACKAGE_SIZE.search(DEPLOYMENT_PAGE.read_text(encoding="utf-8"))
    assert match is not None, "docs/deployment.md no longer states the package's size"
    files = package_files(ROOT)
    size_kb = package_bytes(ROOT, files) / 1000
    stated_files, stated_kb = int(match.group(1)), int(match.group(2))
    assert abs(stated_files - len(files)) <= STATED_TOLERANCE * len(files), (
        f"docs/deployment.md: {stated_files} files; the package has {len(files)}"
    )
    assert abs(stated_kb - size_kb) <= STATED_TOLERANCE * size_kb, (
        f"docs/deployment.md: about {stated_kb} KB; the package is {size_kb:.0f} KB"
    )


def test_the_package_imports_and_indexes_on_requirements_txt_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / "package"
    files = package_files(ROOT)
    for relative in files:
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, package / relative)
    size = package_bytes(package, files)

    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PYTHONNOUSERSITE": "1",
        **{
            name: os.environ[name]
            for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CACHE_DIR", "PIP_CONFIG_FILE")
            if name in os.environ
        },
    }
    python = shutil.which("python3.11") or sys.executable
    venv = tmp_path / "venv"
    run([python, "-m", "venv", str(venv)], cwd=tmp_path, env=environment)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "--disable-pip-version-check",
        "install",
        "--quiet",
    ]
    run([*pip, "-r", "requirements.txt"], cwd=package, env=environment)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    dependencies = sum(path.stat().st_size for path in site_packages.rglob("*") if path.is_file())
    run(
        [
            *pip,
            "--no-deps",
            "--ignore-requires-python",
            "-r",
            str(ROOT / "requirements-worker.txt"),
        ],
        cwd=package,
        env=environment,
    )
    indexed = run(
        [str(venv / "bin" / "python"), str(SCRIPT), str(package)], cwd=package, env=environment
    )
    answer = json.loads(indexed.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer.get("error")

    # The app's functions as the development tree indexes them, in a process of their own:
    # an app indexes once per process, and other tests may have indexed it in this one.
    listed = run(
        [sys.executable, "-c", LIST_FUNCTIONS],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    expected = json.loads(listed.stdout.strip().splitlines()[-1])
    assert answer["functions"] == expected
    assert answer["outside"] == []
    with capsys.disabled():
        print(
            f"\ndeployment package: {len(files)} files, {size:,} bytes ({size / 1000:.0f} KB);"
            f" requirements.txt installs {dependencies / 2**20:.0f} MiB;"
            f" {len(expected)} functions indexed"
        )
