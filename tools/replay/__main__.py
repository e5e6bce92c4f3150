"""``python -m tools.replay``: see ``tools.replay.command``."""

import sys

from tools.replay.command import main

sys.exit(main())
