"""Reading azure.yaml's hooks for the tests: each hook's script per shell, as azd runs it."""

from __future__ import annotations

import re
import textwrap

from tests.infra.bicep import ROOT


def hook(event: str) -> dict[str, tuple[str, str]]:
    """By OS (``posix``, ``windows``), the shell and the script of the hook run at ``event``."""
    text = (ROOT / "azure.yaml").read_text(encoding="utf-8")
    found = re.search(rf"^  {event}:\n((?:    .*\n)+)", text, re.MULTILINE)
    assert found is not None, f"azure.yaml has no {event} hook"
    return {
        os: (shell, textwrap.dedent(run))
        for os, shell, run in re.findall(
            r"^    (posix|windows):\n      shell: (\w+)\n      run: \|\n((?:        .*\n)+)",
            found.group(1),
            re.MULTILINE,
        )
    }
