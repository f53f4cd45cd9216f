"""A stack's settings: `StackSettings` (typed values, already validated), the `jobs` list,
loading and checking a stack's config (loading.py), what the settings put in the functions'
environments (environment.py) and the timing rules phrased with config keys.

No Pulumi (but from_pulumi.py, the program's reader of `pulumi.Config`): the local scheduler,
`ops` and the policy tests load stacks straight from the YAML files through loading.py.
"""
