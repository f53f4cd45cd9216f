"""The rules a stack is held to, written once for the Pulumi program (which checks its config
against them before deploying) and the policy pack (which checks the resources the program
declares): a config that `make check` passes and a preview the pack passes cannot disagree.

Rooms, each importing only from those before it: `timing/`, `config/`, `targets/`, then
`environment_size.py`. Nothing here imports Pulumi, the repository's other code, or the
function's modules beyond its standard-library ones (tests/infra/test_boundaries.py).
"""
