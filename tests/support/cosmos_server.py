"""The Cosmos DB API server the Cosmos tests run against.

One launcher serves the tests, the benchmarks and the demo: `devhost.cosmos_server`. The
tests start it on loopback and fail with "run make setup" when node or the npm package is
missing; they never skip.
"""

from devhost.cosmos_server import EMULATOR_KEY, CosmosServer, CosmosServerMissing

__all__ = ["EMULATOR_KEY", "CosmosServer", "CosmosServerMissing"]
