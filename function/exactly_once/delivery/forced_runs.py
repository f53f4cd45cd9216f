"""Tell a forced run from the scheduled run whose time it carries, on Firestore's clock.

A run forced by hand (`gcloud scheduler jobs run`, the console's "force run") is delivered with
the *next* scheduled run's time in X-CloudScheduler-ScheduleTime. Read as that run, it would
claim the scheduled run's id, and the real delivery at that time would be answered as its
duplicate: the schedule would silently lose a run. A Cloud Scheduler job delivers a scheduled
run at or after its time, so a delivery that reaches Firestore well before the time it carries
is a forced one, and it gets an identity of its own (`Trigger.FORCED`).

"Well before" is judged on Firestore's clock, the one every lease decision uses: the commit
time of the delivery's claim, or, when the claim is refused, the read time of the record that
refused it. Neither costs a round trip: the claim is the delivery's first RPC either way. The
instance's clock only guesses which identity to claim first; a guess the Firestore time
contradicts is given back unrun (one release) and the other identity claimed, so an instance
clock skewed by any amount costs two RPCs more on the deliveries it misjudges and decides
nothing. A claim is only ever run under the identity its own Firestore time confirms, so no
scheduled record is ever run before FORCED_RUN_TOLERANCE ahead of its time.

Headers cannot tell two forced runs announcing the same time apart (Cloud Scheduler sends the
same ones), nor a forced run's retry from the scheduled run once that time has passed: the rule
is one forced run per (job, announced time), and a forced run's delivery that reaches Firestore
after its announced time is that scheduled run's (docs/operations.md, "Forced runs").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from exactly_once.ledger.protocol import Claim, RunAlreadyCompleted, RunInProgress, RunLedger
from exactly_once.run_key import RunKey, Trigger

# A delivery reaching Firestore more than this ahead of its ScheduleTime is a forced run. Cloud
# Scheduler and Firestore keep Google's clock, and a scheduled run is dispatched at its time, not
# before: the margin only absorbs a dispatch a hair early. Cron runs are at least 60 s apart, so
# only a run forced in the last 5 s before a scheduled one is taken for that scheduled run
# (documented); a wider margin would take more forced runs for scheduled ones.
FORCED_RUN_TOLERANCE = timedelta(seconds=5)


def trigger_at(schedule_time: datetime, firestore_now: datetime) -> Trigger:
    """Which run a delivery carrying `schedule_time` is, seen by Firestore at `firestore_now`."""
    return Trigger.FORCED if schedule_time - firestore_now > FORCED_RUN_TOLERANCE else Trigger.SCHEDULED


class DeliveredRun:
    """The run one delivery is: guessed on the instance's clock, settled on Firestore's by the
    claim. `key` is the current verdict (the guess until `claim` returns or raises)."""

    def __init__(self, key: RunKey, instance_now: datetime) -> None:
        self.key = key.as_triggered(trigger_at(key.schedule_time, instance_now))

    @property
    def guessed_forced(self) -> bool:
        """Whether the instance's clock takes the delivery for a forced run: then the warm cache
        is not asked, since a clock running late would answer the scheduled run at that time
        from the forced run's memory, with no Firestore time to correct it."""
        return self.key.forced

    def claim(
        self,
        ledger: RunLedger,
        attempt_id: str,
        *,
        fingerprint: str,
        target: str,
        give_back: Callable[[Claim], None],
    ) -> Claim:
        """Claim the run the delivery is, on Firestore's clock: the guess first, then, if the
        Firestore time of that claim (or of the record that refused it) names the other identity,
        that one, which is final (a slow second claim must not flip a delivery back and forth).
        Raises what RunLedger.claim raises, for the settled identity. A claim under a guess the
        commit time contradicts is returned with `give_back` (the delivery's finisher: it writes
        every end of a claim)."""
        for settled in (False, True):
            try:
                claim = ledger.claim(self.key, attempt_id, fingerprint=fingerprint, target=target)
            except (RunAlreadyCompleted, RunInProgress) as refused:
                if settled or refused.read_time is None or self._confirmed_at(refused.read_time):
                    raise
                self._take_the_other()
                continue
            if settled or self._confirmed_at(claim.update_time):
                return claim
            # The guess was wrong: nothing ran under it, so give it back as it was found (with
            # the checkpoint it inherited) before claiming the other identity. Should the
            # give-back fail, the record waits out its lease; no delivery the Firestore clock
            # judges to be that run is left to run it.
            give_back(claim)
            self._take_the_other()
        raise AssertionError("unreachable: the second claim is final")

    def _confirmed_at(self, firestore_now: datetime) -> bool:
        return trigger_at(self.key.schedule_time, firestore_now) is self.key.trigger

    def _take_the_other(self) -> None:
        other = Trigger.SCHEDULED if self.key.forced else Trigger.FORCED
        self.key = self.key.as_triggered(other)
