"""Entry point Pulumi runs for `pulumi preview --policy-pack policy`.

Pulumi runs this file with policy/ as its directory, so the repository root is put on
sys.path first: the policies import `infra.timing`, the same module the stack validates with.
"""

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from pulumi_policy import PolicyPack  # noqa: E402

from policy.policies import PACK_NAME, POLICIES  # noqa: E402

if __name__ == "__main__":
    # PolicyPack starts the analyzer's gRPC server and blocks; never on import.
    PolicyPack(name=PACK_NAME, policies=list(POLICIES))
