"""``python -m devhost``: the local runtime's command line (see devhost.cli)."""

import sys

from devhost.cli import main

sys.exit(main())
