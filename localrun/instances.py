"""The local run's view of the truth and of its function instances.

What actually ran is read from Firestore (the demo job's own execution records, the run
ledger's live claims), never from the responses the scheduler saw; the instance pool spreads
deliveries over several Functions Framework servers and kills one mid-run for the crash fault.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from jobs.demo import EXECUTIONS_COLLECTION
from scheduler_request import format_rfc3339

from infra.settings import JobSettings, StackSettings
from localrun.scheduler import WARM_UP_JOB

# --- the truth, read from Firestore ----------------------------------------------------------


def _schedule_key(value: Any) -> str:
    return format_rfc3339(value) if isinstance(value, datetime) else str(value)


def count_executions(db: firestore.Client, job_name: str) -> Counter[str]:
    """Executions per ScheduleTime, from the demo job's own records: what actually ran, not
    what the responses claimed."""
    query = db.collection(EXECUTIONS_COLLECTION).where(filter=FieldFilter("job_name", "==", job_name))
    return Counter(_schedule_key(doc.get("schedule_time")) for doc in query.stream())


def live_claims(db: firestore.Client, runs_collection: str, job_name: str) -> list[str]:
    """ScheduleTimes of runs an attempt may still be executing (in progress, lease not over),
    judged like the ledger does: the lease runs from the claim's commit time, on Firestore's
    clock (the read's read_time), never on this machine's."""
    query = db.collection(runs_collection).where(filter=FieldFilter("job_name", "==", job_name))
    return [
        _schedule_key(fields.get("schedule_time"))
        for doc in query.stream()
        if (fields := doc.to_dict() or {}).get("status") == "in_progress"
        and isinstance(fields.get("lease_seconds"), int | float)
        and doc.update_time + timedelta(seconds=fields["lease_seconds"]) > doc.read_time
    ]


def wait_for(probe: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


class InstancePool:
    """Function instances behind one "service", like Cloud Run's: deliveries go round-robin to
    the instances that are up, and a crash (SIGKILL) takes down one instance with every
    request in flight on it, while the others keep serving. The crashed instance restarts in
    the background, so the scheduler's retry clock starts at the crash, as in the cloud.
    With a single instance a crash makes the whole service refuse connections until it is back.
    """

    def __init__(self, servers: Sequence[Any], db: firestore.Client, runs_collection: str) -> None:
        if not servers:
            raise ValueError("at least one instance")
        self._servers = list(servers)  # localrun.function_server.FunctionServer objects
        self._db = db
        self._runs = runs_collection
        self._lock = threading.Lock()
        self._down: set[int] = set()
        self._next = 0
        self._restarts: list[threading.Thread] = []
        self._crash_lock = threading.Lock()  # one crash decision at a time
        self.crashes = 0
        self.errors: list[str] = []

    def start(self) -> None:
        for server in self._servers:
            server.start()

    def warm_up(self, settings: StackSettings, job: JobSettings) -> None:
        """One delivery per instance, of a job name no report counts, before the clock starts:
        the first request of an instance (and of a fresh emulator) is slow enough to overrun a
        compressed attempt deadline, which would only show start-up cost, not a fault."""
        warm = dataclasses.replace(job, name=WARM_UP_JOB, body=None)
        for server in self._servers:
            headers = settings.delivery_headers(warm, datetime.now(UTC).replace(microsecond=0))
            requests.post(server.url, headers=headers, data=b"", timeout=60).raise_for_status()

    def stop(self) -> None:
        self.wait_until_serving()
        for server in self._servers:
            server.stop()

    def pick(self) -> str:
        """URL of the next instance that is up (any instance, when none is)."""
        with self._lock:
            count = len(self._servers)
            for step in range(count):
                index = (self._next + step) % count
                if index not in self._down:
                    self._next = index + 1
                    return str(self._servers[index].url)
            self._next += 1
            return str(self._servers[self._next % count].url)

    def crash_when_inside(
        self, job_id: str, schedule_time: datetime, url: str, done: threading.Event
    ) -> bool:
        """Once the attempt sent to `url` has claimed the run (it is sleeping inside the job),
        kill that instance. False when the attempt ended first (e.g. another crash got it)."""
        key = format_rfc3339(schedule_time)

        def claimed_or_done() -> bool:
            return done.is_set() or key in live_claims(self._db, self._runs, job_id)

        wait_for(claimed_or_done, timeout=30.0)
        with self._crash_lock:
            index = next(i for i, server in enumerate(self._servers) if server.url == url)
            with self._lock:
                if done.is_set() or index in self._down:
                    return False
                self._down.add(index)
            self._servers[index].crash()
            self.crashes += 1
            restart = threading.Thread(target=self._restart, args=(index,), name=f"restart-{index}")
            self._restarts.append(restart)
            restart.start()
        return True

    def wait_until_serving(self) -> None:
        for restart in list(self._restarts):
            restart.join()

    def _restart(self, index: int) -> None:
        try:
            self._servers[index].start()
        except Exception as error:  # reported; deliveries to it then fail visibly
            self.errors.append(str(error))
            return
        with self._lock:
            self._down.discard(index)
