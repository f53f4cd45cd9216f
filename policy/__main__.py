"""Entry point Pulumi runs for `pulumi preview --policy-pack policy`, and for the pack once
published.

Pulumi's Python analyzer (`pulumi-analyzer-policy-python`, shipped with the CLI) runs the
virtualenv's `python -u -m pulumi.policy <engine> <pack directory>`, and that module runs this
file with `runpy.run_path(<pack directory>, run_name="__main__")`: the pack's directory becomes
`sys.path[0]` and this file runs as a script, in no package. `pulumi policy publish` uploads
that directory alone, and Pulumi installs `requirements.txt` into the pack's virtualenv wherever
it runs the published copy.

So everything the pack imports is in its directory or in that virtualenv, and sys.path is left
as the analyzer set it: the pack's code is the package `scheduler_guardrails` beside this file,
whose modules import each other relatively (the same package is
`policy.scheduler_guardrails` to the program and the tests), and the function's definitions it
shares come from the function's distribution that requirements.txt pins.
"""

from pulumi_policy import PolicyPack

# The type checker reads the package from the repository's root, as policy.scheduler_guardrails.
from scheduler_guardrails.policies import PACK_NAME, POLICIES  # type: ignore[import-not-found]

if __name__ == "__main__":
    # PolicyPack starts the analyzer's gRPC server and blocks; never on import.
    PolicyPack(name=PACK_NAME, policies=list(POLICIES))
