"""docs/timing.md shows what a bad config prints: the example must be what the checks print."""

from __future__ import annotations

import re
from datetime import date

import pytest

from infra.config.schema import REPO_ROOT
from infra.settings.timing_checks import timing_advisories
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from tests.infra.conftest import build
from tools.fork_check import Finding

# The config the page describes: a groc schedule, a retention of 600 s, an hourly job with a
# single retry (every other value the defaults, and a handler that runs every job: the page is
# about timing, and a job without one is refused on its own).
HANDLER = {"jobHandler": "jobs.demo:run_demo_job"}
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
        build({**HANDLER, "functionTimeoutSeconds": 60, "retentionSeconds": 600, "jobs": JOBS}, stack="dev")
    printed = "\n".join(_shortened(line) for line in str(refused.value).splitlines())
    assert printed == shown[1].rstrip("\n")


def _section_blocks(heading: str) -> list[str]:
    page = (REPO_ROOT / "docs" / "timing.md").read_text(encoding="utf-8")
    section = page.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return [block.rstrip("\n") for block in re.findall(r"```\n(.*?)```", section, flags=re.S)]


def _refusal(values: dict[str, object]) -> list[str]:
    with pytest.raises(SettingsError) as refused:
        build({**HANDLER, **values}, stack="dev")
    return [_shortened(line).removeprefix("  - ") for line in str(refused.value).splitlines()[1:]]


def test_the_schedule_examples_are_what_the_checks_print() -> None:
    """The never-firing schedule, the spring-forward gap, the clock-change advisory and the
    crowded catch-up window, as docs/timing.md shows them."""
    never, spring, advisory, crowded = _section_blocks("Schedules, time zones and clock changes")
    assert [never] == _refusal({"jobs": [{"name": "report", "schedule": "59 23 31 2 *"}]})
    bihourly = {
        "name": "bihourly",
        "schedule": "0 */2 * * *",
        "timeZone": "Europe/London",
        "retry": {"retryCount": 1, "minBackoffSeconds": 3600, "maxBackoffSeconds": 3600},
    }
    assert [spring] == _refusal({"functionTimeoutSeconds": 60, "jobs": [bihourly]})
    nightly = build(
        {**HANDLER, "jobs": [{"name": "nightly", "schedule": "30 1 * * *", "timeZone": "Europe/London"}]}
    )
    shown = [
        str(Finding("Pulumi.dev.yaml", text, advisory=True))
        for text in timing_advisories(nightly, date(2027, 1, 1))
    ]
    assert shown == [advisory]
    minutely = {
        "name": "minutely",
        "schedule": "* * * * *",
        "retry": {"retryCount": 1, "minBackoffSeconds": 45},
        "catchup": {"windowSeconds": 691200},
    }
    ten_days = {"retentionSeconds": 864000, "idempotencyRetentionSeconds": 864000}
    assert [crowded] == _refusal({"functionTimeoutSeconds": 60, **ten_days, "jobs": [minutely]})
