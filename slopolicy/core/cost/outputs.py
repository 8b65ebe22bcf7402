"""How long answers turn out: a forecast of output tokens per sequence, per tenant and lane.

``max_new_tokens`` is a ceiling, not a length. Reasoning and chat clients
commonly send 8k-32k while most answers stop far earlier; reserving the ceiling
for every running request leaves most of the engine's KV pool held by tokens
that never come, so a policy that reserves worst cases serves less than the
engine's own FCFS queue would. :class:`OutputForecast` learns, per lane and
per tenant within it, the mean (or a quantile) of what recent completed
requests actually generated, and the KV ledger reserves that (never more
than the request's own ceiling): each running request is forecast to end
there, and a request starts iff the peak of the running requests' KV over
the future fits the pool
(:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`).

Why this holds on traffic it was not tuned on:

* It is measured from the traffic itself: no length constant is assumed.
  Until a lane has ``min_samples`` completed answers it forecasts the
  ceiling (the worst case, as before).
* Answer length belongs to the client, not the lane: a code assistant and a
  reasoning agent share the chat lane with answers a factor of ten or more
  apart. A lane's forecast over-reserves for one and under-reserves for the
  other, and what is counted against each tenant's share of the pool and of
  the engine then reads a KV-heavy tenant as a light one. So a tenant's own
  forecast replaces its lane's once it has ``tenant_min_samples`` answers
  there; a new tenant, or one forgotten (the ``max_tenants`` pairs recorded
  most recently are kept), gets the lane's.
* The forecast is the mean by default, not a high quantile
  (``kv.output_quantile``): the peak check adds every running request's
  forecast, and the tenants' shares add their requests' costs, and the sum
  of many answers is near the sum of their means, far below the sum of
  their p90s. Each at its p90, a pool whose engine held 8% read as 95% full
  at its forecast peak.
* A forecast that is too low is corrected while the request runs: the policy
  grows a reservation as output passes it (``Policy.tokens``), and the ledger
  reconciles with the engine's own KV reading. What a miss costs is what every
  engine without a ledger pays anyway: the engine may preempt (vLLM recomputes).
* The windows are recent answers (``window`` per lane, ``tenant_window`` per
  tenant), so a change of traffic shifts the forecast within that many
  completions.

The answer is the mean of the last ``n`` recorded, per sequence, or the
value of rank ``floor(quantile x (n - 1))`` among them. Memory: ``window``
values per lane and ``tenant_window`` per kept (lane, tenant) pair.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal

from slopolicy.core.checks import check_count, is_number, shown
from slopolicy.core.cost.ranks import RecentRank
from slopolicy.errors import UsageError

__all__ = ("OutputForecast",)


class OutputForecast:
    """Per lane, and per tenant within it, the mean (or a quantile) of recent
    output tokens per sequence.

    Args:
        lanes: the lanes it forecasts for.
        quantile: ``"mean"`` (the default: what a sum of answers adds up to;
            see the module), or the rank answered, in ``(0, 1]`` (0.9: nine
            answers in ten end within their forecast; the peak check counts
            on the others ending at it until they pass it, then a block on,
            and so on).
        window: answers remembered per lane (the most recent ones).
        min_samples: answers a lane needs before it forecasts less than the
            ceiling.
        tenant_window: answers remembered per tenant and lane.
        tenant_min_samples: answers a tenant needs in a lane before its own
            forecast replaces the lane's.
        max_tenants: (lane, tenant) pairs remembered; the one that recorded
            least recently is forgotten first (0: lanes only).

    Misuse raises :class:`UsageError` and changes nothing.
    """

    __slots__ = (
        "_lanes",
        "_rank",
        "_tenants",
        "max_tenants",
        "min_samples",
        "tenant_min_samples",
        "tenant_window",
        "window",
    )

    def __init__(
        self,
        lanes: Iterable[str],
        *,
        quantile: float | Literal["mean"] = "mean",
        window: int = 256,
        min_samples: int = 16,
        tenant_window: int = 64,
        tenant_min_samples: int = 8,
        max_tenants: int = 1024,
    ) -> None:
        rank: float | None  # RecentRank's: None answers the mean
        if isinstance(quantile, str) and quantile == "mean":
            rank = None
        elif not isinstance(quantile, str) and is_number(quantile) and 0.0 < quantile <= 1.0:
            rank = float(quantile)
        else:
            raise UsageError(
                f"quantile must be 'mean' or a number in (0, 1], got {shown(quantile)}"
            )
        for name, size, least_name, least in (
            ("window", window, "min_samples", min_samples),
            ("tenant_window", tenant_window, "tenant_min_samples", tenant_min_samples),
        ):
            check_count(name, size, minimum=1)
            check_count(least_name, least, minimum=1)
            if least > size:
                raise UsageError(f"{least_name} ({least}) must be <= {name} ({size})")
        check_count("max_tenants", max_tenants)
        self._rank = rank
        self.window = window
        self.min_samples = min_samples
        self.tenant_window = tenant_window
        self.tenant_min_samples = tenant_min_samples
        self.max_tenants = max_tenants
        self._lanes = {lane: RecentRank(self._rank, window, min_samples) for lane in lanes}
        # Least recently recorded first.
        self._tenants: OrderedDict[tuple[str, str], RecentRank] = OrderedDict()

    @property
    def quantile(self) -> float | Literal["mean"]:
        """``"mean"``, or the quantile answered."""
        return "mean" if self._rank is None else self._rank

    def per_sequence(self, lane: str, max_new_tokens: int, *, tenant: str | None = None) -> int:
        """Output tokens per sequence to reserve for a request of ``lane`` (and
        ``tenant``) with ceiling ``max_new_tokens``: the forecast, at most the
        ceiling (the ceiling itself until the lane has ``min_samples`` answers)."""
        forecast = self.forecast(lane, tenant=tenant)
        if forecast is None or forecast >= max_new_tokens:
            return max_new_tokens
        return forecast

    def forecast(self, lane: str, *, tenant: str | None = None) -> int | None:
        """The forecast in tokens per sequence: ``tenant``'s own in ``lane`` once
        it has ``tenant_min_samples`` answers there, else the lane's; ``None``
        (too few answers yet)."""
        state = self._lane(lane)
        if tenant is not None:
            own = self._tenants.get((lane, tenant))
            if own is not None and own.value is not None:
                state = own
        value = state.value
        # At least one token: a zero-length forecast would reserve nothing
        # for an answer the engine must still hold while it streams.
        return None if value is None else max(1, int(value))

    def record(self, lane: str, tokens_per_sequence: int, *, tenant: str | None = None) -> None:
        """A completed answer of ``lane`` (and ``tenant``) generated
        ``tokens_per_sequence`` tokens per sequence."""
        self._lane(lane)
        check_count("tokens_per_sequence", tokens_per_sequence)
        if tenant is not None and not (isinstance(tenant, str) and tenant):
            raise UsageError(f"tenant must be a non-empty string or None, got {shown(tenant)}")
        self._record(lane, tokens_per_sequence, tenant=tenant)

    def _record(self, lane: str, tokens: int, *, tenant: str | None) -> None:
        """:meth:`record` for a caller that checked its arguments."""
        self._lanes[lane].add(tokens)
        if tenant is None or not self.max_tenants:
            return
        tenants, key = self._tenants, (lane, tenant)
        own = tenants.get(key)
        if own is None:
            if len(tenants) >= self.max_tenants:
                tenants.popitem(last=False)
            own = tenants[key] = RecentRank(self._rank, self.tenant_window, self.tenant_min_samples)
        else:
            tenants.move_to_end(key)
        own.add(tokens)

    def _lane(self, lane: str) -> RecentRank:
        state = self._lanes.get(lane)
        if state is None:
            raise UsageError(f"unknown lane {lane!r}")
        return state
