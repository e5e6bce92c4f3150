"""``python -m simulators.services``: every simulated service as one process."""

import sys

from simulators.services.server import main

sys.exit(main())
