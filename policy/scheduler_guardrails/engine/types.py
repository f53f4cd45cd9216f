"""The engine's type tokens for the resources the pack reads, and how to pick them out.

A token is what each pulumi_gcp resource passes to its super().__init__; a policy sees only
that string, so every rule names a resource kind through these constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pulumi_policy import PolicyResource

SCHEDULER_JOB: Final = "gcp:cloudscheduler/job:Job"
FUNCTION_V2: Final = "gcp:cloudfunctionsv2/function:Function"
FUNCTION_V1: Final = "gcp:cloudfunctions/function:Function"
CLOUD_RUN_V2_SERVICE: Final = "gcp:cloudrunv2/service:Service"
CLOUD_RUN_V2_JOB: Final = "gcp:cloudrunv2/job:Job"
BUCKET: Final = "gcp:storage/bucket:Bucket"
BUCKET_OBJECT: Final = "gcp:storage/bucketObject:BucketObject"
FIRESTORE_FIELD: Final = "gcp:firestore/field:Field"
SERVICE_ACCOUNT: Final = "gcp:serviceaccount/account:Account"
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


def is_iam_type(resource_type: str) -> bool:
    """IAM member, binding and policy resources of every GCP service (bucket, function, run...)."""
    kind = resource_type.rsplit(":", 1)[-1].lower()
    return resource_type.startswith("gcp:") and kind.endswith(("iammember", "iambinding", "iampolicy"))


def resources_of(resources: Iterable[PolicyResource], resource_type: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type == resource_type]
