from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    BadSchedulerRequest,
    run_key_from_headers,
)
from exactly_once.run_key import RunKey, format_rfc3339, parse_rfc3339

HEADERS = {
    JOB_NAME_HEADER: "nightly-report",
    SCHEDULE_TIME_HEADER: "2026-10-16T12:00:00Z",
    PROJECT_HEADER: "acme-prod",
    LOCATION_HEADER: "europe-west1",
}


def test_the_header_names_are_the_ones_cloud_scheduler_and_the_stack_send():
    """Everything else imports these names; this is the one place they are spelled out."""
    assert JOB_NAME_HEADER == "X-CloudScheduler-JobName"
    assert SCHEDULE_TIME_HEADER == "X-CloudScheduler-ScheduleTime"
    assert (PROJECT_HEADER, LOCATION_HEADER) == ("X-Job-Project", "X-Job-Location")


@pytest.mark.parametrize(
    "instant, text",
    [
        (datetime(2026, 10, 16, 12, tzinfo=UTC), "2026-10-16T12:00:00Z"),
        (datetime(2026, 10, 16, 12, 0, 0, 500_000, tzinfo=UTC), "2026-10-16T12:00:00.500000Z"),
        (datetime(2026, 10, 16, 5, tzinfo=timezone(timedelta(hours=-7))), "2026-10-16T12:00:00Z"),
    ],
)
def test_times_are_written_in_utc_with_z_and_whole_seconds_as_scheduler_does(instant, text):
    assert format_rfc3339(instant) == text
    assert parse_rfc3339(text) == instant


@pytest.mark.parametrize(
    "transform",
    [str.lower, str.upper, lambda name: name.title(), lambda name: name],
    ids=["http2-lower", "upper", "http1-titled", "as-sent"],
)
def test_headers_are_looked_up_case_insensitively(transform):
    key = run_key_from_headers({transform(k): v for k, v in HEADERS.items()})
    assert key == run_key_from_headers(HEADERS)
    assert key.job_name == "nightly-report" and key.project == "acme-prod"


def test_run_id_is_sha256_hex_of_the_canonical_tuple():
    run_id = run_key_from_headers(HEADERS).run_id
    assert len(run_id) == 64 and int(run_id, 16) >= 0


def test_same_instant_in_another_offset_is_the_same_run():
    other = {**HEADERS, SCHEDULE_TIME_HEADER: "2026-10-16T05:00:00-07:00"}
    assert run_key_from_headers(other).run_id == run_key_from_headers(HEADERS).run_id


@pytest.mark.parametrize(
    "change",
    [
        {PROJECT_HEADER: "acme-dev"},
        {LOCATION_HEADER: "us-central1"},
        {JOB_NAME_HEADER: "nightly-report-2"},
        {SCHEDULE_TIME_HEADER: "2026-10-16T12:05:00Z"},
    ],
)
def test_each_part_of_the_tuple_separates_runs(change):
    assert run_key_from_headers({**HEADERS, **change}).run_id != run_key_from_headers(HEADERS).run_id


def test_fields_cannot_bleed_into_each_other():
    a = RunKey("p", "l/x", "job", datetime(2026, 1, 1, tzinfo=UTC))
    b = RunKey("p", "l", "x/job", datetime(2026, 1, 1, tzinfo=UTC))
    assert a.run_id != b.run_id


def test_disambiguation_headers_are_optional():
    key = run_key_from_headers({k: v for k, v in HEADERS.items() if not k.startswith("X-Job")})
    assert (key.project, key.location) == ("", "")


@pytest.mark.parametrize("missing", [JOB_NAME_HEADER, SCHEDULE_TIME_HEADER])
def test_missing_header_names_the_header(missing):
    with pytest.raises(BadSchedulerRequest) as caught:
        run_key_from_headers({k: v for k, v in HEADERS.items() if k != missing})
    assert caught.value.header == missing
    assert missing in str(caught.value)


@pytest.mark.parametrize(
    "value",
    ["2026-10-16", "2026-10-16T12:00:00", "every 5 minutes", "2026-13-16T12:00:00Z", "1760616000", " "],
)
def test_schedule_time_must_be_rfc3339_with_offset(value):
    with pytest.raises(BadSchedulerRequest) as caught:
        run_key_from_headers({**HEADERS, SCHEDULE_TIME_HEADER: value})
    assert caught.value.header == SCHEDULE_TIME_HEADER


def test_overlong_header_is_rejected():
    with pytest.raises(BadSchedulerRequest) as caught:
        run_key_from_headers({**HEADERS, PROJECT_HEADER: "p" * 501})
    assert caught.value.header == PROJECT_HEADER


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-10-16T12:00:00Z", datetime(2026, 10, 16, 12, tzinfo=UTC)),
        ("2026-10-16t05:00:00-07:00", datetime(2026, 10, 16, 12, tzinfo=UTC)),
        ("2026-10-16T12:00:00.123456789Z", datetime(2026, 10, 16, 12, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_parse_rfc3339_normalises_to_utc(text, expected):
    assert parse_rfc3339(text) == expected


def test_canonical_schedule_time_keeps_fractions():
    key = run_key_from_headers({**HEADERS, SCHEDULE_TIME_HEADER: "2026-10-16T12:00:00.5Z"})
    assert key.schedule_time_rfc3339 == "2026-10-16T12:00:00.500000Z"
    assert run_key_from_headers(HEADERS).schedule_time_rfc3339 == "2026-10-16T12:00:00Z"
