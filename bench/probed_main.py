"""Ours, served with bench/probes.py installed: the breakdown's server, and only its.

Loaded by `functions-framework --source=bench/probed_main.py` like function/main.py, whose
`handle_scheduled_job` it serves unchanged but probed. `GET /probes` on it answers the records
of the deliveries since the last fetch (and forgets them); `floor` is a second target, a view
that answers at once, so the breakdown also measures what the server and the framework cost a
function that does nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for _path in (str(_ROOT / "function"), str(_ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import flask  # noqa: E402
import functions_framework  # noqa: E402

from bench import probes  # noqa: E402

probes.install()

import main  # noqa: E402  (function/main.py, imported after its functions are probed)

_served = probes.view(main.handle_scheduled_job)


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> flask.Response:
    """Ours; or, for GET /probes, the probes' records since the last fetch."""
    if request.method == "GET" and request.path == probes.RECORDS_PATH:
        return flask.jsonify(probes.fetching())
    response: flask.Response = _served(request)
    return response


@functions_framework.http
def floor(request: flask.Request) -> flask.Response | tuple[str, int]:
    """Nothing but wait `?wait_ms=` (default 0): what serving any function over HTTP costs,
    and what it costs once the process has sat idle in between (GET /probes: as above)."""
    if request.method == "GET" and request.path == probes.RECORDS_PATH:
        return flask.jsonify(probes.fetching())
    time.sleep(float(request.args.get("wait_ms", "0")) / 1000)
    return "", 200
