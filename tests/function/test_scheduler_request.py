from __future__ import annotations

from datetime import UTC, datetime

import pytest
from scheduler_request import BadSchedulerRequest, RunKey, parse_rfc3339, run_key_from_headers

HEADERS = {
    "X-CloudScheduler-JobName": "nightly-report",
    "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z",
    "X-Job-Project": "acme-prod",
    "X-Job-Location": "europe-west1",
}


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
    other = {**HEADERS, "X-CloudScheduler-ScheduleTime": "2026-10-16T05:00:00-07:00"}
    assert run_key_from_headers(other).run_id == run_key_from_headers(HEADERS).run_id


@pytest.mark.parametrize(
    "change",
    [
        {"X-Job-Project": "acme-dev"},
        {"X-Job-Location": "us-central1"},
        {"X-CloudScheduler-JobName": "nightly-report-2"},
        {"X-CloudScheduler-ScheduleTime": "2026-10-16T12:05:00Z"},
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


@pytest.mark.parametrize("missing", ["X-CloudScheduler-JobName", "X-CloudScheduler-ScheduleTime"])
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
        run_key_from_headers({**HEADERS, "X-CloudScheduler-ScheduleTime": value})
    assert caught.value.header == "X-CloudScheduler-ScheduleTime"


def test_overlong_header_is_rejected():
    with pytest.raises(BadSchedulerRequest) as caught:
        run_key_from_headers({**HEADERS, "X-Job-Project": "p" * 501})
    assert caught.value.header == "X-Job-Project"


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
    key = run_key_from_headers({**HEADERS, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00.5Z"})
    assert key.schedule_time_rfc3339 == "2026-10-16T12:00:00.500000Z"
    assert run_key_from_headers(HEADERS).schedule_time_rfc3339 == "2026-10-16T12:00:00Z"
