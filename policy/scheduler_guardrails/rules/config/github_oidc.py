"""GitHub Actions' OIDC subjects, as bootstrap/ binds them and the policy pack recognises them.

GitHub writes the job's context into the token's `sub` claim (its default format):

| The job | `sub` |
| --- | --- |
| names an environment | `repo:<owner>/<repo>:environment:<environment>` |
| runs for a pull request, no environment | `repo:<owner>/<repo>:pull_request` |
| runs for a push to a branch or tag, no environment | `repo:<owner>/<repo>:ref:<ref>` |

The pool maps `google.subject` to `sub`, so one principal names exactly one of these:
`principal://iam.googleapis.com/<pool>/subject/<sub>`. A subject says nothing of the branch
for an environment's jobs; the provider's attribute condition adds that (bootstrap/settings.py).
Standard library only: the pack imports it in its own virtualenv.
"""

from __future__ import annotations

import enum
import re
from typing import Final

WORKLOAD_IDENTITY_USER: Final = "roles/iam.workloadIdentityUser"
# The longest `google.subject` Workload Identity Federation accepts: a token whose mapped
# subject is longer is refused at the exchange, so every workflow run of it fails to sign in.
GOOGLE_SUBJECT_MAX_LENGTH: Final = 127

# Any principal of a workload identity pool: one subject, or a set (an attribute, the pool).
_POOL_PRINCIPAL: Final = re.compile(
    r"^principal(?:Set)?://iam\.googleapis\.com/projects/[^/]+/locations/global/workloadIdentityPools/[^/]+/"
    r"(?P<rest>.+)$"
)
_REPOSITORY = r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+"
_ENVIRONMENT_SUBJECT: Final = re.compile(rf"^subject/repo:{_REPOSITORY}:environment:[^/:]+$")
_PULL_REQUEST_SUBJECT: Final = re.compile(rf"^subject/repo:{_REPOSITORY}:pull_request$")


def environment_subject(repository: str, environment: str) -> str:
    return f"repo:{repository}:environment:{environment}"


def pull_request_subject(repository: str) -> str:
    return f"repo:{repository}:pull_request"


def subject_principal(pool_name: str, subject: str) -> str:
    """The one principal whose token has `sub` == `subject` (pool_name: the pool's full name)."""
    return f"principal://iam.googleapis.com/{pool_name}/subject/{subject}"


class Reach(enum.Enum):
    """Which workflow runs a workload identity principal admits."""

    # Jobs of one repository's deployment environment: what the CI deployer is bound to.
    ENVIRONMENT = "an environment's jobs"
    # Pull request jobs of one repository, naming no environment: the CI previewer.
    PULL_REQUEST = "pull request jobs"
    # Anything broader: a branch, a whole repository, an attribute, the whole pool.
    BROADER = "any branch's jobs"


def reach(member: str) -> Reach | None:
    """What `member` admits, or None when it is no workload identity pool principal."""
    match = _POOL_PRINCIPAL.match(member.strip())
    if match is None:
        return None
    rest = match.group("rest")
    if _ENVIRONMENT_SUBJECT.match(rest):
        return Reach.ENVIRONMENT
    if _PULL_REQUEST_SUBJECT.match(rest):
        return Reach.PULL_REQUEST
    return Reach.BROADER
