"""The watchdog's backstop, in a process of its own (it ends the process it is armed in): one
faulthandler timer for every attempt in the process, set for the earliest deadline."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from localrun import FUNCTION_DIR

# Two attempts arm the backstop, `soon` for half a second from now and `late` for ten
# minutes, in the order given; then the process does `then` and runs on for 3 s.
SCRIPT = """
import time
from exactly_once.delivery.heartbeat import Backstop

backstop = Backstop()
soon, late = object(), object()
deadlines = {{soon: time.monotonic() + 0.5, late: time.monotonic() + 600}}
for attempt in ({order}):
    backstop.arm(attempt, deadlines[attempt])
{then}
time.sleep(3)
print("still running")
"""


def run(order: str, then: str = "") -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(SCRIPT).format(order=order, then=then)
    return subprocess.run(
        [sys.executable, "-W", "ignore::FutureWarning", "-c", code],
        cwd=FUNCTION_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_earliest_deadline_ends_the_process_with_every_traceback_whoever_armed_last():
    for order in ("soon, late", "late, soon"):
        ended = run(order)
        assert ended.returncode == 1 and "still running" not in ended.stdout, order
        assert ended.stderr.startswith("Timeout (") and "most recent call first" in ended.stderr


def test_cancelling_one_attempt_keeps_the_others_deadline_and_the_last_cancel_disarms():
    assert run("late, soon", then="backstop.cancel(late)").returncode == 1
    assert run("late, soon", then="backstop.cancel(soon)").stdout == "still running\n"
    both = run("late, soon", then="backstop.cancel(soon); backstop.cancel(late)")
    assert (both.returncode, both.stdout, both.stderr) == (0, "still running\n", "")
