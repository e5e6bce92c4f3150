"""The Scheduler (D4-D6, E2, E5, E6): Durable Functions orchestrations."""
