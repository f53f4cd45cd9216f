"""A loopback BigQuery API (bigquery v2, JSON REST): `jobs.insert` and `jobs.get`, as the
google-cloud-bigquery client calls them.

Job ids are unique per project, as in BigQuery: a second insert with an id already seen is
refused with 409 (reason `duplicate`), whatever its configuration. A query the fake cannot
parse (one starting `SELEC `) gives a job that is DONE with an `invalidQuery` error result,
which is how BigQuery reports a query it accepted as a job but could not run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.google_rest_fake import ApiError, GoogleApiFake

PREFIX = "/bigquery/v2/projects/"


@dataclass
class FakeBigQuery(GoogleApiFake):
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    inserts: list[dict[str, Any]] = field(default_factory=list)

    def finish(self, project: str, job_id: str, error: dict[str, str] | None = None) -> None:
        """End a RUNNING job: DONE, with `error` ({"reason", "message"}) as its error result."""
        with self.lock:
            status: dict[str, Any] = {"state": "DONE"}
            if error is not None:
                status.update(errorResult=error, errors=[error])
            self.jobs[(project, job_id)]["status"] = status

    def created(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.jobs.values())

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        if not path.startswith(PREFIX):
            raise ApiError(404, f"no route {method} {path}")
        project, _, rest = path.removeprefix(PREFIX).partition("/")
        if method == "POST" and rest == "jobs":
            self.inserts.append(body)
            reference = body["jobReference"]
            key = (project, reference["jobId"])
            if key in self.jobs:
                raise ApiError(409, f"Already Exists: Job {project}:{reference['jobId']}", "duplicate")
            sql = body["configuration"]["query"]["query"]
            status: dict[str, Any] = {"state": "RUNNING"}
            if sql.lstrip().upper().startswith("SELEC "):
                error = {"reason": "invalidQuery", "message": "Syntax error: Unexpected identifier SELEC"}
                status = {"state": "DONE", "errorResult": error, "errors": [error]}
            job = {
                "kind": "bigquery#job",
                "id": f"{project}:{reference.get('location', 'US')}.{reference['jobId']}",
                "jobReference": {**reference, "projectId": project},
                "configuration": body["configuration"],
                "status": status,
                "statistics": {"creationTime": str(int(time.time() * 1000))},
            }
            self.jobs[key] = job
            return job
        if method == "GET" and rest.startswith("jobs/"):
            job_id = rest.removeprefix("jobs/")
            found = self.jobs.get((project, job_id))
            if found is None or query.get("location") != found["jobReference"].get("location"):
                raise ApiError(404, f"Not found: Job {project}:{job_id}", "notFound")
            return found
        raise ApiError(404, f"no route {method} {path}")
