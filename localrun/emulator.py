"""Start and stop the Firestore emulator on a free loopback port.

The tests, `make demo` and `make bench` all use this one launcher, so each of them gets a
private emulator, waits until it really answers, and never leaves a Java process behind.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from localrun.port_holder import PORT_ATTEMPTS, wait_for_own_answer

EMULATOR_HOST_ENV = "FIRESTORE_EMULATOR_HOST"
# The project of the one document the launcher writes before it hands an emulator over.
WARM_UP_PROJECT = "emulator-warm-up"
# "INDEX/COUNT": this process picks its free ports from share INDEX of COUNT (see
# free_loopback_port); unset, from all of them.
PORT_SHARE_ENV = "LOCALRUN_PORT_SHARE"
START_TIMEOUT_SECONDS = 90.0
# How long the emulator gets to stop after SIGTERM, then after SIGKILL.
STOP_TIMEOUT_SECONDS = 15.0
KILL_TIMEOUT_SECONDS = 5.0


class EmulatorError(RuntimeError):
    """The emulator could not be started; the message carries the tail of its log."""


def free_loopback_port() -> int:
    """A loopback port nothing is bound to now, for a server about to bind it. Within a port
    share (PORT_SHARE_ENV), only a port of that share: processes that each pick ports and then
    start servers on them (pytest-xdist's workers, two test runs side by side) never pick the
    same port in the moment between one's pick and its server's bind."""
    index, count = port_share()
    with contextlib.ExitStack() as held:
        while True:
            # Ports outside the share stay bound until one inside is found: never offered twice.
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            # Linux offers bind() ports of one parity first: the shares are of port pairs.
            if port // 2 % count == index:
                return port


def port_share() -> tuple[int, int]:
    """(index, count) from PORT_SHARE_ENV ("INDEX/COUNT"), or (0, 1): every port."""
    value = os.environ.get(PORT_SHARE_ENV, "").strip()
    if not value:
        return 0, 1
    index, _, count = value.partition("/")
    share = int(index), int(count)
    if not 0 <= share[0] < share[1]:
        raise ValueError(f"{PORT_SHARE_ENV}={value}: want INDEX/COUNT with 0 <= INDEX < COUNT")
    return share


def port_subshare(index: int, count: int) -> str:
    """The PORT_SHARE_ENV value for the `index`-th of `count` processes that split the current
    share between them (each of its ports falls in exactly one of theirs)."""
    outer_index, outer_count = port_share()
    return f"{outer_index + outer_count * index}/{outer_count * count}"


def emulator_answers(host: str) -> bool:
    """The emulator's root URL answers 'Ok' once it accepts requests."""
    try:
        with urllib.request.urlopen(f"http://{host}/", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return False


@contextlib.contextmanager
def firestore_emulator(log_dir: Path | None = None) -> Iterator[str]:
    """Yield `host:port` of a running emulator: the one in FIRESTORE_EMULATOR_HOST if set,
    otherwise a new one on a free loopback port, stopped (with its Java child) on exit."""
    existing = os.environ.get(EMULATOR_HOST_ENV)
    if existing:
        if not emulator_answers(existing):
            raise EmulatorError(f"{EMULATOR_HOST_ENV}={existing} is set but nothing answers there")
        yield existing
        return

    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise EmulatorError("gcloud is not on PATH: install the Google Cloud CLI with the Firestore emulator")
    log_path = Path(log_dir or tempfile.mkdtemp(prefix="firestore-emulator-")) / "emulator.log"
    log_path.write_bytes(b"")
    process, host = _start(gcloud, log_path)
    try:
        _warm_up(host, time.monotonic() + START_TIMEOUT_SECONDS, log_path)
        yield host
    finally:
        _stop_group(process)


def _start(gcloud: str, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The running emulator's process and `host:port`. An answer counts only from its own
    process group (localrun/port_holder.py): when another process took the port picked for it,
    it starts again on another."""
    for _ in range(PORT_ATTEMPTS):
        host = f"127.0.0.1:{free_loopback_port()}"
        with log_path.open("ab") as log:
            # A session of its own, so stopping it reaches the Java process gcloud spawns.
            process = subprocess.Popen(
                [gcloud, "emulators", "firestore", "start", f"--host-port={host}", "--quiet"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if _serves_on_its_port(process, host, log_path):
            return process, host
        _stop_group(process)
    raise EmulatorError(f"every one of {PORT_ATTEMPTS} ports picked for the Firestore emulator was taken")


def _serves_on_its_port(process: subprocess.Popen[bytes], host: str, log_path: Path) -> bool:
    """True once it answers from its own process group; False when another process took its
    port. Raises (having stopped it) when it exits or does not answer in time."""
    holder = wait_for_own_answer(
        int(host.rpartition(":")[2]),
        process.pid,
        answers=lambda: emulator_answers(host),
        running=lambda: process.poll() is None,
        timeout=START_TIMEOUT_SECONDS,
        may_move=True,
        interval=0.2,
    )
    if holder is None:
        return True
    if holder == "other":
        return False
    _stop_group(process)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise EmulatorError(f"Firestore emulator did not start on {host}:\n{tail}")


def _warm_up(host: str, deadline: float, log_path: Path) -> None:
    """One real write, in a project of its own, before anyone else's. A new emulator's first
    Firestore request is slow (its JVM loads and compiles what serves it), all the more on a
    busy machine; its first caller must not pay for that within a budget of its own, as a
    function claiming a run does (a half-lease deadline)."""
    request = urllib.request.Request(
        f"http://{host}/v1/projects/{WARM_UP_PROJECT}/databases/(default)/documents/warm-up",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=max(deadline - time.monotonic(), 1.0)):
            pass
    except (urllib.error.URLError, OSError) as error:
        tail = log_path.read_text(errors="replace")[-2000:]
        message = f"Firestore emulator on {host} answers but took no write: {error}\n{tail}"
        raise EmulatorError(message) from error


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stopped means the whole group is gone: gcloud's wrapper, the group's leader, can exit
    while the Java server it started still answers for a moment, and a test that stops the
    emulator to cut Firestore off would then still reach it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=KILL_TIMEOUT_SECONDS)
    if not _group_ended(process.pid, STOP_TIMEOUT_SECONDS):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _group_ended(process.pid, KILL_TIMEOUT_SECONDS)


def _group_ended(group: int, timeout: float) -> bool:
    """Whether no process of `group` is left, waiting up to `timeout` seconds for it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
