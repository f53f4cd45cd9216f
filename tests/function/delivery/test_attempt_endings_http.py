"""Each way an attempt is ended from outside its job, through real Functions Framework
servers: the process that ran the attempt is gone before its lease could be taken over (or,
frozen, runs nothing once it thaws), a Scheduler-like retry through another instance then
takes the run over, and the run is executed once, by that retry.

"Gone before" is judged on Firestore's clock, as test_overrun_http.py judges attempts: a
thread of the test writes a timestamp as soon as it sees the stalled attempt's process
ended, and that commit must come before the commit of the retry's claim.

Scaled down: a 9 s lease, renewed every 3 s, given up on after 7.5 s without a confirmed
renewal; the backstop fires at 8.25 s. The job (stalling_jobs.py) stalls on its first attempt
after writing its mark and never writes again; later attempts finish.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
from google.cloud import firestore

from localrun.function_server import FunctionServer
from localrun.tcp_proxy import tcp_proxy
from tests.function.marked_jobs import MARKS
from tests.support.demo_runs import HEADERS, REPO_ROOT, ended_lines, outcome_of, run_record, server_env
from tests.support.waiting import wait_until

LEASE_SECONDS = 9
# When the test saw each stalled attempt's process ended, by attempt id.
GONE = "process_ends"
GONE_WATCH_SECONDS = 120.0
# How long a delivery may take to start its job: a function server's first request on a loaded
# machine imports the Firestore client, and a deadline only bounds a failure's wait.
JOB_START_SECONDS = 120.0
ANSWERED_UNSTARTED = "answered before its job started"


def stalling_server(function_servers, emulator_host: str, project: str, **extra: str) -> FunctionServer:
    env = server_env(
        emulator_host,
        project,
        JOB_HANDLER="tests.function.stalling_jobs:stall_first_attempt",
        PYTHONPATH=REPO_ROOT,
        LEASE_SECONDS=str(LEASE_SECONDS),
    )
    server: FunctionServer = function_servers({**env, **extra})
    return server


def post(server: FunctionServer, stall: str) -> requests.Response | None:
    """One delivery; None when the instance ended under it (no answer), as Scheduler sees it."""
    try:
        return requests.post(server.url, headers=HEADERS, json={"stall": stall}, timeout=60)
    except requests.ConnectionError:
        return None


def running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie has: it only waits to be reaped).
    A stopped process is running: it has not ended. Linux /proc."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class StalledAttempt:
    """The first attempt of the run, delivered to `server`'s one worker process, started and
    stalled in its job; a thread records when its process is seen ended.

    On a loaded machine a delivery can be answered before its job starts (its claim past the
    store deadline, given back): it is then sent again, as Scheduler would, and `refused`
    keeps those answers. `answers` is the answer to the delivery whose job started."""

    def __init__(self, server: FunctionServer, db, stall: str) -> None:
        (self.worker,) = server.worker_pids()
        self._db = db
        self.refused: list[requests.Response | None] = []
        while True:
            self.answers: list[requests.Response | None] = []
            self._delivery = threading.Thread(target=lambda: self.answers.append(post(server, stall)))
            self._delivery.start()
            started: str = wait_until(
                lambda: self._mark() or (None if self._delivery.is_alive() else ANSWERED_UNSTARTED),
                timeout=JOB_START_SECONDS,
                what="the first attempt's job to start",
            )
            if started != ANSWERED_UNSTARTED:
                self.attempt_id = started
                break
            self.refused += self.answers
            assert len(self.refused) < 5, f"no delivery started the job: {self.refused}"
        self._watcher = threading.Thread(target=self._record_when_gone, daemon=True)
        self._watcher.start()

    def _mark(self) -> str | None:
        return next((mark.id for mark in self._db.collection(MARKS).stream()), None)

    def _record_when_gone(self) -> None:
        deadline = time.monotonic() + GONE_WATCH_SECONDS
        while running(self.worker) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not running(self.worker):
            self._db.collection(GONE).document(self.attempt_id).set({"at": firestore.SERVER_TIMESTAMP})

    def gone_at(self) -> datetime:
        """When, on Firestore's clock, the test saw the process ended: just after it ended."""
        self._watcher.join(timeout=GONE_WATCH_SECONDS + 30)
        seen = self._db.collection(GONE).document(self.attempt_id).get()
        assert seen.exists, "the stalled attempt's process never ended"
        at: datetime = seen.to_dict()["at"]
        return at

    def answered(self) -> list[requests.Response | None]:
        self._delivery.join(timeout=60)
        return self.answers

    def ended_lines(self, log_path: Path) -> list[dict[str, Any]]:
        return [line for line in ended_lines(log_path) if line.get("attempt_id") == self.attempt_id]


def retry_until_taken_over(retrier: FunctionServer, stall: str) -> str:
    """Deliver the run to `retrier` until it is not in_progress, and return that outcome."""
    outcomes: list[str] = []

    def answered_other_than_in_progress() -> str | None:
        outcome = outcome_of(post(retrier, stall))
        outcomes.append(outcome)
        return outcome if outcome != "in_progress" else None

    outcome = wait_until(
        answered_other_than_in_progress, timeout=60, what="a retry to take the run over", interval=0.25
    )
    assert outcomes[0] == "in_progress", outcomes
    return outcome


