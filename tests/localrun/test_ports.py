"""A launcher whose picked port another process took first starts again on another port, instead
of handing its callers the stranger that answers there (the Firestore emulator's Java server binds
ports of its own choosing, outside the launchers' port shares)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localrun import emulator, function_server, tcp_proxy
from localrun.emulator import EMULATOR_HOST_ENV, emulator_answers, firestore_emulator, free_loopback_port
from localrun.function_server import FunctionServer, FunctionServerError
from localrun.port_holder import port_holder
from tests.support.waiting import wait_until

# A process of its own (its own session) that listens on a port and answers nothing but bytes
# that are not HTTP/1.1, as the emulator's gRPC port does.
STRANGER = """
import socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("listening", flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(bytes([0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 64]))
    connection.close()
"""


@pytest.fixture
def stranger() -> Iterator[int]:
    """The port a stranger listens on."""
    port = free_loopback_port()
    process = subprocess.Popen(
        [sys.executable, "-c", STRANGER, str(port)], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"listening\n"
        yield port
    finally:
        process.kill()
        process.wait()


def picks(*ports: int) -> Callable[[], int]:
    """A stand-in for free_loopback_port that hands out `ports` first, then free ones."""
    queue = list(ports)
    return lambda: queue.pop(0) if queue else free_loopback_port()


def test_the_holder_of_a_port_is_told_apart(stranger):
    assert port_holder(stranger, os.getsid(0)) == "other"
    with socket.create_server(("127.0.0.1", 0)) as mine:
        assert port_holder(mine.getsockname()[1], os.getsid(0)) == "ours"
    assert port_holder(free_loopback_port(), os.getsid(0)) == "none"


def test_a_function_server_whose_port_was_taken_serves_on_another(stranger, monkeypatch, tmp_path):
    monkeypatch.setattr(function_server, "free_loopback_port", picks(stranger))
    server = FunctionServer({}, tmp_path / "function.log")
    assert server.port == stranger
    server.start()
    try:
        assert server.port != stranger and server.url == f"http://127.0.0.1:{server.port}/"
        worker = next(iter(server.worker_pids()))
        assert port_holder(server.port, os.getsid(worker)) == "ours" and server.answers()
    finally:
        server.stop()


def test_a_function_server_on_a_port_its_caller_chose_says_another_process_holds_it(stranger, tmp_path):
    server = FunctionServer({}, tmp_path / "function.log", port=stranger)
    with pytest.raises(FunctionServerError, match=rf"port {stranger} did not start \(another process holds"):
        server.start()
    assert not server.running


def test_a_server_on_a_fixed_port_waits_for_a_holder_that_lets_go(tmp_path):
    """As after a crash, when the killed instance's workers hold its port a moment longer:
    the port its clients know is waited for, as gunicorn retries its bind, not given up."""
    port = free_loopback_port()
    holder = subprocess.Popen([sys.executable, "-c", STRANGER, str(port)], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"listening\n"
    server = FunctionServer({}, tmp_path / "function.log", port=port)
    starting = threading.Thread(target=server.start)
    starting.start()
    try:
        log = tmp_path / "function.log"
        in_use = "Connection in use"  # gunicorn's line for each bind it retries
        wait_until(lambda: log.exists() and in_use in log.read_text(), timeout=60, what=in_use)
        holder.kill()
        holder.wait()
        starting.join(timeout=120)
        assert not starting.is_alive() and server.running and server.port == port
        assert port_holder(port, os.getsid(next(iter(server.worker_pids())))) == "ours"
    finally:
        holder.kill()
        starting.join(timeout=120)
        server.stop()


def test_the_emulator_whose_port_was_taken_serves_on_another(stranger, monkeypatch, tmp_path):
    monkeypatch.delenv(EMULATOR_HOST_ENV, raising=False)
    monkeypatch.setattr(emulator, "free_loopback_port", picks(stranger))
    with firestore_emulator(log_dir=tmp_path) as host:
        assert host != f"127.0.0.1:{stranger}" and emulator_answers(host)
    assert not emulator_answers(f"127.0.0.1:{stranger}")  # the stranger is no emulator


def test_a_proxy_whose_port_was_taken_listens_on_another(stranger, monkeypatch):
    monkeypatch.setattr(tcp_proxy, "free_loopback_port", picks(stranger))
    with tcp_proxy.tcp_proxy(f"127.0.0.1:{stranger}") as proxy:
        assert proxy.port != stranger
        assert port_holder(proxy.port, os.getsid(0)) == "ours"


def test_the_stranger_is_not_taken_for_a_server(stranger):
    """The check the launchers relied on alone before: a non-HTTP answer is no answer."""
    assert not FunctionServer({}, Path("/dev/null"), port=stranger).answers()
