"""The config's vocabulary the program and the pack share: a job's `env`, `secrets` and
`grants` (`access.py`), the names the stack chooses, whether a handler exists in the function's
source and whether a job's body is one the function accepts; who holds which role on what
(`grants.py`, the stack's accounts' and the CI accounts'); who may deploy (the deployer's and
the CI previewer's roles, GitHub's OIDC subjects); how a problem is reported (`problems.py`).

The keys `Pulumi.yaml` declares, the ledger's keys and the stack's labels are the program's
alone: infra/config/.
"""
