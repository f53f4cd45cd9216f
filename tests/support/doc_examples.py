"""The code examples of docs/jobs.md, read as a forker copies them."""

from __future__ import annotations

import re
from pathlib import Path

JOBS_DOC = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
# "Your first job": the module, and its two tests, where a forker puts them.
JOB_MODULE = "jobs/my_job.py"
UNIT_TEST = "tests/jobs/test_my_job.py"
SERVED_TEST = "tests/jobs/test_my_job_served.py"
# "Continuing from the previous run": an incremental job built on RunContext.previous().
WATERMARK_JOB = "jobs/watermark.py"
# "A job's own day": a job's "yesterday" counted in its zone.
JOB_DAY = "jobs/yesterday.py"


def example_source(name: str) -> str:
    """The example block docs/jobs.md marks `<!-- example: name -->`."""
    text = JOBS_DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/jobs.md has no example block for {name}"
    return found.group(1)
