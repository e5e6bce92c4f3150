"""Helpers the devhost's own tests share: durable example apps, engine factories, broker
helpers, and a broker Config.json of their own."""

from pathlib import Path

TESTS_ROOT = Path(__file__).resolve().parents[1]
"""devhost/tests: on sys.path in these tests, so an app under it imports by dotted name."""
SUPPORT = Path(__file__).resolve().parent
BROKER_CONFIG = SUPPORT / "servicebus.config.json"
DURABLE_APPS = SUPPORT / "durable_apps"
