"""The guardrails a fork of this stack must not lose, as Pulumi policies.

Forkers change schedules, timeouts and IAM. Each policy here stops one way a fork could
silently lose or double runs, or open the function to the world. They are plain
`pulumi_policy` objects in `POLICIES`, so tests call them directly without the Pulumi CLI.

Every property is read through `_lookup`, which turns the engine's preview-time unknowns into
a value a check skips. Letting `UnknownValueError` escape would make the SDK skip the whole
policy (for a stack policy: every resource), so one unknown URI would hide a real violation.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import urlsplit

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

from infra import timing

# Engine type tokens (as passed to each pulumi_gcp resource's super().__init__).
SCHEDULER_JOB: Final = "gcp:cloudscheduler/job:Job"
FUNCTION_V2: Final = "gcp:cloudfunctionsv2/function:Function"
FUNCTION_V1: Final = "gcp:cloudfunctions/function:Function"
CLOUD_RUN_V2_SERVICE: Final = "gcp:cloudrunv2/service:Service"
BUCKET: Final = "gcp:storage/bucket:Bucket"
FIRESTORE_FIELD: Final = "gcp:firestore/field:Field"
PROJECT_IAM_MEMBER: Final = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING: Final = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY: Final = "gcp:projects/iAMPolicy:IAMPolicy"
_STORAGE_ACL_TYPES: Final = frozenset(
    {
        "gcp:storage/bucketACL:BucketACL",
        "gcp:storage/defaultObjectACL:DefaultObjectACL",
        "gcp:storage/objectACL:ObjectACL",
        "gcp:storage/bucketAccessControl:BucketAccessControl",
        "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl",
        "gcp:storage/objectAccessControl:ObjectAccessControl",
    }
)
_BUCKET_OBJECT: Final = "gcp:storage/bucketObject:BucketObject"

PACK_NAME: Final = "exactly-once-scheduler-guardrails"

# Principals that mean "anyone": the two legacy members and the IAM v2 principal set.
PUBLIC_PRINCIPALS: Final = frozenset({"allusers", "allauthenticatedusers", "principalset://goog/public:all"})
PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
CONDITIONAL_ROLES: Final = frozenset({"roles/datastore.user"})


class Holder(enum.Enum):
    """Which of the stack's own accounts may hold an allow-listed project role."""

    # serviceConfig.serviceAccountEmail of any Cloud Functions v2 function of the stack.
    FUNCTION_RUNTIME = "the runtime account of a function in this stack"
    # The same, but only of a function that runs the Workflows proxy (jobs.workflows) through
    # JOB_HANDLER or JOB_HANDLERS.
    WORKFLOWS_PROXY_RUNTIME = "the runtime account of a function whose JOB_HANDLER(S) use jobs.workflows"
    # buildConfig.serviceAccount of any Cloud Functions v2 function of the stack.
    FUNCTION_BUILD = "the build account (buildConfig.serviceAccount) of a function in this stack"


@dataclass(frozen=True)
class AllowedProjectRole:
    """A role the stack may grant project-wide: why it cannot be scoped, and to whom.

    `condition`, when set, is the only IAM condition expression the grant may carry (a full
    match): the role is allowed only as narrowed by it, never unconditioned or broader.
    """

    reason: str
    holder: Holder
    condition: re.Pattern[str] | None = None
    condition_shown: str = ""


# What infra/build.py grants the build account: object read on the one bucket Cloud Functions
# copies sources to (`gcf-v2-sources-<project number>-<region>`) or objects in it; both halves
# must name the same bucket.
GCF_SOURCES_CONDITION: Final = re.compile(
    r'^resource\.name == "projects/_/buckets/(?P<bucket>gcf-v2-sources-\d+-[a-z]+-[a-z]+\d+)" \|\| '
    r'resource\.name\.startsWith\("projects/_/buckets/(?P=bucket)/"\)$'
)


# The one list of roles the stack may grant project-wide, each with the reason it cannot be
# scoped to a single resource and the one kind of account that may hold it. Extend it here
# (and only here) when a feature needs one more.
PROJECT_ROLE_ALLOWLIST: Final[Mapping[str, AllowedProjectRole]] = MappingProxyType(
    {
        "roles/datastore.user": AllowedProjectRole(
            "the runtime account claims and finishes run records; Firestore has no per-database "
            "IAM resource, so the grant is project-wide with a condition naming the database",
            Holder.FUNCTION_RUNTIME,
        ),
        "roles/workflows.invoker": AllowedProjectRole(
            "the runtime account starts executions when a job goes through the Workflows proxy; "
            "Workflows has no per-workflow IAM resource",
            Holder.WORKFLOWS_PROXY_RUNTIME,
        ),
        "roles/logging.logWriter": AllowedProjectRole(
            "the build account writes the functions' build logs; Cloud Logging has no narrower IAM "
            "resource for writing log entries than the project",
            Holder.FUNCTION_BUILD,
        ),
        "roles/storage.objectViewer": AllowedProjectRole(
            "the build account fetches the source Cloud Functions copied to gcf-v2-sources-<project "
            "number>-<region>, a bucket that does not exist before the first deploy, so the grant "
            "sits on the project with a condition naming that bucket",
            Holder.FUNCTION_BUILD,
            condition=GCF_SOURCES_CONDITION,
            condition_shown=(
                'resource.name == "projects/_/buckets/gcf-v2-sources-<number>-<region>" || '
                'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-<number>-<region>/")'
            ),
        ),
    }
)
PROJECT_MEMBER_PREFIX: Final = "serviceAccount:"
WORKFLOWS_PROXY_MODULE: Final = "jobs.workflows"
TOKEN_CHECK_ENTRY_POINT: Final = "check_idempotency_token"
DEFAULT_IDEMPOTENCY_COLLECTION: Final = "idempotency_tokens"  # function/idempotency.py's default
# Environment switches of function/jobs/ meant for tests only (see the README's proxy section).
WORKFLOWS_ENDPOINT_ENV: Final = "WORKFLOWS_API_ENDPOINT"
ID_TOKEN_DISABLED_ENV: Final = "DOWNSTREAM_ID_TOKEN_DISABLED"

_DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")
_APP_ENGINE_DEFAULT_SA = re.compile(r"^[^@]+@appspot\.gserviceaccount\.com$")
_LEGACY_CLOUD_BUILD_SA = re.compile(r"^\d+@cloudbuild\.gserviceaccount\.com$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")

# Provider/service defaults used when a property is left out.
DEFAULT_ATTEMPT_DEADLINE_SECONDS: Final = 180.0  # Cloud Scheduler's default for HTTP targets
DEFAULT_FUNCTION_TIMEOUT_SECONDS: Final = 60.0  # Cloud Run functions' default timeout
DEFAULT_RUNS_COLLECTION: Final = "scheduler_runs"  # function/config.py's default
TTL_FIELD: Final = "expire_at"


# --- reading engine properties --------------------------------------------------------------


class Absent(enum.Enum):
    """Why a property has no usable value: left out (the service default applies), or not
    known until the update runs (preview), in which case every check on it is skipped."""

    MISSING = "missing"
    UNKNOWN = "unknown"


MISSING: Final = Absent.MISSING
UNKNOWN: Final = Absent.UNKNOWN

_UNKNOWN_SENTINELS: Final = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


def is_unknown_sentinel(value: Any) -> bool:
    """True for the strings the engine sends in place of values it cannot know in preview."""
    return isinstance(value, str) and value in _UNKNOWN_SENTINELS


def _lookup(props: Any, *path: str | int) -> Any:
    """The value at `path`, or MISSING (absent or null) or UNKNOWN (preview).

    Works on the SDK's unknown-checking proxies and on plain dicts alike.
    """
    value: Any = props
    for key in path:
        if value is UNKNOWN or is_unknown_sentinel(value):
            return UNKNOWN
        try:
            if isinstance(key, int):
                if not isinstance(value, Sequence) or isinstance(value, str):
                    return MISSING
                value = value[key]
            else:
                if not isinstance(value, Mapping):
                    return MISSING
                value = value[key]
        except (KeyError, IndexError):
            return MISSING
        except UnknownValueError:
            return UNKNOWN
    if value is None:
        return MISSING
    if is_unknown_sentinel(value):
        return UNKNOWN
    return value


def _elements(props: Any, *path: str) -> list[Any] | Absent:
    """The items of a list property (each possibly UNKNOWN), or why there are none."""
    value = _lookup(props, *path)
    if isinstance(value, Absent):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return [_lookup(value, index) for index in range(len(value))]


def _is_blank(value: Any) -> bool:
    return value is MISSING or (isinstance(value, str) and not value.strip())


def parse_duration_seconds(value: Any) -> float | None:
    """Seconds in a protobuf duration string ("60s", "3.5s") or a bare number; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return float(match[1])
    return None


def _as_number(value: Any) -> float | None:
    """A number the engine may send as int, float (protobuf) or numeric string (env vars)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _resource_policy(
    name: str,
    description: str,
    level: EnforcementLevel,
    types: Iterable[str] | Callable[[str], bool],
    check: Callable[[ResourceValidationArgs], Iterable[str]],
) -> ResourceValidationPolicy:
    """A policy that runs `check` on resources of the given types and reports each message."""
    applies = types if callable(types) else frozenset(types).__contains__

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if not applies(args.resource_type):
            return
        for message in check(args):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=level
    )


# --- Cloud Scheduler jobs -------------------------------------------------------------------


def _check_job_auth(args: ResourceValidationArgs) -> Iterable[str]:
    target = _lookup(args.props, "httpTarget")
    if isinstance(target, Absent):
        return  # Pub/Sub and App Engine targets carry no HTTP auth; unknown: skip.
    oidc = _lookup(target, "oidcToken")
    if oidc is UNKNOWN:
        return
    if oidc is MISSING:
        if _lookup(target, "oauthToken") is not MISSING:
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
    if _is_blank(_lookup(oidc, "serviceAccountEmail")):
        yield (
            f"Scheduler job '{args.name}': httpTarget.oidcToken.serviceAccountEmail is empty, so no token "
            "can be minted. Set it to the invoker service account that holds roles/run.invoker."
        )
    if _is_blank(_lookup(oidc, "audience")):
        yield (
            f"Scheduler job '{args.name}': httpTarget.oidcToken.audience is not set; the token would "
            "carry the full target URL, which the function rejects once the URI has a path or query. "
            "Set audience to the function's base URI."
        )


def _check_job_schedule_and_deadline(args: ResourceValidationArgs) -> Iterable[str]:
    schedule = _lookup(args.props, "schedule")
    if schedule is MISSING:
        yield (
            f"Scheduler job '{args.name}': property schedule is missing. Set a five-field unix-cron "
            "expression such as '*/5 * * * *'."
        )
    elif isinstance(schedule, str) and (error := timing.unix_cron_error(schedule)) is not None:
        yield (
            f"Scheduler job '{args.name}': property schedule: {error}. Use a five-field unix-cron "
            "expression such as '*/5 * * * *': only unix-cron runs carry X-CloudScheduler-ScheduleTime, "
            "which identifies the run."
        )

    deadline = _lookup(args.props, "attemptDeadline")
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


