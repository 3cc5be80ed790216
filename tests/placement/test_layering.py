"""kilorl.placement stays below the RL side: no torch, no config/algos/roles/trainer imports."""

from __future__ import annotations

import subprocess
import sys


def test_placement_imports_no_rl_and_no_torch():
    code = (
        "import sys, kilorl.placement, kilorl.placement.discovery, kilorl.placement.simulate, kilorl.placement.synthetic, "
        "kilorl.placement.ray_placement, kilorl.placement.alibaba, kilorl.placement.probe\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'kilorl.config', 'kilorl.algos', "
        "'kilorl.roles', 'kilorl.trainer', 'ray'))]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", out.stdout
