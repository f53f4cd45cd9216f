"""The soak's execution records: one line per event of the soak job, appended to one file.

Written by the job itself, straight to a local file, never through Firestore or HTTP, so no
fault the soak injects (lost answers, a cut or slow Firestore, a killed or frozen instance) can
lose or invent a record. Every instance appends to the same file, each line with one
write() on a descriptor opened with O_APPEND: Linux appends each such write whole, in one
order for all processes, so the file's order of lines is the order in which the events
happened, whatever the instances' clocks say (one runs with its clock skewed).

Standard library only: the soak's instances import it as the job's, and the independent
checker (localrun/soak/checker.py) reads the file with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The variable naming the file, in the soak's instances' environment.
EXECUTIONS_FILE_ENV = "SOAK_EXECUTIONS_FILE"
START = "start"  # the job began its work
END = "end"  # the job's work is done: its side effect, the one a run must have exactly once


def append(path: str, event: str, tag: str, **fields: Any) -> None:
    """One line, in one write. Once write() returns, the line is the kernel's: an instance
    killed a moment later (a fault the soak injects) still leaves it to the checker, which
    reads the file on the same machine. No fsync: it guards against the machine crashing, a
    fault the soak does not inject, and it would make the job's side effect wait on the disk,
    which on a shared machine can take longer than a compressed lease."""
    line = json.dumps({"event": event, "tag": tag, "pid": os.getpid(), **fields}, sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read(path: Path) -> Iterator[dict[str, Any]]:
    """The file's records in the order they were appended."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        for line in lines:
            yield from parse(line)


def parse(line: bytes) -> Iterator[dict[str, Any]]:
    """The record on one line; none for a line cut short (impossible for one write, but a
    disk may fill)."""
    try:
        record = json.loads(line)
    except ValueError:
        return
    if isinstance(record, dict):
        yield record
