"""A Service Bus app for the listener-restart tests: two queue-triggered functions that take a
moment per message, one with the plain binding (the devhost completes the message) and one
with the SDK-type binding that completes it itself through ServiceBusMessageActions. Each
records the message ids it processed, so a test can tell that every message sent was
processed at least once."""

import asyncio

import azure.functions as func
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

app = func.FunctionApp()

# Long enough that a burst keeps invocations in flight when the broker dies.
WORK_SECONDS = 0.1

processed: dict[str, list[str]] = {"plain": [], "sdk": []}


@app.service_bus_queue_trigger(arg_name="msg", queue_name="plain-jobs", connection="SB")
async def plain(msg: func.ServiceBusMessage) -> None:
    await asyncio.sleep(WORK_SECONDS)
    processed["plain"].append(msg.message_id)


@app.service_bus_queue_trigger(
    arg_name="message", queue_name="sdk-jobs", connection="SB", auto_complete_messages=False
)
async def sdk(
    message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
) -> None:
    await asyncio.sleep(WORK_SECONDS)
    processed["sdk"].append(str(message.message_id))
    # A lost lock raises here; the devhost then abandons, which fails too, and the broker
    # redelivers the message: the work above runs again (at-least-once).
    await asyncio.to_thread(message_actions.complete, message)
