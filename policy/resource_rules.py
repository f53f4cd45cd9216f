"""Policies that judge one resource at a time: jobs, public principals, function identity and
ingress, buckets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pulumi_policy import (
    ResourceValidationArgs,
)

from exactly_once.targets.endpoints import ENDPOINT_VARIABLES
from infra.timing import cron
from infra.timing import rules as timing
from policy.props import (
    APP_ENGINE_DEFAULT_SA,
    BUCKET_OBJECT,
    CLOUD_RUN_V2_SERVICE,
    DEFAULT_COMPUTE_SA,
    FUNCTION_V1,
    FUNCTION_V2,
    ID_TOKEN_DISABLED_ENV,
    LEGACY_CLOUD_BUILD_SA,
    MISSING,
    STORAGE_ACL_TYPES,
    UNKNOWN,
    Absent,
    account_email,
    elements,
    iam_grants,
    is_blank,
    is_iam_type,
    is_public,
    lookup,
    parse_duration_seconds,
)

# --- Cloud Scheduler jobs -------------------------------------------------------------------


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
            "expression such as '*/5 * * * *': only unix-cron runs carry X-CloudScheduler-ScheduleTime, "
            "which identifies the run."
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
            "function URI and run it with a proxy job handler such as "
            "jobs.workflows:start_workflow_execution (see docs/proxy.md)."
        )


def check_no_public_principals(args: ResourceValidationArgs) -> Iterable[str]:
    fix = "Grant the role to a specific principal (e.g. serviceAccount:<invoker>) instead."
    if is_iam_type(args.resource_type):
        for grant in iam_grants(args.props):
            for member in grant.members:
                if is_public(member):
                    role = grant.role if isinstance(grant.role, str) else "a role"
                    yield (
                        f"{args.resource_type} '{args.name}' grants {role} to the public principal "
                        f"'{member}' in property {grant.where}: anyone could call or read the resource. {fix}"
                    )
    elif args.resource_type in STORAGE_ACL_TYPES:
        for prop in ("roleEntities", "entity"):
            entries = elements(args.props, prop)
            for entry in entries if isinstance(entries, list) else []:
                principal = entry.rsplit(":", 1)[-1] if isinstance(entry, str) else entry
                if is_public(principal):
                    yield (
                        f"{args.resource_type} '{args.name}': property {prop} gives '{entry}' access to "
                        f"bucket data. Remove the ACL entry and enable uniformBucketLevelAccess. {fix}"
                    )
    elif args.resource_type == BUCKET_OBJECT:
        acl = lookup(args.props, "predefinedAcl")
        if isinstance(acl, str) and acl.lower().startswith("public"):
            yield (
                f"Bucket object '{args.name}': property predefinedAcl '{acl}' makes the object public. "
                "Remove predefinedAcl; the bucket's uniform IAM decides access."
            )
    elif args.resource_type == CLOUD_RUN_V2_SERVICE and lookup(args.props, "invokerIamDisabled") is True:
        yield (
            f"Cloud Run service '{args.name}': property invokerIamDisabled is true, so anyone can invoke "
            "it without a token. Remove it and grant roles/run.invoker to the scheduler's invoker account."
        )


# --- function identity and ingress ----------------------------------------------------------


def _service_account_property(resource_type: str) -> tuple[str, ...]:
    if resource_type == FUNCTION_V2:
        return ("serviceConfig", "serviceAccountEmail")
    if resource_type == CLOUD_RUN_V2_SERVICE:
        return ("template", "serviceAccount")
    return ("serviceAccountEmail",)


def check_dedicated_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = _service_account_property(args.resource_type)
    account = lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN:
        return  # a new account's email is only known after it is created
    if is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so it runs as the project's "
            "default compute account (Editor on the whole project). Set it to the dedicated runtime "
            "service account."
        )
    elif isinstance(account, str) and (
        DEFAULT_COMPUTE_SA.match(account.strip()) or APP_ENGINE_DEFAULT_SA.match(account.strip())
    ):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is the default service account "
            f"'{account}', which holds broad project roles. Set it to the dedicated runtime service account."
        )


def check_build_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = (
        ("buildConfig", "serviceAccount") if args.resource_type == FUNCTION_V2 else ("buildServiceAccount",)
    )
    account = lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN or (
        args.resource_type == FUNCTION_V2 and lookup(args.props, "buildConfig") is UNKNOWN
    ):
        return
    fix = (
        "Set it to a dedicated build account (projects/<p>/serviceAccounts/<email>) holding only "
        "roles/logging.logWriter, roles/artifactregistry.writer on the image repository and "
        "roles/storage.objectViewer on the source bucket."
    )
    if is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so Cloud Build builds the "
            f"function as its default identity: in new projects the default compute account (Editor). {fix}"
        )
    elif isinstance(account, str):
        email = account_email(account)
        if (
            DEFAULT_COMPUTE_SA.match(email)
            or LEGACY_CLOUD_BUILD_SA.match(email)
            or APP_ENGINE_DEFAULT_SA.match(email)
        ):
            yield (
                f"{args.resource_type} '{args.name}': property {prop} '{account}' is a default account "
                f"with broad project roles. {fix}"
            )


def check_ingress(args: ResourceValidationArgs) -> Iterable[str]:
    if args.resource_type == CLOUD_RUN_V2_SERVICE:
        path: tuple[str, ...] = ("ingress",)
        open_values = {"INGRESS_TRAFFIC_ALL"}
        fix = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    else:
        v2 = args.resource_type == FUNCTION_V2
        path = ("serviceConfig", "ingressSettings") if v2 else ("ingressSettings",)
        open_values = {"ALLOW_ALL"}
        fix = "ALLOW_INTERNAL_ONLY"
    if args.resource_type == FUNCTION_V2 and lookup(args.props, "serviceConfig") is UNKNOWN:
        return
    ingress = lookup(args.props, *path)
    if ingress is UNKNOWN:
        return
    prop = ".".join(path)
    if ingress is MISSING or (isinstance(ingress, str) and ingress in open_values):
        shown = "is not set (defaults to allow-all)" if ingress is MISSING else f"is {ingress}"
        yield (
            f"{args.resource_type} '{args.name}': property {prop} {shown}, so the endpoint is reachable "
            f"from the internet (IAM still applies). Set it to {fix}; Cloud Scheduler in the same "
            "project counts as internal. Keep allow-all only for a scheduler in another project."
        )


def _env_of(resource_type: str, props: Any, variable: str) -> Any:
    """A function's or Cloud Run service's environment variable: value, MISSING or UNKNOWN."""
    if resource_type == FUNCTION_V2:
        return lookup(props, "serviceConfig", "environmentVariables", variable)
    if resource_type == FUNCTION_V1:
        return lookup(props, "environmentVariables", variable)
    containers = elements(props, "template", "containers")
    if containers is UNKNOWN:
        return UNKNOWN
    found: Any = MISSING
    for container in containers if isinstance(containers, list) else []:
        envs = elements(container, "envs")
        if envs is UNKNOWN:
            found = UNKNOWN
        for env in envs if isinstance(envs, list) else []:
            name = lookup(env, "name")
            if name is UNKNOWN:
                found = UNKNOWN
            elif name == variable:
                return lookup(env, "value")
    return found


def check_no_test_switches(args: ResourceValidationArgs) -> Iterable[str]:
    for variable in ENDPOINT_VARIABLES:
        endpoint = _env_of(args.resource_type, args.props, variable)
        if isinstance(endpoint, str) and endpoint.strip().lower().startswith("http://"):
            yield (
                f"{args.resource_type} '{args.name}': environment variable {variable}="
                f"'{endpoint}' is the tests' plaintext endpoint without credentials. Remove it (the "
                "library default is right), or give host[:port] / https://host[:port]."
            )
    disabled = _env_of(args.resource_type, args.props, ID_TOKEN_DISABLED_ENV)
    if disabled is not MISSING and disabled is not UNKNOWN:
        yield (
            f"{args.resource_type} '{args.name}': environment variable {ID_TOKEN_DISABLED_ENV} is set "
            f"('{disabled}'); it is a test-only switch that sends downstream calls without an ID token. "
            "Remove it from deployed functions."
        )


# --- buckets --------------------------------------------------------------------------------


def check_bucket_private(args: ResourceValidationArgs) -> Iterable[str]:
    prevention = lookup(args.props, "publicAccessPrevention")
    if prevention is MISSING or (isinstance(prevention, str) and prevention != "enforced"):
        shown = "is not set (inherited)" if prevention is MISSING else f"is '{prevention}'"
        yield (
            f"Bucket '{args.name}': property publicAccessPrevention {shown}, so a later IAM or ACL change "
            "could publish the function source. Set publicAccessPrevention to 'enforced'."
        )
    uniform = lookup(args.props, "uniformBucketLevelAccess")
    if uniform is MISSING or uniform is False:
        yield (
            f"Bucket '{args.name}': property uniformBucketLevelAccess is not true, so per-object ACLs can "
            "grant access that bucket IAM does not show. Set uniformBucketLevelAccess to true."
        )
