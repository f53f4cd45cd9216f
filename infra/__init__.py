"""The Pulumi program's modules.

function/ is deployed as its own source root, so its modules import each other by top-level
name (`import audit`). The stack and the `ops` CLI share a few of them (the missed-run audit,
the log field names); putting function/ on the path here, once, lets every `infra.*` module
and everything that imports one use them exactly as the tests do (pytest's pythonpath).
Appended, never prepended, so installed packages are never shadowed.
"""

import sys
from pathlib import Path

FUNCTION_DIR = Path(__file__).resolve().parent.parent / "function"
if str(FUNCTION_DIR) not in sys.path:
    sys.path.append(str(FUNCTION_DIR))
