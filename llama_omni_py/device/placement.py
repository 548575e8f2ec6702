"""Host topology: CPUs, NUMA nodes, and which node a device hangs off.

Read from Linux sysfs, never assumed: a CPU range copied from another host is how a
deployment loses its RTF (docs/ascend.md). ``plan_placement`` keeps a session on the
accelerator's NUMA node: the vocoder pool gets its own cores there, the stage threads others
of the same node, all inside this process's affinity mask (a taskset mask is never widened).
Unpinned threads spread across nodes measured worse on 910B (0.72 vs 0.57 RTF at 24 vs 16).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..constants import DEFAULT_VOCODER_THREADS
from ..errors import ConfigError

_SYS_NODE = Path("/sys/devices/system/node")
_SYS_PCI = Path("/sys/bus/pci/devices")
# Below this many usable CPUs on the node a split costs more than it saves: measured on the
# 2-CPU VM, pinning (1 vocoder CPU, 1 stage CPU) took wall RTF from 3.75 to 6.04.
MIN_CPUS_TO_PIN = 4


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
    allowed_cpus: tuple[int, ...]  # this process's affinity mask
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


def read_topology(sys_node: Path = _SYS_NODE, allowed: list[int] | None = None) -> Topology:
    """``sys_node`` is /sys/devices/system/node (its sibling cpu/online lists online CPUs);
    ``allowed`` overrides the affinity mask (tests)."""
    import psutil

    online = None
    try:
        online = set(parse_cpulist((sys_node.parent / "cpu" / "online").read_text()))
    except (OSError, ValueError):
        pass
    nodes = []
    if sys_node.is_dir():
        for d in sorted(sys_node.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            try:
                cpus = parse_cpulist((d / "cpulist").read_text())
            except (OSError, ValueError):
                continue
            nodes.append(NumaNode(int(d.name[4:]), tuple(c for c in cpus if online is None or c in online)))
    if allowed is None:
        allowed = (
            sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        )
    if not nodes:  # no NUMA information (containers, non-Linux): one node with every allowed CPU
        nodes = [NumaNode(0, tuple(sorted(allowed)))]
    return Topology(
        _cpu_model(), os.cpu_count() or 1, psutil.cpu_count(logical=False), tuple(sorted(allowed)), tuple(nodes)
    )


def pci_numa_node(bus_id: str, sys_pci: Path = _SYS_PCI) -> int | None:
    """NUMA node of a PCI device ('0000:c1:00.0'), or None when the kernel does not say."""
    if not bus_id:
        return None
    try:
        node = int((sys_pci / bus_id.lower() / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def npu_pci_bus_id(index: int, timeout: float = 5.0) -> str | None:
    """An Ascend NPU's PCI address from ``npu-smi info -t board -i N`` ("PCIe Bus Info")."""
    try:
        out = subprocess.run(
            ["npu-smi", "info", "-t", "board", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"PCIe Bus Info\s*:\s*([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", out)
    return m.group(1).lower() if m else None


@dataclass(frozen=True)
class PlacementPlan:
    node: int
    reason: str  # why this node
    vocoder_cpus: tuple[int, ...]  # one per vocoder pool thread
    stage_cpus: tuple[int, ...]  # Python stage threads (LLM/TTS/Token2Wav drivers), disjoint
    notes: tuple[str, ...] = ()
    apply: bool = True  # False: too few CPUs to split; threads stay unpinned

    def describe(self) -> str:
        lines = [
            f"NUMA node {self.node} ({self.reason})" + ("" if self.apply else ": not applied"),
            f"  vocoder pool: {len(self.vocoder_cpus)} threads on CPUs {format_cpulist(list(self.vocoder_cpus))}",
            f"  stage threads: CPUs {format_cpulist(list(self.stage_cpus))}",
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def as_dict(self) -> dict:
        return {
            "node": self.node,
            "reason": self.reason,
            "applied": self.apply,
            "notes": list(self.notes),
            "vocoder_cpus": list(self.vocoder_cpus),
            "stage_cpus": list(self.stage_cpus),
            "text": self.describe(),
        }


def device_numa_node(device: str, sys_pci: Path = _SYS_PCI) -> tuple[int | None, str]:
    """(NUMA node or None, label) of a resolved device id: its PCI address from ggml, or
    ``npu-smi`` for Ascend, then sysfs."""
    if device == "cpu":
        return None, device
    from . import backends

    dev = next((d for d in backends.devices() if d.id == device), None)
    bus = dev.pci_bus_id if dev is not None else ""
    if not bus and device.startswith("cann:"):
        bus = npu_pci_bus_id(int(device.split(":")[1])) or ""
    return pci_numa_node(bus, sys_pci), (f"{device} ({bus})" if bus else device)


def plan_placement(
    topo: Topology,
    t2w_threads: int | None = None,
    device_node: int | None = None,
    device_label: str = "the accelerator",
    numa_node: int | None = None,
    numa_source: str = "numa_node",
) -> PlacementPlan:
    """Vocoder cores and stage cores on one node. ``t2w_threads`` None means up to 16 (capped to
    what the node has, with a note); an explicit count that cannot be met on the node raises
    ConfigError. Node: ``numa_node`` (asked for by ``numa_source``, the name an error gives),
    else the accelerator's, else the node with the most usable CPUs. Plain values only: the
    environment is read by the caller (config.py)."""
    allowed = set(topo.allowed_cpus)
    usable = {n.id: [c for c in n.cpus if c in allowed] for n in topo.nodes}
    notes: list[str] = []
    if numa_node is not None:
        node, reason = numa_node, numa_source
        if not usable.get(node):
            raise ConfigError(
                reason,
                f"node {node} has no CPU this process may use "
                f"(nodes with usable CPUs: {[n for n, c in usable.items() if c]})",
            )
    elif device_node is not None and usable.get(device_node):
        node, reason = device_node, f"{device_label} is attached here"
    else:
        if device_node is not None:
            notes.append(f"{device_label} is on node {device_node}, but this process may not use its CPUs")
        node = max(usable, key=lambda n: (len(usable[n]), -n))
        reason = "most usable CPUs"
    cpus = usable[node]
    explicit = t2w_threads is not None
    if t2w_threads is None:
        t2w_threads = DEFAULT_VOCODER_THREADS
    if t2w_threads < 1:
        raise ConfigError("t2w_threads", f"must be a positive integer, got {t2w_threads}")
    room = max(1, len(cpus) - 1)  # keep one CPU of the node for the stage threads
    if t2w_threads > room:
        if explicit and len(cpus) > 1:
            raise ConfigError(
                "t2w_threads",
                f"{t2w_threads} vocoder threads do not fit on NUMA node {node} "
                f"({len(cpus)} usable CPUs, one kept for the stage threads)",
            )
        notes.append(f"vocoder threads capped at {room} (node {node} has {len(cpus)} usable CPUs)")
        t2w_threads = room
    apply = len(cpus) >= MIN_CPUS_TO_PIN
    if not apply:
        notes.append(
            f"{len(cpus)} usable CPUs (< {MIN_CPUS_TO_PIN}): threads left unpinned -- splitting so few "
            "CPUs starves the LLM (measured with llama-omni bench --pin on,off)"
        )
    if len(cpus) == 1:
        return PlacementPlan(node, reason, (cpus[0],), (cpus[0],), tuple(notes), apply)
    # Stage threads take the node's first CPUs, the vocoder the ones after them.
    stage = cpus[: len(cpus) - t2w_threads]
    return PlacementPlan(
        node, reason, tuple(cpus[len(stage) : len(stage) + t2w_threads]), tuple(stage), tuple(notes), apply
    )


def plan_for_device(
    device: str, t2w_threads: int | None = None, numa_node: int | None = None, numa_source: str = "numa_node"
) -> PlacementPlan:
    """The placement plan for a session on ``device`` (its NUMA node from the PCI address)."""
    node, label = device_numa_node(device)
    return plan_placement(read_topology(), t2w_threads, node, label, numa_node, numa_source)


def plan_from_environment(device: str) -> PlacementPlan:
    """The plan a session with default settings gets on ``device``: OMNI_T2W_THREADS and
    OMNI_NUMA_NODE as the configuration reads them."""
    from ..env import numa_node_choice, t2w_threads_env

    return plan_for_device(device, t2w_threads_env(), *numa_node_choice(None))


def pin_current_thread(cpus) -> None:
    """Restricts the calling thread (and threads it starts later) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


def pin_process_to_node(node_id: int) -> list[int]:
    """Restricts this process (and threads started later) to the node's CPUs that it may use;
    returns them (empty, and nothing changed, when there are none)."""
    node = next((n for n in read_topology().nodes if n.id == node_id), None)
    cpus = sorted(set(node.cpus if node else ()) & set(os.sched_getaffinity(0)))
    if cpus:
        os.sched_setaffinity(0, cpus)
    return cpus
