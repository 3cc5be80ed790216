"""Lower layers never import higher ones (docs/architecture.md, "Layers").

Every ``import`` in every module is read with ``ast`` (top level, inside functions and under
``TYPE_CHECKING``), so a lazy import that points up a layer fails here as surely as a
top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kilorl"

# package -> kiloRL packages it may import (besides itself). Anything not listed is forbidden.
ALLOWED: dict[str, set[str]] = {
    "store": set(),
    "placement": set(),
    "comm": set(),
    "monitor": set(),
    "params": {"store"},
    "envs": {"config", "config_section", "core"},
    "models": {"config", "config_section", "core", "envs"},
    "algos": {"config", "config_section", "core", "envs", "models", "comm", "params"},
    "roles": {"config", "config_section", "core", "envs", "models", "algos", "comm", "params", "store", "monitor"},
}
# third-party packages a layer must not import: algorithms know nothing of Ray.
FORBIDDEN_EXTERNAL: dict[str, set[str]] = {
    "algos": {"ray"}, "store": {"ray"}, "comm": {"ray"}, "params": {"ray"}, "monitor": {"ray"},
}


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = path.relative_to(root.parent).with_suffix("").parts[:-1]  # the module's package
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return out


def _layer_violations(root: Path = PACKAGE) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        layer = parts[0].removesuffix(".py")
        if layer not in ALLOWED:
            continue
        for line, name in _imports(path, root):
            top = name.split(".")[0]
            if top == "kilorl":
                target = name.split(".")[1] if name.count(".") else ""
                if target and target != layer and target not in ALLOWED[layer]:
                    bad.append(f"kilorl/{'/'.join(parts)}:{line} imports {name} (kilorl.{layer} may import "
                               f"{sorted(ALLOWED[layer]) or 'nothing else of kilorl'})")
            elif top in FORBIDDEN_EXTERNAL.get(layer, set()):
                bad.append(f"kilorl/{'/'.join(parts)}:{line} imports {name} (kilorl.{layer} must not use {top})")
    return bad


def test_no_module_imports_a_higher_layer():
    assert _layer_violations() == []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_every_layer_in_the_rule_table_exists(layer):
    assert (PACKAGE / layer).is_dir() or (PACKAGE / f"{layer}.py").is_file()


def test_the_checker_sees_imports_inside_functions_and_type_checking(tmp_path):
    """The rule catches a lazy upward import: shown on a synthetic module tree."""
    pkg = tmp_path / "kilorl"
    (pkg / "store").mkdir(parents=True)
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "store" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kilorl.trainer import Trainer\n"
        "def f():\n    from ..roles import actor\n    import ray\n")
    found = _layer_violations(pkg)
    assert len(found) == 3, found
    assert any("imports kilorl.trainer" in v for v in found) and any("imports kilorl.roles" in v for v in found)
    assert any("must not use ray" in v for v in found)
