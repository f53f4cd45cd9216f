"""The missed-run audit as the stack runs it (a job of the real function, on a real Functions
Framework server and the Firestore emulator), where its rules meet the run's lifecycle:

- its clock is Firestore's: a forced audit carrying the next hour's ScheduleTime, or one
  served by an instance whose clock is two hours ahead, judges and catches up nothing that
  has not happened yet;
- it judges from where the last completed audit stopped: an outage's runs are each judged;
- catch-up delivers a run whose every attempt failed but checkpointed (released);
- a resume makes none of the pause's runs up, as missed runs or as deliveries;
- one job it cannot judge (a schedule that never fires), or a catch-up window wider than it
  walks, never stops it judging the others;
- a wall time repeated by a DST fall-back is one run, delivered when either instant has a record;
- a run awaiting its retry when its job was renamed with its runKey kept is caught up through
  the renamed job, under the run id it always had.

Times are relative to now (the audit's horizon is its own claim's commit time), so each test
asserts what holds whatever the minute it runs at.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import requests
import yaml
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once import log_fields
from exactly_once.audit.config import AuditedJob, Catchup, CatchupRuns, Delivery, Redelivery
from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339, parse_rfc3339
from exactly_once.ledger.fields import (
    CONSECUTIVE_FAILURES,
    ENDED_AT,
    LAST_SUCCESS,
    OUTPUT_JSON,
    SCHEDULE_TIME,
    TRIGGER,
    job_status_collection,
    job_status_id,
)
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from infra.plan.audit_job import audit_config, retry_window_seconds
from infra.plan.headers import delivery_headers
from infra.settings.environment import function_environment, job_table
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from infra.settings.samples import DEMO_JOB
from infra.settings.stack import StackSettings
from jobs.demo import EXECUTIONS_COLLECTION
from localrun.emulator import free_loopback_port
from localrun.function_server import FunctionServer
from tests.ops.conftest import Cli
from tests.support.job_tables import table_env
from tests.support.stacks import FIXTURE_STACKS, demo_job, with_job

# Three hours: at least the demo job's retry window plus the audit's hour, within the retention.
WINDOW_SECONDS = 3 * 3600
QUARTER = timedelta(minutes=15)


def _now() -> datetime:
    return datetime.now(UTC)


def _quarters(since: datetime, until: datetime) -> list[datetime]:
    """The demo job's fire times (every 15 minutes) in [since, until]."""
    return fire_times("*/15 * * * *", "Etc/UTC", since, until)


def _audit_time_before(moment: datetime) -> datetime:
    """The latest hourly audit time (hh:05) at or before `moment`: a scheduled audit run."""
    at = moment.replace(minute=5, second=0, microsecond=0)
    return at if at <= moment else at - timedelta(hours=1)


@dataclass
class Served:
    """The dev stack's function with its audit job, as one test serves it."""

    settings: StackSettings
    server: FunctionServer
    db: firestore.Client
    log_path: Path

    @property
    def demo(self) -> JobSettings:
        return demo_job(self.settings)

    @property
    def audit_job(self) -> JobSettings:
        return next(job for job in self.settings.jobs if job.name == AUDIT_JOB_NAME)

    def deliver(self, job: JobSettings, at: datetime, body: bytes | None = None) -> dict[str, Any]:
        reply = requests.post(
            self.server.url,
            headers=delivery_headers(self.settings, job, at),
            data=body if body is not None else job.body_bytes() or b"",
            timeout=300,
        )
        answer: dict[str, Any] = reply.json()
        return answer

    def lines(self, audit_run_id: str, event: str | None = None) -> list[dict[str, Any]]:
        found = []
        for text in self.log_path.read_text(errors="replace").splitlines():
            if text.startswith("{"):
                line = json.loads(text)
                if line.get("audit_run_id") == audit_run_id and (event is None or line.get("event") == event):
                    found.append(line)
        return found

    def executed(self, job: JobSettings) -> Counter[datetime]:
        query = self.db.collection(EXECUTIONS_COLLECTION).where(
            filter=FieldFilter("job_name", "==", self.settings.scheduler_job_id(job))
        )
        return Counter((doc.to_dict() or {})["schedule_time"] for doc in query.stream())

    def claimed_at(self, run_id: str) -> datetime:
        document = cast(
            firestore.DocumentReference, self.db.collection(self.settings.runs_collection).document(run_id)
        )
        claimed: datetime = document.get().get("claimed_at")
        return claimed

    def seed_last_audit(self, judged_until: datetime, pauses: Mapping[str, Any] | None = None) -> None:
        """The audit job's status as a completed audit run that stopped at `judged_until` left it."""
        output = {"judged_until": format_rfc3339(judged_until), "pauses": dict(pauses or {})}
        job_id = self.settings.scheduler_job_id(self.audit_job)
        document = self.db.collection(job_status_collection(self.settings.runs_collection)).document(
            job_status_id(self.settings.project, self.settings.region, job_id)
        )
        document.set(
            {
                LAST_SUCCESS: {
                    "run_id": "seeded",
                    SCHEDULE_TIME: judged_until,
                    TRIGGER: "scheduled",
                    ENDED_AT: judged_until,
                    OUTPUT_JSON: json.dumps(output),
                }
            }
        )