def _check_job_not_google_api(args: ResourceValidationArgs) -> Iterable[str]:
    uri = _lookup(args.props, "httpTarget", "uri")
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
            "jobs.workflows:start_workflow_execution (see README, 'Idempotent proxy')."
        )


# --- public principals ----------------------------------------------------------------------


def _is_iam_type(resource_type: str) -> bool:
    """IAM member, binding and policy resources of every GCP service (bucket, function, run...)."""
    kind = resource_type.rsplit(":", 1)[-1].lower()
    return resource_type.startswith("gcp:") and kind.endswith(("iammember", "iambinding", "iampolicy"))


def _is_public(member: Any) -> bool:
    return isinstance(member, str) and member.strip().lower() in PUBLIC_PRINCIPALS


@dataclass(frozen=True)
class _Grant:
    """One (role, members, condition) triple however the resource spells it."""

    role: Any
    members: list[Any]
    condition: Any
    where: str


def _grants(props: Mapping[str, Any]) -> Iterable[_Grant]:
    """Every grant an IAM resource makes: `member`, `members`, or the bindings of `policyData`."""
    role = _lookup(props, "role")
    condition = _lookup(props, "condition")
    member = _lookup(props, "member")
    if member is not MISSING:
        yield _Grant(role, [member], condition, "member")
    members = _elements(props, "members")
    if isinstance(members, list):
        yield _Grant(role, members, condition, "members")
    policy_data = _lookup(props, "policyData")
    if isinstance(policy_data, str):
        try:
            parsed = json.loads(policy_data)
        except json.JSONDecodeError:
            return
        bindings = parsed.get("bindings", []) if isinstance(parsed, dict) else []
        for index, binding in enumerate(bindings if isinstance(bindings, list) else []):
            if isinstance(binding, dict):
                raw_members = binding.get("members") or []
                yield _Grant(
                    binding.get("role", MISSING),
                    list(raw_members) if isinstance(raw_members, list) else [],
                    binding.get("condition") or MISSING,
                    f"policyData.bindings[{index}]",
                )


def _check_no_public_principals(args: ResourceValidationArgs) -> Iterable[str]:
    fix = "Grant the role to a specific principal (e.g. serviceAccount:<invoker>) instead."
    if _is_iam_type(args.resource_type):
        for grant in _grants(args.props):
            for member in grant.members:
                if _is_public(member):
                    role = grant.role if isinstance(grant.role, str) else "a role"
                    yield (
                        f"{args.resource_type} '{args.name}' grants {role} to the public principal "
                        f"'{member}' in property {grant.where}: anyone could call or read the resource. {fix}"
                    )
    elif args.resource_type in _STORAGE_ACL_TYPES:
        for prop in ("roleEntities", "entity"):
            entries = _elements(args.props, prop)
            for entry in entries if isinstance(entries, list) else []:
                principal = entry.rsplit(":", 1)[-1] if isinstance(entry, str) else entry
                if _is_public(principal):
                    yield (
                        f"{args.resource_type} '{args.name}': property {prop} gives '{entry}' access to "
                        f"bucket data. Remove the ACL entry and enable uniformBucketLevelAccess. {fix}"
                    )
    elif args.resource_type == _BUCKET_OBJECT:
        acl = _lookup(args.props, "predefinedAcl")
        if isinstance(acl, str) and acl.lower().startswith("public"):
            yield (
                f"Bucket object '{args.name}': property predefinedAcl '{acl}' makes the object public. "
                "Remove predefinedAcl; the bucket's uniform IAM decides access."
            )
    elif args.resource_type == CLOUD_RUN_V2_SERVICE and _lookup(args.props, "invokerIamDisabled") is True:
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


def _check_dedicated_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = _service_account_property(args.resource_type)
    account = _lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN:
        return  # a new account's email is only known after it is created
    if _is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so it runs as the project's "
            "default compute account (Editor on the whole project). Set it to the dedicated runtime "
            "service account."
        )
    elif isinstance(account, str) and (
        _DEFAULT_COMPUTE_SA.match(account.strip()) or _APP_ENGINE_DEFAULT_SA.match(account.strip())
    ):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is the default service account "
            f"'{account}', which holds broad project roles. Set it to the dedicated runtime service account."
        )


def _account_email(value: str) -> str:
    """The email in a service account reference: `projects/<p>/serviceAccounts/<email>` or bare."""
    return value.strip().rsplit("/", 1)[-1].lower()


def _check_build_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = (
        ("buildConfig", "serviceAccount") if args.resource_type == FUNCTION_V2 else ("buildServiceAccount",)
    )
    account = _lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN or (
        args.resource_type == FUNCTION_V2 and _lookup(args.props, "buildConfig") is UNKNOWN
    ):
        return
    fix = (
        "Set it to a dedicated build account (projects/<p>/serviceAccounts/<email>) holding only "
        "roles/logging.logWriter, roles/artifactregistry.writer on the image repository and "
        "roles/storage.objectViewer on the source bucket."
    )
    if _is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so Cloud Build builds the "
            f"function as its default identity: in new projects the default compute account (Editor). {fix}"
        )
    elif isinstance(account, str):
        email = _account_email(account)
        if (
            _DEFAULT_COMPUTE_SA.match(email)
            or _LEGACY_CLOUD_BUILD_SA.match(email)
            or _APP_ENGINE_DEFAULT_SA.match(email)
        ):
            yield (
                f"{args.resource_type} '{args.name}': property {prop} '{account}' is a default account "
                f"with broad project roles. {fix}"
            )


