"""Trigger listeners of the devhost: each turns an outside event into a function invocation."""
