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
    "envs": {"config_section", "core"},
    "models": {"config_section", "core", "envs"},
    # algorithms see their own section and a context, never the run config
    "algos": {"config_section", "core", "envs", "models", "comm", "params"},
    "datasets": set(),
    "roles": {"config", "config_section", "core", "envs", "models", "algos", "comm", "params", "store", "monitor",
              "datasets"},
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


ALGO_SHARED = {"api", "common", "keys", "config_base", "flat_params", "optim", "gae", "vtrace", "actor_critic", "registry",
               "sequences"}
"""What every algorithm may build on; an algorithm's own folder is its alone."""
ALGO_INNER: dict[str, set[str]] = {
    "api": set(),
    "common": {"api", "keys", "flat_params", "optim"},
}
"""Inside ``kilorl.algos``: the contracts and the building blocks import no algorithm (and
``api`` nothing else of ``algos``)."""


def _algos_violations(root: Path = PACKAGE) -> list[str]:
    bad = []
    algos = root / "algos"
    for path in sorted(algos.rglob("*.py")):
        part = path.relative_to(algos).parts[0].removesuffix(".py")
        for line, name in _imports(path, root):
            if not name.startswith("kilorl.algos."):
                continue
            target = name.split(".")[2]
            if target == part:
                continue
            if part in ALGO_INNER and target not in ALGO_INNER[part]:
                bad.append(f"kilorl/algos/{path.relative_to(algos)}:{line} imports {name}")
            elif part not in ALGO_SHARED and target not in ALGO_SHARED:
                bad.append(f"kilorl/algos/{path.relative_to(algos)}:{line} imports another algorithm's {name}")
    return bad


def test_the_algorithm_contracts_and_building_blocks_import_no_algorithm():
    assert _algos_violations() == []


def test_the_algos_checker_sees_a_building_block_that_imports_an_algorithm(tmp_path):
    pkg = tmp_path / "kilorl" / "algos"
    (pkg / "common").mkdir(parents=True)
    (pkg / "ppo").mkdir()
    (pkg / "common" / "x.py").write_text("from kilorl.algos.ppo.loss import ppo_loss\n")
    (pkg / "ppo" / "y.py").write_text("from kilorl.algos.dqn.model import QNetwork\nfrom kilorl.algos.common import x\n")
    found = _algos_violations(tmp_path / "kilorl")
    assert len(found) == 2 and "common/x.py" in found[0] and "another algorithm" in found[1], found
