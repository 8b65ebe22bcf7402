"""Which tenants ask for more than their max-min share of what the engine serves.

Max-min fairness gives every tenant what it asks for up to a common level
``L`` (per unit of weight), and ``L`` is where those shares add up to what
the engine serves: ``sum_i min(d_i, w_i * L) = S``. A tenant whose demand
``d_i`` is above ``w_i * L`` is *over its share*; the rest are within it and,
under saturation, should keep what they ask for while the over-share tenants
absorb the shortfall (SIMULATOR.md's "in-share" check).

:class:`TenantDemand` measures both sides online, in the policy's cost units:
``d_i``, the cost each tenant queued, and ``S``, the cost the policy started,
each a sum decayed with time constant ``window_s`` (so a rate times
``window_s``, comparable with each other). While the tenants together ask for
no more than was served (the engine keeps up), or before anything was
served, nobody is over: ``L`` is infinite, and the estimate changes nothing.
``L`` is recomputed once in each ``window_s / 20`` of the caller's clock
(at the first read past each multiple of it, so the moments do not drift
with which calls read it), in passes over the
tenants seen within about ``window_s`` (progressive filling: each pass
meets in full every demand below the level the rest would share; a handful
of passes on real mixes, and a sort of what is left after 16, so a crafted
mix costs ``O(n log n)``). Every sum is kept in the units of one
epoch (a cost at ``t`` counts ``e^((t - epoch) / window_s)``), so all decay
by one factor and a recomputation reads no clock per tenant; the epoch moves
up every ``REBASE`` windows.

Demand is counted when work is queued and service when it starts, so while
queues hold work the two sums differ by what waits, and the largest tenant
reads as over its share whenever work waits. The flag only orders the
tenants competing inside one queue's slack, so it matters only where a queue
forms: below the knee it changes little, near it it trades some of
shortest-first's goodput for the light tenants' attainment, and past it the
over-share tenants absorb the shortfall (``benchmarks/README.md``).

:meth:`TenantDemand.sheds` is the ladder's ``shed`` rung by share: of a
tenant over its share it refuses the part of its requests beyond the share,
spread evenly, and none of a tenant within it; what it refuses counts as
demand. :meth:`TenantDemand.portion` is the part of a tenant's demand
within its share (``w L / d``, 1 within it): what one of its requests is
worth to max-min fairness, by which the policy scales the harm a long
prompt's prefill may do to the other lanes
(:mod:`slopolicy.core.queueing.interference`). :meth:`TenantDemand.within_share`
names the tenants within their share while some tenant is over its own:
those the KV pool's shares owe room for their bursts
(:mod:`slopolicy.core.kv.shares`).

Both sides are counted at the policy's estimate of a request's cost (prompt
and forecast output: its tenant's recent answers, as the KV ledger reserves,
at most ``max_new_tokens``; the caller's ``Entry.share_cost``) so the units
agree: a request queued and started adds the same amount to both. Not at
the ceiling: reasoning clients send 16k-32k ceilings for answers of a few
thousand tokens, and counted there one of them reads as asking many times
what it uses. What expires or is refused after queueing adds to
demand only: that is the shortfall the level sorts out.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import check_now
from slopolicy.core.queueing.counters import check_slack, check_weight, check_window
from slopolicy.errors import UsageError

__all__ = ("TenantDemand",)

# A tenant whose decayed demand has fallen below this (cost units) is forgotten.
_NEGLIGIBLE = 1e-3
#: Progressive-filling passes before the rest is sorted instead.
_PASSES = 16
#: Windows after which the sums move to a new epoch (e^40 ~ 2e17: far from
#: overflow, and a cost's rounding is relative).
REBASE = 40.0


class _Asked:
    """One tenant's sums, in epoch units (see the module)."""

    __slots__ = ("carry", "demand", "spared", "weight")

    def __init__(self, weight: float) -> None:
        self.demand = 0.0  # what it queued (and what shedding refused)
        self.weight = weight
        self.carry = 0.0  # shedding's carry, in requests (see sheds)
        self.spared = 0.0  # the part of demand queued in lanes shedding spares


