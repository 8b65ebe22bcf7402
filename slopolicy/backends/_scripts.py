"""The Redis quota store's Lua scripts (package data) and key layout.

Keys of one tenant share the hash tag ``{<tenant>}``, so Redis Cluster keeps
them in one slot and a script may touch them all::

    <prefix>:{<tenant>}:bucket             hash   the tenant bucket {level, last, rate, burst}
    <prefix>:{<tenant>}:bucket:<lane>      hash   the lane's split bucket
    <prefix>:{<tenant>}:leases             zset   live lease id -> expiry (store clock seconds)
    <prefix>:{<tenant>}:leases:<lane>      zset   the same, for the lane's cap
    <prefix>:{<tenant>}:costs              hash   live lease id -> "<cost> <lane>"

Tenant and lane ids are percent-encoded (every byte but ``A-Za-z0-9_.-~``),
so a ``}``, ``:`` or ``%`` in an id can neither end the hash tag nor collide
with another id's keys; the empty id is written ``%``, which no encoding
produces, so its tag is never the empty ``{}`` that Cluster would ignore.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from urllib.parse import quote

from slopolicy.errors import UsageError

__all__ = ("SCRIPTS", "Script", "TenantKeys", "check_prefix", "escape", "tenant_keys")


@dataclass(frozen=True, slots=True)
class Script:
    """One script: its name, full source (the shared prelude + its body) and SHA1."""

    name: str
    source: str
    sha: str


def _load(name: str) -> Script:
    folder = resources.files("slopolicy.backends") / "lua"
    prelude = (folder / "common.lua").read_text(encoding="utf-8")
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    source = f"{prelude}\n{body}"
    return Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())


#: Every script, by name; loaded once per server and called by SHA1 (EVALSHA).
SCRIPTS: dict[str, Script] = {
    name: _load(name) for name in ("acquire", "settle", "release", "renew", "inspect")
}


def escape(text: str) -> str:
    """``text`` percent-encoded for a key; ``"%"`` for the empty string."""
    return quote(text, safe="") if text else "%"


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can start a key: non-empty, no braces (hash tags)."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise UsageError(f"prefix must be a non-empty string without braces, not {prefix!r}")
    return prefix


@dataclass(frozen=True, slots=True)
class TenantKeys:
    """The keys one (tenant, lane) admission touches, in the scripts' KEYS order."""

    bucket: str
    lane_bucket: str
    leases: str
    lane_leases: str
    costs: str

    def all(self) -> tuple[str, str, str, str, str]:
        """KEYS for acquire, settle and release."""
        return (self.bucket, self.lane_bucket, self.leases, self.lane_leases, self.costs)


def tenant_keys(prefix: str, tenant: str, lane: str) -> TenantKeys:
    """The keys of ``tenant`` in ``lane`` under ``prefix``."""
    base = f"{prefix}:{{{escape(tenant)}}}"
    lane_id = escape(lane)
    return TenantKeys(
        f"{base}:bucket",
        f"{base}:bucket:{lane_id}",
        f"{base}:leases",
        f"{base}:leases:{lane_id}",
        f"{base}:costs",
    )
