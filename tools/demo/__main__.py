"""``python -m tools.demo``: the order pipeline end to end under faults, and its report."""

import sys

from tools.demo.command import main

sys.exit(main())
