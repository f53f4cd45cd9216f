"""The sample's handler served by the Functions Framework, for the HTTP and cold-start cases.

Loaded by `functions-framework --source=bench/baseline_app.py` exactly as ours is loaded from
function/main.py, with the same server options, so the two differ only in their handler. Like
the sample, it builds its Firestore client at import.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Served with bench/ as its source root: the repository root holds the baseline it serves.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import flask  # noqa: E402
import functions_framework  # noqa: E402
from google.cloud import firestore  # noqa: E402

from bench.baseline import BaselineHandler, headers_as_dict  # noqa: E402

db = firestore.Client()
HANDLER = BaselineHandler(db)


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> tuple[str, int]:
    """Runs a job's work once per scheduled run, even if the run is delivered twice."""
    return HANDLER.handle(headers_as_dict(request.headers))
