"""Repository tools (`make docs`). Importing `infra` puts function/ on sys.path, so the tools
read the function's own definitions, as every package outside function/ does."""

import warnings

import infra  # noqa: F401

# google-api-core warns on every start under Python 3.11; `make docs` output should not.
warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
