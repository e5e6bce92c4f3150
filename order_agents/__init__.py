"""Agents (E1, E3, E4, E7, E9): each wraps the call to one remote service with its own retries.

An agent never recovers the workflow itself; it answers the scheduler, and the supervisor
handles whatever the scheduler leaves behind.
"""
