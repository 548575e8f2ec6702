"""The package's import graph, computed from the source -- every import statement, at module level
or inside a function, and every module a lazy face's table names by its dotted name: no
circles, no module importing a layer above its own (the layer table of
docs/architecture.md#layers), and a gateway that never imports the worker."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = "llama_omni_py"
NATIVE = {f"{PKG}._core"}  # the compiled core: a leaf outside the graph


def module_files(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """{dotted module name: (file, is a package)} of every .py file under root/package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _absolute(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = (module if is_pkg else module.rpartition(".")[0]).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, modules) -> str | None:
    """The module a dotted name lives in: the longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _called(call: ast.Call) -> str | None:
    return getattr(call.func, "id", getattr(call.func, "attr", None))


def _target(node) -> str | None:
    return getattr(node, "id", None)


def imports_of(module: str, path: Path, is_pkg: bool, modules, prefix: str) -> set[str]:
    """The package modules ``module`` imports, anywhere in its source."""
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    # the dotted names a lazy face's table imports on first use: in a call of _lazy.lazy, or in a
    # module-level name such a call reads
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and _called(c) == "lazy"]
    read = {n.id for c in calls for n in ast.walk(c) if isinstance(n, ast.Name)}
    tables = calls + [a for a in tree.body if isinstance(a, ast.Assign) and {_target(t) for t in a.targets} & read]
    lazy_names = {
        n.value
        for table in tables
        for n in ast.walk(table)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in modules
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_pkg)
            subs = [f"{base}.{a.name}" for a in node.names]
            names = [s if s in modules or s in NATIVE else base for s in subs]
        else:
            continue
        for name in names:
            if name in NATIVE or not (name == prefix or name.startswith(prefix + ".")):
                continue
            owner = _owner(name, modules)
            if owner and owner != module:
                found.add(owner)
    found |= {name for name in lazy_names if name != module}
    return found


def import_graph(root: Path, package: str, prefix: str | None = None) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {m: imports_of(m, p, is_pkg, modules, prefix or package) for m, (p, is_pkg) in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter
                counter += 1
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return out


def layer_table() -> list[tuple[str, list[str]]]:
    """The layers of docs/architecture.md#layers, bottom first: [(layer, [module prefixes])]."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    table = []
    for line in block.splitlines():
        if line.strip():
            name, *members = line.split()
            table.append((name, members))
    return table


def layer_of(module: str, table) -> int | None:
    """The layer index of a module: its longest listed prefix (``llama_omni_py`` is ``__init__``)."""
    rel = module[len(PKG) + 1 :] if module != PKG else "__init__"
    best, depth = None, -1
    for i, (_, members) in enumerate(table):
        for m in members:
            if (rel == m or rel.startswith(m + ".")) and m.count(".") > depth:
                best, depth = i, m.count(".")
    return best


GRAPH = import_graph(ROOT, PKG)


def test_the_graph_sees_function_level_imports_and_lazy_names(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('T = {"Thing": "pkg.c"}\n__getattr__ = lazy(__name__, T)\nNAME = "pkg.a"\n')
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n    return x\n")
    (pkg / "c.py").write_text("import os\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg"] == {"pkg.c"}
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_package_has_no_import_circles():
    assert len(GRAPH) > 100
    assert circles(GRAPH) == []


def test_every_module_has_a_layer():
    table = layer_table()
    assert [name for name, _ in table][:2] == ["base", "native"] and len(table) >= 6
    assert [m for m in GRAPH if layer_of(m, table) is None] == []


def test_no_module_imports_a_layer_above_its_own():
    table = layer_table()
    upward = [
        f"{a} ({table[layer_of(a, table)][0]}) imports {b} ({table[layer_of(b, table)][0]})"
        for a, targets in GRAPH.items()
        for b in targets
        if layer_of(b, table) > layer_of(a, table)
    ]
    assert upward == []


def test_the_gateway_and_the_worker_never_import_each_other():
    gateway, worker = f"{PKG}.server.gateway", f"{PKG}.server.worker"
    crossing = [
        (a, b)
        for a, targets in GRAPH.items()
        for b in targets
        if (a.startswith(gateway) and b.startswith(worker + ".")) or (a.startswith(worker) and b.startswith(gateway))
    ]
    assert crossing == []  # a Ray actor may start a worker through its face (server.worker) only


@pytest.mark.parametrize("folder", ["benchmarks", "scripts"])
def test_benchmarks_and_scripts_have_no_import_circles(folder):
    # their modules import each other by bare name (the folder is on sys.path)
    files = {p.stem: p for p in (ROOT / folder).glob("*.py")}
    graph = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module in files:
                found.add(node.module)
        graph[name] = found - {name}
    assert circles(graph) == []
