"""What keeps the function, its source and its data from the public.

- no-public-principals: no grant, ACL or switch gives anyone (allUsers, allAuthenticatedUsers,
  the public principal set) a function, Cloud Run service or bucket;
- function-ingress-restricted (advisory): the endpoint is reachable only from inside the
  project's network, unless a scheduler in another project needs allow-all;
- source-bucket-private: buckets enforce public access prevention and uniform access, so a
  later grant cannot publish the function source.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from pulumi_policy import ResourceValidationArgs

from .engine.grants import iam_grants
from .engine.props import MISSING, UNKNOWN, elements, lookup
from .engine.types import BUCKET_OBJECT, CLOUD_RUN_V2_SERVICE, FUNCTION_V2, STORAGE_ACL_TYPES, is_iam_type

# Principals that mean "anyone": the two legacy members and the IAM v2 principal set.
PUBLIC_PRINCIPALS: Final = frozenset({"allusers", "allauthenticatedusers", "principalset://goog/public:all"})


def is_public(member: Any) -> bool:
    return isinstance(member, str) and member.strip().lower() in PUBLIC_PRINCIPALS


# --- public principals ----------------------------------------------------------------------


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


# --- ingress --------------------------------------------------------------------------------


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
