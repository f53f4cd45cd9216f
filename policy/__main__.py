"""Entry point Pulumi runs for `pulumi preview --policy-pack policy`.

Pulumi runs this file with policy/ as its directory and the pack's own virtualenv, which
installs neither the Firestore client nor the function's package. So the repository root and
function/ (the function's source root, as Cloud Run sees it) are put on sys.path first: the
policies import `infra.timing`, the same module the stack validates with, and the function's
standard-library definitions it reads (`exactly_once.config`); nothing heavier is imported.
"""

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
for _root in (str(_REPO_ROOT), str(_REPO_ROOT / "function")):
    if _root not in sys.path:
        sys.path.insert(0, _root)

from pulumi_policy import PolicyPack  # noqa: E402

from policy.policies import PACK_NAME, POLICIES  # noqa: E402

if __name__ == "__main__":
    # PolicyPack starts the analyzer's gRPC server and blocks; never on import.
    PolicyPack(name=PACK_NAME, policies=list(POLICIES))
