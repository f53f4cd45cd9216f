"""Sample Cloud Run job container (a job with `cloudRunJob: {sample: true}`): the run's state
change, once per scheduled run, guarded by the token check.

The stack runs it as `python3 -c <this file>` in a public Python image, so the sample needs no
image build; it uses the standard library only. An execution receives (set by the proxy,
jobs/cloud_run_job.py): RUN_ID (the token), FENCE, SCHEDULE_TIME, SCHEDULER_JOB; and from the
stack: TOKEN_CHECK_URL. Cloud Run sets CLOUD_RUN_EXECUTION, CLOUD_RUN_TASK_INDEX and
CLOUD_RUN_TASK_ATTEMPT. Arguments given as `cloudRunJob.args` arrive in sys.argv[1:].

1. begin: the holder names this attempt of this task, so a repeated begin (its answer lost)
   is still first, and a second execution or a retried task is told duplicate.
2. the state change (the placeholder below), only when first.
3. complete with the result; when the change fails having changed nothing, release, so a
   later execution may make it.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# On Cloud Run the metadata server; tests point it at a local fake (google-auth's variable).
METADATA_HOST = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
RETRY_STATUSES = {429, 502, 503, 504}
ATTEMPTS = 6
SCOPE = "change_state"


def id_token(audience: str) -> str:
    """A Google-signed ID token for this job's service account, for the token check's IAM."""
    query = urllib.parse.urlencode({"audience": audience, "format": "full"})
    url = f"http://{METADATA_HOST}/computeMetadata/v1/instance/service-accounts/default/identity?{query}"
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


def token_call(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call to the token check, sent again (with backoff) on the answers that mean "try
    again". Sending it again is safe: begin carries this attempt's holder, and complete and
    release may be repeated."""
    for attempt in range(ATTEMPTS):
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {id_token(url)}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            if error.code not in RETRY_STATUSES or attempt == ATTEMPTS - 1:
                raise
        except (urllib.error.URLError, TimeoutError):
            if attempt == ATTEMPTS - 1:
                raise
        time.sleep(min(30, 2**attempt))
    raise AssertionError("unreachable")


def change_state(run_id: str, schedule_time: str, args: list[str]) -> dict[str, Any]:
    # PLACEHOLDER: the state-changing step, now run once per scheduled run. Replace it with
    # your own (a write keyed by run_id, a call carrying it as an idempotency key, ...).
    print(json.dumps({"message": "state changed", "run_id": run_id, "schedule_time": schedule_time}))
    return {"run_id": run_id, "schedule_time": schedule_time, "args": args}


def main() -> int:
    url = os.environ["TOKEN_CHECK_URL"]
    token = os.environ["RUN_ID"]
    holder = "/".join(
        os.environ.get(name, "local")
        for name in ("CLOUD_RUN_EXECUTION", "CLOUD_RUN_TASK_INDEX", "CLOUD_RUN_TASK_ATTEMPT")
    )
    begin = {
        "action": "begin",
        "token": token,
        "fence": os.environ["FENCE"],
        "scope": SCOPE,
        "holder": holder,
    }
    check = token_call(url, begin)
    if not check.get("first"):
        print(json.dumps({"message": "skipped", "run_id": token, "verdict": check.get("verdict")}))
        return 0
    try:
        result = change_state(token, os.environ.get("SCHEDULE_TIME", ""), sys.argv[1:])
    except Exception:
        token_call(url, {"action": "release", "token": token, "scope": SCOPE, "holder": check["holder"]})
        raise
    token_call(
        url,
        {"action": "complete", "token": token, "scope": SCOPE, "holder": check["holder"], "result": result},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
