"""``python -m tools.console_keys``: a local pair of operator console keys (E8).

A local run's console takes a read key and an act key (`domain.operator_access`). This makes
them once, at random, into ``<dir>/console-keys.json`` (``.devhost/``, which git ignores), and
gives CONSOLE_KEYS, which holds only their names, roles and SHA-256: with ``--settings FILE``
it writes that setting into the file's ``Values`` (``local.settings.json`` for ``func start``
or ``python -m devhost start``), else it prints it. The local pipeline (``tools.demo``, the
end-to-end tests) calls `local_keys` on its own data directory. Nothing here is a secret the
repository holds.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.operator_access import Role, key_entry

KEYS_FILE = "console-keys.json"
DEFAULT_DIR = Path(".devhost")
READ_KEY_NAME = "local-read"
ACT_KEY_NAME = "local-act"


@dataclass(frozen=True)
class LocalKeys:
    """The local read and act keys, and the CONSOLE_KEYS setting that names them."""

    read: str
    act: str

    @property
    def setting(self) -> str:
        return ",".join(
            (
                key_entry(READ_KEY_NAME, Role.READ, self.read),
                key_entry(ACT_KEY_NAME, Role.ACT, self.act),
            )
        )


def local_keys(directory: Path) -> LocalKeys:
    """The keys of ``directory/console-keys.json``, made when the file is absent."""
    path = directory / KEYS_FILE
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        return LocalKeys(read=str(stored["read"]), act=str(stored["act"]))
    keys = LocalKeys(read=secrets.token_urlsafe(32), act=secrets.token_urlsafe(32))
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"read": keys.read, "act": keys.act}, indent=2) + "\n", "utf-8")
    path.chmod(0o600)
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.console_keys", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--settings", type=Path, help="write CONSOLE_KEYS into this file")
    args = parser.parse_args(argv)
    keys = local_keys(args.dir)
    if args.settings is None:
        print(f"CONSOLE_KEYS={keys.setting}")
        return 0
    document = json.loads(args.settings.read_text(encoding="utf-8"))
    document.setdefault("Values", {})["CONSOLE_KEYS"] = keys.setting
    args.settings.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"CONSOLE_KEYS written to {args.settings}; the keys are in {args.dir / KEYS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
