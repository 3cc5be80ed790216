"""Seconds per rollout and per update of LSTM-PPO against feed-forward PPO, in one process.

One env runner and one learner of ``examples/cartpole_masked_lstm.yaml`` (with and without
``model.recurrent``), stepped alternately in this process without Ray: ``collect`` (256 env
steps) then ``update`` (20 epochs), ``--rounds`` times each, so load from other jobs hits
both. Prints the median seconds of each and the env steps/s of collect + update in series.

    python benchmarks/recurrent_step_cost.py --rounds 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from kilorl.config import config_from_dict
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "cartpole_masked_lstm.yaml"


def build(recurrent: bool) -> tuple[LearnerRole, EnvRunner]:
    data = yaml.safe_load(CONFIG.read_text())
    if not recurrent:
        data["model"]["recurrent"] = None
    data["train"]["torch_threads"] = 1
    cfg = config_from_dict(data)
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    return learner, EnvRunner(cfg, store, 0, seed=0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    sides = {"lstm": build(True), "feed-forward": build(False)}
    times: dict[str, dict[str, list[float]]] = {k: {"collect": [], "update": []} for k in sides}
    version = {k: 0 for k in sides}
    for _ in range(args.rounds):
        for name, (learner, runner) in sides.items():
            t0 = time.perf_counter()
            rollout, _ = runner.collect(version[name])
            t1 = time.perf_counter()
            version[name] += 1
            learner.update(version[name], version[name] * rollout.env_steps, rollout)
            times[name]["collect"].append(t1 - t0)
            times[name]["update"].append(time.perf_counter() - t1)
    steps = rollout.env_steps
    for name, t in times.items():
        c, u = statistics.median(t["collect"]), statistics.median(t["update"])
        print(f"{name:12s} collect {c:.3f} s  update {u:.3f} s  ({steps} env steps: {steps / (c + u):.0f} env steps/s in series)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
