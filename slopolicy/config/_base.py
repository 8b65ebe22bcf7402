"""The base every configuration model shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ("ConfigModel",)


class ConfigModel(BaseModel):
    """Frozen, strict, no unknown keys, no NaN or infinity."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        validate_default=True,
    )
