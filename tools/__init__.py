"""Repository tools (`make docs`): they read the function's own definitions from its installed
package, `exactly_once`, as every package outside function/ does."""

import warnings

# google-api-core warns on every start under Python 3.11; `make docs` output should not.
warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
