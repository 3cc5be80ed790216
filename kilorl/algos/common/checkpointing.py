"""Checkpoints of every named module and optimizer of a learner, as the checkpoint format keeps
them: tensors (``state.safetensors``) and JSON (``meta.json``), never a pickle.

An algorithm with one network and one optimizer returns them as ``model`` and ``optimizer``
of its ``state()``; every other part (a target network, a second optimizer, a replay table's
columns) goes through ``NamedParts`` into ``state()["tensors"]`` and ``["extra_meta"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where it is used: the driver writes checkpoints without it
    import torch


def flatten_optimizer(opt_state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer state dict as named tensors plus the JSON structure that rebuilds it."""
    import torch

    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, per_param in opt_state["state"].items():
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim/{idx}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": opt_state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], structure: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``flatten_optimizer``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith("optim/"):
            continue
        _, idx, key = name.split("/", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, extra in structure.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(extra)
    return {"state": state, "param_groups": structure["param_groups"]}


class NamedParts:
    """A learner's modules and optimizers by name, checkpointed together."""

    def __init__(self) -> None:
        self.modules: dict[str, torch.nn.Module] = {}
        self.optimizers: dict[str, Any] = {}

    def module(self, name: str, module: torch.nn.Module) -> torch.nn.Module:
        self.modules[name] = module
        return module

    def optimizer(self, name: str, optimizer: Any) -> Any:
        """Anything with ``state_dict`` / ``load_state_dict`` in ``torch.optim``'s layout."""
        self.optimizers[name] = optimizer
        return optimizer

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(tensors, meta)``: ``module/<name>/<key>`` and ``optimizer/<name>/...`` tensors, and
        each optimizer's structure under ``meta["optimizers"][name]``."""
        tensors: dict[str, torch.Tensor] = {}
        structures: dict[str, Any] = {}
        for name, module in self.modules.items():
            tensors.update({f"module/{name}/{k}": v.detach().cpu() for k, v in module.state_dict().items()})
        for name, opt in self.optimizers.items():
            flat, structures[name] = flatten_optimizer(opt.state_dict())
            tensors.update({f"optimizer/{name}/{k}": v for k, v in flat.items()})
        return tensors, {"optimizers": structures}

    def load(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        """Restore what ``state`` returned; a part the checkpoint does not hold is an error naming it."""
        import torch

        for name, module in self.modules.items():
            prefix = f"module/{name}/"
            own = {k[len(prefix):]: torch.as_tensor(v) for k, v in tensors.items() if k.startswith(prefix)}
            if not own:
                raise KeyError(f"the checkpoint holds no module {name!r}")
            module.load_state_dict(own)
        for name, opt in self.optimizers.items():
            if name not in meta.get("optimizers", {}):
                raise KeyError(f"the checkpoint holds no optimizer {name!r}")
            prefix = f"optimizer/{name}/"
            own = {k[len(prefix):]: torch.as_tensor(v) for k, v in tensors.items() if k.startswith(prefix)}
            opt.load_state_dict(unflatten_optimizer(own, meta["optimizers"][name]))
