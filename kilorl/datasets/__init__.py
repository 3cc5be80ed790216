"""Recorded datasets on disk, in Minari's HDF5 format (``minari_format``): written by
``kilorl record``, read back without a ``minari`` install."""

from kilorl.datasets.minari_format import DatasetError, Episode, read_dataset, write_dataset

__all__ = ["DatasetError", "Episode", "read_dataset", "write_dataset"]
