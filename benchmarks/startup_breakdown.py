"""Where a kiloRL run's start-up goes, side by side with a bare Ray baseline.

    python benchmarks/startup_breakdown.py --repeats 3

Per repeat, in turns of order, three fresh processes:
- **bare Ray**: ``import ray``; ``ray.init()``; one trivial actor; ``ray.get`` of a call
  on it (what any Ray program pays before its first useful work);
- **bare Ray, tuned**: the same with the Ray settings kiloRL gives the Ray it embeds
  (``EMBEDDED_RAY_CONFIG``: its socket retries), so kiloRL's start-up minus this one is
  what kiloRL itself adds, apart from Ray's own start;
- **kiloRL**: ``kilorl train examples/cartpole_ppo.yaml`` stopped after its first update,
  reporting ``startup_s`` (``Trainer.fit`` entry to every role built and version 0
  published), its parts (``startup_ray_s``, ``startup_roles_s``) and ``startup_process_s``
  (process launch to the same point: interpreter and imports included).
Prints medians and kiloRL's excess over the baseline (the issue's goal: at most 1.5 s).

Both sides are timed after ``import ray`` (``startup_s`` starts once ``Trainer.fit`` has it);
the ``*_process_s`` rows count from process launch, imports and interpreter included.
kiloRL's sources are byte-compiled first (``compileall``), as an installed package is: with
``PYTHONDONTWRITEBYTECODE`` set, an editable install would compile them in every process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BARE = """
import json, sys, time
t0 = time.time()
import ray
t1 = time.time()
ray.init(address="local", include_dashboard=False, **json.loads(sys.argv[1]))
t2 = time.time()

@ray.remote(num_cpus=1)
class A:
    def ready(self):
        return 1

a = A.remote()
ray.get(a.ready.remote())
t3 = time.time()
import psutil
print(json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "first_actor_s": t3 - t2, "ray_s": t3 - t1,
                  "process_s": t3 - psutil.Process().create_time()}))
ray.shutdown()
"""


def bare_ray(tuned: bool = False) -> dict[str, float]:
    """The baseline; ``tuned``: with the Ray settings kiloRL gives an embedded Ray (its socket
    retries), so the difference to kiloRL is what kiloRL itself adds."""
    from kilorl.trainer.cluster import EMBEDDED_RAY_CONFIG

    kwargs = {"_system_config": EMBEDDED_RAY_CONFIG} if tuned else {}
    out = subprocess.run([sys.executable, "-c", BARE, json.dumps(kwargs)], capture_output=True, text=True,
                         check=True, timeout=300, env={**os.environ, "RAY_ADDRESS": "local"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def kilorl(config: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "kilorl.cli.main", "train", config, "--run-dir", str(run),
               "-o", "train.total_env_steps=1", "-o", "logging.progress=false", "-o", "logging.tensorboard=false"]
        t0 = time.time()
        subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300, cwd=REPO,
                       env={**os.environ, "RAY_ADDRESS": "local"})
        wall = time.time() - t0
        row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    return {"startup_s": row["startup_s"], "startup_ray_s": row["startup_ray_s"],
            "startup_roles_s": row["startup_roles_s"], "startup_process_s": row["startup_process_s"],
            "process_wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--config", default=str(REPO / "examples" / "cartpole_ppo.yaml"))
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    import compileall

    compileall.compile_dir(str(REPO / "kilorl"), quiet=1)
    rows: dict[str, list[dict[str, float]]] = {"bare": [], "tuned": [], "kilorl": []}
    run = {"bare": bare_ray, "tuned": lambda: bare_ray(tuned=True), "kilorl": lambda: kilorl(args.config)}
    for i in range(args.repeats):
        order = list(rows)[i % 3:] + list(rows)[:i % 3]  # each side takes every place in turn
        for side in order:
            rows[side].append(run[side]())
            print(side, json.dumps(rows[side][-1]), file=sys.stderr, flush=True)
    bare, tuned, kilo = rows["bare"], rows["tuned"], rows["kilorl"]
    med = {f"bare_{k}": statistics.median(r[k] for r in bare) for k in bare[0]}
    med.update({f"bare_tuned_{k}": statistics.median(r[k] for r in tuned) for k in ("ray_s", "process_s")})
    med.update({f"kilorl_{k}": statistics.median(r[k] for r in kilo) for k in kilo[0]})
    print(f"| measure (median of {args.repeats}) | seconds |\n|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.2f} |")
    excess = med["kilorl_startup_s"] - med["bare_ray_s"]
    excess_proc = med["kilorl_startup_process_s"] - med["bare_process_s"]
    own = med["kilorl_startup_s"] - med["bare_tuned_ray_s"]
    print(f"\nkiloRL start-up minus bare ray.init()+first actor: {excess:+.2f} s (goal <= +1.5 s); "
          f"from process launch: {excess_proc:+.2f} s")
    print(f"minus bare Ray with kiloRL's Ray settings (what kiloRL itself adds): {own:+.2f} s")
    if args.json_out:
        args.json_out.write_text(json.dumps({**rows, "medians": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
