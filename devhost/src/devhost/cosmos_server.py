"""Start and stop `@vercel/cosmosdb-server` (npm): a local Cosmos DB API server.

The Cosmos adapter tests run against it and `python -m tools.demo --backend cosmos`
(`make demo BACKEND=cosmos`) runs the pipeline on it. The server speaks the Cosmos DB NoSQL
REST API over HTTPS, so the real azure-cosmos SDK talks to it unchanged; the tests never
mock the SDK. It runs on 127.0.0.1 on an ephemeral port with keep-alive (its CLI closes
every connection, which costs ~50 ms per request over TLS). azure-cosmos skips certificate
checks for 127.0.0.1 only, which is why the host is fixed.

Two bugs of that server are fixed here, in the launcher, so that they cannot leak into
the adapter (which speaks plain Cosmos DB and nothing else):
- `MISSING_ITEM_IS_404`: reading a missing item answers HTTP 500 (a TypeError in its read
  handler) where Cosmos DB answers 404. The adapter treats 404 as "not found", only.
- `CASE_PRESERVING_PATCH_CONDITION`: it lower-cases the whole filter predicate of a patch
  (field names and string literals), so `c.LockedBy = 'o-1:1'` never matches. The wrapper
  evaluates the predicate as written with the server's own query engine.
Both wrap a handler module's export, which the server looks up on every request.

The package is found as `devhost.node_service` finds one (`npm install
@vercel/cosmosdb-server` in the project's root); without it `CosmosServer.start` raises
`CosmosServerMissing` with that command.
The server keeps everything in memory: stopping it discards every database.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from devhost import child_process
from devhost.node_service import NodeService, NodeServiceMissing

PACKAGE = "@vercel/cosmosdb-server"
EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XyHK8A=="
)
"""The Cosmos DB emulator's well-known key; that server accepts any key."""

READY_BOUND_SECONDS = 30.0


MISSING_ITEM_IS_404 = """
const readDocument = require("@vercel/cosmosdb-server/lib/handler/read-document");
const readMissingAsServerError = readDocument.default;
readDocument.default = (account, req, res, params) => {
  try {
    return readMissingAsServerError(account, req, res, params);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
    res.statusCode = 404;
    return {
      code: "NotFound",
      message: "Entity with the specified id does not exist in the system.",
    };
  }
};
"""

CASE_PRESERVING_PATCH_CONDITION = """
const patchOperations = require("@vercel/cosmosdb-server/lib/handler/_patch-operations");
const patchWithLowerCasedCondition = patchOperations.patchOperation;
patchOperations.patchOperation = (collection, input) => {
  if (!input.condition) return patchWithLowerCasedCondition(collection, input);
  const where = input.condition.trim().replace(/^from\\s+\\w+\\s+where\\s+/i, "");
  const matches = (condition) => collection.documents.query(
    {
      query: `SELECT * FROM c WHERE c.id = @id AND (${condition})`,
      parameters: [{ name: "@id", value: input.id }],
    },
    {},
  ).result.length > 0;
  const unconditional = { ...input, condition: undefined };
  if (matches("true") && !matches(where)) {
    return {
      statusCode: 412,
      body: {
        code: "PreconditionFailed",
        message: "Condition specified in the patch request is not satisfied.",
      },
    };
  }
  return patchWithLowerCasedCondition(collection, unconditional);
};
"""

SERVE = (
    MISSING_ITEM_IS_404
    + CASE_PRESERVING_PATCH_CONDITION
    + """
const { createHttpsServer } = require("@vercel/cosmosdb-server");
const server = createHttpsServer({ keepAlive: true });
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
"""
)


class CosmosServerMissing(NodeServiceMissing):
    """node or the npm package is not installed."""


class CosmosServer(NodeService):
    """One server process; use as a context manager or call `start`/`stop`."""

    package = PACKAGE
    title = "the Cosmos DB API server"
    missing = CosmosServerMissing

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("the Cosmos server is not running")
        return f"https://127.0.0.1:{self.port}/"

    @property
    def connection_string(self) -> str:
        """The `CosmosConnection` app setting for this server (key auth, as locally)."""
        return f"AccountEndpoint={self.endpoint};AccountKey={EMULATOR_KEY};"

    def _launch(self, node: str, modules: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [node, "-e", SERVE],
            cwd=modules.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "NODE_PATH": str(modules)},
        )

    def _ready(self, process: subprocess.Popen[str]) -> int:
        lines = child_process.first_lines(process, 1, READY_BOUND_SECONDS)
        if not lines or not lines[0]:
            raise RuntimeError(
                f"{PACKAGE} did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {process.poll()}); run it by hand: node -e with devhost/"
                "cosmos_server.py SERVE"
            )
        return int(json.loads(lines[0])["port"])
