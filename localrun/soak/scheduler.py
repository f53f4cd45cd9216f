"""The local Cloud Scheduler with the soak's faults: localrun.scheduler.LocalScheduler, whose
retry loop, deadlines, copies and transport it keeps, with a first attempt shaped by the
run's fault schedule (localrun/soak/plan.py) instead of the demo's.

Every delivery carries the soak's name of its run in the body (`tag`), which the job writes
into its execution record: the checker counts executions by it, never by the function's idea
of which run a delivery belongs to.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from localrun.delivery import Delivery, Router, RunResult
from localrun.faults import Fault
from localrun.scheduler import ENDED, LocalScheduler
from localrun.soak.injector import Armed, Injector
from localrun.soak.plan import ALONE, RunPlan, SoakFault

# What the job's body says for each job fault.
_ACTIONS = {SoakFault.RAISE: "raise", SoakFault.EXIT: "exit"}
# The longest a commit fault's job works before its completion: well inside one renewal
# period (a third of the lease), so the next Firestore call after `start` is the completion.
COMMIT_FAULT_SLEEP_SECONDS = 1.0


@dataclass(frozen=True)
class Delivered:
    """What one scheduler run is to the soak: a scheduled run, the forced run a fault added,
    or the scheduled run at the forced run's ScheduleTime."""

    tag: str
    run: int  # the planned run it belongs to
    role: str  # SCHEDULED, FORCED or AT_FORCED_TIME
    schedule_time: datetime
    plan: RunPlan | None  # faults on its first attempt (a scheduled run's own)


SCHEDULED, FORCED, AT_FORCED_TIME = "scheduled", "forced", "scheduled_at_forced_time"


class SoakScheduler(LocalScheduler):
    """One job's deliveries. Runs are named by index (`run(index, ...)`), each index a
    Delivered registered before it is run."""

    def __init__(self, *args: Any, injector: Injector, skewed: Mapping[str, Router], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._injector = injector
        self._skewed = skewed  # clock offset -> its instance
        self._delivered: dict[int, Delivered] = {}
        self._delivered_lock = threading.Lock()
        self.injected: dict[int, list[str]] = {}  # index -> faults that happened

    def register(self, index: int, delivered: Delivered) -> None:
        with self._delivered_lock:
            self._delivered[index] = delivered

    def delivered(self, index: int) -> Delivered:
        with self._delivered_lock:
            return self._delivered[index]

    def soak_body(self, delivered: Delivered, plan: RunPlan | None) -> bytes:
        body: dict[str, Any] = {"tag": delivered.tag}
        sleep = delivered.plan.sleep_seconds if delivered.plan else 0.0
        fault = plan.primary if plan else None
        if fault is SoakFault.HANG:
            sleep = 2 * self.compressed.function_timeout_seconds
        elif fault in (SoakFault.KILL_MID_JOB, SoakFault.FREEZE):
            sleep = self.compressed.time_limit_seconds / 2  # killed or frozen inside it
        elif fault in (SoakFault.KILL_MID_COMMIT, SoakFault.LOST_COMMIT_ANSWER):
            sleep = COMMIT_FAULT_SLEEP_SECONDS
        if fault in _ACTIONS:
            body["action"] = _ACTIONS[fault]
        elif fault is SoakFault.UNSTORABLE and plan is not None:
            body["action"] = plan.variant
        body["sleep_seconds"] = round(sleep, 3)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def _attempt(
        self,
        result: RunResult,
        schedule_time: datetime,
        attempt: int,
        faults: list[Fault],
        first_attempt: float,
    ) -> bool:
        del faults  # the demo's: the soak's come from the run's plan
        delivered = self.delivered(result.index)
        plan = delivered.plan if attempt == 1 else None
        kinds = list(plan.kinds) if plan else []
        if attempt == 1:
            result.faults = [fault.value for fault in kinds]
        fault = plan.primary if plan else None
        body = self.soak_body(delivered, plan)
        headers = self.headers_for(schedule_time, body)
        timeout = self.compressed.attempt_deadline_seconds(self.settings, self.job)
        alone = fault in ALONE
        router: Router = self._instances
        if fault is SoakFault.CLOCK_SKEW and plan is not None:
            router = self._skewed[plan.variant]
        done = threading.Event()
        armed: Armed | None = None
        happened = set(kinds)
        with router.route(alone=alone) as url:
            sent_at = round(self.clock.now() - first_attempt, 3)
            if plan is not None and plan.concurrent:
                pinned = url if alone else None
                self._copy(result, attempt, sent_at, headers, body, timeout, pinned, SoakFault.CONCURRENT)
            if plan is not None and fault in ALONE and fault is not SoakFault.HANG:
                armed = self._injector.arm(plan, delivered.tag, self.job_id, schedule_time, url, done)
            delivery = Delivery(attempt, False, sent_at, None, "", [k.value for k in kinds])
            try:
                self._post(url, headers, body, timeout, delivery)
            finally:
                done.set()
        # Settled once the attempt has left its instance: a fault still waiting for its moment
        # then knows that the moment will not come.
        if armed is not None and not armed.settle():
            happened.discard(armed.fault)
        if delivery.outcome == "dropped" and fault is SoakFault.HANG:
            delivery.outcome = ENDED  # sent alone: only its own watchdog ends its instance
        ok = delivery.status is not None and 200 <= delivery.status < 300
        if fault is SoakFault.LOST_REPLY:
            if delivery.status is None:
                happened.discard(fault)  # no answer to lose
            else:
                delivery.outcome = f"lost_ack:{delivery.outcome}"
                ok = False
        delivery.faults = [k for k in delivery.faults if SoakFault(k) in happened]
        result.deliveries.append(delivery)
        if plan is not None and plan.duplicate:
            # Sent again once answered, wherever the rotation sends it.
            self._copy(result, attempt, sent_at, headers, body, timeout, None, SoakFault.DUPLICATE)
        if attempt == 1:
            with self._delivered_lock:
                self.injected[result.index] = [k.value for k in kinds if k in happened]
        return ok

    def _copy(
        self,
        result: RunResult,
        attempt: int,
        sent_at: float,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        url: str | None,
        kind: SoakFault,
    ) -> None:
        def send() -> None:
            delivery = Delivery(attempt, True, sent_at, None, "", [kind.value])
            with self._instances.route(url=url) as target:
                self._post(target, headers, body, timeout, delivery)
            result.deliveries.append(delivery)

        copy = threading.Thread(target=send, name=f"{kind.value}-{result.index}")
        with self._copies_lock:
            self._copies.append(copy)
        copy.start()
