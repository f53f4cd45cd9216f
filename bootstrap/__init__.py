"""The one-time setup a fork runs by hand so its GitHub Actions can deploy without keys.

A separate Pulumi project (see Pulumi.yaml beside this file and docs/ci.md): a Workload
Identity pool trusting only the fork's repository, the deployer service account the workflows
impersonate, and optionally a private bucket and a KMS key for a self-managed Pulumi backend.
"""
