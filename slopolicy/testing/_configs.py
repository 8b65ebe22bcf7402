"""Hypothesis strategies for policy configurations: valid ones, and documents
with edge values in every field (see :mod:`slopolicy.testing.strategies`)."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis import strategies as st

from slopolicy.config import PolicyConfig
from slopolicy.config.ladder import RUNGS

__all__ = ("policy_configs", "policy_documents")

names = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True)

_HUGE = 10**400
_INTEGERS = (0, 1, -1, 2, 2**31 - 1, 2**53 + 1, 2**63, 10**18, _HUGE, -_HUGE)
_FLOATS = (
    0.0,
    -0.0,
    5e-324,
    2.2e-308,
    1e-300,
    1e-9,
    0.5,
    1.0,
    1e9,
    1e300,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
)
#: Values to try, by JSON Schema type: each field gets those of its types.
_EDGES: dict[str, tuple[Any, ...]] = {
    "integer": _INTEGERS,
    "number": _INTEGERS + _FLOATS,
    "string": ("", "a", "x" * 300),
    "boolean": (True, False),
    "array": ([],),
    "object": ({},),
    "null": (None,),
}


@st.composite
def _config_data(draw: st.DrawFn) -> dict[str, Any]:
    lane_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    reserves = draw(
        st.lists(
            st.sampled_from([0.0, 0.05, 0.1, 0.2]),
            min_size=len(lane_names),
            max_size=len(lane_names),
        )
    )
    lanes = []
    for name, reserve in zip(lane_names, reserves, strict=True):
        p95 = draw(st.none() | st.floats(0.05, 30))
        lanes.append(
            {
                "name": name,
                "slo": {"ttft_p95_s": p95, "ttft_p99_s": None if p95 is None else p95 * 2},
                "max_new_tokens": draw(st.none() | st.integers(1, 8192)),
                "max_prompt_tokens": draw(st.none() | st.integers(1, 200_000)),
                "over_budget": draw(st.sampled_from(["demote", "defer", "reject"])),
                "max_cost": draw(st.none() | st.floats(1, 1e6)),
                "queue_capacity": draw(st.integers(1, 10_000)),
                "max_queue_wait_s": draw(st.floats(0.01, 3600)),
                "weight": draw(st.floats(0.1, 16)),
                "kv_reserve": reserve,
            }
        )
    tier_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    tiers = {}
    for name in tier_names:
        allowed = draw(st.none() | st.lists(st.sampled_from(lane_names), min_size=1, unique=True))
        rate = draw(st.none() | st.floats(1, 1e6))
        tiers[name] = {
            "rate": rate,
            "burst": None if rate is None else rate * draw(st.floats(1, 100)),
            "max_concurrency": draw(st.none() | st.integers(1, 1000)),
            "max_prompt_tokens": draw(st.none() | st.integers(1, 200_000)),
            "weight": draw(st.floats(0.1, 10)),
            "default_lane": lane_names[0] if allowed is None else allowed[0],
            "allowed_lanes": allowed,
            "lanes": {lane: {"share": draw(st.floats(0.01, 1))} for lane in (allowed or [])[:1]},
        }
    tenants = draw(st.dictionaries(names, st.sampled_from(tier_names), max_size=4))
    return {
        "lanes": lanes,
        "tiers": tiers,
        "default_tier": tier_names[0],
        "tenants": tenants,
        "cost": {
            "alpha": draw(st.floats(0, 4)),
            "beta": draw(st.floats(0, 4)),
            "gamma": draw(st.floats(0, 5000)),
        },
        "kv": {"num_blocks": draw(st.integers(1, 100_000)), "block_size": 16},
        "ladder": {
            "rungs": draw(st.lists(st.sampled_from(RUNGS), min_size=1, unique=True)),
            "dwell_s": draw(st.floats(0.1, 60)),
        },
    }


def policy_configs() -> st.SearchStrategy[PolicyConfig]:
    """Valid, varied policy configurations."""
    return _config_data().map(PolicyConfig.from_dict)


@functools.cache
def _schema() -> dict[str, Any]:
    return PolicyConfig.model_json_schema()


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    resolved: dict[str, Any] = _schema()["$defs"][ref.rsplit("/", 1)[-1]]
    return resolved


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [_resolve(part) for part in schema.get("anyOf", [schema])]


_Path = tuple[str | int, ...]
_Name = tuple[str, ...]


def _children(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A schema's fields: properties by name, a mapping's values and a list's
    items as ``*``."""
    for variant in _variants(schema):
        yield from variant.get("properties", {}).items()
        values = variant.get("additionalProperties")
        if not isinstance(values, dict):
            values = next(iter(variant.get("patternProperties", {}).values()), None)
        for part in (values, variant.get("items")):
            if isinstance(part, dict):
                yield "*", part


