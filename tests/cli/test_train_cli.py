"""``kilorl train`` in a fresh process: its errors and exit codes, and a full run with every output on."""

from __future__ import annotations

from tests.conftest import EXAMPLES


def test_unavailable_backend_exits_2(kilorl_cli):
    res = kilorl_cli("train", str(EXAMPLES / "cartpole_ppo.yaml"), "--backend", "mxlink")
    assert res.returncode == 2
    assert "communication_backend='mxlink' is not available" in res.stderr and "gloo" in res.stderr


def test_env_that_fails_in_reset_exits_1_naming_the_actor(kilorl_cli, tmp_path):
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("env:\n  id: tests.trainer.broken_env:ResetRaises\ntrain:\n  total_env_steps: 1024\n"
                   "logging:\n  progress: false\n  tensorboard: false\n")
    res = kilorl_cli("train", str(cfg), "--run-dir", str(tmp_path / "run"))
    assert res.returncode == 1, res.stderr[-2000:]
    assert "error: actor 0 failed to start" in res.stderr and "this env refuses to reset" in res.stderr
    assert "Traceback" not in res.stderr.split("error: actor 0")[-1]


def test_a_fresh_local_run_with_tensorboard_and_frequent_checkpoints_finishes_with_no_token_warning(tmp_path):
    """Regressions: torch imported by two driver threads at once crashed the run (SIGSEGV); Ray's
    token-authentication warning was printed on every local run. One run checks both (a fresh
    Ray start is the costly part of each)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    res = subprocess.run([sys.executable, "-m", "kilorl.cli.main", "train", str(EXAMPLES / "cartpole_ppo.yaml"),
                          "--run-dir", str(run), "-o", "train.total_env_steps=4096",
                          "-o", "checkpoint.every_env_steps=512",
                          "-o", "logging.progress=false", "-o", "logging.report_every_s=0"],
                         capture_output=True, text=True, timeout=300, cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (run / "checkpoints").is_dir() and any((run / "tb").iterdir())
    assert "Token authentication" not in res.stderr + res.stdout  # neither "is enabled ... opt out" nor "disabled"
    assert "RAY_AUTH_MODE" not in res.stderr + res.stdout
