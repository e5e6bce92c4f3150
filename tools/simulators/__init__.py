"""Simulated remote services that the pattern's agents call (pattern.md "Execution (agents)").

They stand in for the unreliable downstream systems of the documented Azure example, run on
loopback, and record what they did so tests can prove what happened at the target.
"""
