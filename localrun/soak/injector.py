"""The soak's instance and Firestore faults, carried out around one attempt.

Each fault waits for its moment on evidence, never on a guess of how long something takes:
the job's own execution record (`start`: the attempt is inside the job), or the run's ledger
record read straight from the emulator (the claim or the completion committed). A fault
whose moment never came because the attempt had ended first did not happen, and says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from google.cloud import firestore
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from exactly_once.delivery.scheduler_request import RunKey
from localrun.instances import InstancePool, wait_for
from localrun.soak.plan import CLAIM, RunPlan, SoakFault
from localrun.soak.served import soak_record
from localrun.tcp_proxy import TcpProxy

# How long a fault waits for its moment, at most.
MOMENT_TIMEOUT_SECONDS = 60.0
# How long a claim's write is held while its instance is killed.
CLAIM_HOLD_SECONDS = 1.5


class ExecutionWatch:
    """Follows the execution file as the jobs append to it: which runs' jobs have started,
    and with which attempt. One reader for every fault, instead of one per fault."""

    def __init__(self, path: Path, interval: float = 0.02) -> None:
        self._path = path
        self._interval = interval
        self._lock = threading.Lock()
        self._started: dict[str, str] = {}  # tag -> attempt id of its first start
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="execution-watch", daemon=True)
        self.thread.start()

    def started(self, tag: str) -> str | None:
        with self._lock:
            return self._started.get(tag)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()

    def _follow(self) -> None:
        offset = 0
        pending = b""
        while not self._stop.wait(self._interval):
            if not self._path.exists():
                continue
            with self._path.open("rb") as source:
                source.seek(offset)
                chunk = source.read()
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                for record in soak_record.parse(line):
                    if record.get("event") == soak_record.START:
                        with self._lock:
                            self._started.setdefault(str(record.get("tag")), str(record.get("attempt_id")))


@dataclass
class Armed:
    """A fault under way beside its attempt; `settle()` once the attempt has returned."""

    fault: SoakFault
    happened: bool = True
    thread: threading.Thread | None = None
    after: list[Callable[[], None]] = field(default_factory=list)
    outcome: list[bool] = field(default_factory=list)

    # Set once the fault is under way, when that is before its thread ends (a freeze, until
    # the thaw): the attempt's retries must not wait for the thaw, they bring it about.
    begun: threading.Event = field(default_factory=threading.Event)

    def settle(self) -> bool:
        """Whether the fault happened, once the attempt has returned and left its instance."""
        if self.thread is not None:
            thread = self.thread
            wait_for(lambda: self.begun.is_set() or not thread.is_alive(), timeout=3600, interval=0.05)
            self.happened = self.begun.is_set() or (all(self.outcome) if self.outcome else False)
        for step in self.after:
            step()
        return self.happened


class Injector:
    """Carries out a run's planned instance or Firestore fault on the instance its first
    attempt was sent to (alone there: plan.ALONE)."""

    def __init__(
        self,
        pool: InstancePool,
        proxy_for: Callable[[str], TcpProxy],
        db: firestore.Client,
        runs_collection: str,
        watch: ExecutionWatch,
        *,
        project: str,
        location: str,
    ) -> None:
        self._pool = pool
        # Looked up by the URL the attempt was sent to, when it is sent: an instance's URL is
        # known for certain only once it serves (a port another process took moves it).
        self._proxy_for = proxy_for
        self._db = db
        self._runs = runs_collection
        self._watch = watch
        self._project = project
        self._location = location

    def record(self, job_id: str, schedule_time: datetime) -> dict[str, Any] | None:
        """The run's ledger record, read from the emulator directly (no proxy, no fault)."""
        run_id = RunKey(self._project, self._location, job_id, schedule_time).run_id
        snapshot = cast(DocumentSnapshot, self._db.collection(self._runs).document(run_id).get())
        return snapshot.to_dict() if snapshot.exists else None

    def arm(
        self, plan: RunPlan, tag: str, job_id: str, schedule_time: datetime, url: str, done: threading.Event
    ) -> Armed:
        """Start the fault (before the attempt is sent); its thread waits for its moment."""
        fault = plan.primary
        assert fault is not None
        armed = Armed(fault)

        def inside() -> bool:
            return self._watch.started(tag) is not None

        def status(wanted: str) -> Callable[[], bool]:
            return lambda: (self.record(job_id, schedule_time) or {}).get("status") == wanted

        def background(work: Callable[[], bool]) -> None:
            armed.thread = threading.Thread(target=lambda: armed.outcome.append(work()), daemon=True)
            armed.thread.start()

        def when_inside(then: Callable[[], None]) -> bool:
            wait_for(lambda: done.is_set() or inside(), timeout=MOMENT_TIMEOUT_SECONDS)
            if not inside():
                return False
            then()
            return True

        if fault is SoakFault.KILL_MID_JOB:
            background(lambda: self._pool.kill_when(url, inside, done, MOMENT_TIMEOUT_SECONDS))
        elif fault is SoakFault.KILL_MID_COMMIT:
            proxy = self._proxy_for(url)
            if plan.variant == CLAIM:
                # The claim's write held on its way to Firestore, the instance killed while it
                # is held; the proxy then delivers it, and the claim may commit after the
                # instance has died (or not: a request whose client is gone may be dropped).
                # Held rather than answered and lost: a connection the instance has yet to open
                # needs the server's answers before its first request goes out.
                held = proxy.held
                proxy.hold_next_request(CLAIM_HOLD_SECONDS)
                background(
                    lambda: self._pool.kill_when(url, lambda: proxy.held > held, done, MOMENT_TIMEOUT_SECONDS)
                )
            else:
                # Once the job works, answers are dropped: its completion commits, unanswered.
                def kill() -> bool:
                    if not when_inside(proxy.lose_answers):
                        return False
                    try:
                        return self._pool.kill_when(url, status("completed"), done, MOMENT_TIMEOUT_SECONDS)
                    finally:
                        proxy.deliver_answers()  # for the restarted instance

                background(kill)
        elif fault is SoakFault.FREEZE:

            def taken_over() -> bool:
                holder = (self.record(job_id, schedule_time) or {}).get("attempt_id")
                return holder is not None and holder != self._watch.started(tag)

            background(
                lambda: self._pool.freeze_when(
                    url, inside, done, taken_over, timeout=MOMENT_TIMEOUT_SECONDS, frozen=armed.begun
                )
            )
        elif fault is SoakFault.LOST_COMMIT_ANSWER:
            proxy = self._proxy_for(url)
            if plan.variant == CLAIM:
                proxy.lose_answers()
            else:
                background(lambda: when_inside(proxy.lose_answers))
            armed.after.append(proxy.deliver_answers)
        elif fault is SoakFault.FIRESTORE_SLOW:
            proxy = self._proxy_for(url)
            held = proxy.held
            proxy.hold_next_request(plan.seconds)
            armed.after.append(lambda: setattr(armed, "happened", proxy.held > held))
        elif fault is SoakFault.FIRESTORE_CUT:
            proxy = self._proxy_for(url)
            proxy.cut("blackhole" if plan.variant == "blackhole" else "refuse")
            timer = threading.Timer(plan.seconds, lambda: _restore(proxy))
            timer.start()

            def restored() -> None:
                timer.join()
                _restore(proxy)

            armed.after.append(restored)
        return armed


def _restore(proxy: TcpProxy) -> None:
    """Forward again, with every connection of the cut closed: a black-holed one would
    otherwise hold the instance's channel forever."""
    proxy.cut("refuse")
    proxy.restore()
