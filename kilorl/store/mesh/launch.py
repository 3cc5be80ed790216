"""The composition root of a worker process: a worker, its op table, and (optionally) a mesh node.

``run_worker`` is what ``kilorl store start`` runs. A worker alone keeps the default
router; with a ``MeshConfig`` a ``MeshNode`` becomes its router and hosts the ``c.*`` ops.
Every worker hosts the replay tables (``server/replay_ops.py``), alone or in a mesh.
"""

from __future__ import annotations

import signal
from typing import Any

from kilorl.store.local.config import ResolvedConfig
from kilorl.store.mesh import ops, versions
from kilorl.store.mesh.node import MeshConfig, MeshNode
from kilorl.store.server import replay_ops
from kilorl.store.server.handlers import HANDLERS
from kilorl.store.server.worker import Worker


def build_worker(rc: ResolvedConfig, mesh: MeshConfig | None = None) -> Worker:
    """A worker ready to serve; with ``mesh`` it joins (or, ``head``, hosts) a mesh of workers."""
    worker = Worker(rc, HANDLERS)
    replay_ops.install(worker)  # replay tables: a service of every worker, alone or in a mesh
    if mesh is not None:
        try:
            node = MeshNode(worker, mesh)
            ops.register(worker, node)
            versions.register(worker, node)
        except BaseException:
            worker.close_unserved()
            raise
    return worker


def run_worker(rc: ResolvedConfig, mesh: MeshConfig | None = None) -> int:
    """Runs a worker in this process until SIGTERM/SIGINT or a shutdown request."""
    worker = build_worker(rc, mesh)
    (worker.run_dir / "worker.pid").write_text(str(worker.pid))

    def on_signal(signum: int, _frame: Any) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"kilorl store worker pid={worker.pid} tcp={rc.spec.host}:{worker.port} unix={worker.unix_path}",
          flush=True)
    worker.serve_forever()
    return 0
