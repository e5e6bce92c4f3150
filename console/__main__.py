"""``python -m console``: see ``console.cli``."""

import sys

from console.cli import main

sys.exit(main())
