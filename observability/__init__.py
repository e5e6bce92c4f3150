"""The app's telemetry through the OpenTelemetry API only (C9): traces (tracing.py), metrics
(metrics.py) and structured logs (logs.py). The host process configures the provider."""