def assert_run_once_by_the_retry(db, stalled: StalledAttempt) -> dict[str, Any]:
    """Two attempts started; only the retry finished, and the record is its completion."""
    marks = {mark.id: mark.to_dict() for mark in db.collection(MARKS).stream()}
    assert len(marks) == 2 and not marks[stalled.attempt_id].get("finished")
    (retry_id,) = [attempt for attempt, mark in marks.items() if mark.get("finished")]
    record: dict[str, Any] = run_record(db).to_dict()
    assert (record["status"], record["result"], record["attempt_id"]) == ("completed", "succeeded", retry_id)
    return record


def assert_gone_before_the_takeover(db, stalled: StalledAttempt) -> None:
    """The retry's claim (the record's claimed_at: the takeover's commit) came after the test
    saw the stalled attempt's process ended, so the two never executed at the same time."""
    record = assert_run_once_by_the_retry(db, stalled)
    assert stalled.gone_at() < record["claimed_at"], "a retry took the run over while the attempt ran"


def test_a_job_that_holds_the_gil_is_ended_by_the_backstop_before_its_lease_can_end(
    function_servers, emulator_host, project, db, log_path
):
    """No Python thread runs while the regular expression holds the GIL, the watchdog's
    included: faulthandler's C timer dumps the tracebacks and exits the process."""
    hogging = stalling_server(function_servers, emulator_host, project)
    retrier = stalling_server(function_servers, emulator_host, project)
    stalled = StalledAttempt(hogging, db, "hog")

    assert retry_until_taken_over(retrier, "hog") == "lease_taken_over"

    assert_gone_before_the_takeover(db, stalled)
    assert stalled.answered() == [None]
    log = log_path.read_text()
    assert "Timeout (" in log and " in stall_first_attempt" in log  # faulthandler's dump of the job
    assert stalled.ended_lines(log_path) == []  # the watchdog never got to run


def test_an_instance_cut_off_from_firestore_is_ended_before_its_lease_can_end(
    function_servers, emulator_host, project, db, log_path
):
    """The stalled attempt's instance reaches Firestore through a proxy that goes silent
    mid-job; the retry reaches it directly, as another instance on a working route would."""
    with tcp_proxy(emulator_host) as proxy:
        cut_off = stalling_server(
            function_servers, emulator_host, project, FIRESTORE_EMULATOR_HOST=proxy.host
        )
        retrier = stalling_server(function_servers, emulator_host, project)
        stalled = StalledAttempt(cut_off, db, "sleep")
        proxy.cut("blackhole")

        assert retry_until_taken_over(retrier, "sleep") == "lease_taken_over"

    assert_gone_before_the_takeover(db, stalled)
    assert stalled.answered() == [None]
    (ended,) = stalled.ended_lines(log_path)
    assert ended["cause"] == "renewal_failed" and ended["renewals"] == 0


def test_a_process_frozen_for_longer_than_its_lease_runs_nothing_once_it_thaws(
    function_servers, emulator_host, project, db, log_path
):
    """SIGSTOP, a retry takes the run over, SIGCONT. Both of the attempt's deadlines passed
    during the freeze, so whichever runs first ends the process: the backstop (its C timer
    ran out) or the watchdog (its give-up point has passed). The job's last write came before
    the freeze, and the attempt writes nothing after it, its finish included."""
    frozen = stalling_server(function_servers, emulator_host, project)
    retrier = stalling_server(function_servers, emulator_host, project)
    stalled = StalledAttempt(frozen, db, "sleep")
    os.kill(stalled.worker, signal.SIGSTOP)
    try:
        outcome = retry_until_taken_over(retrier, "sleep")
    finally:
        os.kill(stalled.worker, signal.SIGCONT)

    assert outcome == "lease_taken_over"
    record = assert_run_once_by_the_retry(db, stalled)
    assert stalled.gone_at() > record["claimed_at"]  # frozen, not gone, while the retry ran
    assert stalled.answered() == [None]
    # Both wake at the thaw, so both may act at once: the backstop's dump is then cut short by
    # the watchdog's exit, and the watchdog's line may land inside the dump. The dump's first
    # write, its header, is the backstop's evidence; the line, whole when no dump began before
    # it, the watchdog's.
    dumped = "Timeout (" in log_path.read_text()
    causes = [line["cause"] for line in stalled.ended_lines(log_path)]
    assert dumped or causes, "the thawed process ended without its backstop or its watchdog"
    assert set(causes) <= {"renewal_failed"}, causes
    assert_run_once_by_the_retry(db, stalled)  # nothing written since the thaw


def test_a_run_whose_lease_is_broken_by_hand_is_ended_at_its_next_renewal(
    function_servers, emulator_host, project, db, log_path
):
    """The in-progress record deleted by hand (ops redo refuses to), and the run delivered
    again: the new delivery claims it afresh, and the stalled attempt's next renewal finds it
    taken over. Until then both ran: a lease broken from outside no longer protects the run."""
    stalled_server = stalling_server(function_servers, emulator_host, project)
    retrier = stalling_server(function_servers, emulator_host, project)
    stalled = StalledAttempt(stalled_server, db, "sleep")
    run_record(db).reference.delete()

    assert outcome_of(post(retrier, "sleep")) == "executed"
    stalled.gone_at()

    assert stalled.answered() == [None]
    (ended,) = stalled.ended_lines(log_path)
    assert ended["cause"] == "taken_over"
    assert_run_once_by_the_retry(db, stalled)
