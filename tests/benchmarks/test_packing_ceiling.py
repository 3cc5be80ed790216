"""The packing ceiling's bin-packing bound (benchmarks/sched_packing_ceiling.py), on hand-checked cases.

The bound decides the ceiling docs/benchmarks.md reports, so it must never claim fewer devices
than the shares need (that would make a ceiling too high) and should beat the trivial bound
(total share rounded up) where the shares do not pair.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.benchmarks.bench_modules import load_bench

ceiling = load_bench("sched_packing_ceiling")


def test_knapsack_takes_the_best_combination_not_the_densest_item() -> None:
    # Capacity 10: two items of size 5 give 6.0, 5 + 3 gives 5.5, three of size 3 give 7.5.
    value, counts = ceiling._knapsack(np.array([3.0, 2.5]), np.array([5, 3]), 10)
    assert value == pytest.approx(7.5)
    assert counts.tolist() == [0, 3]


@pytest.mark.parametrize(("shares", "devices"), [
    ({470: 4, 530: 2}, 3),            # two 0.47 + 0.53 devices, one 0.47 + 0.47
    ({600: 3}, 3),                    # 1.8 GPUs in all, but no two 0.6 pods share a device
    ({810: 3, 160: 1, 50: 2}, 3),     # the small pods fit in the 0.19 rooms
    ({250: 8}, 2),
    ({650: 2, 320: 2, 230: 1}, 3),    # 0.65 + 0.32 twice; the 0.23 needs a third device
])
def test_fewest_devices_matches_the_hand_packing(shares: dict[int, int], devices: int) -> None:
    assert ceiling.fewest_devices(Counter(shares)) == devices