class TenantDemand:
    """Each tenant's recent demand against its max-min share of recent service.

    Args:
        window_s: the time constant both sums decay with (seconds, > 0): a
            tenant's demand is roughly what it queued over the last
            ``window_s``.
    """

    __slots__ = (
        "_demand",
        "_due",
        "_epoch",
        "_level",
        "_refresh",
        "_served",
        "_window",
        "_within",
    )

    def __init__(self, window_s: float) -> None:
        check_window(window_s)
        self._window = float(window_s)
        self._refresh = window_s / 20
        self._demand: dict[str, _Asked] = {}
        self._served = 0.0
        self._epoch: float | None = None  # set by the first call
        self._level = math.inf  # per weight, in decayed cost units at its refresh
        self._within = False  # whether some tenant is within its share at the level
        self._due = -math.inf  # the refresh tick from which the level is recomputed

    def offered(
        self, tenant: str, *, cost: float, weight: float, now: float, spared: bool = False
    ) -> bool:
        """``tenant`` (at ``weight`` > 0) queued work of ``cost`` units at
        ``now``: counted, then whether it is over its share. ``cost`` is
        finite and >= 0; ``spared``: the work is in a lane shedding never
        refuses (it counts toward the share, and :meth:`sheds` takes the
        tenant's excess from the rest)."""
        check_slack(cost, "cost")
        check_weight(weight)
        check_now(now)
        if not isinstance(spared, bool):
            raise UsageError(f"spared must be a bool, got {spared!r}")
        return self._offer(tenant, cost, weight, now, spared)

    def _offer(
        self, tenant: str, cost: float, weight: float, now: float, spared: bool = False
    ) -> bool:
        """:meth:`offered` for a caller that checked its arguments."""
        grown = self._grown(now)
        kept = self._demand.get(tenant)
        if kept is None:
            self._demand[tenant] = kept = _Asked(weight)
        kept.demand += cost * grown
        if spared:
            kept.spared += cost * grown
        kept.weight = weight
        return kept.demand > weight * self._level_at(now) * grown

    def served(self, cost: float, *, now: float) -> None:
        """The policy started work of ``cost`` (finite, >= 0) units at ``now``."""
        check_slack(cost, "cost")
        check_now(now)
        self._serve(cost, now)

    def _serve(self, cost: float, now: float) -> None:
        """:meth:`served` for a caller that checked its arguments."""
        self._served += cost * self._grown(now)

    def sheds(self, tenant: str, *, cost: float, weight: float, now: float) -> bool:
        """Whether shedding by share refuses this request of ``tenant`` (at
        ``weight`` > 0, costing ``cost`` units) at ``now``.

        Of a tenant over its share, what it asks beyond the share, ``d - w
        L``, is taken from the part of its demand shedding may refuse (``d``
        less what it queued ``spared``): that fraction of its requests (1 at
        most) is refused, spread evenly over them (each adds the fraction to
        a carry; a request that brings it to 1 is refused); none of a tenant
        within its share. So shedding takes from each tenant what max-min
        fairness would not give it, and a tenant read as barely over loses
        barely anything. A refused request counts as demand (a shortfall);
        one that is not is counted by :meth:`offered` when it queues."""
        check_slack(cost, "cost")
        check_weight(weight)
        check_now(now)
        return self._sheds(tenant, cost, weight, now)

    def _sheds(self, tenant: str, cost: float, weight: float, now: float) -> bool:
        """:meth:`sheds` for a caller that checked its arguments."""
        grown = self._grown(now)
        share = weight * self._level_at(now) * grown  # first: it may forget tenants
        kept = self._demand.get(tenant)
        if kept is None:
            return False
        excess = kept.demand - share
        if excess <= 0.0:
            kept.carry = 0.0
            return False
        sheddable = kept.demand - kept.spared
        kept.carry += 1.0 if sheddable <= excess else excess / sheddable
        if kept.carry < 1.0:
            return False
        kept.carry -= 1.0
        kept.demand += cost * grown
        kept.weight = weight
        return True

    def over(self, tenant: str, *, now: float) -> bool:
        """Whether ``tenant`` asks for more than its share at ``now``."""
        check_now(now)
        return self._portion(tenant, now) < 1.0

    def within_share(self, *, now: float) -> frozenset[str]:
        """The tenants within their share at ``now`` while some tenant is over
        its own (none while the engine keeps up: nobody to protect), by the
        level as last recomputed. It does not recompute the level: which
        read comes first in a refresh interval sets the sums it is computed
        on, and this read leaves that to :meth:`offered` and the verdicts."""
        check_now(now)
        return self._within_share(now)

    def _within_share(self, now: float) -> frozenset[str]:
        """:meth:`within_share` for a caller that checked ``now``."""
        share = self._level * self._grown(now)
        if share == math.inf:
            return frozenset()
        return frozenset(
            tenant for tenant, kept in self._demand.items() if kept.demand <= kept.weight * share
        )

    def portion(self, tenant: str, *, now: float) -> float:
        """The part of ``tenant``'s demand within its share at ``now``:
        ``min(1, w L / d)``, 1 for a tenant within it or unknown (so 1 while
        the engine keeps up)."""
        check_now(now)
        return self._portion(tenant, now)

    def _portion(self, tenant: str, now: float) -> float:
        """:meth:`portion` for a caller that checked ``now``."""
        grown = self._grown(now)  # first: it may move the epoch
        share = self._level_at(now) * grown
        kept = self._demand.get(tenant)
        if kept is None or kept.demand <= kept.weight * share:
            return 1.0
        return kept.weight * share / kept.demand

    def protects(self, *, now: float) -> bool:
        """Whether the level is finite (the tenants ask for more than is
        served) and some tenant asks for less than its share: a tenant that
        refusing the others' excess would protect."""
        check_now(now)
        return self._protects(now)

    def _protects(self, now: float) -> bool:
        """:meth:`protects` for a caller that checked ``now``."""
        self._grown(now)  # first: it may move the epoch
        self._level_at(now)
        return self._within

    def level(self, *, now: float) -> float:
        """``L``: the share per unit of weight (decayed cost units, as of its
        last recomputation; ``inf`` while the engine keeps up with what is
        asked)."""
        check_now(now)
        return self._level_at(now)

    def asked(self, tenant: str, *, now: float) -> float:
        """``tenant``'s decayed demand at ``now`` (cost units; 0 if unknown)."""
        check_now(now)
        kept = self._demand.get(tenant)
        return 0.0 if kept is None else kept.demand / self._grown(now)

    def started(self, *, now: float) -> float:
        """The decayed cost started, at ``now`` (cost units)."""
        check_now(now)
        return self._served / self._grown(now)

    def _grown(self, now: float) -> float:
        """What a cost at ``now`` counts in epoch units, moving the epoch up
        first where ``now`` is ``REBASE`` windows past it; a time before the
        epoch counts as the epoch (never 0, whatever the clock did)."""
        epoch = self._epoch
        if epoch is None:
            self._epoch = epoch = now
        elif now - epoch > REBASE * self._window:
            shrink = math.exp((epoch - now) / self._window)
            for kept in self._demand.values():
                kept.demand *= shrink
                kept.spared *= shrink
            self._served *= shrink
            self._epoch = epoch = now
        return math.exp(max(0.0, now - epoch) / self._window)

    def _level_at(self, now: float) -> float:
        """The level, recomputed by the first read in each refresh interval
        (the multiples of ``window_s / 20`` on the caller's clock), so when it
        is recomputed does not depend on which calls read it."""
        if now < self._due:
            return self._level
        refresh = self._refresh
        self._due = (math.floor(now / refresh) + 1.0) * refresh
        grown = self._grown(now)
        negligible = _NEGLIGIBLE * grown
        demands = self._demand
        for tenant in [t for t, kept in demands.items() if kept.demand < negligible]:
            del demands[tenant]
        served = self._served
        total = sum(kept.demand for kept in demands.values())
        self._level, self._within = math.inf, False
        if total > served > 0:  # nothing served yet: nothing to share out
            # Progressive filling: at the level what is left would give the
            # rest by weight, every demand below it is met in full; take
            # those out and raise the level until none is below.
            rest, left = list(demands.values()), served
            weights = sum(kept.weight for kept in rest)
            for _ in range(_PASSES):
                level = left / weights
                met = [kept for kept in rest if kept.demand < level * kept.weight]
                if not met or len(met) == len(rest):  # (all: a tie rounded)
                    break
                left -= sum(kept.demand for kept in met)
                weights -= sum(kept.weight for kept in met)
                rest = [kept for kept in rest if kept.demand >= level * kept.weight]
            else:
                # A mix crafted to meet one demand a pass: finish in order
                # of demand per weight, O(n log n). The largest is never met.
                rest.sort(key=lambda kept: kept.demand / kept.weight)
                for kept in rest[:-1]:
                    if kept.demand * weights >= left * kept.weight:
                        break
                    left -= kept.demand
                    weights -= kept.weight
            self._level = left / weights / grown
            self._within = left < served  # some demand was met in full
        return self._level
