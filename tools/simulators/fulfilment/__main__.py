"""``python -m tools.simulators.fulfilment``: the simulated services as a process (fulfilment at the
root), the same command as ``python -m tools.simulators.services``."""

import sys

from tools.simulators.services.server import main

sys.exit(main(prog="python -m tools.simulators.fulfilment"))