@pytest.fixture
def serve(function_servers, emulator_host, project, db, log_path) -> Callable[..., Served]:
    def start(
        settings: StackSettings,
        *,
        extra_job: AuditedJob | None = None,
        pause_changed_at: Mapping[str, datetime] | None = None,
        launcher: tuple[str, ...] = (),
    ) -> Served:
        """`extra_job`: one more job for the audit, written by hand past the stack's checks."""
        port = free_loopback_port()
        redelivery = Redelivery(url=f"http://127.0.0.1:{port}/")
        config = audit_config(settings, redelivery=redelivery, pause_changed_at=pause_changed_at)
        if extra_job is not None:
            config = dataclasses.replace(config, jobs=(*config.jobs, extra_job))
        env = {
            **function_environment(settings),
            **table_env(job_table(settings, config)),
            "GOOGLE_CLOUD_PROJECT": project,
            "FIRESTORE_DATABASE": "(default)",
            "FIRESTORE_EMULATOR_HOST": emulator_host,
        }
        return Served(settings, function_servers(env, port=port, launcher=launcher), db, log_path)

    return start


def _with_demo(settings: StackSettings, **changes: Any) -> StackSettings:
    """The dev stack whose demo job runs without sleeping, with `changes`."""
    return with_job(settings, DEMO_JOB, body={"sleep_seconds": 0}, **changes)


def _catching_up(settings: StackSettings, **changes: Any) -> StackSettings:
    return _with_demo(settings, catchup=Catchup(WINDOW_SECONDS, CatchupRuns.ALL), **changes)


# --- the audit's clock is Firestore's ---------------------------------------------------------


def test_a_forced_audit_judges_nothing_that_has_not_happened(serve, dev_settings) -> None:
    """`ops smoke` force-runs the audit: Cloud Scheduler sends the next hour's ScheduleTime.
    Judged by that time, the runs of the next hour would be reported missed (and page)."""
    function = serve(dev_settings)
    announced = _audit_time_before(_now()) + timedelta(hours=2)
    audit = function.deliver(function.audit_job, announced)
    assert (audit["outcome"], audit["trigger"]) == ("executed", "forced"), audit
    # Its horizon is its claim's commit (the record's claimed_at is the server's stamp of it).
    horizon = function.claimed_at(audit["run_id"]) + timedelta(seconds=1)
    missed = function.lines(audit["run_id"], log_fields.MISSED_RUN)
    assert missed  # nothing was delivered in the hour before: it is reported, as it should be
    for line in missed:
        assert parse_rfc3339(line["retry_window_closed"]) <= horizon, line


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (make test installs it)")
def test_an_instance_two_hours_ahead_catches_up_nothing_that_has_not_happened(serve, dev_settings) -> None:
    """A forced audit on an instance whose clock runs two hours ahead: judged on that clock,
    catch-up would deliver runs of the next two hours, which run as forced runs ahead of
    their time. Judged on Firestore's, it delivers only runs that were due."""
    function = serve(_catching_up(dev_settings), launcher=("faketime", "-f", "+7200s"))
    audit = function.deliver(function.audit_job, _audit_time_before(_now()) + timedelta(hours=2))
    assert (audit["outcome"], audit["trigger"]) == ("executed", "forced"), audit
    claimed = function.claimed_at(audit["run_id"]) + timedelta(seconds=1)  # the claim's stamp, then commit
    caught_up = [parse_rfc3339(entry["schedule_time"]) for entry in audit["output"]["caught_up"]]
    assert caught_up  # the three hours' demo runs nobody delivered
    window = timedelta(seconds=retry_window_seconds(function.settings, function.demo))
    assert all(at + window <= claimed for at in caught_up), caught_up
    executed = function.executed(function.demo)
    assert sorted(executed) == sorted(caught_up) and set(executed.values()) == {1}


