"""The order domain: records, transitions, policies, contracts and store ports.

Plain Python and the standard library only - no Azure or other framework import - so every
rule's logic is unit-tested without a runtime (see style.md).
"""
