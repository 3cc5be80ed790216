"""kilorl.comm stays below the RL side: importing it loads no config/algos/roles/trainer/envs/models module."""

from __future__ import annotations

import subprocess
import sys


def test_comm_imports_nothing_from_the_rl_side():
    code = (
        "import sys, kilorl.comm, kilorl.comm.ddp, kilorl.comm.sync, kilorl.comm.hooks, kilorl.comm.sparse, "
        "kilorl.comm.encoding, kilorl.comm.compressors, kilorl.comm.config, kilorl.comm.learner_sync\n"
        "bad = [m for m in sys.modules if m.startswith(('kilorl.config', 'kilorl.algos', 'kilorl.roles', "
        "'kilorl.trainer', 'kilorl.envs', 'kilorl.models', 'kilorl.store', 'ray', 'gymnasium'))]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", out.stdout
