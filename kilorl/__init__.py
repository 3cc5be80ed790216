"""kiloRL: distributed reinforcement learning with a built-in tiered data system.

The top-level names are imported lazily so that `import kilorl.store` or
`import kilorl.placement` does not pull in torch, Ray or the RL code (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "load_config": ("kilorl.config", "load_config"),
    "Config": ("kilorl.config", "Config"),
    "Trainer": ("kilorl.trainer", "Trainer"),
    "Cluster": ("kilorl.trainer.cluster", "Cluster"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        return getattr(importlib.import_module(module_name), attr)
    raise AttributeError(f"module 'kilorl' has no attribute {name!r}")


__all__ = ["__version__", *_LAZY]
