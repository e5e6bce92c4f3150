"""Tooling that never deploys: the demo, chaos, benchmarks, simulated services, console CLI."""
