"""A request's ``tool_risk`` from what its tools have cost lately (``ToolPool.risk``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import PolicyConfig, Request
from slopolicy.core.tools import ToolLease, ToolLimits, ToolOutcome, ToolPool, ToolSpec
from slopolicy.core.tools.risk import MAX_RISK_NAMES
from slopolicy.errors import UsageError

TOOLS = ("search", "fetch", "shell")


def _pool(**limits: Any) -> ToolPool:
    specs = {
        "search": ToolSpec("search", timeout=2.0),  # reads against its timeout
        "fetch": ToolSpec("fetch"),  # against risk_horizon
        "*": ToolSpec("*"),
    }
    return ToolPool(ToolLimits(tools=specs, **limits))


def _call(pool: ToolPool, tool: str, start: float, seconds: float, outcome: ToolOutcome) -> float:
    """One call of ``tool`` from ``start`` for ``seconds``; returns when it ended."""
    lease = pool.acquire("a", tool, now=start)
    assert isinstance(lease, ToolLease), lease
    pool.release(lease.id, now=start + seconds, outcome=outcome)
    return start + seconds


def _calls(
    pool: ToolPool, tool: str, n: int, seconds: float, outcome: ToolOutcome, now: float = 0.0
) -> float:
    """``n`` calls one after another from ``now``; returns when the last ended."""
    for _ in range(n):
        now = _call(pool, tool, now, seconds, outcome)
    return now


def test_a_tool_reads_its_failure_share_or_its_time_share_whichever_is_larger() -> None:
    pool = _pool()
    assert pool.risk([], now=0.0) == 0.0
    assert pool.risk(["search"], now=0.0) == 0.0  # no calls: nothing known against it
    now = _calls(pool, "search", 10, 0.5, ToolOutcome.OK)  # 0.5 s of a 2 s timeout: a quarter
    assert pool.risk(["search"], now=now) == pytest.approx(0.25)
    now = _calls(pool, "search", 10, 0.0, ToolOutcome.ERROR, now)  # half the calls failed
    assert pool.risk(["search"], now=now) == pytest.approx(0.5)
    # Without a timeout, risk_horizon (10 s) reads as 1: 5 s calls read a half.
    now = _calls(pool, "fetch", 10, 5.0, ToolOutcome.OK, now)
    assert pool.risk(["fetch"], now=now) == pytest.approx(0.5)
    # Two calls: the chance at least one goes bad, were they independent.
    assert pool.risk(["search", "fetch"], now=now) == pytest.approx(1 - 0.5 * 0.5)
    assert pool.risk(["fetch", "fetch"], now=now) == pytest.approx(1 - 0.5**2)
    assert pool.risk(["fetch"], now=now + 60.0) == 0.0  # the window has moved past them


def test_few_calls_read_low_and_timeouts_read_high() -> None:
    pool = _pool(min_calls=10)
    now = _calls(pool, "search", 1, 2.0, ToolOutcome.TIMEOUT)  # ran its whole timeout
    assert pool.risk(["search"], now=now) == pytest.approx(0.1)  # over min_calls, not 1
    now = _calls(pool, "search", 9, 2.0, ToolOutcome.TIMEOUT, now)
    assert pool.risk(["search"], now=now) == 1.0
    now = _calls(pool, "search", 1, 9.0, ToolOutcome.CANCELLED, now)  # says nothing of the tool
    assert pool.statistics(now=now).tools[0].calls == 10
    assert pool.risk(["search"], now=now) == 1.0


def test_an_unlisted_name_reads_the_star_groups_risk() -> None:
    pool = _pool(risk_horizon=1.0)
    now = _calls(pool, "grep", 10, 0.5, ToolOutcome.OK)
    assert pool.risk(["cat"], now=now) == pytest.approx(0.5)  # "*" is one shared group


def test_the_config_sets_the_horizon() -> None:
    limits = PolicyConfig.from_dict({"tools": {"risk_horizon_s": 4.0}}).tools.to_limits()
    assert limits.risk_horizon == 4.0


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("search", "iterable"),
        (3, "iterable"),
        (["search", ""], "tool name"),
        (["search", 7], "tool name"),
        (["search"] * (MAX_RISK_NAMES + 1), "at most"),
    ],
)
def test_bad_names_raise_and_change_nothing(tools: Any, message: str) -> None:
    pool = _pool()
    _call(pool, "search", 0.0, 1.0, ToolOutcome.OK)
    before = pool.statistics(now=1.0)
    with pytest.raises(UsageError, match=message):
        pool.risk(tools, now=50.0)
    assert pool.statistics(now=1.0) == before  # not even the clock moved
    with pytest.raises(UsageError, match="now"):
        pool.risk(["search"], now=float("nan"))


def test_a_name_no_limits_cover_raises() -> None:
    pool = ToolPool(ToolLimits(tools={"search": ToolSpec("search")}))
    with pytest.raises(UsageError, match="no limits cover tool 'fetch'"):
        pool.risk(["search", "fetch"], now=0.0)
    with pytest.raises(UsageError, match="risk_horizon"):
        ToolLimits(risk_horizon=0.0)


_CALLS = st.lists(
    st.tuples(
        st.sampled_from(TOOLS),
        st.floats(0.0, 30.0),  # seconds it ran
        st.floats(0.0, 20.0),  # seconds until the next starts
        st.sampled_from(list(ToolOutcome)),
    ),
    max_size=40,
)
_NAMES = st.lists(st.sampled_from(TOOLS), max_size=6)


@given(calls=_CALLS, names=_NAMES, more=st.sampled_from(TOOLS), horizon=st.floats(1e-3, 100.0))
def test_risk_is_a_valid_tool_risk_and_never_falls_as_calls_are_added(
    calls: list[tuple[str, float, float, ToolOutcome]],
    names: list[str],
    more: str,
    horizon: float,
) -> None:
    pool = _pool(risk_horizon=horizon, min_calls=3)
    now = 0.0
    for tool, seconds, gap, outcome in calls:
        _call(pool, tool, now, seconds, outcome)
        now += seconds + gap
    risk = pool.risk(names, now=now)
    assert 0.0 <= risk <= 1.0
    assert Request(prompt_tokens=1, tool_risk=risk).tool_risk == risk  # a valid field
    assert pool.risk([*names, more], now=now) >= risk
    assert pool.risk(list(reversed(names)), now=now) == pytest.approx(risk)
    assert pool.risk([], now=now) == 0.0
