"""``python -m tools.cosmos_containers``: the app's Cosmos DB containers as JSON (U2, U3, C3).

What ``adapters.cosmos_containers`` defines, with the names the COSMOS_* settings of the
environment give them: infra/cosmos-containers.json is this output, which the Bicep loads
to create the containers in Azure.
"""

from __future__ import annotations

import json
import os
import sys

import bootstrap
from adapters.cosmos_containers import cosmos_layout
from config import Settings


def main() -> None:
    layout = cosmos_layout(bootstrap.cosmos_options(Settings.from_environ(os.environ)))
    json.dump(
        {
            "database": layout.database,
            "containers": [definition.to_document() for definition in layout.containers],
        },
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
