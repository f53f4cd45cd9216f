"""Entry point Pulumi runs for `pulumi preview --policy-pack policy`.

Pulumi runs this file with policy/ as its directory and the pack's own virtualenv, which
installs neither the Firestore client nor the function's package. The policies import
`infra.timing.rules`, the same module the stack validates with, and the function's standard-library
definitions (`exactly_once.config`, `exactly_once.ledger.fields`, ...); nothing heavier is
imported. So two roots go on sys.path:

- the repository root first, so that `policy` and `infra` are this checkout's packages even
  if the pack's virtualenv installs a distribution of the same name;
- function/ last, where the Functions Framework puts the function's source root, so that a
  module a fork adds there cannot shadow one of the pack's own dependencies.
"""

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))
if str(_REPO_ROOT / "function") not in sys.path:
    sys.path.append(str(_REPO_ROOT / "function"))

from pulumi_policy import PolicyPack  # noqa: E402

from policy.policies import PACK_NAME, POLICIES  # noqa: E402

if __name__ == "__main__":
    # PolicyPack starts the analyzer's gRPC server and blocks; never on import.
    PolicyPack(name=PACK_NAME, policies=list(POLICIES))
