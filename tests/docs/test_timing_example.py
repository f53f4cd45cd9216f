"""docs/timing.md shows what a bad config prints: the example must be what the checks print."""

from __future__ import annotations

import re

import pytest

from infra.config.schema import REPO_ROOT, SettingsError
from tests.infra.conftest import build

# The config the page describes: a groc schedule, a retention of 600 s, an hourly job with a
# single retry (every other value the defaults).
JOBS = [
    {"name": "report", "schedule": "every 5 minutes"},
    {"name": "sync", "schedule": "0 * * * *", "retry": {"retryCount": 1}},
]


def _shortened(line: str) -> str:
    """The page lists a long run of config keys as its first and last, joined by '…'."""
    match = re.match(r"^(  - )([^ ]+(?:, [^ ]+)+): (.*)$", line)
    if match is None:
        return line
    keys = match[2].split(", ")
    return f"{match[1]}{keys[0]}, …, {keys[-1]}: {match[3]}"


def test_the_bad_config_example_is_what_the_checks_print() -> None:
    page = (REPO_ROOT / "docs" / "timing.md").read_text(encoding="utf-8")
    section = page.split("## A bad config fails before any resource is touched", 1)[1]
    shown = re.search(r"```\n(invalid config.*?)```", section, flags=re.S)
    assert shown is not None
    with pytest.raises(SettingsError) as refused:
        build({"functionTimeoutSeconds": 60, "retentionSeconds": 600, "jobs": JOBS}, stack="dev")
    printed = "\n".join(_shortened(line) for line in str(refused.value).splitlines())
    assert printed == shown[1].rstrip("\n")
