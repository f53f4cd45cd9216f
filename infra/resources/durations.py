"""Durations as Google Cloud's APIs take them: a protobuf Duration string ("60s", "0.5s").

One writer for every duration the stack sends (Cloud Scheduler's deadline and backoffs, the
pauses of a first deploy), so a value the timing rules approved is the value deployed.
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    """`seconds` as a protobuf Duration string: whole seconds bare ("60s"), else exact ("0.5s")."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:.9g}s"
