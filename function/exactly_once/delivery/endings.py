"""How a claimed attempt ends, as a value: each check before the job (its starting deadline, its
pause, its time limit, its overlap lock) and the job itself come to one of these, and one
finisher (delivery/finishing.py) turns it into the one ledger write that records it.

Temporal's interceptor chain has the shape: a check either passes the run on or ends it, and the
ending is data, so no check writes to the ledger itself, and each ledger write (complete,
release, give back) has one call site.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exactly_once.delivery.outcomes import Outcome
from exactly_once.ledger.lifecycle import JobResult
from exactly_once.ledger.writes import StagedWrite

if TYPE_CHECKING:
    from exactly_once.context import RunContext


@dataclass(frozen=True)
class Skip:
    """The run is recorded completed with `result` and never run: it was delivered past its
    starting deadline, its job is paused, or another run of the job holds its lock. `also` rides
    in that commit (a paused job's status, conditioned on the read that decided the skip);
    `committed` is called once the commit is known to be this attempt's (a pause's one line)."""

    result: JobResult
    reason: str
    outcome: Outcome
    message: str
    also: Sequence[StagedWrite] = ()
    committed: Callable[[], None] | None = None
    # Whether the answer carries `reason` as its error (an overlap skip's does not).
    says_why: bool = True


@dataclass(frozen=True)
class GiveBack:
    """The claim is returned unrun, with the checkpoint it inherited, and the delivery answered
    `outcome`: the next delivery of the run decides again (its lock was busy under `wait`,
    Firestore failed before the job could start, the claim came too late to run)."""

    outcome: Outcome
    message: str
    error: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ran:
    """The job ran in `context`: it returned `output_json`, or raised `failure`."""

    context: RunContext
    output_json: str | None
    failure: BaseException | None


Ending = Skip | GiveBack | Ran


class DecidedOnStale(Exception):
    """A skip's commit was refused because the read it was decided on no longer stands (the job's
    status changed since): nothing was written, and the run is decided again."""
