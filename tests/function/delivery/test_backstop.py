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


def test_a_released_attempt_leaves_the_timer_set_until_it_is_settled():
    # Released and never settled: the timer still ends the process at the released deadline.
    assert run("soon,", then="backstop.release(soon)").returncode == 1
    settled = run("soon,", then="backstop.release(soon); backstop.settle()")
    assert (settled.returncode, settled.stdout, settled.stderr) == (0, "still running\n", "")


def test_the_next_attempt_armed_before_the_settle_gets_its_own_deadline():
    # The second attempt arms after the first was released but before the first's watcher
    # settled: the timer is set for the second's deadline, and a late settle leaves it set.
    rearmed = run(
        "soon,", then="backstop.release(soon); backstop.arm(late, deadlines[late]); backstop.settle()"
    )
    assert (rearmed.returncode, rearmed.stdout) == (0, "still running\n")
    again = run(
        "late,",
        then="backstop.release(late); backstop.arm(soon, deadlines[soon]); backstop.settle()",
    )
    assert again.returncode == 1  # the new attempt's own (short) deadline still ends it


def test_releasing_one_attempt_re_arms_at_once_for_the_others():
    assert run("late, soon", then="backstop.release(late)").returncode == 1
    assert run("late, soon", then="backstop.release(soon)").stdout == "still running\n"
