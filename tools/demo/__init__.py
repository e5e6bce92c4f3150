"""The order pipeline run locally end to end: ``make demo`` / ``python -m tools.demo``."""
