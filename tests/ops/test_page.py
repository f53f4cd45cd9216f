"""`ops page` on the emulator's ledger, rendered by headless Chromium: every run the history
holds is on the page, in the job's row, and no row's label runs into another row or its runs.

The screenshot docs/operations.md shows is this test's: `PAGE_SCREENSHOT=docs/images/ops-page.png`
saves it there instead of the test's own directory."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from exactly_once.audit.schedule import fires
from exactly_once.delivery.scheduler_request import RunKey, Trigger
from exactly_once.ledger.lifecycle import JobResult
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from infra.plan.audit_job import with_audit_job
from infra.settings.samples import DEMO_JOB
from ops.context import StackContext
from ops.history import job_history
from ops.page import write_page
from tests.support.browser import MISSING, chromium, overlap, rendered_rows, screenshot
from tests.support.stacks import fixture_stack

NIGHTLY = "nightly-report"


@pytest.fixture
def context(project: str) -> StackContext:
    """The dev fixture stack's ledger on the emulator, holding runs of every kind the page
    colours: completed, skipped, in progress, never delivered, and a manual run."""
    context = StackContext("dev", with_audit_job(fixture_stack("dev")), project, "(default)")
    ledger = RunLedger(
        FirestoreRunStore(context.firestore(), context.settings.runs_collection),
        lease=timedelta(minutes=10),
        retention=timedelta(days=1),
    )
    now = datetime.now(UTC)
    for name in (DEMO_JOB, NIGHTLY):
        audited = context.audited(context.job(name))
        latest = fires(audited.schedule, audited.time_zone, now - timedelta(days=1), now, newest=6)
        keys = [RunKey(context.project, context.location, audited.name, fire.instant) for fire in latest]
        for index, key in enumerate(keys[:-1]):  # the latest never delivered
            claim = ledger.claim(key, f"attempt-{index}")
            if index == 1:
                ledger.complete(claim, JobResult.OVERLAP_SKIPPED, "another run held the job's lock")
            elif index != len(keys) - 2:  # the one before the latest stays in progress
                ledger.complete(claim)
        if name == DEMO_JOB:
            forced = RunKey(context.project, context.location, audited.name, now, Trigger.FORCED)
            ledger.complete(ledger.claim(forced, "manual"))
    return context


def test_the_page_is_one_file_that_fetches_nothing(context: StackContext, tmp_path: Path) -> None:
    page = write_page(context, tmp_path / "page.html", jobs=[DEMO_JOB, NIGHTLY], runs=6)
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html
    assert re.search(r"\b(src|href)=|url\(|@import", html) is None


def test_every_run_is_in_its_jobs_row_and_no_label_overlaps(context: StackContext, tmp_path: Path) -> None:
    binary = chromium()
    if binary is None:
        pytest.skip(MISSING)
    now = datetime.now(UTC)
    jobs = [
        DEMO_JOB,
        NIGHTLY,
        *(job.name for job in context.settings.jobs if job.name not in (DEMO_JOB, NIGHTLY)),
    ]
    page = write_page(context, tmp_path / "page.html", jobs=jobs, runs=6, now=now)
    rows = rendered_rows(binary, page, tmp_path)

    assert [row["job"] for row in rows] == jobs
    for row in rows:
        found = job_history(context, row["job"], last=6, now=now)
        expected = [entry["run_id"] for entry in reversed(found.runs)] + [""] * len(found.manual)
        assert [run["id"] for run in row["runs"]] == expected, row["job"]
        outcomes = [entry["outcome"] for entry in reversed(found.runs)] + ["manual"] * len(found.manual)
        assert [run["outcome"] for run in row["runs"]] == outcomes, row["job"]
        for run in row["runs"]:
            assert run["box"][2] > run["box"][0] and run["box"][3] > run["box"][1]  # laid out, visible
            assert not overlap(row["label"], run["box"]), (row["job"], run)
    demo = rows[0]["runs"]
    assert {run["outcome"] for run in demo} >= {"completed", "missed", "manual"}
    labels = [row["label"] for row in rows]
    for index, label in enumerate(labels):
        for other in labels[index + 1 :]:
            assert not overlap(label, other), (label, other)

    shot = screenshot(binary, page, Path(os.environ.get("PAGE_SCREENSHOT", tmp_path / "page.png")), tmp_path)
    assert shot.stat().st_size > 10_000  # a rendered page, not an empty canvas
