"""A loopback Cloud Tasks API (v2, the REST protocol google-cloud-tasks' REST transport speaks)
that, like the service, delivers each task it creates: an HTTP request to the task's URL with
its method, headers and body, after answering CreateTask.

`POST /v2/projects/P/locations/L/queues/Q/tasks` with {"task": {"httpRequest": {...}}} answers
the Task; a queue not in `queues` answers NOT_FOUND. `failures` scripts the next calls
(tests/support/google_rest_fake.py). The OIDC token is recorded, not minted: the function on
loopback checks none, Cloud Run does in the cloud.
"""

from __future__ import annotations

import base64
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests
from google.cloud.tasks_v2 import HttpMethod

from tests.support.google_rest_fake import ApiError, GoogleApiFake

_CREATE = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/queues/[^/]+)/tasks$")


@dataclass
class FakeCloudTasks(GoogleApiFake):
    queues: set[str] = field(default_factory=set)
    # Every task created, as its JSON; and what each delivery got (status, or the error's name).
    tasks: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[int | str] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        match = _CREATE.match(path)
        if method != "POST" or match is None:
            raise ApiError(404, f"No route: {method} {path}")
        if match.group(1) not in self.queues:
            raise ApiError(404, f"Queue does not exist: {match.group(1)}")
        task = dict((body or {}).get("task") or {})
        if "httpRequest" not in task or not task["httpRequest"].get("url"):
            raise ApiError(400, "task.httpRequest.url is required")
        method_value = task["httpRequest"].get("httpMethod", "POST")
        # The client sends enums as numbers (`enum-encoding=int`); read them as the service does.
        task["httpRequest"]["httpMethod"] = (
            HttpMethod(method_value).name if isinstance(method_value, int) else str(method_value)
        )
        task["name"] = f"{match.group(1)}/tasks/{uuid.uuid4().int % 10**19}"
        self.tasks.append(task)
        thread = threading.Thread(target=self._dispatch, args=(task["httpRequest"],))
        self._threads.append(thread)
        thread.start()
        return task

    def _dispatch(self, request: dict[str, Any]) -> None:
        try:
            answer = requests.request(
                request.get("httpMethod", "POST"),
                request["url"],
                headers={**request.get("headers", {}), "User-Agent": "Google-Cloud-Tasks"},
                data=base64.b64decode(request.get("body", "")),
                timeout=120,
            )
        except requests.RequestException as error:
            outcome: int | str = type(error).__name__
        else:
            outcome = answer.status_code
        with self.lock:
            self.deliveries.append(outcome)

    def join(self, timeout: float = 120) -> None:
        """Wait for every delivery started so far."""
        for thread in list(self._threads):
            thread.join(timeout=timeout)

    def stop(self) -> None:
        super().stop()
        self.join()
