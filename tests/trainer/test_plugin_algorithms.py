"""Two algorithms of a third-party package (``tests/plugin_algos``, one on ``on_policy`` with
a stateful behaviour policy, one on ``replay``) train through the trainer and roles, which
know nothing of them: they arrive through the ``kilorl.algorithms`` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from kilorl.config import config_from_dict
from kilorl.trainer import Trainer
from kilorl.trainer.metrics import read_metrics
algo = json.loads(sys.argv[1])
cfg = config_from_dict({"env": {"id": "CartPole-v1"}, "algo": algo,
    "parallelism": {"actor": 2, "envs_per_actor": 2}, "train": {"total_env_steps": 768, "seed": 2},
    "model": {"hidden_sizes": [16]}, "logging": {"progress": False, "tensorboard": False, "report_every_s": 0},
    "resources": {"learner": {"gpus": 0, "cpus": 1, "memory_gb": 0.25}, "actor": {"cpus": 1, "memory_gb": 0.25},
                  "parameter_server": {"cpus": 0.1, "memory_gb": 0.1}}})
import ray
ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
result = Trainer(cfg, sys.argv[2]).fit()
rows = read_metrics(sys.argv[2])
print(json.dumps({"env_steps": result.env_steps, "rows": rows}))
"""


def _entry_point(tmp_path: Path) -> dict[str, str]:
    dist = tmp_path / "kilorl_test_algos-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kilorl-test-algos\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kilorl.algorithms]\ntest_algos = tests.plugin_algos.register\n")
    path = os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("algo", [{"name": "counting_pg", "rollout_length": 32},
                                  {"name": "tiny_q", "rollout_length": 16, "learning_starts": 64, "batch_size": 32}])
def test_a_third_party_algorithm_trains_on_the_generic_trainer_and_roles(tmp_path, algo):
    out = subprocess.run([sys.executable, "-c", RUN, json.dumps(algo), str(tmp_path / "run")], capture_output=True,
                         text=True, env=_entry_point(tmp_path), cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["env_steps"] == 768
    rows = got["rows"]
    if algo["name"] == "counting_pg":  # two runners' rollouts of 32 x 2 per iteration, each checked against its state
        assert [r["env_steps"] for r in rows] == list(range(128, 769, 128))
        assert all(r["state_checked_steps"] == 128 for r in rows)
    else:  # one runner's rollout of 16 x 2 per iteration; TD steps once 64 rows are in
        assert [r["env_steps"] for r in rows] == list(range(32, 769, 32))
        losses = [r["td_loss"] for r in rows if r["env_steps"] >= 64]
        assert losses and all(v == v for v in losses)  # finite: trained on sampled rows


def test_no_file_of_the_trainer_or_the_roles_names_an_algorithm():
    """The trainer and the roles reach algorithms through the registry only."""
    import re

    names = re.compile(r"\b(ppo|a2c|dqn|counting_pg|tiny_q)\b", re.IGNORECASE)
    for folder in ("trainer", "roles"):
        for path in (REPO / "kilorl" / folder).rglob("*.py"):
            assert not names.search(path.read_text()), f"{path.relative_to(REPO)} names an algorithm"
