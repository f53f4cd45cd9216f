"""The keys `Pulumi.yaml` declares and their types (`schema.py`), the run ledger's keys, Google
Cloud's rules for labels and the stack's own label, and where the repository is (`paths.py`).

The vocabulary the policy pack shares (a job's access, names, handlers, bodies, grants, who may
deploy, how a problem is reported) is policy/scheduler_guardrails/rules/config/. No Pulumi and
no stack-wide view: infra/settings/ assembles these into a stack's settings.
"""
