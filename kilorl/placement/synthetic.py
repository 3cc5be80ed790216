"""A synthetic mix of RL jobs for topology-YAML simulations (no trace needed).

Each job has a learner gang that all-reduces (1-16 whole GPUs), actors on fractional
GPUs (inference) and CPU-only parameter servers near the learners. Arrivals are Poisson,
durations exponential; everything is drawn from a seeded generator.
"""

from __future__ import annotations

import numpy as np

from kilorl.placement.requests import Affinity, Demand, GangRequest
from kilorl.placement.simulate import TraceJob


def rl_job_mix(
    jobs: int,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 60.0,
    mean_duration_s: float = 3600.0,
    learner_sizes: tuple[int, ...] = (1, 2, 4, 8, 16),
    learner_weights: tuple[float, ...] = (0.3, 0.25, 0.2, 0.15, 0.1),
    actor_share: tuple[float, ...] = (0.25, 0.5),
) -> list[TraceJob]:
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1 (got {jobs})")
    if len(learner_sizes) != len(learner_weights):
        raise ValueError("learner_sizes and learner_weights differ in length")
    rng = np.random.default_rng(seed)
    w = np.asarray(learner_weights, dtype=float)
    t = 0.0
    out = []
    for j in range(jobs):
        t += float(rng.exponential(mean_interarrival_s))
        learners = int(rng.choice(learner_sizes, p=w / w.sum()))
        actors = int(rng.integers(1, 5)) * learners
        share = float(rng.choice(actor_share))
        ps = max(1, learners // 2)
        gangs = (
            GangRequest("learner", learners, Demand.of(1, 4, 64), (Affinity("same_island"),), collective=True),
            GangRequest("parameter_server", ps, Demand.of(0, 2, 16), (Affinity("near_role", role="learner"),)),
            GangRequest("actor", actors, Demand.of(share, 2, 8)),
        )
        out.append(TraceJob(f"rl-{j:05d}", gangs, t, t + float(rng.exponential(mean_duration_s))))
    return out
