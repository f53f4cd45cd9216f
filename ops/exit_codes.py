"""The CLI's exit statuses, defined once: `--help`, docs/operations.md and the tests read them here.

A script calling `python -m ops audit` must tell a missed run (page someone) from a machine
that cannot ask Google Cloud (fix the credentials, ask again) and from a wrong command line
(fix the script): each is its own status, and nothing else exits with it.
"""

from __future__ import annotations

import textwrap
from enum import IntEnum


class ExitCode(IntEnum):
    """What a command's exit status means; each member's `meaning` is the one line shown."""

    OK = 0
    RUN_PROBLEM = 1
    USAGE_ERROR = 2
    CLOUD_UNREACHABLE = 3

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "done: nothing missed, every smoke step passed, the function accepted the delivery",
    ExitCode.RUN_PROBLEM: (
        "the answer is a problem with a run: a run was missed (audit), a smoke step failed, a manual "
        "run (run-now) failed or did not complete, the function did not accept a delivery, or redo "
        "refused an unfinished run"
    ),
    ExitCode.USAGE_ERROR: (
        "the command was wrong (unknown stack or job, a bad flag or time, a time off the job's "
        "schedule, an invalid stack config): one line on stderr says what; nothing was done"
    ),
    ExitCode.CLOUD_UNREACHABLE: (
        "Google Cloud could not be asked: no usable credentials, no connection, an API call refused, "
        "or a request stopped before the function; nothing was judged, ask again once that is fixed"
    ),
}


def exit_codes_text(width: int = 100) -> str:
    """The table `--help` ends with: each status, its meaning wrapped beside it."""
    lines = ["exit status:"]
    for code in ExitCode:
        lines += textwrap.wrap(
            code.meaning, width, initial_indent=f"  {code.value}  ", subsequent_indent=" " * 5
        )
    return "\n".join(lines)
