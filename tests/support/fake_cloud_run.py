"""A loopback Cloud Run Admin API (run.googleapis.com v2, JSON REST): what run_v2's REST
transport speaks for `jobs.run` and `jobs.executions.list`.

`jobs.run` creates an execution whose template carries the overrides' env and args, and
answers a long-running operation whose metadata is the execution, as the API does. The list
is newest first (creation time, descending), paged by pageSize / pageToken. `jobs.executions.get`
answers one execution; an execution runs until the test ends it (`finish`), as Cloud Run
reports an ended one: a completion time, a `Completed` condition and the tasks' counts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.support.google_rest_fake import ApiError, GoogleApiFake

EXECUTION_TYPE = "type.googleapis.com/google.cloud.run.v2.Execution"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class FakeCloudRun(GoogleApiFake):
    jobs: set[str] = field(default_factory=set)
    executions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    run_requests: list[dict[str, Any]] = field(default_factory=list)
    list_pages: int = 0

    def started(self, job: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.executions.get(job, []))

    def seed(self, job: str, created: datetime, run_id: str = "other-run") -> dict[str, Any]:
        """An execution started before, by someone else or for another run."""
        with self.lock:
            return self._create(job, [{"name": "RUN_ID", "value": run_id}], [], created)

    def finish(self, name: str, outcome: str = "succeeded", message: str = "") -> None:
        """End the execution `name`: "succeeded", "failed" (with `message`, as the API's
        condition says why) or "cancelled"."""
        with self.lock:
            execution = self._named(name)
            tasks = execution["taskCount"]
            execution["completionTime"] = rfc3339(datetime.now(UTC))
            state = "CONDITION_SUCCEEDED" if outcome == "succeeded" else "CONDITION_FAILED"
            execution["conditions"] = [{"type": "Completed", "state": state, "message": message}]
            count = {"succeeded": "succeededCount", "failed": "failedCount", "cancelled": "cancelledCount"}
            execution[count[outcome]] = tasks

    def _named(self, name: str) -> dict[str, Any]:
        for executions in self.executions.values():
            for execution in executions:
                if execution["name"] == name:
                    return execution
        raise ApiError(404, f"Resource '{name}' was not found")

    def _create(self, job: str, env: list[Any], args: list[str], created: datetime) -> dict[str, Any]:
        execution = {
            "name": f"{job}/executions/{job.rsplit('/', 1)[-1]}-{uuid.uuid4().hex[:5]}",
            "uid": str(uuid.uuid4()),
            "job": job.rsplit("/", 1)[-1],
            "createTime": rfc3339(created),
            "taskCount": 1,
            "template": {"containers": [{"image": "python:3.12-slim", "env": env, "args": args}]},
        }
        self.executions.setdefault(job, []).append(execution)
        return execution

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        if method == "POST" and path.endswith(":run"):
            job = path.removeprefix("/v2/").removesuffix(":run")
            self.run_requests.append(body or {})
            if job not in self.jobs:
                raise ApiError(404, f"Resource '{job}' was not found")
            overrides = (body or {}).get("overrides", {})
            container = (overrides.get("containerOverrides") or [{}])[0]
            execution = self._create(
                job, container.get("env", []), container.get("args", []), datetime.now(UTC)
            )
            if "taskCount" in overrides:
                execution["taskCount"] = overrides["taskCount"]
            location = job.split("/jobs/")[0]
            return {
                "name": f"{location}/operations/{uuid.uuid4()}",
                "metadata": {"@type": EXECUTION_TYPE, **execution},
                "done": False,
            }
        if method == "GET" and path.endswith("/executions"):
            job = path.removeprefix("/v2/").removesuffix("/executions")
            if job not in self.jobs:
                raise ApiError(404, f"Resource '{job}' was not found")
            self.list_pages += 1
            newest_first = sorted(self.executions.get(job, []), key=lambda e: e["createTime"], reverse=True)
            start = int(query.get("pageToken") or 0)
            size = int(query.get("pageSize") or 100)
            page = newest_first[start : start + size]
            answer: dict[str, Any] = {"executions": page}
            if start + size < len(newest_first):
                answer["nextPageToken"] = str(start + size)
            return answer
        if method == "GET" and "/executions/" in path:
            return self._named(path.removeprefix("/v2/"))
        raise ApiError(404, f"no route {method} {path}")
