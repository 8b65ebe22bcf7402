"""Engine files: a fitted cost profile and the engine's knobs, as YAML or JSON.

``slopolicy calibrate`` writes one; ``simulate --engine FILE`` and ``demo
--engine FILE`` read it (a name that is no file is a built-in profile)::

    profile:            # EngineProfile's terms, in seconds
      name: llama.cpp:tiny
      t_cpu: 0.0021
      t_w: 0.0004
      a: 1.9e-05
      beta_p: 1.2e-09
      beta_d: 3.0e-08
      kv_tokens: 81920
      t_sample: 0.0018
      t_start: 0.011
      t_ubatch: 0.0024
      t_wake: 5.0e-06
    engine:             # EngineSpec's knobs (vLLM names)
      kind: llama.cpp   # whose scheduler (default vllm)
      max_num_seqs: 8
      max_num_batched_tokens: 2048
      max_model_len: 10240
    residuals: [...]    # what calibrate measured against the fit (not read)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slopolicy.config.loading import load_file
from slopolicy.errors import ConfigError, SimulationError, UsageError
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import EngineProfile, profile

__all__ = ("engine_data", "load_engine", "resolve_engine", "write_engine")

_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold",
          "block_size", "num_blocks", "max_model_len", "kind", "ubatch_tokens")  # fmt: skip


def engine_data(spec: EngineSpec, residuals: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """``spec`` as an engine file's data."""
    knobs = {name: getattr(spec, name) for name in _KNOBS if getattr(spec, name) is not None}
    data: dict[str, Any] = {"profile": dataclasses.asdict(spec.profile), "engine": knobs}
    if residuals:
        data["residuals"] = list(residuals)
    return data


def write_engine(path: str, spec: EngineSpec, residuals: Sequence[dict[str, Any]] = ()) -> None:
    """Write ``spec`` to ``path`` (``.json``, else YAML)."""
    data = engine_data(spec, residuals)
    if path.endswith(".json"):
        text = json.dumps(data, indent=2) + "\n"
    else:
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{path}: cannot write: {error.strerror or error}") from error


def load_engine(path: str) -> EngineSpec:
    """The engine an engine file describes; :class:`SimulationError` names what is wrong."""
    try:
        data = load_file(path)
    except ConfigError as error:
        raise SimulationError(str(error), source=path) from error
    if not isinstance(data, dict) or not isinstance(data.get("profile"), dict):
        raise SimulationError("an engine file needs a 'profile' mapping", source=path)
    knobs = data.get("engine") or {}
    if not isinstance(knobs, dict):
        raise SimulationError("'engine' must be a mapping", source=path)
    unknown = sorted(set(knobs) - set(_KNOBS))
    fields = {f.name for f in dataclasses.fields(EngineProfile)}
    unknown += sorted(f"profile.{k}" for k in set(data["profile"]) - fields)
    if unknown:
        raise SimulationError(f"unknown fields {unknown}", source=path)
    try:
        return EngineSpec(EngineProfile(**data["profile"]), **knobs)
    except (TypeError, UsageError) as error:
        raise SimulationError(str(error), source=path) from error


def resolve_engine(name: str) -> EngineSpec | EngineProfile:
    """An engine file's engine when ``name`` is a file, else the built-in profile."""
    if Path(name).is_file():
        return load_engine(name)
    return profile(name)
