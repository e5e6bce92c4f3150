"""The replay gate (C7): orchestration histories replayed through the app's current code
before it ships, so no change breaks an order in flight (docs/replay.md)."""
