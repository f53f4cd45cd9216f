"""Function servers, and `python -m` runs, forked from one process that imported their
libraries once.

A Functions Framework server spends most of its start importing Flask, gunicorn and the
Firestore client (about 0.9 s of CPU on python3.12, against about 0.1 s forked from a process
that imported them already); the `ops` CLI spends as long importing the same client. The tests
start a few hundred servers and call the CLI dozens of times, so `FunctionServer(...,
forked=True)` and `run_module` ask this module's forker instead: a process per interpreter and
start-up environment (`StartupKey`) that imports those libraries and then, per request, forks
a child that becomes what the command line would have started. A server gets its own session
(so it is crashed, frozen and stopped as a process group, like any server), and each child its
own working directory, environment and output files. The code under test (the function's
module, `ops`) is imported in the child, after the fork, from the environment the child was
given: nothing of one child's configuration is in another.

The forker imports libraries only, never creates a client, a channel or a thread before it
forks (gRPC's C core may not be forked once it runs), and reaps its children. A server started
with a launcher (faketime) or another interpreter is started as a process of its own, always.

The forker runs as `python localrun/server_forks.py` (started by `fork_server` and
`run_module`): it reads one JSON request per line on stdin and answers each with the child's
pid; it exits when stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

# The variables the interpreter reads when it starts (PYTHON*), and the libraries when they
# are imported (GRPC_*): a server whose environment differs in one is forked from a forker
# started with that environment.
_STARTUP_PREFIXES = ("PYTHON", "GRPC_", "LD_")
_REAP_SECONDS = 0.5
# The forker runs as a script, not as localrun's module: the localrun package puts the
# checkout's function/ on the path, which a server of another copy's function/ must not see.
_SCRIPT = Path(__file__).resolve()


@dataclass(frozen=True)
class StartupKey:
    python: str
    startup_env: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, python: str, env: Mapping[str, str]) -> StartupKey:
        startup = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_PREFIXES)))
        return cls(python, startup)


class ForkedProcess:
    """A forked server, as much of `subprocess.Popen` as FunctionServer uses: it is the
    forker's child, not ours, so it is watched through a pidfd (it exited once that reads)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd: int | None = os.pidfd_open(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0.0):
            self._ended()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._exited(timeout):
                raise subprocess.TimeoutExpired(f"forked server {self.pid}", timeout or 0.0)
            self._ended()
        assert self.returncode is not None
        return self.returncode

    def _exited(self, timeout: float | None) -> bool:
        assert self._pidfd is not None
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(readable)

    def _ended(self) -> None:
        # Its exit status is the forker's to collect; that it ended is all a server's user asks.
        self.returncode = 0
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Forker:
    """The client side: one forker process, asked for a server at a time."""

    def __init__(self, key: StartupKey) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_STARTUP_PREFIXES)}
        env.update(dict(key.startup_env))
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [key.python, str(_SCRIPT)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def fork(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path,
        *,
        exit_code: Path | None = None,
    ) -> ForkedProcess:
        """A server (`argv`: functions-framework's command line), or with `exit_code` a run of
        the module argv[0] with argv[1:], which writes its exit code there."""
        request = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "exit_code": str(exit_code) if exit_code else None,
        }
        with self._lock:
            stdin, answers = self._process.stdin, self._process.stdout
            assert stdin is not None and answers is not None
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            answer = answers.readline()
        if not answer:
            raise RuntimeError(f"the server forker (pid {self._process.pid}) exited")
        return ForkedProcess(int(answer))


_forkers: dict[StartupKey, Forker] = {}
_forkers_lock = threading.Lock()


def fork_server(
    python: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: Path, stderr: Path
) -> ForkedProcess:
    """A server forked from this interpreter's forker for `env`'s start-up variables."""
    return _forker(python, env).fork(argv, env, cwd, stdout, stderr)


def _forker(python: str, env: Mapping[str, str]) -> Forker:
    """The running forker for `python` and `env`'s start-up variables, started when there is none."""
    key = StartupKey.of(python, env)
    with _forkers_lock:
        forker = _forkers.get(key)
        if forker is None or forker._process.poll() is not None:
            forker = _forkers[key] = Forker(key)
    return forker


def run_module(
    module: str, args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m module *args` as `subprocess.run(..., capture_output=True, text=True)` runs
    it, forked from this interpreter's forker (the `ops` CLI a test calls dozens of times)."""
    forker = _forker(sys.executable, env)
    with tempfile.TemporaryDirectory(prefix="forked-run-") as folder:
        out, err, code = (Path(folder) / name for name in ("stdout", "stderr", "exit-code"))
        process = forker.fork([module, *args], env, cwd, out, err, exit_code=code)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            raise
        # A child killed before it wrote its code ended by a signal: what subprocess reports.
        returncode = int(code.read_text()) if code.exists() else -signal.SIGKILL
        command = [sys.executable, "-m", module, *args]
        return subprocess.CompletedProcess(command, returncode, out.read_text(), err.read_text())


def _enter(request: Mapping[str, Any]) -> None:
    """In the child: the signals' default handlers, the working directory, environment and
    output files the request gives, and the path without the forker's folder, which Python put
    first (PYTHONPATH stays)."""
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    if sys.path and sys.path[0] == str(_SCRIPT.parent):
        del sys.path[0]


def _become_server(request: Mapping[str, Any]) -> None:
    """In the child: the server `functions-framework` would be, in a session of its own."""
    os.setsid()
    _enter(request)
    from functions_framework._cli import _cli

    sys.argv = list(request["argv"])
    _cli.main(args=sys.argv[1:], prog_name="functions-framework")


def _run_module(request: Mapping[str, Any]) -> int:
    """In the child: `python -m argv[0] *argv[1:]`, its exit code returned."""
    _enter(request)
    module, *args = request["argv"]
    sys.path.insert(0, os.getcwd())  # as `-m` does
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    return 0


def _serve(requests: IO[str], answers: IO[str]) -> None:
    while True:
        readable, _, _ = select.select([requests], [], [], _REAP_SECONDS)
        _reap()
        if not readable:
            continue
        line = requests.readline()
        if not line:
            return
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(f"{pid}\n")
        answers.flush()


def _child(request: Mapping[str, Any]) -> NoReturn:
    code = 1
    try:
        if request["exit_code"] is None:
            _become_server(request)
            code = 0
        else:
            code = _run_module(request)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if request["exit_code"] is not None:
            Path(request["exit_code"]).write_text(str(code))
        os._exit(code)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    # The libraries every server imports, imported once, before any fork.
    import flask
    import functions_framework._cli
    import functions_framework._http.gunicorn
    from google.cloud import firestore

    del flask, functions_framework, firestore

    _serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
