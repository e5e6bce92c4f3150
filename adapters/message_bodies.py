"""The body of a received Service Bus message as the app reads it (S1, S3, E3).

The app's messages are UTF-8 JSON in AMQP data sections. A body in an AMQP value or
sequence section is no message of the app's: `data_body` refuses it with `NotADataBody`,
never guessing bytes from it, so the message is dead-lettered with that reason at once.
"""

from __future__ import annotations

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.amqp import AmqpMessageBodyType


class NotADataBody(ValueError):
    """The message's body is an AMQP value or sequence section, not data."""

    def __init__(self, section: AmqpMessageBodyType) -> None:
        super().__init__(f"the body is an AMQP {section.value} section, not a data section")
        self.section = section


def data_body(message: ServiceBusReceivedMessage) -> bytes:
    """The message's data sections as one byte string."""
    if message.body_type is not AmqpMessageBodyType.DATA:
        raise NotADataBody(message.body_type)
    body = message.body
    return body if isinstance(body, bytes) else b"".join(body)
