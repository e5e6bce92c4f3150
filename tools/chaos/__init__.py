"""``python -m tools.chaos`` (``make chaos``): the order pipeline under crashes and faults,
checked for what the pattern promises (C1-C10): nothing lost, doubled or left half-undone."""
