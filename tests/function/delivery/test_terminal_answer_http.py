"""A terminal failure says why in its answer, and so does every duplicate of it: whoever reads
the answer (Cloud Scheduler's log, the local demo, a person with curl) learns the reason the
ledger recorded without opening the function's logs."""

from __future__ import annotations

from tests.support.demo_runs import Body, deliver, run_record

BAD_BODY: Body = {"sleep_seconds": "slowly"}
REASON = "body field sleep_seconds must be a number"


def test_the_failed_attempt_and_its_duplicates_answer_the_recorded_reason(start_server, db):
    first, second = start_server(), start_server()

    failed = deliver(first, BAD_BODY)
    assert (failed.status_code, failed.json()["outcome"]) == (200, "failed_terminal")
    assert failed.json()["error"] == REASON
    assert run_record(db).to_dict()["error"] == REASON

    # The same instance answers from its memory of completed runs; another reads the ledger.
    for server in (first, second):
        duplicate = deliver(server, BAD_BODY)
        body = duplicate.json()
        assert (duplicate.status_code, body["outcome"], body["result"]) == (
            200,
            "duplicate_completed",
            "terminal_failure",
        )
        assert body["error"] == REASON


def test_a_succeeded_run_answers_no_error(start_server):
    server = start_server()
    assert "error" not in deliver(server).json()
    assert "error" not in deliver(server).json()
