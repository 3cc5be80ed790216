"""Compare two kiloRL run directories of the same config and seed: are they the same run?

    python benchmarks/compare_runs.py RUN_A RUN_B

Used to check that a refactoring left the arithmetic alone (run the same config at two
commits). Reports the first iteration whose metrics row differs outside the timing
fields, the largest relative difference per metric, the first iteration whose episode
statistics differ (from there on the two runs have acted differently), and, for the newest
checkpoint of each, per tensor of ``model.safetensors`` and ``state.safetensors`` whether
it is bit-identical and how far apart. Rows are matched by position, so both runs should
report every iteration (``-o logging.report_every_s=0``). Exit status 0 when everything
compared is identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

TIMING = {"wall_time", "train_time", "sps", "collect_s", "actor_wait_s", "learner_update_s", "publish_s"}
"""Fields that measure time, never compared."""
EPISODE_FIELDS = ("episodes", "episode_return_mean")


def _rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def compare_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """First differing row, first row with different episode statistics, max relative difference per field."""
    first, first_episode, worst = None, None, {}
    for x, y in zip(a, b):
        for key in sorted(set(x) & set(y)):
            if key in TIMING or key.startswith("startup") or not isinstance(x[key], (int, float)):
                continue
            diff = abs(x[key] - y[key])
            worst[key] = max(worst.get(key, 0.0), diff / max(abs(x[key]), 1e-12))
            if diff and first is None:
                first = {"iteration": x.get("iteration"), "env_steps": x.get("env_steps"), "field": key, "a": x[key], "b": y[key]}
        if first_episode is None and any(x.get(k) != y.get(k) for k in EPISODE_FIELDS):
            first_episode = {"iteration": x.get("iteration"), "env_steps": x.get("env_steps")}
    return {"rows": (len(a), len(b)), "first_difference": first, "first_episode_difference": first_episode,
            "max_relative_difference": worst}


def compare_tensors(a: Path, b: Path) -> dict[str, Any]:
    """Per tensor: identical, or the largest absolute difference and the relative L2 distance."""
    from safetensors.numpy import load_file

    ta, tb = load_file(a), load_file(b)
    out: dict[str, Any] = {"only_in_a": sorted(set(ta) - set(tb)), "only_in_b": sorted(set(tb) - set(ta)), "tensors": {}}
    for key in sorted(set(ta) & set(tb)):
        x, y = ta[key].astype(np.float64), tb[key].astype(np.float64)
        if x.shape != y.shape:
            out["tensors"][key] = {"identical": False, "shapes": (list(x.shape), list(y.shape))}
        elif np.array_equal(ta[key], tb[key]):
            out["tensors"][key] = {"identical": True}
        else:
            d = np.abs(x - y)
            out["tensors"][key] = {"identical": False, "max_abs": float(d.max()),
                                   "rel_l2": float(np.linalg.norm(d) / max(np.linalg.norm(x), 1e-12))}
    return out


def compare(a: Path, b: Path) -> dict[str, Any]:
    report: dict[str, Any] = {"metrics": compare_rows(_rows(a), _rows(b))}
    ca, cb = (sorted((r / "checkpoints").glob("step_*")) for r in (a, b))
    if ca and cb:
        report["checkpoints"] = (ca[-1].name, cb[-1].name)
        for name in ("model.safetensors", "state.safetensors"):
            if (ca[-1] / name).is_file() and (cb[-1] / name).is_file():
                report[name] = compare_tensors(ca[-1] / name, cb[-1] / name)
    return report


def identical(report: dict[str, Any]) -> bool:
    m = report["metrics"]
    tensors = [t for k, v in report.items() if k.endswith(".safetensors") for t in v["tensors"].values()]
    same_keys = all(not v["only_in_a"] and not v["only_in_b"] for k, v in report.items() if k.endswith(".safetensors"))
    return m["rows"][0] == m["rows"][1] and m["first_difference"] is None and same_keys and all(t["identical"] for t in tensors)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    args = p.parse_args(argv)
    report = compare(args.run_a, args.run_b)
    print(json.dumps(report, indent=1))
    same = identical(report)
    print("identical" if same else "DIFFERENT", file=sys.stderr)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
