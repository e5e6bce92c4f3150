"""A real state store that fails part-way through a scan: what a store error in the middle
of a supervisor's sweep looks like to the code that runs it (U2, C6)."""

from __future__ import annotations

from typing import Any

from domain.ports import StateStore, StoreUnavailable


class FailsFromPage:
    """`states`, whose expired-records query fails from its `page`th call on."""

    def __init__(self, states: StateStore, page: int) -> None:
        self._states = states
        self._left = page - 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._states, name)

    def query_expired(self, **arguments: Any) -> Any:
        if self._left <= 0:
            raise StoreUnavailable("the store went away in the middle of the scan")
        self._left -= 1
        return self._states.query_expired(**arguments)
