"""``python -m tools.smoke``: see ``tools.smoke.command``."""

import sys

from tools.smoke.command import main

sys.exit(main())
