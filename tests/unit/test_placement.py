import pytest
from sysfs import fake_sysfs

import llama_omni_py as omni
from llama_omni_py.device import placement
from llama_omni_py.env import numa_node_choice


@pytest.mark.parametrize(
    "text,cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", []), ("2,1,1", [1, 2])]
)
def test_cpulist_round_trip(text, cpus):
    assert placement.parse_cpulist(text) == cpus
    assert placement.parse_cpulist(placement.format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "1--2", "1,,2"])
def test_malformed_cpulist(bad):
    with pytest.raises(ValueError):
        placement.parse_cpulist(bad)


def test_topology_from_fakefake_sysfs(tmp_path):
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        d = tmp_path / f"node{node}"
        d.mkdir()
        (d / "cpulist").write_text(cpus + "\n")
    topo = placement.read_topology(tmp_path)
    assert [n.id for n in topo.nodes] == [0, 1]
    assert topo.node_of_cpu(5) == 1 and topo.node_of_cpu(99) is None


def test_pci_numa_node(tmp_path):
    (tmp_path / "0000:c1:00.0").mkdir()
    (tmp_path / "0000:c1:00.0" / "numa_node").write_text("3\n")
    (tmp_path / "0000:01:00.0").mkdir()
    (tmp_path / "0000:01:00.0" / "numa_node").write_text("-1\n")
    assert placement.pci_numa_node("0000:C1:00.0", tmp_path) == 3
    assert placement.pci_numa_node("0000:01:00.0", tmp_path) is None
    assert placement.pci_numa_node("", tmp_path) is None


def test_plan_small_host(tmp_path):
    topo = placement.read_topology(fake_sysfs(tmp_path, {0: "0-1"}), allowed=[0, 1])
    plan = placement.plan_placement(topo)
    assert plan.node == 0 and plan.vocoder_cpus == (1,) and plan.stage_cpus == (0,)
    assert any("capped at 1" in n for n in plan.notes)
    with pytest.raises(omni.ConfigError, match="t2w_threads"):
        placement.plan_placement(topo, t2w_threads=2)


def test_plan_follows_the_npu_on_a_256_core_host(tmp_path):
    nodes = {n: f"{32 * n}-{32 * n + 31}" for n in range(8)}
    sys_node = fake_sysfs(tmp_path, nodes)
    pci = tmp_path / "pci"
    (pci / "0000:c1:00.0").mkdir(parents=True)
    (pci / "0000:c1:00.0" / "numa_node").write_text("6\n")
    topo = placement.read_topology(sys_node, allowed=list(range(256)))
    plan = placement.plan_placement(topo, 16, placement.pci_numa_node("0000:C1:00.0", pci), "npu 0")
    assert plan.node == 6 and "npu 0" in plan.reason
    assert len(plan.vocoder_cpus) == 16 and all(192 <= c < 224 for c in plan.vocoder_cpus + plan.stage_cpus)
    assert not set(plan.vocoder_cpus) & set(plan.stage_cpus) and len(plan.stage_cpus) == 16
    chosen = numa_node_choice(None, {"OMNI_NUMA_NODE": "2"})  # the environment, as the config reads it
    assert chosen == (2, "OMNI_NUMA_NODE") and numa_node_choice(5, {"OMNI_NUMA_NODE": "2"}) == (5, "numa_node")
    assert placement.plan_placement(topo, 8, 6, "npu", *chosen).vocoder_cpus[0] // 32 == 2
    with pytest.raises(omni.ConfigError, match="OMNI_NUMA_NODE"):
        placement.plan_placement(topo, 8, 6, "npu", *numa_node_choice(None, {"OMNI_NUMA_NODE": "9"}))
    assert "node 6" in plan.describe() and "16 threads" in plan.describe()


def test_plan_never_widens_a_taskset_mask(tmp_path):
    sys_node = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"})
    topo = placement.read_topology(sys_node, allowed=[10, 11, 12, 13])  # taskset -c 10-13
    plan = placement.plan_placement(topo, None, device_node=0)
    assert plan.node == 1 and set(plan.vocoder_cpus + plan.stage_cpus) <= {10, 11, 12, 13}
    assert any("may not use" in n for n in plan.notes)  # the device's node is outside the mask


def test_plan_skips_offline_cpus(tmp_path):
    topo = placement.read_topology(fake_sysfs(tmp_path, {0: "0-7"}, online="0-3,6"), allowed=list(range(8)))
    plan = placement.plan_placement(topo, 3)
    assert set(plan.vocoder_cpus + plan.stage_cpus) == {0, 1, 2, 3, 6} and len(plan.vocoder_cpus) == 3


def test_plan_without_numa_information(tmp_path):
    topo = placement.read_topology(tmp_path / "missing", allowed=[0, 1, 2, 3])
    plan = placement.plan_placement(topo, 2)
    assert plan.node == 0 and plan.vocoder_cpus == (2, 3) and plan.stage_cpus == (0, 1)
