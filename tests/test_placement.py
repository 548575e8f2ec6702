import pytest

from llama_omni_py import placement


@pytest.mark.parametrize("text,cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", []), ("2,1,1", [1, 2])])
def test_cpulist_round_trip(text, cpus):
    assert placement.parse_cpulist(text) == cpus
    assert placement.parse_cpulist(placement.format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "1--2", "1,,2"])
def test_malformed_cpulist(bad):
    with pytest.raises(ValueError):
        placement.parse_cpulist(bad)


def test_topology_from_fake_sysfs(tmp_path):
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