def _check_ingress(args: ResourceValidationArgs) -> Iterable[str]:
    if args.resource_type == CLOUD_RUN_V2_SERVICE:
        path: tuple[str, ...] = ("ingress",)
        open_values = {"INGRESS_TRAFFIC_ALL"}
        fix = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    else:
        v2 = args.resource_type == FUNCTION_V2
        path = ("serviceConfig", "ingressSettings") if v2 else ("ingressSettings",)
        open_values = {"ALLOW_ALL"}
        fix = "ALLOW_INTERNAL_ONLY"
    if args.resource_type == FUNCTION_V2 and _lookup(args.props, "serviceConfig") is UNKNOWN:
        return
    ingress = _lookup(args.props, *path)
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
        return _lookup(props, "serviceConfig", "environmentVariables", variable)
    if resource_type == FUNCTION_V1:
        return _lookup(props, "environmentVariables", variable)
    containers = _elements(props, "template", "containers")
    if containers is UNKNOWN:
        return UNKNOWN
    found: Any = MISSING
    for container in containers if isinstance(containers, list) else []:
        envs = _elements(container, "envs")
        if envs is UNKNOWN:
            found = UNKNOWN
        for env in envs if isinstance(envs, list) else []:
            name = _lookup(env, "name")
            if name is UNKNOWN:
                found = UNKNOWN
            elif name == variable:
                return _lookup(env, "value")
    return found


