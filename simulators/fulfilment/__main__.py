"""``python -m simulators.fulfilment``: the simulated services as a process (fulfilment at the
root), the same command as ``python -m simulators.services``."""

import sys

from simulators.services.server import main

sys.exit(main(prog="python -m simulators.fulfilment"))
