"""Agents (E1, E3, E4, E7, E9): each wraps the call to one remote service with its own retries.

An agent only answers the scheduler; it never recovers the workflow itself.
"""
