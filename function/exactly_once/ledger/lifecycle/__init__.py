"""The lifecycle of a run and of its job: the states of a run's record and of a job's status, the
events that move them, what rides along. The transition tables below are the code
(`lifecycle/table.py`, `lifecycle/job_state.py`): the claim, the owner's writes judged after a
refusal, `ops redo`, the pause of a job after failed runs and the docs all read them.

Every path that writes a run record or a job's status, or judges one, asks this package: the
ledger's claim, renewal and finish, the delivery's endings, the forced-run path, the job locks,
the missed-run audit and its catch-up, the ops CLI. None of them compares a record's `status`
or a state itself (tests/function/ledger/test_one_lifecycle.py holds the function package and
`ops/` to that), so a new capability cannot add a path that decides a state on its own.

Pure: no Firestore, no clock. Every time it is given is Firestore's: a commit time
(`update_time`) or the time a read was served (`read_time`). A record is judged as of its read.

The states of a run's record, as one read sees it (`State`):

- `absent`: no record. Never claimed, or given back without a checkpoint (the record deleted).
- `expired`: completed, and past its retention (`expire_at`): a claim takes it over, and
  Firestore's TTL deletes it some time later; the audit still judges it by its result.
- `leased`: in progress, its lease live: an attempt is running the job.
- `lapsed`: in progress, its lease over: its attempt crashed, froze or was cut off.
- `released`: given back with a checkpoint to keep: claimable at once, like an absent record.
- `completed`: final, with its result (`JobResult`).

The run's transitions (`make docs` writes this table from `TRANSITIONS`, here and into
docs/deduplication.md):

<!-- BEGIN GENERATED: lifecycle -->
| From | Event | To | Write | Rides along |
| --- | --- | --- | --- | --- |
| `absent` | claim | leased | create (refused if any record exists) | attempt id, lease, fence = the commit time |
| `lapsed` | claim | leased | update conditioned on the record as read | the checkpoint the record holds |
| `released` | claim | leased | update conditioned on the record as read | the checkpoint the record holds |
| `expired` | claim | leased | update conditioned on the record as read | no checkpoint: a completed run resumes nothing |
| `leased` | renew | leased | update conditioned on the owner's last write | the owner's newer checkpoint, when it changed |
| `leased` | complete | completed (succeeded, terminal failure or overlap skipped) | update conditioned on the owner's last write | output or error, staged writes (success only), job status, downstream work; checkpoint cleared |
| `leased` | skip late | completed (skipped late) | update conditioned on the owner's last write | why it was late; checkpoint cleared |
| `leased` | skip paused | completed (skipped paused) | update conditioned on the owner's last write | which failed runs paused the job, the job status as read (or the skip is refused whole); checkpoint cleared |
| `leased` | release | released, or absent without a checkpoint | update (or delete) conditioned on the owner's last write | the owner's latest checkpoint (its own or the one it inherited), job status failure |
| `leased` | give back | released, or absent without a checkpoint | update (or delete) conditioned on the owner's last write | exactly the checkpoint the claim inherited; nothing else (the job never ran) |
| `completed` | expire | expired, then absent | none | nothing: past `expire_at` (retention from the later of the owner's last write and the ScheduleTime) a claim takes it over; Firestore's TTL deletes it up to days later |
| `lapsed`, `released` | expire | absent | none | its checkpoint goes with it: the TTL deletes it after `expire_at` (the claimer's clock + retention), and a run unfinished for the whole retention starts afresh |
| `completed`, `expired` | redo | absent | delete conditioned on the record as read | nothing: the next delivery claims the run afresh |
| `leased` | claim | (unchanged) | none | in_progress (409, Retry-After = seconds left on the lease) |
| `completed` | claim | (unchanged) | none | answered from the record: the job is not run again |
<!-- END GENERATED -->

Three rules hold across the table:

1. **A checkpoint lives as long as the run is unfinished.** A takeover inherits what the record
   holds; a renewal or a release replaces it only with the owner's own newer value; a give-back
   puts back exactly what the claim inherited; only completion clears it.
2. **Only the owner of the run's latest claim finishes it**: every write after the claim is
   conditioned on the owner's last write, and a refused one is read back and judged by the
   table (`after_refusal`): our own write whose answer was lost is a success, never `lease_lost`.
3. **The audit judges what the ledger would decide**: a run is caught up exactly when a
   delivery of it would be claimed (absent, released or lapsed) and no delivery of it can still
   come; a completed record, within its retention or past it, is never delivered again.

A job with pauseAfterFailures has a state of its own, in its status document (`JobState`:
`running`, `pausing`, `paused`; lifecycle/job_state.py). Its transitions (written into
docs/operations.md too):

<!-- BEGIN GENERATED: job-lifecycle -->
| From | Event | To | Write | Rides along |
| --- | --- | --- | --- | --- |
| `running`, `pausing`, `paused` | run failed | running, or pausing at pauseAfterFailures failed runs | merge in the commit that ends the failed attempt (release or terminal completion) | the run's id added to the failed runs once, however many of its attempts fail |
| `running`, `pausing`, `paused` | run succeeded | running | merge in the commit that completes the run, whatever the job table says | no failed runs, no pause |
| `pausing` | skip | paused | update conditioned on the status as read, in the commit that records the run skipped | when (the commit time) and after which runs it paused; the one ERROR line, once that commit is known to be ours |
| `paused` | skip | paused | update conditioned on the status as read, in the commit that records the run skipped | the run skipped last |
| `running`, `pausing`, `paused` | resume | running | merge by `ops resume` | no failed runs, no pause, when it was resumed |
<!-- END GENERATED -->

A job with an overlap policy (`skip`, `wait`) holds a lock while a run executes (`LockState`:
`free`, `held`, `left`, `ours`; lifecycle/job_lock.py). A lock is live exactly as long as its
holder's run, as this package judges that run's record. Its transitions (written into
docs/jobs.md too):

<!-- BEGIN GENERATED: job-lock -->
| From | Event | To | Write | Rides along |
| --- | --- | --- | --- | --- |
| `free` | take | held | create (refused if a lock exists) | the run and attempt holding it, when (the commit time), expire_at for the TTL |
| `left` | take | held | update conditioned on the lock as read | the run and attempt holding it, when (the commit time), expire_at for the TTL |
| `ours` | take | held | update conditioned on the lock as read | the run and attempt holding it, when (the commit time), expire_at for the TTL |
| `held` | take | (unchanged) | none | busy: `skip` records the run overlap skipped, `wait` answers 409 with Retry-After = the seconds left on the holder's lease |
| `held` | release | free | delete conditioned on the holder's own take (a lock taken over since is not released) | nothing: the next run of the job takes it at once |
<!-- END GENERATED -->
"""

