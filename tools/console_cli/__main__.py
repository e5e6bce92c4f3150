"""``python -m tools.console_cli``: see ``console.cli``."""

import sys

from tools.console_cli.cli import main

sys.exit(main())
