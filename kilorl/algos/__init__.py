"""Algorithms: each a folder with its config, learner update and per-step record.

No Ray and no environments here (docs/architecture.md, "Layers"); importing this package
is cheap (torch is imported by the learner, policy and model modules only).
"""

from kilorl.algos.registry import AlgorithmSpec, get, names, register

__all__ = ["AlgorithmSpec", "get", "names", "register"]