def _check_no_test_switches(args: ResourceValidationArgs) -> Iterable[str]:
    endpoint = _env_of(args.resource_type, args.props, WORKFLOWS_ENDPOINT_ENV)
    if isinstance(endpoint, str) and endpoint.strip().lower().startswith("http://"):
        yield (
            f"{args.resource_type} '{args.name}': environment variable {WORKFLOWS_ENDPOINT_ENV}="
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


# --- roles ----------------------------------------------------------------------------------


def _check_no_primitive_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not _is_iam_type(args.resource_type):
        return
    for grant in _grants(args.props):
        if isinstance(grant.role, str) and grant.role in PRIMITIVE_ROLES:
            yield (
                f"{args.resource_type} '{args.name}': role {grant.role} ({grant.where}) is a primitive role "
                "that covers nearly every service in the project. Grant the narrowest predefined role "
                "instead (roles/run.invoker, roles/datastore.user with a condition, ...)."
            )


def _check_conditional_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not _is_iam_type(args.resource_type):
        return
    for grant in _grants(args.props):
        if not (isinstance(grant.role, str) and grant.role in CONDITIONAL_ROLES):
            continue
        if grant.condition is UNKNOWN:
            continue
        expression = _lookup(grant.condition, "expression")
        if expression is UNKNOWN:
            continue
        if _is_blank(expression):
            yield (
                f"{args.resource_type} '{args.name}': {grant.role} ({grant.where}) has no condition, so it "
                "reaches every Firestore database in the project. Add condition {title, expression} "
                "limiting it to this database, e.g. "
                "resource.name.startsWith('projects/<project>/databases/<database>')."
            )


def _check_project_iam_allowlist(args: ResourceValidationArgs) -> Iterable[str]:
    allowed = ", ".join(sorted(PROJECT_ROLE_ALLOWLIST))
    if args.resource_type in (PROJECT_IAM_BINDING, PROJECT_IAM_POLICY):
        yield (
            f"{args.resource_type} '{args.name}' is authoritative for the whole project and would remove "
            "grants this stack does not own. Use gcp.projects.IAMMember, and only for the allow-listed "
            f"roles ({allowed}), or grant on the resource itself."
        )
        return
    role = _lookup(args.props, "role")
    member = _lookup(args.props, "member")
    if isinstance(role, str) and role not in PROJECT_ROLE_ALLOWLIST:
        yield (
            f"Project IAM member '{args.name}': role {role} is granted project-wide, but only {allowed} may "
            "be. Grant it on the specific resource (service, bucket, ...) instead, or add the role with "
            "its reason to PROJECT_ROLE_ALLOWLIST in policy/policies.py."
        )
    if isinstance(member, str) and not member.startswith(PROJECT_MEMBER_PREFIX):
        yield (
            f"Project IAM member '{args.name}': member '{member}' is not a service account; project-wide "
            f"grants are for the stack's own accounts only. Use a '{PROJECT_MEMBER_PREFIX}<email>' member."
        )
    allowed_role = PROJECT_ROLE_ALLOWLIST.get(role) if isinstance(role, str) else None
    if allowed_role is not None and allowed_role.condition is not None:
        expression = _lookup(args.props, "condition", "expression")
        if expression is UNKNOWN:
            return
        if not (isinstance(expression, str) and allowed_role.condition.match(expression.strip())):
            shown = "has no condition" if _is_blank(expression) else f"has condition '{expression}'"
            yield (
                f"Project IAM member '{args.name}': {role} {shown}, but it may be granted project-wide only "
                f"with exactly the condition {allowed_role.condition_shown} ({allowed_role.reason})."
            )


# --- buckets --------------------------------------------------------------------------------


def _check_bucket_private(args: ResourceValidationArgs) -> Iterable[str]:
    prevention = _lookup(args.props, "publicAccessPrevention")
    if prevention is MISSING or (isinstance(prevention, str) and prevention != "enforced"):
        shown = "is not set (inherited)" if prevention is MISSING else f"is '{prevention}'"
        yield (
            f"Bucket '{args.name}': property publicAccessPrevention {shown}, so a later IAM or ACL change "
            "could publish the function source. Set publicAccessPrevention to 'enforced'."
        )
    uniform = _lookup(args.props, "uniformBucketLevelAccess")
    if uniform is MISSING or uniform is False:
        yield (
            f"Bucket '{args.name}': property uniformBucketLevelAccess is not true, so per-object ACLs can "
            "grant access that bucket IAM does not show. Set uniformBucketLevelAccess to true."
        )


# --- stack: runs collection TTL -------------------------------------------------------------


def _resources_of(resources: Iterable[PolicyResource], resource_type: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type == resource_type]


def _env(function: PolicyResource, variable: str) -> Any:
    return _lookup(function.props, "serviceConfig", "environmentVariables", variable)


def _field_problems(field: PolicyResource) -> list[str]:
    """Why this expire_at Field does not give the runs collection a working TTL (empty: it does)."""
    problems: list[str] = []
    if _lookup(field.props, "ttlConfig") is MISSING:
        problems.append("ttlConfig is missing, so expired run records are never deleted (set ttlConfig: {})")
    index_config = _lookup(field.props, "indexConfig")
    if index_config is MISSING:
        problems.append(
            "indexConfig is missing, so expire_at keeps Firestore's default single-field indexes "
            "(a monotonically increasing timestamp: write hot-spots); set indexConfig: {} to exempt it"
        )
    else:
        indexes = _elements(index_config, "indexes")
        if isinstance(indexes, list) and indexes:
            problems.append(
                f"indexConfig lists {len(indexes)} index(es); remove them so {TTL_FIELD} is exempt "
                "from indexing"
            )
    return problems


def _is_token_check(function: PolicyResource) -> bool:
    """The token-check function: same source as the dedup function, another entry point. It
    is not a scheduler target and keeps no run records."""
    return bool(_lookup(function.props, "buildConfig", "entryPoint") == TOKEN_CHECK_ENTRY_POINT)


def _ledger_functions(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    """Cloud Functions v2 that may be scheduler targets and keep run records."""
    return [f for f in _resources_of(resources, FUNCTION_V2) if not _is_token_check(f)]


def _missing_ttl_collections(
    fields: list[PolicyResource], collections: Iterable[str | None]
) -> list[str | None]:
    """The collections (None: "some collection") no expire_at Field covers."""
    return [
        collection
        for collection in collections
        if not any(
            collection is None or _lookup(f.props, "collection") in (collection, UNKNOWN) for f in fields
        )
    ]


def _ttl_fields(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    return [
        f
        for f in _resources_of(resources, FIRESTORE_FIELD)
        if _lookup(f.props, "field") in (TTL_FIELD, UNKNOWN)
    ]


def _validate_runs_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    functions = _ledger_functions(args.resources)
    if not functions and not _resources_of(args.resources, SCHEDULER_JOB):
        return  # no run ledger in this stack
    collections: set[str] = set()
    for function in functions:
        collection = _env(function, "RUNS_COLLECTION")
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is MISSING:
            collections.add(DEFAULT_RUNS_COLLECTION)
    ttl_fields = _ttl_fields(args.resources)
    for field in ttl_fields:
        for problem in _field_problems(field):
            report_violation(f"Firestore field '{field.name}' ({TTL_FIELD}): {problem}.", field.urn)

    wanted: list[str | None] = [*sorted(collections)] if collections else [None]
    for collection in _missing_ttl_collections(ttl_fields, wanted):
        name = f"'{collection}'" if collection else "of run records"
        shown = repr(collection or "<runs collection>")
        report_violation(
            f"The runs collection {name} has no TTL field: without it run records are kept forever. "
            f"Add gcp.firestore.Field(collection={shown}, field='{TTL_FIELD}', "
            "ttl_config={}, index_config={}).",
            None,
        )


def _validate_idempotency_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Token records expire like run records; the field's own problems (ttlConfig, indexes) are
    reported once, by runs-collection-ttl, which checks every expire_at Field."""
    collections: set[str] = set()
    unknown = False
    for function in _resources_of(args.resources, FUNCTION_V2):
        if not _is_token_check(function):
            continue
        collection = _env(function, "IDEMPOTENCY_COLLECTION")
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is UNKNOWN:
            unknown = True
        else:
            collections.add(DEFAULT_IDEMPOTENCY_COLLECTION)  # what the function falls back to
    wanted: list[str | None] = [*sorted(collections)]
    if unknown and not collections:
        wanted = [None]
    for collection in _missing_ttl_collections(_ttl_fields(args.resources), wanted):
        shown = repr(collection or "<IDEMPOTENCY_COLLECTION>")
        report_violation(
            f"The token check deploys, but its collection {shown} has no TTL field: token records "
            f"would be kept forever. Add gcp.firestore.Field(collection={shown}, field='{TTL_FIELD}', "
            "ttl_config={}, index_config={}).",
            None,
        )


# --- stack: who holds the project-wide roles ------------------------------------------------


def _handler_specs(function: PolicyResource) -> list[str] | Absent:
    """Every module:callable a function may run (JOB_HANDLER and JOB_HANDLERS' values)."""
    specs: list[str] = []
    single = _env(function, "JOB_HANDLER")
    table = _env(function, "JOB_HANDLERS")
    if single is UNKNOWN or table is UNKNOWN:
        return Absent.UNKNOWN
    if isinstance(single, str):
        specs.append(single)
    if isinstance(table, str):
        try:
            parsed = json.loads(table)
        except json.JSONDecodeError:
            parsed = {}
        if isinstance(parsed, dict):
            specs.extend(v for v in parsed.values() if isinstance(v, str))
    return specs


def _uses_workflows_proxy(function: PolicyResource) -> bool | Absent:
    specs = _handler_specs(function)
    if isinstance(specs, Absent):
        return specs
    return any(spec.split(":")[0].strip() == WORKFLOWS_PROXY_MODULE for spec in specs)


def _holder_accounts(holder: Holder, resources: list[PolicyResource]) -> set[str] | Absent:
    """Emails (lower-case) of the stack's accounts that may hold a role, or UNKNOWN when some
    account or handler is not known in preview (then nothing is reported)."""
    emails: set[str] = set()
    for function in _resources_of(resources, FUNCTION_V2):
        if holder is Holder.FUNCTION_BUILD:
            build_account = _lookup(function.props, "buildConfig", "serviceAccount")
            if build_account is UNKNOWN:
                return Absent.UNKNOWN
            if isinstance(build_account, str) and build_account.strip():
                emails.add(_account_email(build_account))
            continue
        if holder is Holder.WORKFLOWS_PROXY_RUNTIME:
            uses = _uses_workflows_proxy(function)
            if uses is UNKNOWN:
                return UNKNOWN
            if uses is not True:
                continue
        account = _lookup(function.props, "serviceConfig", "serviceAccountEmail")
        if account is UNKNOWN:
            return Absent.UNKNOWN
        if isinstance(account, str) and account.strip():
            emails.add(account.strip().lower())
    return emails


def _validate_project_role_holders(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = list(args.resources)
    for grant in _resources_of(resources, PROJECT_IAM_MEMBER):
        role, member = _lookup(grant.props, "role"), _lookup(grant.props, "member")
        allowed = PROJECT_ROLE_ALLOWLIST.get(role) if isinstance(role, str) else None
        if allowed is None or not isinstance(member, str) or not member.startswith(PROJECT_MEMBER_PREFIX):
            continue  # unknown, or reported by project-iam-allowlist
        holders = _holder_accounts(allowed.holder, resources)
        if holders is UNKNOWN or not isinstance(holders, set):
            continue
        email = member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()
        if email in holders:
            continue
        found = ", ".join(sorted(holders)) if holders else "none in this stack"
        report_violation(
            f"Project IAM member '{grant.name}': {role} is granted project-wide to '{member}', but only "
            f"{allowed.holder.value} may hold it (found: {found}). Remove the grant, or grant it to "
            "that account only; a job that no longer uses the feature needs no grant at all.",
            grant.urn,
        )


# --- stack: timing invariants ---------------------------------------------------------------

# Reported per resource, with that resource's URN, by scheduler-job-schedule-and-deadline.
_RULES_CHECKED_PER_RESOURCE: Final = frozenset({"unix-cron", "attempt-deadline-range"})

_FIELD_PROPERTIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "schedule": "Job.schedule",
        "attempt_deadline_seconds": "Job.attemptDeadline",
        "function_timeout_seconds": "Function.serviceConfig.timeoutSeconds",
        "lease_seconds": "Function.serviceConfig.environmentVariables.LEASE_SECONDS",
        "retention_seconds": "Function.serviceConfig.environmentVariables.RETENTION_SECONDS",
        "retry.retry_count": "Job.retryConfig.retryCount",
        "retry.min_backoff_seconds": "Job.retryConfig.minBackoffDuration",
        "retry.max_backoff_seconds": "Job.retryConfig.maxBackoffDuration",
        "retry.max_doublings": "Job.retryConfig.maxDoublings",
        "retry.max_retry_duration_seconds": "Job.retryConfig.maxRetryDuration",
    }
)

_RULE_FIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "function-timeout-range": "set serviceConfig.timeoutSeconds between 1 and 3600",
        "retry-count-range": "set retryConfig.retryCount between 0 and 5",
        "backoff-range": "set 0 < retryConfig.minBackoffDuration <= retryConfig.maxBackoffDuration",
        "retry-non-negative": "make retryConfig.maxDoublings and maxRetryDuration zero or positive",
        "lease-covers-timeout": (
            "raise LEASE_SECONDS to at least the function timeout (the stack uses timeout + 10s)"
        ),
        "retry-outlives-lease": (
            "raise retryConfig.retryCount, minBackoffDuration or maxDoublings so the last retry arrives "
            "after the lease, or lower LEASE_SECONDS (never below the function timeout)"
        ),
        "retention-outlives-retries": (
            "raise RETENTION_SECONDS past the latest retry, or shorten the retry window"
        ),
        "deadline-matches-timeout": "set attemptDeadline to serviceConfig.timeoutSeconds",
        "retries-fit-schedule": (
            "schedule the job less often, or lower retryConfig.retryCount, the backoffs or attemptDeadline"
        ),
    }
)


@dataclass(frozen=True)
class _JobPlan:
    """A job paired with its function and the timing read from both, or the reasons it can't be."""

    job: PolicyResource
    function: PolicyResource | None
    timing: timing.JobTiming | None
    problems: tuple[str, ...] = ()


def _function_for(job: PolicyResource, functions: list[PolicyResource]) -> PolicyResource | None:
    """The function a job calls: by URI, then by engine dependency, then the only function."""
    uri = _lookup(job.props, "httpTarget", "uri")
    if isinstance(uri, str):
        for function in functions:
            for path in (("url",), ("serviceConfig", "uri")):
                if _same_endpoint(uri, _lookup(function.props, *path)):
                    return function
    dependency_urns = {d.urn for d in job.dependencies}
    for deps in job.property_dependencies.values():
        dependency_urns.update(d.urn for d in deps)
    linked = [f for f in functions if f.urn in dependency_urns]
    if len(linked) == 1:
        return linked[0]
    return functions[0] if len(functions) == 1 else None


def _same_endpoint(uri: str, base: Any) -> bool:
    """True when `uri` is `base` or a path/query below it."""
    if not isinstance(base, str) or not base:
        return False
    base = base.rstrip("/")
    return uri == base or uri.startswith((base + "/", base + "?"))


def _seconds_or_problem(value: Any, default: float, prop: str) -> float | str | Absent:
    """Seconds for a duration property, the default when missing, UNKNOWN, or a problem text."""
    if value is MISSING:
        return default
    if value is UNKNOWN:
        return Absent.UNKNOWN
    seconds: float | None = parse_duration_seconds(value)
    if seconds is None:
        return f"property {prop} {value!r} is not a duration; write it like '10s'"
    return seconds


def _plan(job: PolicyResource, functions: list[PolicyResource]) -> _JobPlan | None:
    """Build JobTiming for one job, or None when something it needs is unknown in preview."""
    function = _function_for(job, functions)
    if function is None:
        return _JobPlan(job, None, None)
    props = job.props
    problems: list[str] = []
    values: dict[str, float] = {}

    deadline = _lookup(props, "attemptDeadline")
    if deadline is UNKNOWN:
        return None
    deadline_seconds = (
        DEFAULT_ATTEMPT_DEADLINE_SECONDS if deadline is MISSING else parse_duration_seconds(deadline)
    )
    if deadline_seconds is None:
        return None  # not a duration: reported by scheduler-job-schedule-and-deadline
    values["attempt_deadline_seconds"] = deadline_seconds

    retry_props = _lookup(props, "retryConfig")
    if retry_props is UNKNOWN:
        return None
    defaults = timing.RetryConfig()
    for key, prop, default in (
        ("min_backoff_seconds", "minBackoffDuration", defaults.min_backoff_seconds),
        ("max_backoff_seconds", "maxBackoffDuration", defaults.max_backoff_seconds),
        ("max_retry_duration_seconds", "maxRetryDuration", defaults.max_retry_duration_seconds),
    ):
        result = _seconds_or_problem(_lookup(retry_props, prop), default, f"retryConfig.{prop}")
        if result is UNKNOWN:
            return None
        if isinstance(result, str):
            problems.append(result)
        elif isinstance(result, float):
            values[key] = result
    counts: dict[str, int] = {}
    for key, prop, int_default in (
        ("retry_count", "retryCount", defaults.retry_count),
        ("max_doublings", "maxDoublings", defaults.max_doublings),
    ):
        raw = _lookup(retry_props, prop)
        if raw is UNKNOWN:
            return None
        number = float(int_default) if raw is MISSING else _as_number(raw)
        if number is None or number != int(number):
            problems.append(f"property retryConfig.{prop} {raw!r} is not a whole number")
        else:
            counts[key] = int(number)

    service = _lookup(function.props, "serviceConfig")
    if service is UNKNOWN:
        return None
    timeout = _lookup(service, "timeoutSeconds")
    if timeout is UNKNOWN:
        return None
    timeout_seconds = DEFAULT_FUNCTION_TIMEOUT_SECONDS if timeout is MISSING else _as_number(timeout)
    if timeout_seconds is None:
        problems.append(f"function property serviceConfig.timeoutSeconds {timeout!r} is not a number")
    for key, variable in (("lease_seconds", "LEASE_SECONDS"), ("retention_seconds", "RETENTION_SECONDS")):
        raw = _env(function, variable)
        if raw is UNKNOWN:
            return None
        number = None if raw is MISSING else _as_number(raw)
        if number is None:
            shown = "is not set" if raw is MISSING else f"{raw!r} is not a number of seconds"
            problems.append(
                f"function property serviceConfig.environmentVariables.{variable} {shown}; set it explicitly "
                "so the timing can be checked"
            )
        else:
            values[key] = number

    if problems or timeout_seconds is None:
        return _JobPlan(job, function, None, tuple(problems))
    schedule = _lookup(props, "schedule")
    job_timing = timing.JobTiming(
        schedule=schedule if isinstance(schedule, str) else "",
        attempt_deadline_seconds=values["attempt_deadline_seconds"],
        function_timeout_seconds=timeout_seconds,
        lease_seconds=values["lease_seconds"],
        retention_seconds=values["retention_seconds"],
        retry=timing.RetryConfig(
            retry_count=counts["retry_count"],
            max_retry_duration_seconds=values["max_retry_duration_seconds"],
            min_backoff_seconds=values["min_backoff_seconds"],
            max_backoff_seconds=values["max_backoff_seconds"],
            max_doublings=counts["max_doublings"],
        ),
    )
    return _JobPlan(job, function, job_timing)


def _timing_message(plan: _JobPlan, violation: timing.Violation) -> str:
    assert plan.function is not None
    properties = ", ".join(_FIELD_PROPERTIES.get(field, field) for field in violation.fields)
    fix = _RULE_FIXES.get(violation.rule, "change the listed properties until the rule holds")
    return (
        f"Scheduler job '{plan.job.name}' -> function '{plan.function.name}' [{violation.rule}]: "
        f"{violation.message}. Properties: {properties}. Fix: {fix}."
    )


def _timing_validator(advisory: bool) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """One validator per enforcement level: a stack policy has a single level, and a fork must be
    able to silence advisories without silencing the rules that protect runs."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        functions = _ledger_functions(args.resources)
        for job in _resources_of(args.resources, SCHEDULER_JOB):
            plan = _plan(job, functions)
            if plan is None:
                continue  # an input is unknown during preview: checked on the update
            if plan.function is None:
                if advisory and functions:
                    report_violation(
                        f"Scheduler job '{job.name}': cannot tell which of {len(functions)} functions its "
                        "httpTarget.uri calls, so its timing was not checked. Point httpTarget.uri at the "
                        "function's url output.",
                        job.urn,
                    )
                continue
            if not advisory:
                for problem in plan.problems:
                    where = f"Scheduler job '{job.name}' -> function '{plan.function.name}'"
                    report_violation(f"{where}: {problem}.", job.urn)
            if plan.timing is None:
                continue
            for violation in timing.check_job_timing(plan.timing):
                if violation.advisory == advisory and violation.rule not in _RULES_CHECKED_PER_RESOURCE:
                    report_violation(_timing_message(plan, violation), job.urn)

    return validate


# --- the pack -------------------------------------------------------------------------------

_MANDATORY = EnforcementLevel.MANDATORY
_ADVISORY = EnforcementLevel.ADVISORY

POLICIES: Final[list[ResourceValidationPolicy | StackValidationPolicy]] = [
    _resource_policy(
        "scheduler-job-oidc-auth",
        "Cloud Scheduler HTTP jobs authenticate with an OIDC token that names its audience.",
        _MANDATORY,
        [SCHEDULER_JOB],
        _check_job_auth,
    ),
    _resource_policy(
        "scheduler-job-schedule-and-deadline",
        "Cloud Scheduler jobs use a unix-cron schedule and an attempt deadline within 15s..30min.",
        _MANDATORY,
        [SCHEDULER_JOB],
        _check_job_schedule_and_deadline,
    ),
    _resource_policy(
        "scheduler-job-no-direct-google-api",
        "Cloud Scheduler jobs never call *.googleapis.com directly; they go through the dedup proxy.",
        _MANDATORY,
        [SCHEDULER_JOB],
        _check_job_not_google_api,
    ),
    _resource_policy(
        "no-public-principals",
        "No allUsers / allAuthenticatedUsers on functions, Cloud Run services or buckets.",
        _MANDATORY,
        lambda t: _is_iam_type(t) or t in _STORAGE_ACL_TYPES or t in (_BUCKET_OBJECT, CLOUD_RUN_V2_SERVICE),
        _check_no_public_principals,
    ),
    _resource_policy(
        "function-dedicated-service-account",
        "Functions run as a dedicated service account, never the default compute account.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        _check_dedicated_service_account,
    ),
    _resource_policy(
        "function-build-service-account",
        "Functions build as a dedicated account, never Cloud Build's default (compute) identity.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1],
        _check_build_service_account,
    ),
    _resource_policy(
        "function-ingress-restricted",
        "Function ingress is internal-only unless a scheduler in another project needs allow-all.",
        _ADVISORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        _check_ingress,
    ),
    _resource_policy(
        "function-no-test-switches",
        "Deployed functions set neither a plaintext WORKFLOWS_API_ENDPOINT nor DOWNSTREAM_ID_TOKEN_DISABLED.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        _check_no_test_switches,
    ),
    _resource_policy(
        "no-primitive-roles",
        "No primitive roles (owner, editor, viewer) in any IAM grant.",
        _MANDATORY,
        _is_iam_type,
        _check_no_primitive_roles,
    ),
    _resource_policy(
        "datastore-user-conditional",
        "roles/datastore.user grants carry an IAM condition limiting them to one database.",
        _MANDATORY,
        _is_iam_type,
        _check_conditional_roles,
    ),
    _resource_policy(
        "project-iam-allowlist",
        "Project-wide grants only for allow-listed roles, only to service accounts, never authoritative.",
        _MANDATORY,
        [PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING, PROJECT_IAM_POLICY],
        _check_project_iam_allowlist,
    ),
    _resource_policy(
        "source-bucket-private",
        "Buckets enforce public access prevention and uniform bucket-level access.",
        _MANDATORY,
        [BUCKET],
        _check_bucket_private,
    ),
    StackValidationPolicy(
        name="runs-collection-ttl",
        description="The runs collection has a TTL on expire_at, exempt from indexing.",
        validate=_validate_runs_ttl,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="idempotency-collection-ttl",
        description="When the token check is deployed, its collection has a TTL on expire_at.",
        validate=_validate_idempotency_ttl,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="project-role-holders",
        description="Each allow-listed project role is held only by the account it is listed for.",
        validate=_validate_project_role_holders,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="scheduler-timing-invariants",
        description="Lease, retries and retention fit together so no run is lost or doubled.",
        validate=_timing_validator(advisory=False),
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="scheduler-timing-advisories",
        description="Attempt deadline matches the function timeout; every job's function is identifiable.",
        validate=_timing_validator(advisory=True),
        enforcement_level=_ADVISORY,
    ),
]
