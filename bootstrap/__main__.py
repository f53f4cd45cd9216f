"""Entry point of the bootstrap project (`cd bootstrap && pulumi up -s ci`), run once by hand.

Pulumi runs this file with bootstrap/ as its directory, so the repository root is put on
sys.path first: the deployer's roles come from policy/scheduler_guardrails/rules/config/deployer_roles.py,
the list the main
stack's deploy docs are written from.
"""

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

import pulumi  # noqa: E402

from bootstrap.config import settings_from_pulumi_config  # noqa: E402
from bootstrap.github_deployer import GithubDeployer  # noqa: E402

deployer = GithubDeployer("ci", settings_from_pulumi_config())

# The GitHub repository variables (docs/ci.md): GCP_WORKLOAD_IDENTITY_PROVIDER,
# GCP_DEPLOYER_SERVICE_ACCOUNT (deploy.yml) and GCP_PREVIEWER_SERVICE_ACCOUNT (preview.yml).
pulumi.export("workloadIdentityProvider", deployer.workload_identity_provider)
pulumi.export("deployerServiceAccount", deployer.deployer_email)
pulumi.export("previewerServiceAccount", deployer.previewer_email)
if deployer.state_bucket_url is not None:
    pulumi.export("stateBucketUrl", deployer.state_bucket_url)
if deployer.secrets_provider is not None:
    pulumi.export("secretsProvider", deployer.secrets_provider)
