"""The store's layers can be read off its folders, and imports point one way only.

Every module of ``kilorl.store`` is parsed with ``ast``; every import counts, wherever it
is written (top level, inside a function, under ``TYPE_CHECKING``), because an import
hidden in a function is still a dependency. Two rules (docs/architecture.md, "Layers"):

- no cycle among ``kilorl.store`` modules;
- a module imports only from its own layer and the layers its layer may use (``ALLOWED``);
- no module imports another module's private names, or reads them off an imported module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kilorl.store

ROOT = Path(kilorl.store.__file__).parent
PKG = "kilorl.store"

# layer -> layers it may import (besides itself). ``errors`` is the shared bottom.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "wire": {"errors"},
    "metastore": {"wire", "errors"},
    "local": {"wire", "errors"},
    # Replay tables (RL-agnostic rows, codecs, sampler, rate limiter): the worker serves
    # them, the client encodes their chunks.
    "replay": {"errors"},
    "server": {"local", "replay", "wire", "errors"},
    "mesh": {"server", "local", "metastore", "wire", "errors"},
    "client": {"replay", "wire", "errors"},
    # The openYuanrong-compatible API sits on the client like any user code; ``facade`` is
    # its old name, kept as an alias.
    "yuanrong": {"client", "wire", "errors"},
    "facade": {"yuanrong", "client", "wire", "errors"},
    "package": {"errors", "client", "local", "facade"},
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PKG, *parts])


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def layer_of(module: str) -> str:
    rest = module[len(PKG) + 1:].split(".") if module != PKG else []
    return rest[0] if rest else "package"


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The ``kilorl.store`` modules ``module`` imports, resolved to modules where possible."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if is_package(path) else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        for t in targets:
            if t == PKG or t.startswith(PKG + "."):
                while t not in known and "." in t:  # e.g. ``import kilorl.store.x.y`` of an attribute
                    t = t.rpartition(".")[0]
                if t != module:
                    out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = all_modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        layer = layer_of(mod)
        allowed = ALLOWED.get(layer)
        for dep in sorted(deps):
            dep_layer = layer_of(dep)
            if dep_layer == layer:
                continue
            if allowed is None or dep_layer not in allowed:
                bad.append(f"{mod} ({layer}) imports {dep} ({dep_layer})")
    return bad


def private_reads(module: str, path: Path) -> list[str]:
    """``from kilorl.store.x import _name`` and ``x._name`` where ``x`` is an imported store module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases: set[str] = set()
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PKG):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    bad.append(f"{module} imports {node.module}.{alias.name}")
                aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            aliases.update(a.asname or a.name for a in node.names if a.name.startswith(PKG))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            bad.append(f"{module} reads {node.value.id}.{node.attr}")
    return bad


def test_no_module_reads_another_modules_private_names():
    bad = [b for m, p in all_modules().items() for b in private_reads(m, p)]
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_every_module_belongs_to_a_known_layer():
    unknown = sorted({layer_of(m) for m in all_modules()} - set(ALLOWED))
    assert not unknown, f"modules outside the layered packages: {unknown}"


def test_store_modules_import_each_other_without_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among kilorl.store modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_points_up_a_layer():
    bad = upward_imports(import_graph())
    assert not bad, "imports pointing up a layer:\n" + "\n".join(bad)


def test_the_checker_sees_imports_hidden_in_functions_and_type_checking(tmp_path):
    """The rules would be toothless if function-local or TYPE_CHECKING imports slipped by."""
    src = tmp_path / "probe.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from kilorl.store.server import worker\n"
                   "def f():\n    import kilorl.store.mesh.node\n")
    known = {"kilorl.store.server.worker", "kilorl.store.mesh.node", "kilorl.store.server", "kilorl.store.mesh"}
    found = imports_of("kilorl.store.local.probe", src, known)
    assert found == {"kilorl.store.server.worker", "kilorl.store.mesh.node"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
