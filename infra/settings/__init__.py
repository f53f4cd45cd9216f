"""A stack's settings: `StackSettings` (typed values, already validated), the `jobs` list,
loading and checking a stack's config (loading.py), what the settings put in the functions'
environments (environment.py) and the timing rules phrased with config keys.

No Pulumi SDK (but from_pulumi.py, the program's reader of `pulumi.Config`): the local
scheduler, `ops`, `make check` and the policy tests load stacks through loading.py, which reads
a stack's config as `pulumi up` resolves it (stack_config.py: through the Pulumi CLI where it is
on PATH, else from the YAML files).
"""
