"""A run that stops before its env-step budget never says "done" (kilorl.trainer.early_stop).

The fast tests drive ``early_stop.recorded`` and ``kilorl top`` on run directories; the slow
ones run ``kilorl train`` in a subprocess to an early stop of each kind and read its exit code,
its last line and its last metrics row.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kilorl.config import dump_config
from kilorl.trainer import early_stop
from kilorl.trainer.loop_errors import LearnerLost
from tests.conftest import tiny_config
from tests.trainer.migration_config import LEAK_BYTES_PER_S, migration_config


@dataclass
class _Result:
    env_steps: int
    stopped: str | None


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _metrics(run_dir: Path, *rows: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_stopped_result_becomes_the_last_metrics_row_with_reason_steps_and_resume_command(tmp_path):
    run = tmp_path / "run"
    _metrics(run, {"env_steps": 256, "iteration": 1}, {"env_steps": 512, "iteration": 2})
    (run / "checkpoints" / "step_512").mkdir(parents=True)
    (run / "checkpoints" / "step_512" / "meta.json").write_text(json.dumps({"env_steps": 512, "iteration": 2}))
    result = early_stop.recorded(run, 4096, lambda: _Result(512, "actor[0] could not be moved (no room)"))
    assert result.stopped is not None
    last = _rows(run)[-1]
    assert (last["stopped"], last["env_steps"], last["iteration"], last["total_env_steps"]) == ("migration", 512, 2, 4096)
    assert last["resume"] == f"kilorl train --resume {run}"
    line = early_stop.describe_row(early_stop.stopped_row(run))
    assert line == (f"stopped early (migration): actor[0] could not be moved (no room); reached 512 of 4096 env "
                    f"steps; resume with: kilorl train --resume {run}")


def test_a_run_that_finishes_adds_no_row_and_an_unrelated_error_is_not_an_early_stop(tmp_path):
    run = tmp_path / "run"
    _metrics(run, {"env_steps": 4096, "iteration": 16})
    early_stop.recorded(run, 4096, lambda: _Result(4096, None))
    assert early_stop.stopped_row(run) is None

    def bug() -> _Result:
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        early_stop.recorded(run, 4096, bug)
    assert len(_rows(run)) == 1


def test_lost_learners_are_recorded_and_raised_with_a_fresh_start_as_the_way_on_without_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    _metrics(run, {"env_steps": 768, "iteration": 3})

    def lost() -> _Result:
        raise LearnerLost("learner 0 died (ActorDiedError); the run has no checkpoint to restore from")

    with pytest.raises(LearnerLost):
        early_stop.recorded(run, 4096, lost)
    last = _rows(run)[-1]
    assert (last["stopped"], last["env_steps"]) == ("learners_lost", 768)
    assert "learner 0 died" in last["stop_reason"] and "no checkpoint to resume from" in last["resume"]


@pytest.mark.parametrize("error", ["parameters", "store"])
def test_a_store_that_could_not_be_recovered_is_a_store_lost_stop(tmp_path, error):
    from kilorl.params.reconnect import ParametersLost
    from kilorl.store.errors import ConnectionLost

    run = tmp_path / "run"
    _metrics(run, {"env_steps": 1024, "iteration": 4})
    exc = ParametersLost("policy version 4 is gone") if error == "parameters" else ConnectionLost("worker gone")

    def lost() -> _Result:
        raise exc

    with pytest.raises(type(exc)):
        early_stop.recorded(run, 4096, lost)
    assert (_rows(run)[-1]["stopped"], _rows(run)[-1]["env_steps"]) == ("store_lost", 1024)


@pytest.mark.parametrize("kind", ["actors_lost", "out_of_memory"])
def test_actors_lost_past_their_restarts_and_roles_killed_for_memory_are_early_stops(tmp_path, kind):
    from ray.exceptions import OutOfMemoryError, RayActorError

    run = tmp_path / "run"
    _metrics(run, {"env_steps": 512, "iteration": 2})
    exc = RayActorError() if kind == "actors_lost" else OutOfMemoryError("4 worker(s) were killed: node low on memory")

    def lost() -> _Result:
        raise exc

    with pytest.raises(type(exc)):
        early_stop.recorded(run, 4096, lost)
    assert (_rows(run)[-1]["stopped"], _rows(run)[-1]["env_steps"]) == (kind, 512)


def test_top_shows_the_stop_of_a_run_that_ended_early(tmp_path, capsys):
    from kilorl.cli.top import run as top
    from kilorl.monitor.discovery import TargetsFile

    run = tmp_path / "run"
    TargetsFile(run / "monitor" / "targets.json")  # the run's exporters are gone: an empty targets file
    _metrics(run, {"env_steps": 512, "iteration": 2})
    early_stop.record(early_stop.EarlyStop("store_lost", "ConnectionLost: worker gone", 512, 4096, 2, str(run),
                                           early_stop.resume_command(run)))
    assert top(argparse.Namespace(run_dir=str(run), interval=1.0, once=True)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("stopped early (store_lost): ConnectionLost: worker gone; reached 512 of 4096")


# -- kilorl train, end to end ---------------------------------------------------------------------------
def _train(kilorl_cli, tmp_path: Path, cfg) -> tuple[object, Path]:
    path, run = tmp_path / "run.yaml", tmp_path / "run"
    path.write_text(dump_config(cfg))
    return kilorl_cli("train", str(path), "--run-dir", str(run), timeout=420), run


def _assert_stopped(out, run: Path, kind: str) -> str:
    assert out.returncode == early_stop.EXIT_STOPPED, out.stdout[-2000:] + out.stderr[-3000:]
    assert "done:" not in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    row = _rows(run)[-1]
    assert row["stopped"] == kind and 0 < row["env_steps"] < row["total_env_steps"]
    assert last.startswith(f"stopped early ({kind}): ")
    assert f"reached {row['env_steps']} of {row['total_env_steps']} env steps" in last
    return last


@pytest.mark.slow
def test_kilorl_train_stopped_by_no_room_for_the_head_store_worker_exits_3_naming_reason_steps_and_resume(
        kilorl_cli, tmp_path):
    cfg = migration_config([{"role": "store", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}], 256 * 4000)
    out, run = _train(kilorl_cli, tmp_path, cfg)
    last = _assert_stopped(out, run, "migration")
    assert "store[0] could not be moved" in last and "no other store worker" in last
    assert last.endswith(f"resume with: kilorl train --resume {run}")


@pytest.mark.slow
def test_kilorl_train_stopped_by_lost_learners_exits_3_naming_reason_steps_and_resume(kilorl_cli, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(env={"id": "tests.trainer.broken_env:KillsItsLearner",
                           "kwargs": {"once_checkpointed": str(run_dir)}},
                      train={"total_env_steps": 256 * 100_000}, checkpoint={"every_env_steps": 512})
    out, run = _train(kilorl_cli, tmp_path, cfg)
    last = _assert_stopped(out, run, "learners_lost")
    assert "LearnerLost: learner 0 died" in last and "giving up after 2 restores" in last
    assert last.endswith(f"resume with: kilorl train --resume {run}")


def test_kilorl_train_with_a_typo_in_memory_budget_bytes_exits_2_listing_the_roles(kilorl_cli, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(dump_config(tiny_config()).replace("memory_budget_bytes: {}", "memory_budget_bytes: {actr: 2000000000}"))
    assert "actr" in path.read_text()
    out = kilorl_cli("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2 and "done:" not in out.stdout
    assert ("monitor.memory_budget_bytes: key 'actr' names no role of the run (did you mean 'actor'?); "
            "roles: actor, learner, store") in out.stderr
