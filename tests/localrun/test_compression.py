"""The function's durations on the demo's compressed clock: floors derived from the ledger's
rules, and a speed-up the local run cannot honour refused before anything starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exactly_once.config import JOB_TABLE_ENV, JOB_TABLE_FILE, FunctionConfig, JobPolicy
from localrun import demo
from localrun.compression import (
    BUSY_ROUND_TRIP_SECONDS,
    SLOWEST_ROUND_TRIP_ENV,
    WARM_UP_JOB,
    CompressedTiming,
    claim_budget_seconds,
    lease_floor_seconds,
    per_call_seconds,
    slowest_round_trip_seconds,
)
from localrun.demo import load_settings
from localrun.verdicts import EXIT_CANNOT_RUN
from tests.support.stacks import fixture_stack


@pytest.fixture
def settings():
    return load_settings(None)


@pytest.mark.parametrize("round_trip", [0.25, 1.0, 1.5])
def test_the_lease_floor_gives_one_firestore_call_the_round_trip(round_trip):
    floor = lease_floor_seconds(round_trip)
    assert per_call_seconds(floor) == pytest.approx(round_trip)
    assert per_call_seconds(floor * 0.9) < round_trip  # and it is the shortest such lease


def test_a_round_trip_longer_than_any_ledger_call_may_take_has_no_floor():
    with pytest.raises(ValueError, match="longer than any ledger call"):
        lease_floor_seconds(per_call_seconds(1e9) * 2)  # a lease of 30 years gives a call no more


def test_the_demo_default_floors_the_lease_and_the_time_limit(settings):
    job = settings.jobs[0]
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)

    # 30 s / 20 would give a Firestore call a quarter of a second.
    assert settings.lease_seconds / 20 < compressed.lease_seconds == lease_floor_seconds(1.0)
    # A claim may take its whole budget and still leave the job a round trip.
    assert compressed.time_limit_seconds == claim_budget_seconds(compressed.lease_seconds) + 1.0
    assert compressed.time_limit_seconds > settings.time_limit_seconds / 20
    # The timeout's margin and the deadline's distance to the timeout are compressed as usual.
    margin = (settings.function_timeout_seconds - settings.time_limit_seconds) / 20
    assert compressed.function_timeout_seconds - compressed.time_limit_seconds == pytest.approx(margin)
    distance = (job.attempt_deadline_seconds - settings.function_timeout_seconds) / 20
    deadline = compressed.attempt_deadline_seconds(settings, job)
    assert deadline - compressed.function_timeout_seconds == pytest.approx(distance)
    assert "lease" in compressed.floors() and "time limit" in compressed.floors()
    assert compressed.problems(settings, job) == []


def test_without_compression_nothing_is_floored(settings):
    job = settings.jobs[0]
    compressed = CompressedTiming.of(settings, 1.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    assert compressed.lease_seconds == settings.lease_seconds
    assert compressed.time_limit_seconds == settings.time_limit_seconds
    assert compressed.function_timeout_seconds == settings.function_timeout_seconds
    assert compressed.attempt_deadline_seconds(settings, job) == job.attempt_deadline_seconds
    assert compressed.floors() == ""
    stack = dataclasses.replace(settings.job_timing(job), time_limit_seconds=settings.time_limit_seconds)
    assert compressed.job_timing(settings, job) == stack


def test_the_function_reads_the_compressed_durations_it_is_given(settings, tmp_path):
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=1.5)
    env = compressed.function_env(
        settings, firestore_project="demo-x", emulator_host="127.0.0.1:1", table_dir=tmp_path
    )
    config = FunctionConfig.from_env(env)
    assert config.lease_seconds == compressed.lease_seconds
    assert config.time_limit_seconds == compressed.time_limit_seconds
    assert config.retention_seconds == compressed.retention_seconds
    assert (config.project, env["FIRESTORE_EMULATOR_HOST"]) == ("demo-x", "127.0.0.1:1")
    # The job table is the caller's to clean up: written in the directory it was given, nowhere else.
    assert [path.name for path in tmp_path.iterdir()] == [JOB_TABLE_FILE]
    assert Path(env[JOB_TABLE_ENV]) == tmp_path / JOB_TABLE_FILE


def test_a_speedup_whose_floored_lease_outlasts_the_retries_is_named(settings):
    job = settings.jobs[0]
    compressed = CompressedTiming.of(settings, 1000.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    (problem,) = [p for p in compressed.problems(settings, job) if "retry-outlives-lease" in p]
    assert problem.startswith("at speed-up x1000 ")


def test_the_demo_refuses_such_a_speedup_before_starting_anything(capsys, tmp_path):
    assert demo.main(["--speedup", "1000", "--output-dir", str(tmp_path / "out")]) == EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert "x1000" in err and "retry-outlives-lease" in err and "smaller --speedup" in err
    assert "starting the Firestore emulator" not in err
    assert not (tmp_path / "out").exists()


def test_a_negative_round_trip_time_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--firestore-rtt-ms", "-5"])
    assert exit_info.value.code == 2
    assert "--firestore-rtt-ms" in capsys.readouterr().err


def test_a_job_with_a_limit_of_its_own_is_compressed_from_it(tmp_path):
    """The local function serves the one job under test: its time limit is that job's own, and
    Scheduler waits as long for it, relative to that limit, as in the cloud."""
    settings = fixture_stack("prod")  # a 295 s function time limit
    job = dataclasses.replace(settings.jobs[0], time_limit_seconds=55.0, attempt_deadline_seconds=60.0)
    compressed = CompressedTiming.of(settings, 1.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS, job=job)
    assert compressed.time_limit_seconds == 55.0
    assert compressed.attempt_deadline_seconds(settings, job) == 60.0
    env = compressed.function_env(
        settings, firestore_project="p", emulator_host="127.0.0.1:1", table_dir=tmp_path
    )
    assert env["JOB_TIME_LIMIT_SECONDS"] == "55.0"
    # No job keeps a limit of its own in the local table, nor a starting deadline.
    local = FunctionConfig.from_env(env)
    assert all(
        policy.time_limit_seconds is None and policy.starting_deadline_seconds is None
        for policy in local.jobs.values()
    )


def test_the_local_function_serves_the_warm_up_job_as_one_that_names_no_handler(settings, tmp_path):
    """The warm-up (localrun/instances.py) delivers a job of its own, which no report counts:
    the function runs only the jobs its table names, so the local table names it too, with
    nothing of its own, as the stack's jobs that name no handler."""
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    env = compressed.function_env(
        settings, firestore_project="p", emulator_host="127.0.0.1:1", table_dir=tmp_path
    )
    local = FunctionConfig.from_env(env)
    warm_up = settings.scheduler_job_id(WARM_UP_JOB)
    assert local.jobs[warm_up] == JobPolicy()


