"""``python -m tools.chaos``: the order pipeline under crashes and faults (chaos.command)."""

import sys

from tools.chaos.command import main

sys.exit(main())
