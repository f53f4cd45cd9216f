"""runtime-account-grants: what a job may be given beyond the ledger, checked against the one
list the stack grants from (rules/config/access.py's GRANT_KINDS).

Every grant to a function's runtime account is either one of the allow-listed project roles
(allowlist.py) or an IAM member on one resource of a kind in GRANT_KINDS, with a role listed
for that kind. Cloud Run admin/developer and BigQuery roles beyond job creation are refused
project-wide with a reason, and so are roles broader than a kind lists (a dataset's
dataOwner, a job's admin), authoritative bindings and grants on folders or the organization.
"""

from __future__ import annotations

from typing import Any, Final

from pulumi_policy import ReportViolation, StackValidationArgs

from ..engine.grants import PROJECT_MEMBER_PREFIX, iam_grants
from ..engine.props import Absent
from ..engine.types import PROJECT_IAM_BINDING, PROJECT_IAM_MEMBER, PROJECT_IAM_POLICY, is_iam_type
from ..rules.config.access import GRANT_KINDS, KINDS_BY_TYPE
from .holders import runtime_accounts

# Project-wide roles a runtime account is told, by name, it may not hold: what a Cloud Run job
# target or a BigQuery target needs is granted on the job or the dataset instead.
_ON_THE_JOB: Final = "roles/run.jobsExecutorWithOverrides and roles/run.viewer on the one Cloud Run job"
_PER_DATASET: Final = "roles/bigquery.jobUser on the project and dataViewer/dataEditor per dataset"
_NARROWER: Final = {
    "roles/run.admin": _ON_THE_JOB,
    "roles/run.developer": _ON_THE_JOB,
    "roles/run.invoker": f"{_ON_THE_JOB}, or roles/run.invoker on the one service",
    "roles/bigquery.admin": _PER_DATASET,
    "roles/bigquery.user": _PER_DATASET,
    "roles/bigquery.dataOwner": "roles/bigquery.dataEditor on the datasets the job writes",
    "roles/bigquery.dataEditor": "roles/bigquery.dataEditor on the datasets the job writes",
    "roles/bigquery.dataViewer": "roles/bigquery.dataViewer on the datasets the job reads",
    "roles/secretmanager.secretAccessor": "roles/secretmanager.secretAccessor on each secret",
}
_KINDS_SHOWN: Final = ", ".join(kind.key for kind in GRANT_KINDS)


def validate_runtime_grants(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = list(args.resources)
    accounts = runtime_accounts(resources)
    if isinstance(accounts, Absent):
        return  # some runtime account is not known yet (preview): nothing can be judged
    for resource in resources:
        if not is_iam_type(resource.resource_type) or resource.resource_type in (
            PROJECT_IAM_BINDING,
            PROJECT_IAM_POLICY,
        ):
            continue  # project-wide authoritative grants: project-iam-allowlist refuses them
        for grant in iam_grants(resource.props):
            held = [m for m in grant.members if _email(m) in accounts]
            if not held or not isinstance(grant.role, str):
                continue
            message = _judge(resource.resource_type, resource.name, grant.role, held[0])
            if message:
                report_violation(message, resource.urn)


def _email(member: Any) -> str | None:
    if not isinstance(member, str) or not member.startswith(PROJECT_MEMBER_PREFIX):
        return None
    return member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()


def _judge(resource_type: str, name: str, role: str, member: str) -> str | None:
    who = f"the runtime account '{member}'"
    if resource_type == PROJECT_IAM_MEMBER:
        if role in _NARROWER:
            return (
                f"Project IAM member '{name}': {role} project-wide for {who} reaches every Cloud Run job, "
                f"dataset or secret of the project. Grant {_NARROWER[role]} instead (a job's cloudRunJob, "
                "bigquery, secrets or grants settings do)."
            )
        return None  # other project roles: project-iam-allowlist and project-role-holders
    kind = KINDS_BY_TYPE.get(resource_type)
    if kind is None:
        return (
            f"{resource_type} '{name}' grants {role} to {who}, but the runtime account is granted roles "
            f"only as IAM members on one resource of a kind the stack lists ({_KINDS_SHOWN}; "
            "rules/config/access.py GRANT_KINDS): never authoritatively, never on a folder or the "
            "organization."
        )
    if role not in kind.roles:
        return (
            f"{resource_type} '{name}' grants {role} to {who} on a {kind.key}, more than a job needs (it "
            f"may change the resource or who has access). Allowed: {', '.join(sorted(kind.roles))}."
        )
    return None
