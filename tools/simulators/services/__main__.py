"""``python -m tools.simulators.services``: every simulated service as one process."""

import sys

from tools.simulators.services.server import main

sys.exit(main())
