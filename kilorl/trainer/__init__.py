"""The trainer wires roles together and drives the training loop."""

from kilorl.trainer.cluster import Cluster
from kilorl.trainer.trainer import Trainer, TrainResult

__all__ = ["Cluster", "TrainResult", "Trainer"]
