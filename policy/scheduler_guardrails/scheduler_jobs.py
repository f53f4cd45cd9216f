"""What one Cloud Scheduler job must say for its runs to be told apart and reach the function.

- scheduler-job-oidc-auth: the job calls with an OIDC token that names its audience, the only
  token a Cloud Run function accepts;
- scheduler-job-schedule-and-deadline: a unix-cron schedule (only those runs carry
  X-CloudScheduler-ScheduleTime, which identifies the run) that names a day that exists, and
  an attempt deadline within Cloud Scheduler's range;
- scheduler-job-no-direct-google-api: a Google API ignores the run's identity, so every retry
  would repeat the call; such jobs go through the dedup proxy;
- scheduler-job-body-accepted: the body is one the function accepts, or the job never runs
  (rules/config/delivery_body.py, which the stack's config is checked with too).

How a job's retries fit its function's lease and timeout is the timing rules' (timing/).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pulumi_policy import ResourceValidationArgs

import exactly_once

from .engine.props import MISSING, UNKNOWN, Absent, is_blank, lookup, parse_duration_seconds
from .rules.config.delivery_body import body_problems, max_body_bytes
from .rules.config.problems import SettingsError
from .rules.timing import cron
from .rules.timing import rules as timing

# The source root of the function's package as the pack's virtualenv has it (policy/requirements.txt
# pins the function's distribution): the body limit is read from the function it was released with.
FUNCTION_SOURCE: Final = Path(exactly_once.__file__).resolve().parents[1]


def check_job_auth(args: ResourceValidationArgs) -> Iterable[str]:
    target = lookup(args.props, "httpTarget")
    if isinstance(target, Absent):
        return  # Pub/Sub and App Engine targets carry no HTTP auth; unknown: skip.
    oidc = lookup(target, "oidcToken")
    if oidc is UNKNOWN:
        return
    if oidc is MISSING:
        if lookup(target, "oauthToken") is not MISSING:
            yield (
                f"Scheduler job '{args.name}': httpTarget.oauthToken is set, but a Cloud Run function "
                "only accepts an OIDC identity token. Replace it with httpTarget.oidcToken "
                "{serviceAccountEmail: <invoker account>, audience: <function URI>}."
            )
        else:
            yield (
                f"Scheduler job '{args.name}' calls its target without authentication: "
                "httpTarget.oidcToken is missing. Set httpTarget.oidcToken with serviceAccountEmail = the "
                "dedicated invoker account and audience = the function URI."
            )
        return
    if is_blank(lookup(oidc, "serviceAccountEmail")):
        yield (
            f"Scheduler job '{args.name}': httpTarget.oidcToken.serviceAccountEmail is empty, so no token "
            "can be minted. Set it to the invoker service account that holds roles/run.invoker."
        )
    if is_blank(lookup(oidc, "audience")):
        yield (
            f"Scheduler job '{args.name}': httpTarget.oidcToken.audience is not set; the token would "
            "carry the full target URL, which the function rejects once the URI has a path or query. "
            "Set audience to the function's base URI."
        )


def check_job_schedule_and_deadline(args: ResourceValidationArgs) -> Iterable[str]:
    schedule = lookup(args.props, "schedule")
    if schedule is MISSING:
        yield (
            f"Scheduler job '{args.name}': property schedule is missing. Set a five-field unix-cron "
            "expression such as '*/5 * * * *'."
        )
    elif isinstance(schedule, str) and (error := cron.unix_cron_error(schedule)) is not None:
        yield (
            f"Scheduler job '{args.name}': property schedule: {error}. Use a five-field unix-cron "
            "expression that fires, such as '*/5 * * * *': only unix-cron runs carry "
            "X-CloudScheduler-ScheduleTime, which identifies the run."
        )

    deadline = lookup(args.props, "attemptDeadline")
    if isinstance(deadline, Absent):
        return  # the default (180s) is in range; unknown: skip
    seconds = parse_duration_seconds(deadline)
    low, high = timing.MIN_ATTEMPT_DEADLINE_SECONDS, timing.MAX_ATTEMPT_DEADLINE_SECONDS
    if seconds is None:
        yield (
            f"Scheduler job '{args.name}': property attemptDeadline {deadline!r} is not a duration. "
            f"Write it in seconds with an 's' suffix, e.g. '60s', between {low:g}s and {high:g}s."
        )
    elif not low <= seconds <= high:
        yield (
            f"Scheduler job '{args.name}': property attemptDeadline {deadline!r} is outside Cloud "
            f"Scheduler's HTTP range {low:g}s..{high:g}s. Set it within the range, equal to the "
            "function timeout."
        )


def check_job_not_google_api(args: ResourceValidationArgs) -> Iterable[str]:
    uri = lookup(args.props, "httpTarget", "uri")
    if not isinstance(uri, str):
        return  # not an HTTP job, or unknown in preview
    try:
        host = (urlsplit(uri.strip()).hostname or "").lower().rstrip(".")
    except ValueError:
        return
    if host == "googleapis.com" or host.endswith(".googleapis.com"):
        yield (
            f"Scheduler job '{args.name}': httpTarget.uri '{uri}' calls a Google API directly; the API "
            "ignores X-CloudScheduler-ScheduleTime, so every retry repeats the call (e.g. starts "
            "another workflow execution). Route it through the dedup proxy: point the job at the "
            "function URI and run it with a job handler that starts the work once per run (a target "
            "kind's proxy or your own; see docs/proxy.md)."
        )


def check_job_body(args: ResourceValidationArgs) -> Iterable[str]:
    body = lookup(args.props, "httpTarget", "body")
    if not isinstance(body, str):
        return  # no body, not an HTTP job, or unknown in preview
    try:
        sent = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        yield (
            f"Scheduler job '{args.name}': httpTarget.body is not base64, which is how Cloud Scheduler "
            "takes a body. Encode the JSON body with base64."
        )
        return
    try:
        limit = max_body_bytes(FUNCTION_SOURCE)
    except SettingsError as error:
        yield f"Scheduler job '{args.name}': httpTarget.body cannot be checked: {error}."
        return
    for problem in body_problems(sent, limit):
        yield f"Scheduler job '{args.name}': httpTarget.body: {problem}."
