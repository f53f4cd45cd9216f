"""The audit's rules on a ledger in memory (function/exactly_once/testing/memory_store.py, which passes the
Firestore store's conformance suite), with times the test chooses: a repeated wall time is one
run; the pause history a resume keeps; how far back an audit judges."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once.audit.catchup import job_candidates
from exactly_once.audit.config import (
    MAX_CATCHUP_WINDOW_RUNS,
    AuditConfig,
    AuditedJob,
    Catchup,
    CatchupRuns,
    Delivery,
    Redelivery,
)
from exactly_once.audit.pauses import (
    RESUME_MARGIN,
    Pause,
    history_from_json,
    history_to_json,
    observe,
    paused_at,
)
from exactly_once.audit.run import judged_span
from exactly_once.audit.schedule import FireTime, fires
from exactly_once.ledger.lifecycle import Verdict
from exactly_once.ledger.protocol import RunLedger
from exactly_once.run_key import RunKey
from exactly_once.testing.memory_store import MemoryRunStore, ServerClock, stored_record_reader
from tests.support.audit_runs import RecordingSender, reader_of, run_in_process

LEASE = timedelta(seconds=30)
# Europe/London falls back on 2026-10-25: 01:00-02:00 happens in BST, then again in GMT.
FIRST_0130 = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
SECOND_0130 = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
NIGHTLY = AuditedJob(
    name="nightly",
    schedule="30 1 * * *",
    time_zone="Europe/London",
    retry_window_seconds=900,
    catchup=Catchup(86400, CatchupRuns.ALL),
)


def test_a_wall_time_a_fall_back_repeats_is_one_run_with_two_instants() -> None:
    night = fires(NIGHTLY.schedule, NIGHTLY.time_zone, FIRST_0130 - timedelta(hours=1), SECOND_0130)
    assert night == [FireTime(FIRST_0130, SECOND_0130)]
    # Spring forward: 01:30 never happens in London on 2026-03-29, so nothing fires that night.
    spring = fires(
        NIGHTLY.schedule,
        NIGHTLY.time_zone,
        datetime(2026, 3, 29, tzinfo=UTC),
        datetime(2026, 3, 29, 6, tzinfo=UTC),
    )
    assert spring == []


@pytest.fixture
def store() -> MemoryRunStore:
    return MemoryRunStore(clock=ServerClock(SECOND_0130 + timedelta(hours=6)))


def ledger_on(store: MemoryRunStore) -> RunLedger:
    return RunLedger(store, lease=LEASE, retention=timedelta(days=3), monotonic=store.clock.monotonic)


def night_candidates(store: MemoryRunStore) -> list[tuple[datetime, Verdict]]:
    window = job_candidates(
        NIGHTLY,
        project="acme",
        location="europe-west2",
        now=store.clock.now(),
        read_records=stored_record_reader(store),
        lease=LEASE,
    )
    return [(run.schedule_time, run.state) for run in window.chosen]


def key(at: datetime) -> RunKey:
    return RunKey("acme", "europe-west2", "nightly", at)


def test_catch_up_delivers_a_repeated_wall_time_once_at_its_first_instant(store: MemoryRunStore) -> None:
    assert night_candidates(store) == [(FIRST_0130, Verdict.MISSED)]


def test_a_record_at_the_second_instant_means_the_night_was_delivered(store: MemoryRunStore) -> None:
    ledger = ledger_on(store)
    ledger.complete(ledger.claim(key(SECOND_0130), "second"))
    assert night_candidates(store) == []


def test_a_run_given_back_at_the_second_instant_is_caught_up_there(store: MemoryRunStore) -> None:
    """Its checkpoint is at that instant's record: catch-up resumes it, never starts the first."""
    ledger = ledger_on(store)
    ledger.release(ledger.claim(key(SECOND_0130), "second"), checkpoint_json='{"page":2}')
    assert night_candidates(store) == [(SECOND_0130, Verdict.MISSED)]


