"""Closing the app's Service Bus senders, receivers and clients within `CLOSE_TIMEOUT_SECONDS`.

A link or connection whose peer died may never answer its close, or raise; the handler is
done with either way, so `close_quietly` lets a shutdown go on without it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from observability import logs

CLOSE_TIMEOUT_SECONDS = 5.0

log = logs.get_logger("app.servicebus")


class Closable(Protocol):
    async def close(self) -> None: ...


async def close_quietly(handler: Closable, what: str) -> None:
    """Close `handler` (`what` names it in the debug log), giving up after a few seconds."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
            await handler.close()
    except Exception as error:
        log.debug(
            "closing a service bus handler",
            handler=what,
            error=type(error).__name__,
            detail=str(error),
        )
