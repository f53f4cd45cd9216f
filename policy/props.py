"""Reading engine properties, and the type tokens and defaults every policy shares.

Every property is read through `lookup`, which turns the engine's preview-time unknowns into
a value a check skips. Letting `UnknownValueError` escape would make the SDK skip the whole
policy (for a stack policy: every resource), so one unknown URI would hide a real violation.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
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

from exactly_once.targets.job_specs import BIGQUERY_HANDLER

# Engine type tokens (as passed to each pulumi_gcp resource's super().__init__).
SCHEDULER_JOB: Final = "gcp:cloudscheduler/job:Job"
FUNCTION_V2: Final = "gcp:cloudfunctionsv2/function:Function"
FUNCTION_V1: Final = "gcp:cloudfunctions/function:Function"
CLOUD_RUN_V2_SERVICE: Final = "gcp:cloudrunv2/service:Service"
CLOUD_RUN_V2_JOB: Final = "gcp:cloudrunv2/job:Job"
BUCKET: Final = "gcp:storage/bucket:Bucket"
FIRESTORE_FIELD: Final = "gcp:firestore/field:Field"
PROJECT_IAM_MEMBER: Final = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING: Final = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY: Final = "gcp:projects/iAMPolicy:IAMPolicy"
STORAGE_ACL_TYPES: Final = frozenset(
    {
        "gcp:storage/bucketACL:BucketACL",
        "gcp:storage/defaultObjectACL:DefaultObjectACL",
        "gcp:storage/objectACL:ObjectACL",
        "gcp:storage/bucketAccessControl:BucketAccessControl",
        "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl",
        "gcp:storage/objectAccessControl:ObjectAccessControl",
    }
)
BUCKET_OBJECT: Final = "gcp:storage/bucketObject:BucketObject"

PACK_NAME: Final = "exactly-once-scheduler-guardrails"

# Principals that mean "anyone": the two legacy members and the IAM v2 principal set.
PUBLIC_PRINCIPALS: Final = frozenset({"allusers", "allauthenticatedusers", "principalset://goog/public:all"})
PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
CONDITIONAL_ROLES: Final = frozenset({"roles/datastore.user"})

PROJECT_MEMBER_PREFIX: Final = "serviceAccount:"
WORKFLOWS_PROXY_MODULE: Final = "jobs.workflows"
BIGQUERY_PROXY_MODULE: Final = BIGQUERY_HANDLER.split(":")[0]
TOKEN_CHECK_ENTRY_POINT: Final = "check_idempotency_token"
# Environment switches of function/jobs/ meant for tests only (docs/proxy.md), besides the
# proxies' endpoint overrides (exactly_once/targets/endpoints.py: plaintext only on loopback).
ID_TOKEN_DISABLED_ENV: Final = "DOWNSTREAM_ID_TOKEN_DISABLED"

DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")
APP_ENGINE_DEFAULT_SA = re.compile(r"^[^@]+@appspot\.gserviceaccount\.com$")
LEGACY_CLOUD_BUILD_SA = re.compile(r"^\d+@cloudbuild\.gserviceaccount\.com$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")

# Provider/service defaults used when a property is left out.
DEFAULT_ATTEMPT_DEADLINE_SECONDS: Final = 180.0  # Cloud Scheduler's default for HTTP targets
DEFAULT_FUNCTION_TIMEOUT_SECONDS: Final = 60.0  # Cloud Run functions' default timeout
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


def lookup(props: Any, *path: str | int) -> Any:
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


def elements(props: Any, *path: str) -> list[Any] | Absent:
    """The items of a list property (each possibly UNKNOWN), or why there are none."""
    value = lookup(props, *path)
    if isinstance(value, Absent):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return [lookup(value, index) for index in range(len(value))]


def is_blank(value: Any) -> bool:
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


def as_number(value: Any) -> float | None:
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


def resource_policy(
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


# --- public principals ----------------------------------------------------------------------


def is_iam_type(resource_type: str) -> bool:
    """IAM member, binding and policy resources of every GCP service (bucket, function, run...)."""
    kind = resource_type.rsplit(":", 1)[-1].lower()
    return resource_type.startswith("gcp:") and kind.endswith(("iammember", "iambinding", "iampolicy"))


def is_public(member: Any) -> bool:
    return isinstance(member, str) and member.strip().lower() in PUBLIC_PRINCIPALS


@dataclass(frozen=True)
class IamGrant:
    """One (role, members, condition) triple however the resource spells it."""

    role: Any
    members: list[Any]
    condition: Any
    where: str


def iam_grants(props: Mapping[str, Any]) -> Iterable[IamGrant]:
    """Every grant an IAM resource makes: `member`, `members`, or the bindings of `policyData`."""
    role = lookup(props, "role")
    condition = lookup(props, "condition")
    member = lookup(props, "member")
    if member is not MISSING:
        yield IamGrant(role, [member], condition, "member")
    members = elements(props, "members")
    if isinstance(members, list):
        yield IamGrant(role, members, condition, "members")
    policy_data = lookup(props, "policyData")
    if isinstance(policy_data, str):
        try:
            parsed = json.loads(policy_data)
        except json.JSONDecodeError:
            return
        bindings = parsed.get("bindings", []) if isinstance(parsed, dict) else []
        for index, binding in enumerate(bindings if isinstance(bindings, list) else []):
            if isinstance(binding, dict):
                raw_members = binding.get("members") or []
                yield IamGrant(
                    binding.get("role", MISSING),
                    list(raw_members) if isinstance(raw_members, list) else [],
                    binding.get("condition") or MISSING,
                    f"policyData.bindings[{index}]",
                )


def account_email(value: str) -> str:
    """The email in a service account reference: `projects/<p>/serviceAccounts/<email>` or bare."""
    return value.strip().rsplit("/", 1)[-1].lower()


def resources_of(resources: Iterable[PolicyResource], resource_type: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type == resource_type]


def function_env(function: PolicyResource, variable: str) -> Any:
    return lookup(function.props, "serviceConfig", "environmentVariables", variable)


def function_env_entry(function: PolicyResource, variable: str, key: Any) -> float | str | Absent:
    """The number under `key` in a function's JSON-object variable (JOB_TIME_LIMITS: seconds
    by the Scheduler job id the function receives); MISSING when the variable or the entry is
    absent, UNKNOWN in preview, or a problem text for a malformed value."""
    raw = function_env(function, variable)
    if raw is MISSING:
        return Absent.MISSING
    if raw is UNKNOWN or key is UNKNOWN:
        return Absent.UNKNOWN
    try:
        entries = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        entries = None
    shown = f"function property serviceConfig.environmentVariables.{variable}"
    if not isinstance(entries, dict):
        return f"{shown} {raw!r} is not a JSON object of numbers by job"
    if key not in entries:
        return Absent.MISSING
    number = as_number(entries[key])
    return number if number is not None else f"{shown}[{key!r}] {entries[key]!r} is not a number of seconds"
