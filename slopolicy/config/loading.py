"""Reading policy files and turning validation failures into :class:`ConfigError`."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from slopolicy.errors import ConfigError, FieldError

__all__ = ("load_file", "parse_text", "validate")

_Model = TypeVar("_Model", bound=BaseModel)
Format = Literal["yaml", "toml", "json"]
_SUFFIXES: dict[str, Format] = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}


def validate(model: type[_Model], data: object, source: str | None) -> _Model:
    """``model`` validated from ``data``; every problem reported as a :class:`FieldError`."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            (FieldError("", f"expected a mapping at the top level, got {type(data).__name__}"),),
            source,
        )
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_field_errors(error), source) from error


def _field_errors(error: ValidationError) -> tuple[FieldError, ...]:
    return tuple(
        FieldError(".".join(str(part) for part in detail["loc"]), detail["msg"])
        for detail in error.errors(include_url=False)
    )


def load_file(path: str) -> Any:
    """Parsed contents of a YAML, TOML or JSON policy file."""
    file = Path(path)
    kind = _SUFFIXES.get(file.suffix.lower())
    if kind is None:
        known = ", ".join(sorted(_SUFFIXES))
        raise ConfigError((FieldError("", f"unknown file type; use one of {known}"),), path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError((FieldError("", f"cannot read the file: {error}"),), path) from error
    return parse_text(text, kind, path)


def parse_text(text: str, kind: Format, source: str | None) -> Any:
    """Parse ``text`` as ``kind``; syntax errors become :class:`ConfigError`."""
    try:
        if kind == "yaml":
            import yaml

            return yaml.safe_load(text)
        if kind == "toml":
            return _toml_loads(text)
        return json.loads(text)
    except Exception as error:  # each parser has its own error type
        raise ConfigError((FieldError("", f"invalid {kind.upper()}: {error}"),), source) from error


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    document: dict[str, Any] = tomllib.loads(text)
    return document