def test_a_busier_machine_floors_the_lease_for_its_slowest_round_trip(monkeypatch, settings):
    """CI serves the demo and the soak beside the test suite: it says how slow a round trip
    gets there, and the lease gives one Firestore call that long."""
    monkeypatch.setenv(SLOWEST_ROUND_TRIP_ENV, "3")
    assert slowest_round_trip_seconds() == 3.0
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=slowest_round_trip_seconds())
    assert compressed.lease_seconds == lease_floor_seconds(3.0) == 3 * lease_floor_seconds(1.0)
    monkeypatch.delenv(SLOWEST_ROUND_TRIP_ENV)
    assert slowest_round_trip_seconds() == BUSY_ROUND_TRIP_SECONDS


@pytest.mark.parametrize("value", ["fast", "0.5", "inf", "nan"])
def test_a_slowest_round_trip_that_is_no_number_of_seconds_is_refused_by_name(monkeypatch, capsys, value):
    monkeypatch.setenv(SLOWEST_ROUND_TRIP_ENV, value)
    with pytest.raises(ValueError, match=SLOWEST_ROUND_TRIP_ENV):
        slowest_round_trip_seconds()
    assert demo.main(["--output-dir", "unused"]) == EXIT_CANNOT_RUN
    assert SLOWEST_ROUND_TRIP_ENV in capsys.readouterr().err
