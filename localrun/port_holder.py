"""Who listens on a loopback port: the check that the server answering there is the one just started.

A port picked free (`free_loopback_port`) is free only until someone binds it, and not every
process on the machine picks its ports from the launchers' shares: the Firestore emulator's Java
server binds three more ports of its own choosing, and an outgoing connection may hold any
ephemeral port. A launcher whose port was taken in the moment between its pick and its server's
bind would otherwise see the other process answer, take it for its own server, and hand its
callers a stranger (a gRPC server answering HTTP/1.1 with binary frames, or another test's
function). So a launcher asks who holds the listening socket before it trusts an answer, and
starts again on another port when someone else does.

Linux only: the answer is read from /proc. Elsewhere it is "unknown", and the launchers trust an
answer as they always did.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

# "ours": a process of the given session listens on the port; "other": only other processes do;
# "none": nothing listens yet; "unknown": /proc cannot tell (not Linux).
PortHolder = Literal["ours", "other", "none", "unknown"]

# Ports a launcher tries before giving up, each lost to another process between its pick and
# the bind.
PORT_ATTEMPTS = 5

_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN_STATE = "0A"


def port_holder(port: int, session: int) -> PortHolder:
    """Who holds the listening socket on `port`: a process of session `session` (the launched
    server's process group, which its children such as gunicorn's workers stay in) or another."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return "unknown"
    if not inodes:
        return "none"
    sockets = {f"socket:[{inode}]" for inode in inodes}
    for pid in _session_members(session):
        with contextlib.suppress(OSError):  # a member that just exited
            fd_dir = Path(f"/proc/{pid}/fd")
            if any(os.readlink(fd_dir / fd) in sockets for fd in os.listdir(fd_dir)):
                return "ours"
    return "other"


def wait_for_own_answer(
    port: int,
    session: int,
    *,
    answers: Callable[[], bool],
    running: Callable[[], bool],
    timeout: float,
    may_move: bool,
    interval: float = 0.1,
) -> PortHolder | None:
    """Wait until the server just launched in `session` answers (`answers()`) from its own
    process on `port`: None then. Otherwise who held the port when the wait stopped: "other"
    at once when another process holds it and the server `may_move` to another port; else
    whoever held it when the server ended (`running()` false) or `timeout` seconds passed. A
    server that may not move (its clients know its port) waits out a holder that lets go, as
    gunicorn retries its bind."""
    deadline = time.monotonic() + timeout
    while True:
        holder = port_holder(port, session)
        if holder == "other" and may_move:
            return holder
        if holder in ("ours", "unknown") and answers():
            return None
        if not running() or time.monotonic() > deadline:
            return holder
        time.sleep(interval)


def _listening_inodes(port: int) -> set[str] | None:
    """The inodes of the sockets listening on `port`, on any address; None without /proc."""
    inodes: set[str] = set()
    readable = False
    for table in _TCP_TABLES:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            # sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
            fields = row.split()
            if fields[3] == _LISTEN_STATE and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    return inodes if readable else None


def _session_members(session: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            # The command name in parentheses may hold spaces: the fields after it are fixed.
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == session:  # state ppid pgrp session
                members.append(int(entry))
    return members
