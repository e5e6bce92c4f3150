"""Embedded Service Bus-compatible broker.

A wire-agnostic queue model (``config``, ``entities``, ``journal``) and an AMQP 1.0 wire layer on
python-qpid-proton that the real azure-servicebus SDK talks to. Topics, subscriptions and sessions
are not supported yet.
"""
