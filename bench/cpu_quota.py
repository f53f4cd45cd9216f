"""A CPU quota for the processes `make bench` measures: a sixth of a vCPU, by a Linux cgroup.

Cloud Run's default function instance, the one the template deploys, has a sixth of a vCPU.
There the CPU a delivery costs, not the round trips, decides its wall time: a delivery that
needs 3 ms of CPU takes at least 18 ms, and one that overruns its share of a scheduling period
waits for the next. A bench on an idle core never shows that, so the bench runs the served
cases and the audit again with each serving process confined to the quota of such an instance:
CFS bandwidth control, `quota_us` of CPU per `period_us` of wall time.

Each confined process gets a cgroup of its own (two instances are two sixths, as on Cloud Run,
never one shared sixth), under a parent named for the bench's process, so that runs side by
side never meet; everything created is removed when the context ends, on failure too. Both
interfaces are supported: cgroup v1 (`cpu.cfs_quota_us`, `cpu.cfs_period_us` in the cpu
hierarchy) and cgroup v2 (`cpu.max`). Where no quota can be set up (not root, no cgroup file
system, a controller not enabled), `cpu_quotas` yields an `Unavailable` whose one line says why,
and the bench reports its unconfined numbers only: a bench that cannot confine is still a bench.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Where the cpu controller is usually mounted: v1's own hierarchy (two common names), then the
# unified v2 hierarchy.
DEFAULT_ROOTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup"))
# How long removal waits for a killed process to leave its cgroup (rmdir refuses until then).
REMOVE_SECONDS = 5.0


@dataclass(frozen=True)
class Quota:
    """`quota_us` microseconds of CPU in every `period_us` of wall time."""

    quota_us: int
    period_us: int
    name: str

    @property
    def share(self) -> float:
        """Of one CPU."""
        return self.quota_us / self.period_us


# Cloud Run's default function instance (the template's): 1/6 vCPU.
SIXTH_OF_A_VCPU = Quota(16_667, 100_000, "a sixth of a vCPU")


@dataclass(frozen=True)
class Unavailable:
    """No quota could be set up; `reason` is the one line the report prints."""

    reason: str


class CpuQuotas:
    """Cgroups of one quota under one parent: `confine(pid)` puts a process and its children in
    a cgroup of their own. Made by `cpu_quotas`, which removes them all."""

    def __init__(self, quota: Quota, parent: Path, version: int) -> None:
        self.quota = quota
        self.parent = parent
        self.version = version
        self._children: list[Path] = []
        self._names = itertools.count()

    @property
    def description(self) -> str:
        """What the report names: the quota, and how it is set."""
        if self.version == 1:
            setting = f"cpu.cfs_quota_us={self.quota.quota_us}, cpu.cfs_period_us={self.quota.period_us}"
        else:
            setting = f'cpu.max "{self.quota.quota_us} {self.quota.period_us}"'
        return f"{self.quota.name} ({self.quota.share:.3f} CPU: cgroup v{self.version} {setting})"

    def new_cgroup(self) -> Path:
        """A fresh cgroup with the quota, empty."""
        child = self.parent / f"p{next(self._names)}"
        child.mkdir()
        self._children.append(child)
        if self.version == 1:
            _write(child / "cpu.cfs_period_us", str(self.quota.period_us))
            _write(child / "cpu.cfs_quota_us", str(self.quota.quota_us))
        else:
            _write(child / "cpu.max", f"{self.quota.quota_us} {self.quota.period_us}")
        return child

    def prepare(self) -> Unavailable | None:
        """Enable the controller for the parent's children (v2: in the root too, where it
        stays enabled, as a system's cgroup manager would leave it) and make one cgroup with
        the quota, removed again: what cannot be done is found before anything is measured."""
        try:
            if self.version == 2:
                for level in (self.parent.parent, self.parent):
                    if "cpu" not in (level / "cgroup.subtree_control").read_text().split():
                        _write(level / "cgroup.subtree_control", "+cpu")
            probe = self.new_cgroup()
        except OSError as error:
            return Unavailable(f"no CPU quota: cannot set one in {self.parent} ({error.strerror or error})")
        self._children.remove(probe)
        _remove(probe, self.parent.parent)
        return None

    def confine(self, pid: int) -> Path:
        """Move `pid` and every process under it (a server and its workers) into a new cgroup
        of the quota; returns that cgroup. Children it forks later are born inside."""
        cgroup = self.new_cgroup()
        for member in process_tree(pid):
            with contextlib.suppress(ProcessLookupError):
                _write(cgroup / "cgroup.procs", str(member))
        return cgroup

    def close(self) -> None:
        """Remove every cgroup made here, the parent last; a process still in one is moved back
        to the root first. What cannot be removed is said on stderr in one line, never raised:
        the measurement it served is done."""
        for cgroup in [*reversed(self._children), self.parent]:
            if not _remove(cgroup, self.parent.parent):
                print(f"bench: could not remove the cgroup {cgroup}", file=sys.stderr)
        self._children.clear()


@contextlib.contextmanager
def cpu_quotas(
    quota: Quota = SIXTH_OF_A_VCPU, root: Path | None = None, name: str | None = None
) -> Iterator[CpuQuotas | Unavailable]:
    """Quotas of `quota` under `root` (default: the first of DEFAULT_ROOTS that has a cpu
    controller), in a parent cgroup `name` (default: named for this process); or `Unavailable`
    saying why not. Everything created is removed on exit."""
    found = _controller(root)
    if isinstance(found, Unavailable):
        yield found
        return
    where, version = found
    parent = where / (name or f"eos-bench-{os.getpid()}")
    try:
        parent.mkdir()
    except OSError as error:
        yield Unavailable(f"no CPU quota: cannot create a cgroup in {where} ({error.strerror or error})")
        return
    quotas = CpuQuotas(quota, parent, version)
    try:
        problem = quotas.prepare()
        yield quotas if problem is None else problem
    finally:
        quotas.close()


def _controller(root: Path | None) -> tuple[Path, int] | Unavailable:
    """Where the cpu controller is, and which interface it speaks."""
    for where in [root] if root is not None else DEFAULT_ROOTS:
        if (where / "cpu.cfs_quota_us").exists():
            return where, 1
        with contextlib.suppress(OSError):
            if "cpu" in (where / "cgroup.controllers").read_text().split():
                return where, 2
    places = str(root) if root is not None else ", ".join(map(str, DEFAULT_ROOTS))
    return Unavailable(f"no CPU quota: no cgroup cpu controller at {places}")


def _write(path: Path, value: str) -> None:
    """A control file is written in one write() and never created: a missing one is an error."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, value.encode())
    finally:
        os.close(descriptor)


def _remove(cgroup: Path, root: Path) -> bool:
    """rmdir `cgroup`, moving what is left in it to `root` and waiting for exiting processes."""
    deadline = time.monotonic() + REMOVE_SECONDS
    while True:
        with contextlib.suppress(OSError):
            for pid in (cgroup / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    _write(root / "cgroup.procs", pid)
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents first (Linux /proc; a process gone meanwhile is left
    out)."""
    tree, index = [pid], 0
    while index < len(tree):
        current = tree[index]
        index += 1
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    tree += [int(child) for child in (task / "children").read_text().split()]
    return tree
