"""`python -m tools.bench`: the throughput benchmarks behind `make bench`: broker and pipeline.

    python -m tools.bench                      both, with their defaults
    python -m tools.bench servicebus [ARGS]    bench.servicebus_throughput alone, ARGS passed on
    python -m tools.bench pipeline [ARGS]      bench.pipeline_throughput alone, ARGS passed on

Exits non-zero if any benchmark that ran failed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from tools.bench import pipeline_throughput, servicebus_throughput

BENCHMARKS: dict[str, Callable[[Sequence[str] | None], int]] = {
    "servicebus": servicebus_throughput.main,
    "pipeline": pipeline_throughput.main,
}


def main(argv: Sequence[str]) -> int:
    if not argv:
        results = []
        for run in BENCHMARKS.values():
            results.append(run([]))
            print(flush=True)
        return max(results)
    name, *rest = argv
    if name in ("-h", "--help"):
        print(__doc__)
        return 0
    if name not in BENCHMARKS:
        print(
            f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)} or none for all",
            file=sys.stderr,
        )
        return 2
    return BENCHMARKS[name](rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
