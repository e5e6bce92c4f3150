"""``python -m chaos``: the order pipeline under crashes and faults (chaos.command)."""

import sys

from chaos.command import main

sys.exit(main())
