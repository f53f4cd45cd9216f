"""The local Cloud Scheduler and the demo: exactly-once on this machine, before any deploy.

The local run serves function/ as Cloud Run does, with function/ as the source root, and
drives its demo job (`jobs.demo`: its longest sleep). So function/ is
on this process's path too, exactly as it is on the deployed function's; the library itself,
`exactly_once`, is the installed package either way.
"""

import sys
import warnings

from infra.config.paths import FUNCTION_DIR

__all__ = ["FUNCTION_DIR", "PYTHON_VERSION_WARNING"]

# google-api-core warns at every import under Python 3.11 (supported until 2027; the function
# is deployed on 3.12, where it does not): the demo's first line, and every function server's
# first lines, would be a dependency's notice instead of what the demo is doing. The package
# runs before any of its modules imports Google's; the servers are told the same through
# PYTHONWARNINGS (function_server.py).
PYTHON_VERSION_WARNING = "You are using a Python version"
warnings.filterwarnings("ignore", message=PYTHON_VERSION_WARNING, category=FutureWarning)

if str(FUNCTION_DIR) not in sys.path:
    sys.path.append(str(FUNCTION_DIR))
