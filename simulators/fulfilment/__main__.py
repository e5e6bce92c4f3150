"""``python -m simulators.fulfilment``: the simulated fulfilment service as a process."""

import sys

from simulators.fulfilment.server import main

sys.exit(main())
