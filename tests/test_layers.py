"""The import graph of the project's packages: layers only import downwards, and no module cycles.

Layers, low to high: ext < machinery < storage < cache < front < apiserver < nodetier < shardslice (front: the
storage contract answered by K residency shards; nodetier: the node-facing tier, the apiserver's endpoints
over Leases held in memory; shardslice: the sharded slice's controllers and launcher; recipes: the configurations that assemble all of
them and the runner that starts and judges them: nothing imports it; bench/ and tests/ sit on top and are not checked). Every
``.py`` file under those packages is parsed with ``ast`` (Cython ``.pyx`` modules are modules too; their ``import``/``cimport`` lines are scanned); every import
statement counts, wherever it is (module level, inside a function, under ``if TYPE_CHECKING``).
Relative imports are resolved against the importing module's package. An import names one module:
``import a.b.c`` and ``from a.b import c`` (``c`` a module) are edges to ``a.b.c``; ``from a.b import
name`` (``name`` not a module) is an edge to ``a.b``, the package's ``__init__``. Parent packages are
not counted as imported (as import-linter and pydeps count it). Non-project imports are ignored.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

LAYERS = ("ext", "machinery", "storage", "cache", "front", "apiserver", "nodetier", "deployment", "shardslice", "recipes")
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the graph

def project_modules(root: Path, layers=LAYERS) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the layer packages, and every Cython
    module (.pyx: ext's compiled modules, imported by name like any other)."""
    mods: dict[str, Path] = {}
    for layer in layers:
        for path in sorted([*(root / layer).rglob("*.py"), *(root / layer).rglob("*.pyx")]):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


_PYX_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+c?import[ \t]+([\w., \t]+)|c?import[ \t]+([\w., \t]+))",
                         re.MULTILINE)


