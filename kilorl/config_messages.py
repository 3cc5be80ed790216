"""Config errors as users read them: the field named as written, allowed and close keys listed.

Split from ``kilorl.config``: turning pydantic's ``ValidationError`` into messages is a
responsibility of its own, walking the schema by its annotations.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kilorl.algos.registry import get as algo_spec
from kilorl.algos.registry import names as algo_names

_MOVED = {("parallelism", "pipeline_depth"): "train.pipeline_depth"}
"""Fields that moved: the error names their new place."""


def _section_model(annotation: Any, tag: Any) -> Any:
    """The model behind a field annotation; for a discriminated union, the member ``tag`` names."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    members = get_args(annotation)
    if not members:
        return annotation
    for m in members:
        name = getattr(m, "model_fields", {}).get("name")
        if name is not None and name.default == tag:
            return m
    return None


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Walk the schema along `loc` (minus its last element) and list allowed keys."""
    current: Any = model
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        if get_args(annotation) and parts:  # a union: pydantic puts the tag in the location
            current = _section_model(annotation, parts.pop(0))
        else:
            current = _section_model(annotation, None)
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else []


def _field_name(loc: tuple[Any, ...]) -> str:
    """``algo.ppo.lr`` -> ``algo.lr``: the union tag is not a key the user wrote."""
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] == "algo" and parts[1] in algo_names():
        del parts[1]
    return ".".join(parts) or "<root>"


def _other_paths_field(loc: tuple[Any, ...]) -> str | None:
    """For ``algo.<field>`` unknown to the chosen algorithm but an option of algorithms on
    another data path (``buffer_size`` on PPO, ``gae_lambda`` on DQN): a message naming
    both ``algo.<field>`` and ``algo.name``."""
    if len(loc) != 3 or loc[0] != "algo" or loc[1] not in algo_names():
        return None
    name, field = str(loc[1]), str(loc[2])
    mine = algo_spec(name).data_path
    has = {n: field in algo_spec(n).load("config").model_fields for n in algo_names()}
    if any(has[n] for n in algo_names() if algo_spec(n).data_path == mine):
        return None  # an option of this data path, just not of this algorithm: a plain unknown field
    owners = [n for n in algo_names() if algo_spec(n).data_path != mine and has[n]]
    if not owners:
        return None
    path = algo_spec(owners[0]).data_path
    return (f"algo.{field}: an option of the {path} data path ({', '.join(owners)}); algo.name={name} is on the "
            f"{mine} data path and has no such field")


def format_validation_error(root: type[BaseModel], err: ValidationError) -> str:
    """Pydantic's errors as the lines a user reads: each names its field (``algo.lr``, not the
    union tag), an unknown field lists the allowed ones and the closest, a moved one its place."""
    lines = []
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        field = _field_name(loc)
        moved = _MOVED.get(tuple(str(p) for p in loc))
        if moved:
            lines.append(f"{field}: moved to {moved}")
        elif e["type"] == "extra_forbidden" and _other_paths_field(loc):
            lines.append(_other_paths_field(loc))
        elif e["type"] == "extra_forbidden":
            allowed = _allowed_fields(root, loc)
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"{field}: unknown field{hint}; allowed: {', '.join(allowed)}")
        elif e["type"] == "union_tag_invalid":
            lines.append(f"{field}.name: unknown algorithm {e.get('ctx', {}).get('tag')!r}; "
                         f"allowed: {e.get('ctx', {}).get('expected_tags')}")
        elif e["type"] == "literal_error":
            lines.append(f"{field}: {e['msg']} (got {e.get('input')!r})")
        elif e["type"] == "missing":
            lines.append(f"{field}: required field is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            got = e.get("input")
            shown = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
            lines.append(f"{field}: {msg}{shown}" if loc else msg)  # a whole-config check names its fields
    return "invalid config:\n  " + "\n  ".join(lines)
