"""The config's vocabulary: the keys `Pulumi.yaml` declares and their types, a job's `env`,
`secrets` and `grants`, the run ledger's keys, the names the stack chooses, whether a handler
exists in function/ and whether a job's body is one the function accepts; who holds which role
on what (`grants.py`, the stack's accounts' and the CI accounts'); who may deploy (the
deployer's and the CI previewer's roles, GitHub's OIDC subjects). Each parser reports every
problem with the config key to edit.

No Pulumi and no stack-wide view: infra/settings/ assembles these into a stack's settings.
"""
