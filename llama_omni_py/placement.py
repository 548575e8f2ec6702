"""Host topology: CPUs, NUMA nodes, and which node a device hangs off.

Read from Linux sysfs, never assumed: a CPU range copied from another host is how a
deployment loses its RTF (ascend-and-serving §4). Later placement plans build on this.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

_SYS_NODE = Path("/sys/devices/system/node")
_SYS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]. Raises ValueError on malformed input."""
    cpus: list[int] = []
    text = text.strip()
    if not text:
        return cpus
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not m:
            raise ValueError(f"malformed CPU list element {part!r} in {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"descending CPU range {part!r}")
        cpus.extend(range(lo, hi + 1))
    return sorted(set(cpus))


def format_cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (the form taskset -c accepts)."""
    out, cpus = [], sorted(set(cpus))
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    cpu_model: str
    logical_cpus: int
    physical_cores: int | None
    allowed_cpus: tuple[int, ...]          # this process's affinity mask
    nodes: tuple[NumaNode, ...] = field(default_factory=tuple)

    def node_of_cpu(self, cpu: int) -> int | None:
        for n in self.nodes:
            if cpu in n.cpus:
                return n.id
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu model", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def read_topology(sys_node: Path = _SYS_NODE) -> Topology:
    import psutil

    nodes = []
    if sys_node.is_dir():
        for d in sorted(sys_node.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            try:
                nodes.append(NumaNode(int(d.name[4:]), tuple(parse_cpulist((d / "cpulist").read_text()))))
            except (OSError, ValueError):
                continue
    allowed = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else tuple(range(os.cpu_count() or 1))
    if not nodes:  # no NUMA information (containers, non-Linux): one node with every CPU
        nodes = [NumaNode(0, tuple(range(os.cpu_count() or 1)))]
    return Topology(_cpu_model(), os.cpu_count() or 1, psutil.cpu_count(logical=False), allowed, tuple(nodes))


def pci_numa_node(bus_id: str, sys_pci: Path = _SYS_PCI) -> int | None:
    """NUMA node of a PCI device ('0000:c1:00.0'), or None when the kernel does not say."""
    if not bus_id:
        return None
    try:
        node = int((sys_pci / bus_id.lower() / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
