"""kilorl.monitor is a lower layer: importing it pulls in no RL code, no store, no torch."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.monitor.conftest import REPO, _env

FORBIDDEN = ("kilorl.config", "kilorl.algos", "kilorl.roles", "kilorl.trainer", "kilorl.store", "torch", "ray")


def test_importing_the_monitor_imports_no_higher_layer_nor_torch():
    code = (
        "import sys, json; import kilorl.monitor.reporter, kilorl.monitor.exporter, kilorl.monitor.runtime,"
        " kilorl.monitor.leak, kilorl.monitor.migration, kilorl.monitor.discovery, kilorl.monitor.dashboard;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('kilorl', 'torch', 'ray')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO, check=True)
    loaded = json.loads(out.stdout)
    assert "kilorl.monitor" in loaded
    bad = [m for m in loaded if m in FORBIDDEN or m.startswith(tuple(f + "." for f in FORBIDDEN))]
    assert bad == []
