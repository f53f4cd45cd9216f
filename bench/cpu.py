"""The CPU time a serving process spends, read from outside it, to the nanosecond.

Wall time on a shared machine says little about what a delivery costs on an instance with a
sixth of a vCPU (bench/cpu_quota.py): there the CPU is what runs out. So every case also
reports the CPU time of the process that serves: the bench's own in process
(`time.process_time`, every thread's, the Firestore client's included), a Functions Framework
server's over HTTP (the server and its gunicorn worker together).

A served process's CPU is read through its process CPU clock (`clock_gettime` on the clock
`clock_getcpuclockid` gives, which Linux lets any process read): the scheduler's own count in
nanoseconds, including the threads that ended. /proc/<pid>/stat's utime and stime count in
clock ticks (10 ms), more than a whole delivery, so they are only the fallback.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from bench.cpu_quota import process_tree

# The rows every case adds beside its latency (bench/stats.py Metric's name and unit). The unit
# is not "ms", so that no latency target (bench/targets.py) ever judges a CPU row.
CPU_METRIC = "CPU of the serving process per delivery"
CPU_UNIT = "ms CPU"
# Linux's encoding of a process's CPU clock id (CPUCLOCK_SCHED of the whole thread group).
_CPUCLOCK_SCHED = 2
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """The CPU time `pid` has used (user and system, all its threads, ended ones too)."""
    try:
        return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


class ServedCpu:
    """The CPU of a server's processes (the Functions Framework's and its workers'), found
    once and read as often as needed."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._pids = process_tree(pid)

    def seconds(self) -> float:
        """Their CPU so far; the processes are found again when one is gone (a worker replaced),
        so a reading never fails for it, though it may then jump back."""
        try:
            return sum(process_cpu_seconds(pid) for pid in self._pids)
        except OSError:
            self._pids = process_tree(self._pid)
            total = 0.0
            for pid in self._pids:
                with contextlib.suppress(OSError):
                    total += process_cpu_seconds(pid)
            return total
