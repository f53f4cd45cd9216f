"""What the faketime wrapper leaves behind when it is killed, removed before it can collide.

`faketime -f OFFSET command` (the instances whose clock is off: tests, the demo, the soak)
creates a named semaphore and a shared-memory object named by its own pid
(/dev/shm/sem.faketime_sem_PID, /dev/shm/faketime_shm_PID) and removes them when it exits.
Killed, as a crashed instance is (SIGKILL to its process group), it cannot: the two stay, and a
later wrapper that happens to get the same pid refuses to start ("sem_open: File exists").
Hundreds of kills later that is a failed start every hundred or so. So each launch first removes
the leftovers of every wrapper no longer running, and a stopped wrapper's own are removed at once.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

SHARED_MEMORY = Path("/dev/shm")
_NAMES = ("sem.faketime_sem_{pid}", "faketime_shm_{pid}")
_LEFTOVER = re.compile(r"(?:sem\.faketime_sem|faketime_shm)_(\d+)")


def is_faketime(launcher: tuple[str, ...]) -> bool:
    return bool(launcher) and Path(launcher[0]).name == "faketime"


def remove_wrapper_files(pid: int) -> None:
    """The files of the wrapper that ran as `pid`, which has exited."""
    for name in _NAMES:
        with contextlib.suppress(OSError):
            (SHARED_MEMORY / name.format(pid=pid)).unlink()


def remove_stale_files() -> None:
    """The files of every wrapper that is no longer running. A running wrapper's are kept (its
    pid is alive), and no new wrapper can have the pid of a process still alive."""
    try:
        names = os.listdir(SHARED_MEMORY)
    except OSError:
        return
    for name in names:
        if (match := _LEFTOVER.fullmatch(name)) is not None and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                (SHARED_MEMORY / name).unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
