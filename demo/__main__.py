"""``python -m demo``: the order pipeline end to end under faults, and its report (demo.command)."""

import sys

from demo.command import main

sys.exit(main())
