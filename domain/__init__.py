"""The order domain: records, transitions, policies, workflow, contracts and ports.

Standard library only, no Azure or framework import, so every rule is unit-tested without a
runtime.
"""
