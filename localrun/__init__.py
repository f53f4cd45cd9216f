"""The local Cloud Scheduler and the demo: exactly-once on this machine, before any deploy.

The local run serves function/ as Cloud Run does, with function/ as the source root, and
drives its demo job (`jobs.demo`: its longest sleep). So function/ is
on this process's path too, exactly as it is on the deployed function's; the library itself,
`exactly_once`, is the installed package either way.
"""

import sys

from infra.config.paths import FUNCTION_DIR

__all__ = ["FUNCTION_DIR"]

if str(FUNCTION_DIR) not in sys.path:
    sys.path.append(str(FUNCTION_DIR))