def _fields(
    document: Any, schema: dict[str, Any], path: _Path = (), name: _Name = ()
) -> Iterator[tuple[_Path, _Name]]:
    """Every field under ``document``, set or not (a section left out still has
    its fields): its path, and its name in :func:`_templates`."""
    for part, child in _children(schema):
        items: Iterable[tuple[str | int, Any]] = ()
        if part != "*":
            if isinstance(document, dict | None):
                items = [(part, (document or {}).get(part))]
        elif isinstance(document, dict):
            items = document.items()
        elif isinstance(document, list):
            items = enumerate(document)
        for key, item in items:
            yield (*path, key), (*name, part)
            yield from _fields(item, child, (*path, key), (*name, part))


@functools.cache
def _templates() -> dict[_Name, tuple[Any, ...]]:
    """Every field of the schema (list items and mapping values named ``*``),
    with the edge values of its types."""
    found: dict[_Name, tuple[Any, ...]] = {}

    def walk(schema: dict[str, Any], name: _Name) -> None:
        for part, child in _children(schema):
            field = (*name, part)
            if field not in found:
                found[field] = _edges(child)
                walk(child, field)

    walk(_schema(), ())
    return dict(sorted(found.items()))


def _edges(schema: dict[str, Any]) -> tuple[Any, ...]:
    found: list[Any] = []
    for variant in _variants(schema):
        found.extend(variant.get("enum", ()))
        if "const" in variant:
            found.append(variant["const"])
        found.extend(_EDGES.get(variant.get("type", ""), ()))
    return tuple(found) or (None,)


@st.composite
def _edit(draw: st.DrawFn) -> tuple[_Name, Any]:
    """A field and an edge value for it."""
    templates = _templates()
    field = draw(st.sampled_from(list(templates)))
    return field, draw(st.sampled_from(templates[field]))


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    # The edits are drawn before the document they apply to: drawn after it,
    # hypothesis picks the first field of the list far more often than others.
    edits = draw(st.lists(_edit(), min_size=1, max_size=4))
    document = draw(_config_data())
    for field, value in edits:
        paths = [path for path, name in _fields(document, _schema()) if name == field]
        if not paths:
            continue  # e.g. a tier's lane split, in a tier without one
        path = draw(st.sampled_from(paths))
        target: Any = document
        for key in path[:-1]:
            if isinstance(target, dict) and target.get(key) is None:
                target[key] = {}
            target = target[key]
        # A copy: an empty list or mapping set here may be filled by a later edit.
        target[path[-1]] = copy.deepcopy(value)
    return document


def policy_documents() -> st.SearchStrategy[dict[str, Any]]:
    """Policy configuration mappings, as :meth:`PolicyConfig.from_dict` reads them:
    valid ones with one to four fields (any field, set or not) changed to an edge
    value of its type: zero, -1, ``10**400``, ``5e-324``, ``1e308``, infinity,
    NaN, an empty string, list or mapping, ``None``. Many are invalid; every
    one a config accepts should run (see ``tests/config``)."""
    return _documents()