# --- pauses ------------------------------------------------------------------------------------

T = datetime(2026, 11, 30, 12, tzinfo=UTC)
HOURLY = AuditedJob(name="hourly", schedule="0 * * * *", time_zone="Etc/UTC", retry_window_seconds=600)


def job(*, paused: bool, changed: datetime | None) -> AuditedJob:
    return AuditedJob(
        HOURLY.name, HOURLY.schedule, HOURLY.time_zone, 600, paused=paused, pause_changed_at=changed
    )


def test_a_pause_seen_by_an_audit_ends_at_the_recorded_resume_plus_the_deploys_margin() -> None:
    history = observe(
        {},
        [job(paused=True, changed=T - timedelta(hours=5))],
        horizon=T,
        previous_horizon=T - timedelta(hours=1),
        keep_since=T - timedelta(days=1),
    )
    assert history == {"hourly": (Pause(T - timedelta(hours=5)),)}
    later = T + timedelta(hours=3)
    resumed = observe(
        history_from_json(history_to_json(history)),  # as the next audit reads it back
        [job(paused=False, changed=T + timedelta(hours=2))],
        horizon=later,
        previous_horizon=T,
        keep_since=later - timedelta(days=1),
    )
    (pause,) = resumed["hourly"]
    assert pause == Pause(T - timedelta(hours=5), T + timedelta(hours=2) + RESUME_MARGIN)
    assert paused_at(resumed, "hourly", T + timedelta(hours=2, minutes=20))
    assert not paused_at(resumed, "hourly", T + timedelta(hours=2, minutes=31))
    assert not paused_at(resumed, "hourly", T - timedelta(hours=5, minutes=1))


def test_without_recorded_changes_a_pause_is_bounded_by_the_audits_that_saw_it() -> None:
    """The key was removed rather than set false: the pause ends where the first audit that
    saw the job running stops; nothing says when it began, so it covers all the audit keeps."""
    seen = observe(
        {},
        [job(paused=True, changed=None)],
        horizon=T,
        previous_horizon=T - timedelta(hours=1),
        keep_since=T - timedelta(days=1),
    )
    assert seen == {"hourly": (Pause(T - timedelta(days=1)),)}
    ended = observe(
        seen,
        [job(paused=False, changed=None)],
        horizon=T + timedelta(hours=1),
        previous_horizon=T,
        keep_since=T,
    )
    assert ended == {"hourly": (Pause(T - timedelta(days=1), T + timedelta(hours=1)),)}


def test_a_pause_no_audit_saw_runs_from_the_last_audit_to_the_recorded_resume() -> None:
    between = observe(
        {},
        [job(paused=False, changed=T - timedelta(minutes=20))],
        horizon=T,
        previous_horizon=T - timedelta(hours=1),
        keep_since=T - timedelta(days=1),
    )
    assert between == {"hourly": (Pause(T - timedelta(hours=1), T - timedelta(minutes=20) + RESUME_MARGIN),)}
    # A change before the last audit was seen by it: nothing to infer.
    quiet = observe(
        {},
        [job(paused=False, changed=T - timedelta(hours=2))],
        horizon=T,
        previous_horizon=T - timedelta(hours=1),
        keep_since=T - timedelta(days=1),
    )
    assert quiet == {}


def test_pauses_older_than_the_retention_are_forgotten() -> None:
    old = {"hourly": (Pause(T - timedelta(days=3), T - timedelta(days=2)),)}
    assert (
        observe(
            old,
            [job(paused=False, changed=T - timedelta(days=2))],
            horizon=T,
            previous_horizon=T,
            keep_since=T - timedelta(days=1),
        )
        == {}
    )


# --- how far back an audit judges -------------------------------------------------------------


