"""The policy pack: its directory is what `pulumi policy publish` uploads (PulumiPolicy.yaml,
requirements.txt, `__main__.py`, the package `scheduler_guardrails`, its tests).

A package so the repository's root imports it: the program, the tools and the tests use
`policy.scheduler_guardrails`, whose rules the program validates its config with. Nothing in
the pack imports this name; __main__.py says how Pulumi loads the pack instead.
"""
