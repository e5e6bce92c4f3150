"""Start and stop `@vercel/cosmosdb-server` (npm): a local Cosmos DB API server.

The Cosmos adapter tests run against it and `python -m demo --backend cosmos`
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

The package is looked for in the `node_modules` of the current directory or the nearest
folder above it that has one (as node resolves it), so a project installs it with `npm
install @vercel/cosmosdb-server` in its own root. If node or the package is missing,
`CosmosServer.start` raises `CosmosServerMissing` with that command; the tests fail with that
message, never skip.
The server keeps everything in memory: stopping it discards every database.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

from devhost import child_process

PACKAGE = "@vercel/cosmosdb-server"
EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XyHK8A=="
)
"""The Cosmos DB emulator's well-known key; that server accepts any key."""

READY_BOUND_SECONDS = 30.0


def node_modules_with(package: str, start: Path | None = None) -> Path | None:
    """The first ``node_modules`` holding `package`, from `start` (the current directory) up."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        modules = folder / "node_modules"
        if (modules / package / "package.json").is_file():
            return modules
    return None


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


class CosmosServerMissing(RuntimeError):
    """node or the npm package is not installed."""


class CosmosServer:
    """One server process; use as a context manager or call `start`/`stop`."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("the Cosmos server is not running")
        return f"https://127.0.0.1:{self.port}/"

    @property
    def connection_string(self) -> str:
        """The `CosmosConnection` app setting for this server (key auth, as locally)."""
        return f"AccountEndpoint={self.endpoint};AccountKey={EMULATOR_KEY};"

    def start(self) -> CosmosServer:
        node = shutil.which("node")
        modules = node_modules_with(PACKAGE)
        if node is None or modules is None:
            raise CosmosServerMissing(
                f"the Cosmos DB API server needs node and the npm package {PACKAGE} in the "
                f"node_modules of {Path.cwd()} or a folder above it: run `npm install {PACKAGE}` "
                "in the project's root (in this repository: make setup)"
            )
        self._process = subprocess.Popen(
            [node, "-e", SERVE],
            cwd=modules.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "NODE_PATH": str(modules)},
        )
        self.port = self._read_port(self._process)
        return self

    def _read_port(self, process: subprocess.Popen[str]) -> int:
        lines = child_process.first_lines(process, 1, READY_BOUND_SECONDS)
        if not lines or not lines[0]:
            self.stop()
            raise RuntimeError(
                f"{PACKAGE} did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {process.poll()}); run it by hand: node -e with devhost/"
                "cosmos_server.py SERVE"
            )
        return int(json.loads(lines[0])["port"])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            child_process.stop(process)

    def __enter__(self) -> CosmosServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