def test_an_audit_judges_from_the_last_one_bounded_by_the_records_retention() -> None:
    config = AuditConfig(jobs=(HOURLY,), interval_seconds=3600)
    day = timedelta(days=1)
    first = judged_span(config, T, None, day)
    assert (first.since, first.until, first.not_judged) == (T - timedelta(hours=1), T, None)
    after_outage = judged_span(config, T, T - timedelta(hours=6), day)
    assert (after_outage.since, after_outage.not_judged) == (T - timedelta(hours=6), None)
    too_long = judged_span(config, T, T - timedelta(days=3), day)
    assert too_long.since == too_long.not_judged == T - day + timedelta(seconds=600)


# --- a catch-up window's size -------------------------------------------------------------------

MINUTELY = AuditedJob(name="minutely", schedule="* * * * *", time_zone="Etc/UTC", retry_window_seconds=120)


@pytest.mark.parametrize(("days", "truncated"), [(7, False), (8, True)])
def test_a_window_is_walked_to_the_runs_an_audit_walks_and_no_further(days: int, truncated: bool) -> None:
    """(now - windowSeconds, now]: seven days of a job every minute, judged on the minute, are
    exactly the 10,080 runs the stack allows; eight days are walked to their newest 10,080."""
    store = MemoryRunStore(clock=ServerClock(T))
    job = dataclasses.replace(MINUTELY, catchup=Catchup(days * 86400, CatchupRuns.ALL))
    window = job_candidates(
        job, project="acme", location="l", now=T, read_records=stored_record_reader(store), lease=LEASE
    )
    assert window.truncated is truncated
    assert len(window.chosen) == MAX_CATCHUP_WINDOW_RUNS - 2  # the last two still inside their retries
    assert window.chosen[0].schedule_time == T - timedelta(days=7) + timedelta(minutes=1)


def test_a_job_paused_with_no_recorded_change_has_none_of_its_runs_delivered_or_missed() -> None:
    """Nothing says since when the job is paused (no `pause_changed_at`, no earlier audit): a
    first audit with catch-up must deliver none of the window's runs, though the window reaches
    hours further back than the audit's span, and report none of them missed."""
    paused = AuditedJob(
        name="hourly",
        schedule="*/15 * * * *",
        time_zone="Etc/UTC",
        retry_window_seconds=900,
        paused=True,
        catchup=Catchup(3 * 3600, CatchupRuns.ALL),
        delivery=Delivery(headers={"X-CloudScheduler-JobName": "hourly"}),
    )
    config = AuditConfig(
        jobs=(paused,), interval_seconds=3600, redeliveries=(Redelivery(url="http://127.0.0.1:9/"),)
    )
    send = RecordingSender()
    outcome = run_in_process(
        config,
        reader_of({}),
        send,
        project="acme",
        location="l",
        job_name="audit",
        when=T + timedelta(minutes=7),
        lease=LEASE,
        retention=timedelta(days=1),
    )
    assert send.sent == [] and outcome.caught_up() == []
    assert outcome.missed() == set() and outcome.output["paused"] == 4


def test_changes_no_audit_saw_count_as_paused_back_to_the_last_audit() -> None:
    """The stack records only the latest change of the key. Paused, resumed and paused again
    within the hour: the audit sees one pause, which must cover the first too. Paused and
    resumed before any audit completed: as far back as the audit looks."""
    again = observe(
        {},
        [job(paused=True, changed=T - timedelta(minutes=10))],
        horizon=T,
        previous_horizon=T - timedelta(hours=1),
        keep_since=T - timedelta(days=1),
    )
    assert again == {"hourly": (Pause(T - timedelta(hours=1)),)}
    first = observe(
        {},
        [job(paused=False, changed=T - timedelta(minutes=10))],
        horizon=T,
        previous_horizon=None,
        keep_since=T - timedelta(days=1),
    )
    assert first == {"hourly": (Pause(T - timedelta(days=1), T - timedelta(minutes=10) + RESUME_MARGIN),)}
