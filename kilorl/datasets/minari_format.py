"""Minari's on-disk dataset format, written and read with h5py alone.

A dataset is a directory whose ``data/`` holds ``main_data.hdf5`` and ``metadata.json``
(what ``minari.load_dataset`` reads under ``$MINARI_DATASETS_PATH/<dataset_id>``). The HDF5
file has one group per episode, ``episode_<i>``, with ``observations`` (``T + 1`` rows: the
reset observation and every observation after a step), ``actions``, ``rewards``,
``terminations``, ``truncations`` (``T`` rows each) and an ``infos`` group, and the attributes
``id``, ``seed`` and ``total_steps``. ``metadata.json`` carries the spaces serialised as
Minari serialises them (JSON strings), the counts, the env id and the data format.
Box and Discrete spaces only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
MINARI_VERSION = "0.5.4"
"""The Minari release whose format this writes (``metadata.json``'s ``minari_version``)."""
STEP_FIELDS = ("actions", "rewards", "terminations", "truncations")


class DatasetError(ValueError):
    """A dataset that cannot be read or does not fit: the message names the file and the field."""


@dataclass
class Episode:
    """One episode: ``observations`` has one row more than the per-step arrays."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    seed: int | None = None

    def __len__(self) -> int:
        return len(self.rewards)


def serialize_space(space: gym.Space) -> str:
    """Minari's JSON string of a Box or Discrete space."""
    if isinstance(space, gym.spaces.Box):
        return json.dumps({"type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
                           "low": space.low.tolist(), "high": space.high.tolist()})
    if isinstance(space, gym.spaces.Discrete):
        return json.dumps({"type": "Discrete", "dtype": str(space.dtype), "start": int(space.start), "n": int(space.n)})
    raise DatasetError(f"cannot serialise {space}: only Box and Discrete spaces are supported")


def deserialize_space(text: str) -> gym.Space:
    data = json.loads(text)
    if data["type"] == "Box":
        return gym.spaces.Box(np.array(data["low"], data["dtype"]), np.array(data["high"], data["dtype"]),
                              tuple(data["shape"]), np.dtype(data["dtype"]))
    if data["type"] == "Discrete":
        return gym.spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    raise DatasetError(f"unsupported space type {data['type']!r} (Box and Discrete are)")


def write_dataset(path: str | Path, episodes: list[Episode], observation_space: gym.Space, action_space: gym.Space,
                  dataset_id: str, env_id: str | None = None, extra: dict[str, Any] | None = None) -> Path:
    """Write ``episodes`` under ``path/data``; an existing dataset there is an error (nothing is
    overwritten). Returns the data directory."""
    import h5py

    data = Path(path) / "data"
    if (data / METADATA_FILE).exists() or (data / MAIN_FILE).exists():
        raise DatasetError(f"{data}: a dataset already exists there; choose another path")
    data.mkdir(parents=True, exist_ok=True)
    with h5py.File(data / MAIN_FILE, "w", track_order=True) as f:
        for i, ep in enumerate(episodes):
            if len(ep.observations) != len(ep) + 1:
                raise DatasetError(f"episode {i}: observations has {len(ep.observations)} rows, expected {len(ep) + 1}")
            group = f.create_group(f"episode_{i}")
            group.attrs["id"] = i
            group.attrs["total_steps"] = len(ep)
            if ep.seed is not None:
                group.attrs["seed"] = int(ep.seed)
            group.create_dataset("observations", data=ep.observations)
            for name in STEP_FIELDS:
                group.create_dataset(name, data=getattr(ep, name))
            group.create_group("infos")
    metadata = {
        "dataset_id": dataset_id, "total_episodes": len(episodes), "total_steps": int(sum(len(e) for e in episodes)),
        "data_format": "hdf5", "observation_space": serialize_space(observation_space),
        "action_space": serialize_space(action_space), "minari_version": MINARI_VERSION,
        "env_spec": _env_spec_json(env_id), "dataset_size": round((data / MAIN_FILE).stat().st_size / 1e6, 1),
        **(extra or {}),
    }
    (data / METADATA_FILE).write_text(json.dumps({k: v for k, v in metadata.items() if v is not None}))
    return data


def _env_spec_json(env_id: str | None) -> str | None:
    """The registered env's spec as Minari stores it (None for an unregistered entry point)."""
    if env_id is None or ":" in env_id:
        return None
    try:
        return gym.spec(env_id).to_json()
    except Exception:  # noqa: BLE001 - a spec that cannot be serialised is left out, as Minari does
        return None


def read_dataset(path: str | Path) -> tuple[list[Episode], dict[str, Any]]:
    """Every episode of the dataset at ``path`` (its root or its ``data/``), and its metadata
    with the spaces deserialised (``observation_space``, ``action_space``)."""
    import h5py

    root = Path(path)
    data = root / "data" if (root / "data").is_dir() else root
    meta_file, main_file = data / METADATA_FILE, data / MAIN_FILE
    for file in (meta_file, main_file):
        if not file.is_file():
            raise DatasetError(f"{file}: no such file (not a Minari dataset: expected data/{file.name})")
    meta = _read_metadata(meta_file)
    episodes = []
    try:
        f = h5py.File(main_file, "r")
    except OSError as err:
        raise DatasetError(f"{main_file}: not a readable HDF5 file ({err})") from err
    with f:
        for i in range(int(meta["total_episodes"])):
            episodes.append(_read_episode(f, i, main_file))
    return episodes, meta


def _read_metadata(file: Path) -> dict[str, Any]:
    """``metadata.json`` with its spaces deserialised; a file that is not that names the file and the field."""
    try:
        meta = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetError(f"{file}: not valid JSON ({err})") from err
    if not isinstance(meta, dict):
        raise DatasetError(f"{file}: expected a JSON object, got {type(meta).__name__}")
    for field in ("observation_space", "action_space", "total_episodes"):
        if field not in meta:
            raise DatasetError(f"{file}: no {field}")
    for field in ("observation_space", "action_space"):
        try:
            meta[field] = deserialize_space(meta[field])
        except DatasetError as err:
            raise DatasetError(f"{file}: {field}: {err}") from err
        except (TypeError, KeyError, ValueError) as err:
            raise DatasetError(f"{file}: {field} is not a serialised space ({type(err).__name__}: {err})") from err
    return meta


def _read_episode(f: Any, i: int, file: Path) -> Episode:
    name = f"episode_{i}"
    if name not in f:
        raise DatasetError(f"{file}: {name} is missing (metadata.json counts more episodes than the file holds)")
    group = f[name]
    missing = [k for k in ("observations", *STEP_FIELDS) if k not in group]
    if missing:
        raise DatasetError(f"{file}: {name} is truncated: no {', '.join(missing)}")
    arrays = {k: np.asarray(group[k][()]) for k in ("observations", *STEP_FIELDS)}
    T = len(arrays["rewards"])
    bad = [k for k in STEP_FIELDS if len(arrays[k]) != T] + (["observations"] if len(arrays["observations"]) != T + 1 else [])
    if bad:
        raise DatasetError(f"{file}: {name} is truncated: {', '.join(bad)} do not match {T} steps "
                           f"(observations needs {T + 1} rows)")
    seed = group.attrs.get("seed")
    return Episode(**arrays, seed=None if seed is None else int(seed))