from exactly_once.ledger.lifecycle.claims import (
    CLAIM_STAMP_MARGIN,
    AfterRefusal,
    ClaimVerdict,
    Finished,
    Held,
    OtherTarget,
    TakeOver,
    after_refusal,
    completion_event,
    inherited_checkpoint,
    on_claim,
    own_claim_kind,
)
from exactly_once.ledger.lifecycle.job_lock import (
    LOCK_TRANSITIONS,
    LockBusy,
    LockEvent,
    LockState,
    lock_state,
    take_lock,
)
from exactly_once.ledger.lifecycle.record_fields import (
    about_run,
    claimed_fields,
    completion_fields,
    release_fields,
    renewal_fields,
    retained_until,
)
from exactly_once.ledger.lifecycle.states import (
    ATTEMPT_ID,
    STATUS,
    ClaimKind,
    JobResult,
    State,
    Status,
    StoredRecord,
    holds_claim,
    is_completed,
    is_owned_by,
    lease_seconds_left,
    recorded_by_another_target,
    result_of,
    seconds_held,
    state_of,
    stored_status,
)
from exactly_once.ledger.lifecycle.table import TRANSITIONS, Event, NoTransition, Step, Write, claimable, step
from exactly_once.ledger.lifecycle.verdicts import (
    JUDGED_FIELDS,
    Verdict,
    deliverable_again,
    has_record,
    judge,
    progress,
)

__all__ = [
    "ATTEMPT_ID",
    "CLAIM_STAMP_MARGIN",
    "JUDGED_FIELDS",
    "LOCK_TRANSITIONS",
    "STATUS",
    "TRANSITIONS",
    "AfterRefusal",
    "ClaimKind",
    "ClaimVerdict",
    "Event",
    "Finished",
    "Held",
    "JobResult",
    "LockBusy",
    "LockEvent",
    "LockState",
    "NoTransition",
    "OtherTarget",
    "State",
    "Status",
    "Step",
    "StoredRecord",
    "TakeOver",
    "Verdict",
    "Write",
    "about_run",
    "after_refusal",
    "claimable",
    "claimed_fields",
    "completion_event",
    "completion_fields",
    "deliverable_again",
    "has_record",
    "holds_claim",
    "inherited_checkpoint",
    "is_completed",
    "is_owned_by",
    "judge",
    "lease_seconds_left",
    "lock_state",
    "on_claim",
    "own_claim_kind",
    "progress",
    "recorded_by_another_target",
    "release_fields",
    "renewal_fields",
    "result_of",
    "retained_until",
    "seconds_held",
    "state_of",
    "step",
    "stored_status",
    "take_lock",
]
