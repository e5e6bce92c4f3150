"""The broker's queue-model tests' pieces: a namespace factory's type."""

from __future__ import annotations

from collections.abc import Callable

from devhost.servicebus.entities import Namespace

MakeNamespace = Callable[..., Namespace]