# --- every run judged once, from where the last audit stopped ---------------------------------


def test_the_runs_of_an_outage_are_each_judged_by_the_first_audit_after_it(serve, dev_settings) -> None:
    """The function was down for six hours: the last completed audit stopped then. The first
    audit after it judges all six hours, not just its own interval."""
    function = serve(dev_settings)
    stopped = _now() - timedelta(hours=6)
    function.seed_last_audit(stopped)
    audit = function.deliver(function.audit_job, _audit_time_before(_now()))
    assert audit["outcome"] == "executed", audit
    until = function.claimed_at(audit["run_id"])  # the server's stamp of the audit's claim
    window = timedelta(seconds=retry_window_seconds(function.settings, function.demo))

    def due(up_to: datetime) -> set[datetime]:
        return {at for at in _quarters(stopped - window, up_to - window) if stopped < at + window <= up_to}

    missed = {
        parse_rfc3339(line[log_fields.SCHEDULE_TIME])
        for line in function.lines(audit["run_id"], log_fields.MISSED_RUN)
        if line[log_fields.JOB] == function.settings.scheduler_job_id(function.demo)
    }
    # The commit is at most a moment after the stamp.
    assert len(due(until)) >= 23 and due(until) <= missed <= due(until + timedelta(seconds=1))
    assert audit["output"]["judged_from"] == format_rfc3339(stopped)


def test_an_outage_longer_than_the_retention_is_judged_as_far_back_as_records_last(
    serve, dev_settings
) -> None:
    function = serve(dev_settings)
    function.seed_last_audit(_now() - timedelta(hours=30))
    audit = function.deliver(function.audit_job, _audit_time_before(_now()))
    output = audit["output"]
    until = parse_rfc3339(output["judged_until"])
    config = audit_config(function.settings)
    longest = max(job.retry_window_seconds for job in config.jobs)
    oldest = until - timedelta(seconds=function.settings.retention_seconds - longest)
    assert output["judged_from"] == output["not_judged_before"] == format_rfc3339(oldest)
    (summary,) = function.lines(audit["run_id"], log_fields.AUDIT_SUMMARY)
    assert "were not judged" in summary["message"]


# --- catch-up and the lifecycle ---------------------------------------------------------------


