"""Recorded datasets on disk, in Minari's HDF5 format (``minari_format``): written by
``kilorl record``, read back without a ``minari`` install."""

from kilorl.datasets.minari_format import DatasetError, Episode, read_dataset, write_dataset
from kilorl.datasets.returns import returns_to_go

__all__ = ["DatasetError", "Episode", "read_dataset", "returns_to_go", "write_dataset"]
