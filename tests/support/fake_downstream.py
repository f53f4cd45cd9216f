"""A loopback HTTP downstream that records every call and answers from a script."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tests.support.loopback_fake import HELD, Held, HttpAnswer, HttpFake, HttpRequest

Step = int | tuple[str, float] | Held


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    body: Any


class FakeDownstream(HttpFake):
    """`script` answers the next calls in order: an int status, ("sleep", seconds) to outlast
    the caller's timeout, or HELD to answer only once the fake stops. Once it runs out, every
    call gets 200."""

    def __init__(self, script: list[Step] | None = None) -> None:
        super().__init__()
        self.script = list(script or [])

    @property
    def calls(self) -> list[Call]:
        with self.lock:
            return [Call(request.path, dict(request.headers), request.json()) for request in self.requests]

    @property
    def url(self) -> str:
        return f"{self.endpoint}/apply"

    def answer(self, request: HttpRequest, step: Step | None) -> HttpAnswer:
        status = step if isinstance(step, int) else 200
        if isinstance(step, tuple):
            time.sleep(step[1])  # scripted: outlast the caller's timeout
        assert step is None or step == HELD or isinstance(step, int | tuple)
        return HttpAnswer(status, json.dumps({"status": status}).encode())