def _parse(path: Path) -> list[ast.AST]:
    """The import nodes of a file: ast for Python, a line scan of (c)import statements for Cython."""
    text = path.read_text()
    if path.suffix == ".py":
        return [n for n in ast.walk(ast.parse(text, str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]
    nodes: list[ast.AST] = []
    for m in _PYX_IMPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        names = [ast.alias(n.split()[0]) for n in (m.group(2) or m.group(3)).split(",") if n.strip()]
        nodes.append(ast.ImportFrom(module=m.group(1), names=names, level=0, lineno=line) if m.group(1)
                     else ast.Import(names=names, lineno=line))
    return nodes


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def import_edges(root: Path, layers=LAYERS) -> dict[str, list[tuple[str, int]]]:
    """module -> [(imported project module, line)], all imports of the module's file."""
    mods = project_modules(root, layers)

    def resolve(name: str) -> str | None:
        """The longest prefix of `name` that is a project module."""
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            cand = ".".join(parts[:i])
            if cand in mods:
                return cand
        return None

    edges: dict[str, list[tuple[str, int]]] = {}
    for mod, path in mods.items():
        out: list[tuple[str, int]] = []
        for node in _parse(path):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = resolve(alias.name)
                    if target:
                        out.append((target, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = _package_of(mod, path).split(".")
                    if node.level > 1:
                        base = base[: len(base) - (node.level - 1)]
                    base_name = ".".join(base + ([node.module] if node.module else []))
                else:
                    base_name = node.module or ""
                for alias in node.names:
                    target = resolve(f"{base_name}.{alias.name}") if alias.name != "*" else None
                    if target != f"{base_name}.{alias.name}":  # a name defined in base, not a submodule
                        target = resolve(base_name)
                    if target:
                        out.append((target, node.lineno))
        edges[mod] = sorted(set(out), key=lambda e: (e[1], e[0]))
    return edges


# --------------------------------------------------------------------------- the checks

def _layer(module: str) -> str:
    return module.split(".", 1)[0]


def upward_imports(edges: dict[str, list[tuple[str, int]]], layers=LAYERS) -> list[str]:
    """`importer:line imports target (layer -> higher layer)` for every import against the layering."""
    rank = {name: i for i, name in enumerate(layers)}
    bad = []
    for mod, targets in sorted(edges.items()):
        for target, line in targets:
            if rank[_layer(target)] > rank[_layer(mod)]:
                bad.append(f"{mod}:{line} imports {target} ({_layer(mod)} -> {_layer(target)}, a higher layer)")
    return bad


def import_cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """One concrete cycle (closed path, first module repeated at the end) per strongly connected
    component with more than one module, or a module importing itself. Tarjan's algorithm, iterative."""
    graph = {m: sorted({t for t, _ in ts}) for m, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1 or node in graph[node]:
                    sccs.append(sorted(comp))
    return [_a_cycle(graph, comp) for comp in sorted(sccs)]


def _a_cycle(graph: dict[str, list[str]], comp: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    members = set(comp)
    start = comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for m in frontier:
            for t in graph[m]:
                if t == start:  # closed: walk the parents back from m to start
                    path = [m]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if t in members and t not in parent:
                    parent[t] = m
                    following.append(t)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {comp}")


def _describe_cycle(cycle: list[str], edges: dict[str, list[tuple[str, int]]]) -> str:
    hops = []
    for a, b in zip(cycle, cycle[1:]):
        lines = [str(line) for t, line in edges[a] if t == b]
        hops.append(f"{a}:{','.join(lines)} -> {b}")
    return "cycle: " + "  ".join(hops)


# --------------------------------------------------------------------------- the tests

def test_layers_import_only_downwards():
    edges = import_edges(ROOT)
    assert len(edges) > 40, sorted(edges)  # the scan found the project
    bad = upward_imports(edges)
    assert not bad, ("imports from a lower layer into a higher one (layers: " + " < ".join(LAYERS) + "):\n  "
                     + "\n  ".join(bad))


def test_no_import_cycles():
    edges = import_edges(ROOT)
    cycles = import_cycles(edges)
    assert not cycles, "import cycles between project modules:\n  " + "\n  ".join(
        _describe_cycle(c, edges) for c in cycles)


def test_checker_finds_upward_imports_and_cycles(tmp_path):
    """The checks on a synthetic tree: they must see an upward import, a cycle (through a relative
    import inside a function), and leave a clean downward import alone."""
    files = {
        "ext/__init__.py": "",
        "ext/fast.py": "import os\n",
        "ext/compiled.pyx": "cimport cython\nfrom libc.stdint cimport uint64_t\nfrom ext.fast cimport x\n",
        "machinery/__init__.py": "",
        "machinery/low.py": "from ext import fast\n\ndef f():\n    import cache.high  # upward, hidden in a function\n",
        "storage/__init__.py": "",
        "storage/a.py": "from . import b\n",
        "storage/b.py": "def g():\n    from .c import name\n",
        "storage/c.py": "from storage.a import something\nimport machinery.low\n",
        "cache/__init__.py": "",
        "cache/high.py": "from ext.fast import x\n",
        "apiserver/__init__.py": "from .sub.mod import x\n",
        "apiserver/sub/__init__.py": "",
        "apiserver/sub/mod.py": "from ...cache import high\nfrom .. import sub\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    edges = import_edges(tmp_path)
    assert edges["ext.compiled"] == [("ext.fast", 3)]
    assert edges["machinery.low"] == [("ext.fast", 1), ("cache.high", 4)]
    assert edges["storage.c"] == [("storage.a", 1), ("machinery.low", 2)]
    assert edges["apiserver"] == [("apiserver.sub.mod", 1)]
    assert edges["apiserver.sub.mod"] == [("cache.high", 1), ("apiserver.sub", 2)]
    assert upward_imports(edges) == ["machinery.low:4 imports cache.high (machinery -> cache, a higher layer)"]
    cycles = import_cycles(edges)
    assert cycles == [["storage.a", "storage.b", "storage.c", "storage.a"]]
    assert _describe_cycle(cycles[0], edges) == \
        "cycle: storage.a:1 -> storage.b  storage.b:2 -> storage.c  storage.c:1 -> storage.a"
    # a module importing itself is a cycle too
    (tmp_path / "ext/fast.py").write_text("from ext import fast\n")
    assert ["ext.fast", "ext.fast"] in import_cycles(import_edges(tmp_path))
