"""The CPU list a pinned benchmark runs on: the NUMA node of the chosen device (the placement
plan's node), checked against the current affinity mask. scripts/bench-pinned.sh runs

    python -m llama_omni_py.bench.pinning [--device D] [--force] [--mask LIST]
        [--sys-node DIR] [--sys-pci DIR] [--pci-bus-id BDF]

which prints ``<node> <cpulist>`` for ``taskset -c``, or exits 3 with the reason when the current
mask lies outside the node (pinning there would widen a mask someone set on purpose, or run on a
range copied from another host: the 0.57 -> 0.68 RTF loss in docs/ascend.md)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..device import placement
from ..env import numa_node_choice
from ..errors import ConfigError

REFUSED = 3  # exit status when the mask is outside the node


@dataclass(frozen=True)
class PinDecision:
    node: int
    node_cpus: tuple[int, ...]  # the node's online CPUs
    cpus: tuple[int, ...]  # what taskset -c gets
    note: str


def device_node_cpus(
    topo: placement.Topology, device_node: int | None, label: str = "the device", env: dict | None = None
) -> tuple[int, tuple[int, ...]]:
    """(node, its online CPUs) for the device, chosen by the placement plan: OMNI_NUMA_NODE, else
    the device's node, else the node with the most CPUs this process may use. A known node is
    taken whatever the current mask (the mask is checked afterwards, by ``decide``)."""
    asked, source = numa_node_choice(None, env)
    every = tuple(sorted({c for n in topo.nodes for c in n.cpus}))
    known = device_node is not None or asked is not None
    plan = placement.plan_placement(
        dataclasses.replace(topo, allowed_cpus=every) if known else topo, 1, device_node, label, asked, source
    )
    node = next(n for n in topo.nodes if n.id == plan.node)
    return node.id, node.cpus


def decide(node: int, node_cpus, mask, force: bool = False) -> PinDecision:
    """Pin to the node when the mask covers it; keep a mask already inside the node; refuse
    (ConfigError) a mask reaching outside the node without covering it, unless forced."""
    n, m = set(node_cpus), set(mask)
    fmt = lambda c: placement.format_cpulist(sorted(c))  # noqa: E731
    if not n:
        raise ConfigError("numa_node", f"NUMA node {node} has no online CPU")
    if n <= m:
        return PinDecision(node, tuple(sorted(n)), tuple(sorted(n)), f"pinned to NUMA node {node}")
    if m <= n:
        return PinDecision(
            node, tuple(sorted(n)), tuple(sorted(m)), f"the current mask {fmt(m)} is inside NUMA node {node}: kept"
        )
    if not force:
        raise ConfigError(
            "affinity",
            f"the current CPU affinity mask {fmt(m)} lies outside NUMA node {node} "
            f"(CPUs {fmt(n)}) of the device; run from a shell whose mask covers the node, "
            "or pass --force",
        )
    both = n & m
    return PinDecision(
        node,
        tuple(sorted(n)),
        tuple(sorted(both or m)),
        f"forced: mask {fmt(m)} outside NUMA node {node}; running on {fmt(both or m)}",
    )


def _device_node(device: str, sys_pci: Path, bus_id: str | None) -> tuple[int | None, str]:
    if bus_id:
        return placement.pci_numa_node(bus_id, sys_pci), f"{device} ({bus_id})"
    if device == "cpu":
        return None, device
    from ..device.backends import resolve_device

    return placement.device_numa_node(resolve_device(device), sys_pci)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llama_omni_py.bench.pinning", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--force", action="store_true", help="run even when the current mask is outside the node")
    ap.add_argument("--mask", help="CPU list to check instead of this process's affinity mask")
    ap.add_argument("--sys-node", default=str(placement._SYS_NODE), help="sysfs NUMA directory (tests)")
    ap.add_argument("--sys-pci", default=str(placement._SYS_PCI), help="sysfs PCI devices directory (tests)")
    ap.add_argument("--pci-bus-id", help="the device's PCI address, when ggml does not report it")
    a = ap.parse_args(argv)
    try:
        mask = placement.parse_cpulist(a.mask) if a.mask else sorted(os.sched_getaffinity(0))
        topo = placement.read_topology(Path(a.sys_node), allowed=mask)
        dev_node, label = _device_node(a.device, Path(a.sys_pci), a.pci_bus_id)
        node, cpus = device_node_cpus(topo, dev_node, label)
        d = decide(node, cpus, mask, a.force)
    except (ConfigError, ValueError) as e:
        print(f"bench-pinned: refused: {e}", file=sys.stderr)
        return REFUSED
    print(f"bench-pinned: {d.note}", file=sys.stderr)
    print(d.node, placement.format_cpulist(list(d.cpus)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
