"""A killed faketime wrapper's semaphore and shared memory are removed, so a later wrapper that
gets the same pid starts ("sem_open: File exists" otherwise)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from localrun import faketime_leftovers
from localrun.faketime_leftovers import SHARED_MEMORY
from localrun.function_server import FunctionServer


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def wrapper_files(pid: int) -> list[str]:
    return [f"sem.faketime_sem_{pid}", f"faketime_shm_{pid}"]


def test_only_the_files_of_wrappers_no_longer_running_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(faketime_leftovers, "SHARED_MEMORY", tmp_path)
    live = subprocess.Popen(["sleep", "60"])
    try:
        gone, running = dead_pid(), live.pid
        for name in [*wrapper_files(gone), *wrapper_files(running), "unrelated_42"]:
            (tmp_path / name).write_bytes(b"")
        faketime_leftovers.remove_stale_files()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*wrapper_files(running), "unrelated_42"])
    finally:
        live.kill()
        live.wait()


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (make test installs it)")
def test_a_crashed_skewed_instance_leaves_nothing_and_a_stale_leftover_is_swept(tmp_path):
    stale = dead_pid()
    for name in wrapper_files(stale):
        (SHARED_MEMORY / name).write_bytes(b"")
    server = FunctionServer({}, tmp_path / "function.log", launcher=("faketime", "-f", "+120s"))
    server.start()
    wrapper = server.pid
    assert wrapper is not None
    assert all((SHARED_MEMORY / name).exists() for name in wrapper_files(wrapper))  # in use
    assert not any((SHARED_MEMORY / name).exists() for name in wrapper_files(stale))
    server.crash()  # SIGKILL: the wrapper cannot clean up after itself
    assert not any((SHARED_MEMORY / name).exists() for name in wrapper_files(wrapper))
