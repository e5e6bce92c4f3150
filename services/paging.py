"""Bounded scans over paged store queries (D1, U2, U6): `BoundedScan`.

A scan follows the store's continuation tokens and stops at its item cap, its page cap, the
end, or a repeated token (`StopReason`), so no store can keep a starter or supervisor busy
forever; it keeps its own account of pages, items and request charge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from domain.ports import Page

T = TypeVar("T")


class StopReason(StrEnum):
    EXHAUSTED = "exhausted"
    ITEM_CAP = "item-cap"
    PAGE_CAP = "page-cap"
    REPEATED_TOKEN = "repeated-token"


@dataclass
class BoundedScan(Generic[T]):
    """Iterate the items of `fetch(page_size, continuation)` pages within the caps."""

    fetch: Callable[[int, str | None], Page[T]]
    page_size: int
    max_items: int
    max_pages: int
    pages: int = 0
    items_read: int = 0
    request_charge: float = 0.0
    stopped: StopReason | None = None
    _seen_tokens: set[str] = field(default_factory=set)

    def __iter__(self) -> Iterator[T]:
        continuation: str | None = None
        while True:
            if self.pages >= self.max_pages:
                self.stopped = StopReason.PAGE_CAP
                return
            remaining = self.max_items - self.items_read
            if remaining <= 0:
                self.stopped = StopReason.ITEM_CAP
                return
            page = self.fetch(min(self.page_size, remaining), continuation)
            self.pages += 1
            self.items_read += len(page.items)
            self.request_charge += page.request_charge
            yield from page.items
            if page.continuation is None:
                self.stopped = StopReason.EXHAUSTED
                return
            if page.continuation in self._seen_tokens:
                self.stopped = StopReason.REPEATED_TOKEN
                return
            self._seen_tokens.add(page.continuation)
            continuation = page.continuation
