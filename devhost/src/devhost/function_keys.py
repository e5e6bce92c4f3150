"""Function keys of the devhost's HTTP triggers, checked as the Functions host checks them.

On Azure an HTTP function with ``authLevel`` ``function`` answers 401 unless the request
carries a function key or the master key, in the ``x-functions-key`` header or the ``code``
query parameter; ``admin`` takes the master key only; ``anonymous`` takes anything. The
devhost does the same, so a caller that forgot its key fails here as it would on Azure.
The Durable extension's webhooks on the HTTP port (``/runtime/webhooks/durabletask/``) take
its system key, ``durabletask_extension``, or the master key; the host puts the system key in
the management URLs it gives the durableClient binding, as Azure does.

The keys: the settings DEVHOST_FUNCTION_KEY and DEVHOST_MASTER_KEY (local.settings.json or
the environment) when set; otherwise ``<data>/keys.json``, created with random keys on the
first start (readable by its owner only) and reused after, so a CLI or a test reads the key
of the running devhost there.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

KEYS_FILE = "keys.json"
FUNCTION_KEY_SETTING = "DEVHOST_FUNCTION_KEY"
MASTER_KEY_SETTING = "DEVHOST_MASTER_KEY"
KEY_HEADER = "x-functions-key"
KEY_QUERY = "code"
DURABLE_EXTENSION_KEY = "durabletask_extension"


@dataclass(frozen=True)
class FunctionKeys:
    """The host's default function key, its master key and the Durable extension's key."""

    function: str
    master: str
    durable_extension: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @classmethod
    def load(cls, data_dir: Path, settings: Mapping[str, str]) -> FunctionKeys:
        """Keys from the settings, else from ``<data_dir>/keys.json`` (created if absent)."""
        path = data_dir / KEYS_FILE
        stored: dict[str, str] = {}
        if path.exists():
            stored = json.loads(path.read_text(encoding="utf-8"))
        keys = cls(
            function=settings.get(FUNCTION_KEY_SETTING)
            or stored.get("function")
            or secrets.token_urlsafe(32),
            master=settings.get(MASTER_KEY_SETTING)
            or stored.get("master")
            or secrets.token_urlsafe(32),
            durable_extension=stored.get(DURABLE_EXTENSION_KEY) or secrets.token_urlsafe(32),
        )
        if stored != keys.to_dict():
            data_dir.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                json.dump(keys.to_dict(), file, indent=2)
        return keys

    @classmethod
    def read(cls, data_dir: Path) -> FunctionKeys:
        """The keys a running devhost wrote to ``<data_dir>/keys.json``."""
        stored = json.loads((data_dir / KEYS_FILE).read_text(encoding="utf-8"))
        return cls(
            function=stored["function"],
            master=stored["master"],
            durable_extension=stored[DURABLE_EXTENSION_KEY],
        )

    def to_dict(self) -> dict[str, str]:
        return {
            "function": self.function,
            "master": self.master,
            DURABLE_EXTENSION_KEY: self.durable_extension,
        }

    def allows(self, auth_level: str, presented: str | None) -> bool:
        """Whether a request presenting `presented` may call a function of `auth_level`."""
        level = auth_level.lower()
        if level == "anonymous":
            return True
        accepted = [self.master] if level == "admin" else [self.function, self.master]
        return _matches(presented, accepted)

    def allows_durable_webhooks(self, presented: str | None) -> bool:
        """Whether a request presenting `presented` may call the Durable webhooks."""
        return _matches(presented, [self.durable_extension, self.master])


def presented_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The key a request carries: the ``x-functions-key`` header, else the ``code`` query."""
    return headers.get(KEY_HEADER) or query.get(KEY_QUERY)


def _matches(presented: str | None, accepted: list[str]) -> bool:
    return presented is not None and any(hmac.compare_digest(presented, key) for key in accepted)
