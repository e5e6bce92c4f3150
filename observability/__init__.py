"""The app's telemetry through the OpenTelemetry API only (C9): spans (`tracing`), instruments
(`metrics`) and structured log records (`logs`). The host process configures the provider
and the exporter; this package never does.
"""
