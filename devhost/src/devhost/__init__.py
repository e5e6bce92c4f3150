"""The devhost: runs a Functions app offline as the Functions host would (see host.py)."""

import os

# The devhost starts child processes (broker, language workers) while its gRPC settlement
# service runs. Each is a fork followed at once by exec, which gRPC's fork handlers do not
# need to prepare for; with them on, gRPC logs a warning on every start.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
