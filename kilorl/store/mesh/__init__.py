"""Workers as one store: ring, membership, metadata records, transfers, rebalancing.

A ``MeshNode`` is a worker's router; ``launch.run_worker`` composes the two.
"""
