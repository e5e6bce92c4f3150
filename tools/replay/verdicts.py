"""One verdict per instance history, in words an engineer can act on (C7).

An instance replays cleanly; or it is non-deterministic: the code asks for another activity,
timer or sub-orchestration than the history recorded, or raises where the recorded run went
on; or it belongs to a workflow version the code no longer serves. The fix for the last two
is the same rule: a change that alters what an instance meets is a new workflow version, and
the old version's path stays until no order runs it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from devhost.durable.replay_check import HistoryCheck

RULE = (
    "rule C7: a change that alters the activities, timers or events an instance meets is a "
    "new workflow version; add it to WORKFLOWS with WORKFLOW_VERSION bumped and keep the old "
    "path until no order runs it (docs/replay.md)"
)


class Kind(StrEnum):
    CLEAN = "replays"
    NON_DETERMINISTIC = "non-deterministic"
    UNSERVED = "unserved version"


@dataclass(frozen=True)
class Verdict:
    instance_id: str
    kind: Kind
    detail: str
    origin: str
    """Where the history came from: a file, or the app it was read from."""

    def line(self) -> str:
        return f"{self.kind.value:<17} {self.instance_id}  {self.detail}  [{self.origin}]"


def unserved(
    instance_id: str, version: str | None, served: Collection[str], origin: str
) -> Verdict:
    return Verdict(
        instance_id,
        Kind.UNSERVED,
        f"started as version {version!r}, which this code no longer serves (it serves "
        f"{', '.join(sorted(served))})",
        origin,
    )


def of_check(check: HistoryCheck, origin: str) -> Verdict:
    if check.mismatch is not None:
        return Verdict(
            check.instance_id,
            Kind.NON_DETERMINISTIC,
            f"at sequence id {check.mismatch.sequence_id}: the history has "
            f"{check.mismatch.history_has} but the code now asks for {check.mismatch.code_wants}",
            origin,
        )
    if check.failure is not None:
        return Verdict(
            check.instance_id,
            Kind.NON_DETERMINISTIC,
            f"the code raised where the recorded run went on: {check.failure}",
            origin,
        )
    return Verdict(
        check.instance_id, Kind.CLEAN, f"{check.orchestrator} version {check.version}", origin
    )
