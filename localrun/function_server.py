"""Serve function/ with the Functions Framework on a loopback port, as Cloud Run would.

Tests, `make demo` and `make bench` use this one launcher. It can also crash the server on
purpose (SIGKILL, no cleanup, exactly what a lost instance looks like) and start it again.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from localrun import FUNCTION_DIR, PYTHON_VERSION_WARNING, faketime_leftovers
from localrun.emulator import free_loopback_port
from localrun.port_holder import PORT_ATTEMPTS, wait_for_own_answer
from localrun.server_forks import ForkedProcess, fork_server

TARGET = "handle_scheduled_job"
START_TIMEOUT_SECONDS = 60.0
# A path the Functions Framework answers itself (404), never handing it to the function: asked
# whether a server is up, it says so without a log line of the function's. The framework
# imports the function's module before it serves anything, so any answer means it imported.
QUIET_PATH = "robots.txt"
# The -W filter that keeps localrun's own warning filter (localrun/__init__.py) in the servers.
_WARNINGS_FILTER = f"ignore:{PYTHON_VERSION_WARNING}:FutureWarning"


class FunctionServerError(RuntimeError):
    """The server did not come up; the message carries the tail of its output."""


class FunctionServer:
    """One Functions Framework process serving an entry point of a source file
    (by default `handle_scheduled_job` of function/main.py)."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_path: Path,
        port: int | None = None,
        *,
        source: Path = FUNCTION_DIR / "main.py",
        target: str = TARGET,
        launcher: Sequence[str] = (),
        python: Path | None = None,
        stderr_path: Path | None = None,
        forked: bool = False,
    ) -> None:
        """The server writes its stdout, the function's JSON log lines, to `log_path`; its
        stderr (the Functions Framework's and gunicorn's own lines, tracebacks) to
        `stderr_path`, or to `log_path` too when None. `forked`: started by forking a process
        that imported the server's libraries already (localrun/server_forks.py), unless it has
        a launcher or another interpreter; for tests that start hundreds, never for a start
        that is timed."""
        self.port = port or free_loopback_port()
        # A port the caller chose, or one clients were already told, is kept; a port picked
        # here may be exchanged for another while it has not served yet.
        self._port_fixed = port is not None
        self.source = source
        self.target = target
        # Prepended to the command, e.g. ("faketime", "+120s") for an instance whose clock is off.
        self.launcher = tuple(launcher)
        # The interpreter whose Functions Framework serves: this one's, or another virtualenv's
        # (an app that installed the exactly_once package on its own).
        self.framework = Path(python or sys.executable).with_name("functions-framework")
        self._env = {**os.environ, **env}
        given = self._env.get("PYTHONWARNINGS")
        self._env["PYTHONWARNINGS"] = f"{given},{_WARNINGS_FILTER}" if given else _WARNINGS_FILTER
        self._log_path = log_path
        self._stderr_path = stderr_path
        self._forked = forked and not self.launcher and python is None
        self._process: subprocess.Popen[bytes] | ForkedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        """Start and wait until it answers (QUIET_PATH: the framework answers once the
        function's module imported, config and handlers checked, and the function logs nothing).

        An answer counts only from this server's own process (localrun/port_holder.py): when
        another process took the port between its pick and the bind, the server starts again
        on another port, unless its port is fixed (chosen by the caller, or served before)."""
        for _ in range(PORT_ATTEMPTS):
            self.spawn()
            if self._serves_on_its_port():
                self._port_fixed = True
                return
            self.stop()
            self.port = free_loopback_port()
        raise FunctionServerError(f"every one of {PORT_ATTEMPTS} ports picked was taken by another process")

    def _serves_on_its_port(self) -> bool:
        """True once it answers from its own process; False when another process took a port
        it may leave. Raises (having stopped it) when it exits or does not answer in time."""
        assert self._process is not None
        holder = wait_for_own_answer(
            self.port,
            self._process.pid,
            answers=self.answers,
            running=lambda: self.running,
            timeout=START_TIMEOUT_SECONDS,
            may_move=not self._port_fixed,
        )
        if holder is None:
            return True
        if holder == "other" and not self._port_fixed:
            return False
        self.stop()
        taken = " (another process holds the port)" if holder == "other" else ""
        tail = (self._stderr_path or self._log_path).read_text(errors="replace")[-3000:]
        raise FunctionServerError(f"function server on port {self.port} did not start{taken}:\n{tail}")

    def spawn(self) -> None:
        """Start the process without waiting for it: for callers that time the start-up."""
        command = [*self.launcher, str(self.framework), f"--source={self.source}", f"--target={self.target}"]
        command += ["--host=127.0.0.1", f"--port={self.port}"]
        if faketime_leftovers.is_faketime(self.launcher):
            faketime_leftovers.remove_stale_files()
        if self._forked:
            stderr = self._stderr_path or self._log_path
            self._process = fork_server(
                sys.executable, command, self._env, self.source.parent, self._log_path, stderr
            )
            return
        with contextlib.ExitStack() as files:
            log = files.enter_context(self._log_path.open("ab"))
            errors = files.enter_context(self._stderr_path.open("ab")) if self._stderr_path else None
            self._process = subprocess.Popen(
                command,
                cwd=self.source.parent,
                env=self._env,
                stdout=log,
                stderr=errors if errors is not None else subprocess.STDOUT,
                start_new_session=True,
            )

    def crash(self) -> None:
        """Kill the server like a lost instance: no response, no finish, leases left behind."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def freeze(self) -> None:
        """Stop every process of the server (SIGSTOP), as a host that stalls: nothing runs,
        not even the function's watchdog, until thaw()."""
        self._send(signal.SIGSTOP)

    def thaw(self) -> None:
        self._send(signal.SIGCONT)

    def _send(self, signum: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signum)

    def restart(self) -> None:
        self.crash()
        self.start()

    @property
    def pid(self) -> int | None:
        """The launched process's (the launcher's, when there is one), while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _signal(self, signum: int) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signum)
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=5)
        if faketime_leftovers.is_faketime(self.launcher):
            faketime_leftovers.remove_wrapper_files(self._process.pid)
        self._process = None

    def worker_pids(self) -> frozenset[int]:
        """The processes that serve its requests (gunicorn's workers, children of the server's
        process): a set that changes when a worker is ended and replaced. Linux /proc."""
        if self._process is None:
            return frozenset()
        pid = self._process.pid
        try:
            return frozenset(
                int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            )
        except OSError:
            return frozenset()

    def answers(self) -> bool:
        """Whether it answers HTTP now (waiting at most 2 s for it), asked where the function
        logs nothing (QUIET_PATH)."""
        try:
            with urllib.request.urlopen(self.url + QUIET_PATH, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer means the app is serving
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            return False  # nothing there yet, or something that does not speak HTTP/1.1


@contextlib.contextmanager
def function_server(env: Mapping[str, str], log_path: Path) -> Iterator[FunctionServer]:
    server = FunctionServer(env, log_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
