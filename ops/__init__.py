"""Day-2 operations of a deployed stack: `python -m ops status|audit|backfill|redo|smoke --stack NAME`.

The CLI reads the stack's own config files (through infra.settings.stack), so it knows the project,
region, database, collection and jobs that `pulumi up` deployed, and it shares the function's
code for everything that must agree with it (run ids, headers, the audit's logic): the
`exactly_once` package, installed by the root requirements.txt (ops/requirements.txt).
"""

import warnings

# google-api-core warns on every start under Python 3.11 (supported until 2027); an operator
# reading a command's output should not have to read that too.
warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
