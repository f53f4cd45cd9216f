"""The bench's CPU quota (bench/cpu_quota.py) confines what it is given, leaves nothing behind,
and where it cannot be set up says why in one line instead of failing the bench.

What a confined process gets is counted (its CPU time, read by bench/cpu.py), not timed: the
assertion is about the quota, with a margin far wider than any machine's noise.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpu import ServedCpu
from bench.cpu_quota import SIXTH_OF_A_VCPU, CpuQuotas, Unavailable, cpu_quotas

BUSY_SECONDS = 2.0
# A sixth is 0.167 of a core; unconfined, a busy loop takes all of one (or what a loaded
# machine leaves it), far more than this.
MOST_OF_A_SIXTH = 0.30


def test_a_busy_child_confined_to_a_sixth_gets_about_a_sixth_and_its_cgroup_goes_away():
    with cpu_quotas(SIXTH_OF_A_VCPU) as quotas:
        if isinstance(quotas, Unavailable):
            pytest.skip(quotas.reason)  # not root, or no cgroup file system here
        assert "a sixth of a vCPU" in quotas.description
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            cgroup = quotas.confine(busy.pid)
            assert str(busy.pid) in (cgroup / "cgroup.procs").read_text().split()
            cpu = ServedCpu(busy.pid)
            used, started = cpu.seconds(), time.monotonic()
            deadline = started + BUSY_SECONDS
            while time.monotonic() < deadline:
                time.sleep(0.1)
            share = (cpu.seconds() - used) / (time.monotonic() - started)
        finally:
            busy.kill()
            busy.wait()
        parent = quotas.parent
        assert parent.is_dir()
    assert 0 < share < MOST_OF_A_SIXTH
    assert not parent.exists()


def test_a_root_without_a_cpu_controller_is_said_in_one_line(tmp_path):
    with cpu_quotas(SIXTH_OF_A_VCPU, root=tmp_path) as quotas:
        assert isinstance(quotas, Unavailable)
    assert quotas.reason == f"no CPU quota: no cgroup cpu controller at {tmp_path}"
    assert list(tmp_path.iterdir()) == []


def test_a_root_whose_quota_cannot_be_written_is_said_in_one_line_and_left_as_it_was(tmp_path):
    # A cgroup v1 root by its files, but no kernel behind it: a cgroup made there has no control
    # files to write, as where the bench may create a directory and set nothing.
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    with cpu_quotas(SIXTH_OF_A_VCPU, root=tmp_path, name="eos-bench-test") as quotas:
        assert isinstance(quotas, Unavailable)
    assert quotas.reason.startswith(f"no CPU quota: cannot set one in {tmp_path / 'eos-bench-test'} (")
    assert "\n" not in quotas.reason
    assert [path.name for path in tmp_path.iterdir()] == ["cpu.cfs_quota_us"]


def test_a_cgroup_that_cannot_be_created_is_said_in_one_line(tmp_path):
    # The parent cgroup cannot even be created: its place is taken by a file.
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "eos-bench-test").write_text("")
    with cpu_quotas(SIXTH_OF_A_VCPU, root=tmp_path, name="eos-bench-test") as quotas:
        assert isinstance(quotas, Unavailable)
    assert quotas.reason == f"no CPU quota: cannot create a cgroup in {tmp_path} (File exists)"


def test_a_quota_is_named_as_each_interface_sets_it():
    assert (
        "cgroup v1 cpu.cfs_quota_us=16667, cpu.cfs_period_us=100000"
        in CpuQuotas(SIXTH_OF_A_VCPU, Path("/x"), 1).description
    )
    assert 'cgroup v2 cpu.max "16667 100000"' in CpuQuotas(SIXTH_OF_A_VCPU, Path("/x"), 2).description
