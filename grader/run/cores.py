"""How many cores this process may use (its affinity and its cgroup's CPU
quota), and the default number of judges that follows."""
from __future__ import annotations

import math
import os
from pathlib import Path


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup"),
                 own_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may use: those of its CPU affinity, capped
    by the CPU quota of its cgroup (a container's ``--cpus``, a
    Kubernetes pod's limit), which ``os.cpu_count()`` ignores: a pod
    limited to 2 CPUs on a 64-core node must not start 64 judges."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root, own_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(cores, 1)


def _cgroup_quota(root: Path, own_cgroup: Path) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), None when unlimited
    or unknown. The process's own cgroup is read first, then the root's
    (inside a container the two are the same)."""
    places = [root]
    try:
        for line in own_cgroup.read_text().splitlines():
            if line.startswith("0::/") and line.strip() != "0::/":
                places.insert(0, root / line.strip()[4:])
    except OSError:
        pass
    for place in places:
        try:
            limit, period = (place / "cpu.max").read_text().split()[:2]
            if limit == "max":
                return None
            return int(limit) / int(period)
        except (OSError, ValueError):
            pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        length = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / length if quota > 0 and length > 0 else None


def default_jobs() -> int:
    """Judges at once by default: one more than the usable cores. A judge
    waits at times (for its workers to be forked and to start, for its
    last worker); the extra one keeps the cores busy (measured with
    bench/bench.py: a class of 300 on 2 cores in 54 s with 3 judges, 59 s
    with 2). Each judge's workers keep their own limits."""
    return usable_cores() + 1
