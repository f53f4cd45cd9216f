"""A delivery's report renders its log line: the fields a delivery learned, in the order it
learns them; a field it never learned is left out, one it learned as None is written null."""

from __future__ import annotations

from datetime import UTC, datetime

from exactly_once.config import OverlapPolicy
from exactly_once.delivery.outcomes import Outcome
from exactly_once.delivery.report import DeliveryReport
from exactly_once.ledger.downstream import Downstream, DownstreamState
from exactly_once.run_key import RunKey, Trigger

KEY = RunKey("acme", "europe-west1", "nightly", datetime(2026, 10, 16, 12, tzinfo=UTC), Trigger.FORCED)


def test_a_run_that_ran_is_logged_in_the_order_it_went() -> None:
    report = DeliveryReport(key=KEY, attempt_id="a-1", overlap=OverlapPolicy.SKIP, job_returned=False)
    report.renewals, report.staged_writes = 2, 0
    report.downstream = Downstream("kind", "work-1", DownstreamState.RUNNING)
    report.error, report.latency_ms = "boom", 12.5
    assert list(report.log_fields(Outcome.FAILED_RELEASED).items()) == [
        ("outcome", "failed_released"),
        ("run_id", KEY.run_id),
        ("job", "nightly"),
        ("schedule_time", "2026-10-16T12:00:00Z"),
        ("trigger", "forced"),
        ("project", "acme"),
        ("location", "europe-west1"),
        ("attempt_id", "a-1"),
        ("overlap", "skip"),
        ("job_returned", False),
        ("renewals", 2),
        ("downstream_name", "work-1"),
        ("downstream_state", "running"),
        ("error", "boom"),
        ("latency_ms", 12.5),
    ]


def test_an_unknown_holder_is_written_null_and_an_unlearned_one_left_out() -> None:
    held = DeliveryReport(holder_run_id=None, retry_after_s=1).log_fields(Outcome.OVERLAP_WAIT)
    assert held == {"outcome": "overlap_wait", "holder_run_id": None, "retry_after_s": 1}
    assert DeliveryReport().log_fields(Outcome.BAD_REQUEST) == {"outcome": "bad_request"}


def test_a_duplicate_answered_from_memory_says_so_after_its_result() -> None:
    report = DeliveryReport(key=KEY, result="succeeded", cached=True, body_mismatch=True)
    assert list(report.log_fields(Outcome.DUPLICATE_COMPLETED))[-3:] == ["result", "cached", "body_mismatch"]