def test_catch_up_delivers_a_run_released_with_a_checkpoint(serve, dev_settings, db) -> None:
    """Every attempt of a run failed retryably, and the last one saved a checkpoint: the run is
    released (claimable at once), not absent. Catch-up delivers it, and it runs once."""
    function = serve(_catching_up(dev_settings))
    settings = function.settings
    now = _now()
    runs = _quarters(now - timedelta(seconds=WINDOW_SECONDS) - QUARTER, now)
    released_at = runs[len(runs) // 2]  # in the window, its retries long over
    for at in runs:
        if at != released_at:
            assert function.deliver(function.demo, at)["outcome"] == "executed"
    ledger = RunLedger(
        FirestoreRunStore(db, settings.runs_collection),
        lease=timedelta(seconds=30),
        retention=timedelta(days=1),
    )
    key = RunKey(settings.project, settings.region, settings.scheduler_job_id(function.demo), released_at)
    ledger.release(ledger.claim(key, "failed-attempt"), checkpoint_json='{"page":3}')

    audit = function.deliver(function.audit_job, _audit_time_before(_now()))

    assert [entry["run_id"] for entry in audit["output"]["caught_up"]] == [key.run_id], audit
    assert function.executed(function.demo)[released_at] == 1
    record = db.collection(settings.runs_collection).document(key.run_id).get().to_dict()
    assert (record["status"], record["checkpoint_json"]) == ("completed", None)


def test_a_resume_makes_none_of_the_pauses_runs_up(serve, dev_settings) -> None:
    """The demo job was paused two hours ago, an audit saw it paused, then it was resumed. The
    first audit after the resume catches up none of the runs the pause skipped."""
    now = _now()
    paused_at = now - timedelta(hours=2)
    paused = serve(
        _catching_up(dev_settings, paused=True, pause_recorded=True),
        pause_changed_at={"demo-every-15-minutes": paused_at},
    )
    before_pause = [at for at in _quarters(now - timedelta(seconds=WINDOW_SECONDS), paused_at)]
    for at in before_pause:
        assert paused.deliver(paused.demo, at)["outcome"] == "executed"
    paused.seed_last_audit(paused_at - timedelta(minutes=30))
    first = paused.deliver(paused.audit_job, _audit_time_before(now) - timedelta(hours=1))
    assert first["outcome"] == "executed" and first["output"]["caught_up"] == [], first

    resumed_at = _now()
    resumed = serve(
        _catching_up(dev_settings, paused=False, pause_recorded=True),
        pause_changed_at={"demo-every-15-minutes": resumed_at},
    )
    second = resumed.deliver(resumed.audit_job, _audit_time_before(_now()))

    assert second["outcome"] == "executed", second
    assert second["output"]["caught_up"] == []
    assert resumed.lines(second["run_id"], log_fields.CATCHUP_DELIVERY) == []
    assert all(at < paused_at for at in resumed.executed(resumed.demo))
    # What the first audit kept for the second: the pause, from the last audit's horizon (the
    # job may have been paused and resumed unseen before the change the stack recorded).
    assert first["output"]["pauses"] == {
        paused.settings.scheduler_job_id(paused.demo): [
            [format_rfc3339(paused_at - timedelta(minutes=30)), None]
        ]
    }


def test_runs_of_a_pause_that_began_and_ended_between_two_audits_are_not_missed(serve, dev_settings) -> None:
    """Paused and resumed between two audits: no audit saw the pause. The stack recorded when
    the key changed, and the runs between the last audit and the resume count as paused."""
    now = _now()
    last_audit = now - timedelta(hours=1, minutes=10)
    resumed_at = now - timedelta(minutes=50)
    function = serve(
        _with_demo(dev_settings, paused=False, pause_recorded=True),
        pause_changed_at={"demo-every-15-minutes": resumed_at},
    )
    function.seed_last_audit(last_audit)
    # Delivered before the pause began (after the last audit, before the resume's margin ended
    # nothing was), and since the job is back.
    for at in [
        *_quarters(now - timedelta(hours=2), last_audit),
        *_quarters(resumed_at + timedelta(minutes=30), now),
    ]:
        assert function.deliver(function.demo, at)["outcome"] == "executed"

    audit = function.deliver(function.audit_job, _audit_time_before(now))

    demo_id = function.settings.scheduler_job_id(function.demo)
    missed = [
        line
        for line in function.lines(audit["run_id"], log_fields.MISSED_RUN)
        if line[log_fields.JOB] == demo_id
    ]
    assert missed == []
    assert audit["output"]["paused"] >= 2, audit["output"]


# --- one job never stops the audit ------------------------------------------------------------


def test_a_schedule_that_never_fires_does_not_stop_the_audit_of_the_others(serve, dev_settings) -> None:
    never = AuditedJob(
        name="eos-dev_leap-day-twice", schedule="59 23 31 2 *", time_zone="Etc/UTC", retry_window_seconds=800
    )
    function = serve(dev_settings, extra_job=never)
    audit = function.deliver(function.audit_job, _audit_time_before(_now()))
    assert audit["outcome"] == "executed", audit
    (error,) = function.lines(audit["run_id"], log_fields.AUDIT_JOB_ERROR)
    assert error[log_fields.JOB] == never.name and "never fires" in error["error"]
    assert audit["output"]["errors"] == {never.name: error["error"]}
    judged = {line[log_fields.JOB] for line in function.lines(audit["run_id"], log_fields.MISSED_RUN)}
    assert function.settings.scheduler_job_id(function.demo) in judged


def test_a_catchup_window_wider_than_an_audit_walks_does_not_fail_the_audit(serve, dev_settings) -> None:
    """A job every minute with an eight-day window (11,520 runs, more than the 10,080 an audit
    walks), written by hand past the stack's check: walked to its newest runs, with a warning."""
    wide = AuditedJob(
        name="eos-dev_every-minute",
        schedule="* * * * *",
        time_zone="Etc/UTC",
        retry_window_seconds=120,
        catchup=Catchup(8 * 86400, CatchupRuns.LATEST),
        delivery=Delivery(
            headers={"X-CloudScheduler-JobName": "eos-dev_every-minute"}, body=b'{"sleep_seconds": 0}'
        ),
    )
    function = serve(dev_settings, extra_job=wide)
    audit = function.deliver(function.audit_job, _audit_time_before(_now()))
    assert audit["outcome"] == "executed", audit
    warnings = [
        line
        for line in function.lines(audit["run_id"])
        if "holds more runs than an audit walks" in line.get("message", "")
    ]
    assert [line[log_fields.JOB] for line in warnings] == [wide.name]


# --- a repeated wall time is one run ----------------------------------------------------------

FALL_BACK = datetime(2025, 10, 26, tzinfo=UTC)  # Europe/London: 01:00-02:00 BST, then GMT again
FIRST_0130 = datetime(2025, 10, 26, 0, 30, tzinfo=UTC)  # 01:30 BST
SECOND_0130 = datetime(2025, 10, 26, 1, 30, tzinfo=UTC)  # 01:30 GMT


@pytest.fixture
def london_stack(tmp_path: Path) -> Iterator[Path]:
    stack = yaml.safe_load((FIXTURE_STACKS / "Pulumi.dev.yaml").read_text())
    jobs = stack["config"]["exactly-once-scheduler:jobs"]
    jobs[:] = [{**jobs[0], "name": "london-0130", "schedule": "30 1 * * *", "timeZone": "Europe/London"}]
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    yield tmp_path


def test_a_repeated_wall_time_counts_as_delivered_when_its_second_instant_has_a_record(
    cli: Cli, db, london_stack: Path
) -> None:
    """Cloud Scheduler may fire 01:30 on the fall-back night at either instant. It fired at the
    second: the audit counts the night's run as delivered, and does not report the first."""
    settings = dataclasses.replace(cli, stacks_dir=london_stack)
    ledger = RunLedger(
        FirestoreRunStore(db, "scheduler_runs"), lease=timedelta(seconds=30), retention=timedelta(days=3650)
    )
    key = RunKey("my-gcp-project", "us-central1", "eos-dev_london-0130", SECOND_0130)
    ledger.complete(ledger.claim(key, "second-instant"))

    audit = settings(
        "audit", "--job", "london-0130", "--since", "2025-10-25T12:00:00Z", "--until", "2025-10-26T12:00:00Z"
    )

    assert audit.returncode == 0, audit.stdout + audit.stderr
    (line,) = [
        line for line in audit.stdout.splitlines() if "eos-dev_london-0130" in line and "T" in line[:20]
    ]
    assert line.startswith(format_rfc3339(SECOND_0130)) and "completed" in line


# --- a rename that keeps the job's runKey ------------------------------------------------------


def test_a_run_awaiting_its_retry_across_a_rename_is_caught_up_under_its_run_id(
    serve, dev_settings, db
) -> None:
    """Job `report-a` (runKey `report`): a run's attempt failed, and the run waited for its
    retry when the stack renamed the job `report-b`, keeping the runKey. The old Scheduler job,
    and the retry, went with the rename. The renamed stack's audit catches the run up through
    `report-b`'s headers, the ledger records it under the run id it always had, and the job's
    status (what `previous()` reads) carries on from the runs before the rename."""
    old = serve(_catching_up(dev_settings, name="report-a", run_key="report"))
    old_job = old.settings.job_named("report-a")
    now = _now()
    runs = _quarters(now - timedelta(seconds=WINDOW_SECONDS) - QUARTER, now)
    failed_at = runs[len(runs) // 2]  # in the window, its retries long over
    for at in runs:
        if at != failed_at:
            assert old.deliver(old_job, at)["outcome"] == "executed"
    failed = old.deliver(old_job, failed_at, body=b'{"fail": true, "sleep_seconds": 0}')
    assert failed["outcome"] == "failed_released", failed

    new = serve(_catching_up(dev_settings, name="report-b", run_key="report"))
    new_job = new.settings.job_named("report-b")
    settings = new.settings
    assert settings.scheduler_job_id(new_job) != old.settings.scheduler_job_id(old_job)
    renamed = RunKey(
        settings.project,
        settings.region,
        settings.scheduler_job_id(new_job),
        failed_at,
        run_key=settings.run_key_id(new_job),
    )
    assert renamed.run_id == failed["run_id"]
    statuses = JobStatuses(FirestoreRunStore(db, settings.runs_collection), settings.runs_collection)
    carried = statuses.last_success(renamed, timeout=30)
    assert carried is not None and carried.schedule_time == max(at for at in runs if at != failed_at)

    audit = new.deliver(new.audit_job, _audit_time_before(_now()))

    assert [entry["run_id"] for entry in audit["output"]["caught_up"]] == [failed["run_id"]], audit
    assert new.executed(new_job) == Counter({failed_at: 1})  # run once, as the renamed job
    assert failed_at not in old.executed(old_job)
    record = db.collection(settings.runs_collection).document(failed["run_id"]).get().to_dict()
    assert record["status"] == "completed"
    status = statuses.document(renamed).get().to_dict() or {}
    assert (status[LAST_SUCCESS]["run_id"], status[CONSECUTIVE_FAILURES]) == (failed["run_id"], 0)
