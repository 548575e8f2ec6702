"""Synthetic sysfs trees for the placement tests: NUMA nodes with their CPU lists."""


def fake_sysfs(root, nodes, online=None):
    for node, cpus in nodes.items():
        d = root / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    if online is not None:
        (root / "cpu").mkdir()
        (root / "cpu" / "online").write_text(online + "\n")
    return root / "node"
