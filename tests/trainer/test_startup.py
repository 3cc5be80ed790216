"""Start-up and teardown: a role that fails to start leaves no actors and no Ray behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kilorl.trainer import StartupError, Trainer
from tests.conftest import REPO, tiny_config

BROKEN = "tests.trainer.broken_env:ResetRaises"


def _alive_actors() -> set[str]:
    from ray._private.state import actors

    return {aid for aid, a in actors().items() if a["State"] != "DEAD"}


def test_failure_in_env_reset_is_named_and_kills_every_role_it_started(ray_local, tmp_path):
    before = _alive_actors()
    cfg = tiny_config(env={"id": BROKEN}, parallelism={"actor": 2, "parameter_server": 2})
    with pytest.raises(StartupError, match=r"actor \d failed to start: .*this env refuses to reset"):
        Trainer(cfg, tmp_path / "run").fit()
    import time

    deadline = time.time() + 30  # ray.kill is asynchronous: wait until the GCS has seen the deaths
    while _alive_actors() - before and time.time() < deadline:
        time.sleep(0.2)
    assert _alive_actors() - before == set()
    assert ray_local.is_initialized()  # Ray was running before: the run did not stop it


def _fit_in_a_fresh_process(config_expr: str, run_dir: str) -> dict:
    """Train ``config_expr`` (a ``tiny_config(...)`` call) where no Ray runs; what was left after."""
    script = textwrap.dedent(f"""
        import json, psutil, ray
        from kilorl.trainer import StartupError, Trainer
        from tests.conftest import tiny_config
        error = None
        try:
            Trainer({config_expr}, {run_dir!r}).fit()
        except StartupError as err:
            error = str(err)
        gone, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=30)
        print(json.dumps({{"error": error, "ray_initialized": ray.is_initialized(),
                          "children": [p.name() for p in alive]}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**__import__("os").environ, "RAY_ADDRESS": "local"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_failure_leaves_no_ray_instance_it_started(tmp_path):
    """In a fresh process: the trainer starts Ray, an actor fails, Ray and its processes are gone."""
    result = _fit_in_a_fresh_process(f"tiny_config(env={{'id': {BROKEN!r}}})", str(tmp_path / "run"))
    assert "actor 0 failed to start" in result["error"] and "refuses to reset" in result["error"]
    assert result["ray_initialized"] is False
    assert result["children"] == []  # no raylet, GCS, worker or store worker outlived the failed start


def test_described_cluster_refuses_to_train(tmp_path):
    from kilorl.trainer import Cluster, ClusterError

    with pytest.raises(ClusterError, match="described cluster"):
        Trainer(tiny_config(), tmp_path / "run", Cluster(nodes=4, gpus_per_node=8)).fit()


def test_attached_cluster_smaller_than_expected_is_refused(ray_local, tmp_path):
    from kilorl.trainer import Cluster, ClusterError

    with pytest.raises(ClusterError, match=r"nodes=4, gpus_per_node=8\) but Ray .* has 1 node\(s\)"):
        Trainer(tiny_config(), tmp_path / "run", Cluster(nodes=4, gpus_per_node=8, address="auto")).fit()
    assert ray_local.is_initialized()


def test_a_store_worker_that_cannot_start_fails_the_start_and_leaves_nothing(tmp_path):
    """On this machine the driver starts the store worker itself (before Ray): its failure is named."""
    result = _fit_in_a_fresh_process("tiny_config(store={'shm_size': '64TiB'})", str(tmp_path / "run"))
    assert result["error"] is not None and "store worker failed to start" in result["error"], result
    assert "does not fit in" in result["error"]  # the worker's own reason reaches the user
    assert result["ray_initialized"] is False
    assert result["children"] == []


def test_a_local_runs_store_worker_starts_before_ray_is_imported_and_stops_when_ray_cannot_start(tmp_path):
    # The worker's own start then runs beside Ray's import (one core) instead of beside
    # ray.init() (both cores); a worker started that early must still never outlive a failed start.
    script = textwrap.dedent(f"""
        import json, sys, psutil
        from kilorl.trainer import Cluster, Trainer
        from kilorl.trainer.store_fleet import StoreFleet
        from tests.conftest import tiny_config

        seen = {{}}
        start_local = StoreFleet.start_local.__func__

        def recording(cls, *args, **kwargs):
            seen["ray imported"] = "ray" in sys.modules
            fleet = start_local(cls, *args, **kwargs)
            seen["worker alive"] = fleet.local.proc.poll() is None
            return fleet

        def no_ray(self, *args, **kwargs):
            raise RuntimeError("Ray did not start")

        StoreFleet.start_local = classmethod(recording)
        Cluster.connect = no_ray
        try:
            Trainer(tiny_config(), {str(tmp_path / "run")!r}).fit()
        except RuntimeError as err:
            seen["error"] = str(err)
        gone, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=30)
        print(json.dumps({{**seen, "children": [p.name() for p in alive]}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "RAY_ADDRESS": "local"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "ray imported": False, "worker alive": True, "error": "Ray did not start", "children": []}


def test_the_drivers_start_up_path_imports_no_torch():
    # torch costs 1.4 s of CPU to import, which the roles need on these cores: nothing the
    # driver runs to start a run may import it.
    script = textwrap.dedent("""
        import sys
        from kilorl.config import load_config
        from kilorl.trainer import Trainer
        from kilorl.trainer.loop import OnPolicyLoop
        from kilorl.trainer.session import RoleSession, parameter_store
        from kilorl.trainer.store_fleet import StoreFleet
        from kilorl.trainer.checkpoint import Checkpointer
        from kilorl.trainer.metrics import MetricsWriter
        from kilorl.params.store_backed import StoreParameterStore
        from kilorl.comm import CompressionConfig
        cfg = load_config("examples/cartpole_ppo.yaml")
        store = parameter_store(cfg, StoreFleet.external("127.0.0.1:1", None))
        print([m for m in sys.modules if m == "torch" or m.startswith("torch.")][:3])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_training_run_with_checkpoints_and_tensorboard_never_imports_torch_on_the_driver(tmp_path):
    # The learner sends its checkpoints as bytes and TensorBoard is written without torch, so
    # the driver's CPU stays with the roles for the whole run. A fresh process, so a torch
    # import anywhere in the run would show in its sys.modules.
    script = textwrap.dedent(f"""
        import json, sys
        from kilorl.trainer import Trainer
        from kilorl.trainer.checkpoint import load_checkpoint
        from tests.conftest import tiny_config

        cfg = tiny_config(logging={{"progress": False, "tensorboard": True, "report_every_s": 0.0}},
                          checkpoint={{"every_env_steps": 1024}}, train={{"total_env_steps": 4096}})
        result = Trainer(cfg, {str(tmp_path / "run")!r}).fit()
        torch_during_run = "torch" in sys.modules
        state, meta = load_checkpoint(result.checkpoint)  # reading one back may import it
        print(json.dumps({{"torch": torch_during_run, "steps": result.env_steps, "saved": meta["env_steps"],
                          "updates": meta["updates"], "model": sorted(state["model"])[:1]}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "RAY_ADDRESS": "local"})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["torch"] is False
    assert r["steps"] == 4096 and r["saved"] == 4096
    assert r["updates"] == 4096 // 128  # one update per batch of 32 steps x 4 envs
    assert r["model"] and r["model"][0].startswith(("policy", "value"))
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert checkpoints == ["step_000000002048", "step_000000003072", "step_000000004096"]  # keep=3


def test_an_embedded_ray_preloads_the_role_modules_and_retries_its_socket_connections_every_20_ms():
    # The roles' import (torch, gymnasium, kiloRL: 1.4 s of CPU) is Ray's preload, done while
    # Ray is still starting; a fresh process, so this Ray is the one Cluster.connect starts.
    # Ray's own processes read the retry settings from the GCS, where they are checked here.
    script = textwrap.dedent("""
        import json, sys, ray
        from ray._private.state import state
        from kilorl.trainer.cluster import ROLE_MODULES, Cluster

        assert Cluster().connect(1)

        @ray.remote(num_cpus=0)
        def imported():
            import gc
            modules = [m for m in ("torch", "kilorl.roles.env_runner", "kilorl.roles.learner", *ROLE_MODULES)
                       if m in sys.modules]
            return {"modules": modules, "gc on": gc.isenabled(), "frozen": gc.get_freeze_count() > 100_000}

        config = state.get_system_config()
        retry = {k: config.get(k) for k in ("raylet_client_connect_timeout_milliseconds",
                                             "raylet_client_num_connect_attempts")}
        print(json.dumps({"driver": "torch" in sys.modules, "worker": ray.get(imported.remote()), "retry": retry}))
        ray.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "RAY_ADDRESS": "local"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "driver": False,
        "worker": {"modules": ["torch", "kilorl.roles.env_runner", "kilorl.roles.learner", "kilorl.roles.prestart"],
                   "gc on": True, "frozen": True},
        "retry": {"raylet_client_connect_timeout_milliseconds": 20, "raylet_client_num_connect_attempts": 500}}
