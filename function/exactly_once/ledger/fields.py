"""Names of run-record fields that others read outside the ledger, and the one rule read there.

Kept apart from protocol.py (which needs the Firestore client library) so the Pulumi program can
import them: the TTL policy and the indexing exemptions must name exactly the fields the
ledger writes. The missed-run audit, which needs no Firestore client either, judges a record's
target by the same rule as the claim (`recorded_by_another_target`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The TTL field of run records, token records and job locks: Firestore deletes a document
# some time after this moment.
EXPIRE_AT: Final = "expire_at"
CLAIMED_AT: Final = "claimed_at"
COMPLETED_AT: Final = "completed_at"
# The commit time of the owner's last lease renewal (null until the job outlives a renewal).
RENEWED_AT: Final = "renewed_at"
SCHEDULE_TIME: Final = "schedule_time"
# The job's latest checkpoint (JSON text) as of the owner's last renewal or its release: what
# an attempt that takes the run over resumes from. A completion clears it.
CHECKPOINT: Final = "checkpoint_json"
# What claimed the run (@exactly_once(target=...), by default the Cloud Run service), so that two functions
# sharing a runs collection and a job name cannot decide each other's runs.
TARGET: Final = "target"

# Fields whose values only ever grow and that no query filters on. Left indexed, every new
# record's entry would land at the end of the same index range, which caps the collection at
# about 500 writes a second; exempt, the writes spread like the document ids do.
UNINDEXED_RUN_FIELDS: Final = (CLAIMED_AT, RENEWED_AT, COMPLETED_AT, SCHEDULE_TIME)


def recorded_by_another_target(record: Mapping[str, Any], target: str | None) -> bool:
    """Whether the function of `target` must refuse the run `record` holds: the one rule of the
    ledger's claim and of the missed-run audit. A record or a function without a target (one
    outside Cloud Run, or a record from before targets were recorded) is nobody else's; a
    record of the earlier "<service>/<module>.<function>" form is its service's."""
    recorded = record.get(TARGET)
    if not target or not recorded or recorded == target:
        return False
    # Recorded before the target was a setting: "<service>/<module>.<function>", the service's.
    return not ("/" in recorded and "/" not in target and recorded.split("/", 1)[0] == target)
