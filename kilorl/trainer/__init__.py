"""The trainer wires roles together and drives the training loop."""

from kilorl.trainer.cluster import Cluster, ClusterError
from kilorl.trainer.session import StartupError
from kilorl.trainer.trainer import Trainer, TrainResult

__all__ = ["Cluster", "ClusterError", "StartupError", "TrainResult", "Trainer"]
