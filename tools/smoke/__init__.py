"""The smoke test after a deployment: ``python -m tools.smoke`` (tools.smoke.command)."""
