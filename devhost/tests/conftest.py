"""What every devhost test shares: the test apps import in child processes as they do here."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from devhost_tests_support import TESTS_ROOT


@pytest.fixture(autouse=True, scope="session")
def _test_apps_importable_in_child_processes() -> Iterator[None]:
    """pytest puts devhost/tests on this process's sys.path (``pythonpath``); language
    workers and devhosts the tests start get it through PYTHONPATH, so an app named by a
    dotted path under it (``devhost_tests_support.durable_apps.semantics_app:app``) loads
    there too."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_ROOT), before]))
    yield
    if before is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = before
