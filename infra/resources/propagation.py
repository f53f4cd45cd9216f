"""The pauses a first deploy needs: Google applies some changes minutes after the call returns.

`depends_on` orders resources by when their create call *returned*. Three kinds of Google Cloud
change are in effect only later, and whatever uses them at once fails:

* **Enabled APIs.** The provider waits until Service Usage lists an API as enabled, not until
  the API serves. Firestore, Artifact Registry and IAM are off in a new project, and their first
  calls can answer 403 "... has not been used in project ... before or it is disabled. If you
  enabled this API recently, wait a few minutes for the action to propagate to our systems".
* **IAM grants.** Google's IAM documentation: a change "typically propagates in 2 minutes, but
  could potentially take 7 minutes or longer". A build that starts first fails with
  "Access to bucket gcf-v2-sources-... denied". Google's own builder sample waited 60 s and
  failed about half of the time; its later samples wait 120 s.
* **Log-based metrics.** Cloud Logging has the metric at once, but Cloud Monitoring refuses an
  alert policy on its type with 404 "Cannot find metric(s) that match type ... it could take
  up to 10 minutes to become available". The provider retries only on 409, so the 404 fails
  the update.

Each pause is a `pulumiverse_time.Sleep` whose `triggers` name what it waits for: it sleeps
when it is created (a first deploy, a new stack, a stack brought up again after `pulumi
destroy`) and again when a trigger changes (a newly enabled API, a replaced account, a renamed
metric); an unchanged stack never waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumiverse_time as time

from infra.resources.durations import duration

# After the enabled APIs, before any resource of the Firestore, Artifact Registry and IAM APIs
# (the stack's database, image repository and accounts, and so everything built on them).
# Google says only "a few minutes"; the calls that meet a 403 fail the update, so this covers
# the usual propagation, as the IAM pauses do, rather than the worst case.
API_ACTIVATION_DELAY_SECONDS = 120
# Before a function's first build: the build account's grants. A build that fails here costs
# a whole `pulumi up` again, so the pause covers IAM's typical 2 minutes with a margin, above
# the 120 s of Google's later samples.
BUILD_GRANTS_DELAY_SECONDS = 180
# Before the first scheduled run: the serving grants (invoker, Firestore, Workflows). Shorter,
# because a run that meets a 403 is not lost at once: Cloud Scheduler retries it with the
# job's backoff, and a later retry normally finds the grant in effect.
SERVING_GRANTS_DELAY_SECONDS = 60
# Before a function with secrets is deployed: the runtime account's secretAccessor grants.
# Cloud Run checks, when it deploys the revision, that the account may read each secret, and
# a check that fails fails the whole update, as a build does: no retry covers it. So the
# same length as the build's pause, not the serving one's.
SECRET_GRANTS_DELAY_SECONDS = 180
# Before the alert policies: the log-based metrics they reference. Google gives no typical
# time, only "up to 10 minutes": this bets on the usual case, not the worst. A policy that
# still meets the 404 fails the update; the next `pulumi up` creates it (no new pause then).
METRIC_TYPES_DELAY_SECONDS = 180


@dataclass(frozen=True)
class Pause:
    """One pause of the stack: the end of its resource name ("<prefix>-<suffix>"), its length,
    and whether every stack has it or only one whose jobs reference secrets."""

    suffix: str
    seconds: int
    only_with_secrets: bool = False


API_ACTIVATION = Pause("api-propagation", API_ACTIVATION_DELAY_SECONDS)
BUILD_GRANTS = Pause("build-grants-propagation", BUILD_GRANTS_DELAY_SECONDS)
SECRET_GRANTS = Pause("runtime-grants-propagation", SECRET_GRANTS_DELAY_SECONDS, only_with_secrets=True)
SERVING_GRANTS = Pause("serving-grants-propagation", SERVING_GRANTS_DELAY_SECONDS)
METRIC_TYPES = Pause("metric-types-propagation", METRIC_TYPES_DELAY_SECONDS)
# Every pause a stack can have: `pause_after` declares no other, and the docs count these.
PAUSES = (API_ACTIVATION, BUILD_GRANTS, SECRET_GRANTS, SERVING_GRANTS, METRIC_TYPES)


def pause_after(
    prefix: str,
    pause: Pause,
    after: Sequence[pulumi.Resource],
    triggers: Mapping[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> time.Sleep:
    """`pause` (named "<prefix>-<its suffix>") after `after` are created, slept again when
    `triggers` change.

    `opts` carries the parent and any further dependencies; the pause is never protected or
    retained, so `pulumi destroy` removes it and the next `pulumi up` sleeps again.
    """
    if pause not in PAUSES:
        raise ValueError(f"{pause.suffix}: not one of PAUSES, which the docs count")
    return time.Sleep(
        f"{prefix}-{pause.suffix}",
        create_duration=duration(pause.seconds),
        triggers=dict(triggers),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(after))),
    )
