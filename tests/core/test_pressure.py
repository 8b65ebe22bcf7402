from __future__ import annotations

import math

import pytest

from slopolicy.config.ladder import LadderConfig
from slopolicy.config.policy import PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.ladder.pressure import (
    SIGNALS,
    Pressure,
    Reading,
    Signal,
    Trigger,
    Zone,
    default_triggers,
)
from slopolicy.errors import UsageError


def test_a_snapshot_reads_its_fields_and_extras_by_name() -> None:
    pressure = Pressure(kv_usage=0.5, decode_tps_drop=-0.1, extra={"retriever": 3})
    assert pressure.signal("kv_usage") == 0.5
    assert pressure.signal("decode_tps_drop") == -0.1  # faster than baseline is allowed
    assert pressure.signal("ttft_p95_fraction") is None
    assert pressure.signal("retriever") == 3.0
    assert isinstance(pressure.signal("retriever"), float)
    assert pressure.signal("missing") is None
    assert Signal("retriever")(pressure) == 3.0


def test_a_snapshot_copies_its_extras() -> None:
    extra: dict[str, float | None] = {"a": 1.0}
    pressure = Pressure(extra=extra)
    extra["a"] = 2.0
    assert pressure.signal("a") == 1.0
    assert hash(pressure) == hash(Pressure(extra={"a": 5.0}))  # extras are not hashed
    assert pressure == Pressure(extra={"a": 1.0})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kv_usage": math.nan}, "kv_usage: must be finite"),
        ({"ttft_p95_fraction": math.inf}, "must be finite"),
        ({"queue_wait_fraction": True}, "expected a number"),
        ({"tool_timeout_rate": "0.1"}, "expected a number"),
        ({"extra": {"": 1.0}}, "bad signal name"),
        ({"extra": {"kv_usage": 1.0}}, "bad signal name"),
        ({"extra": {"x": math.nan}}, r"extra\['x'\]"),
        ({"extra": [("x", 1.0)]}, "mapping"),
    ],
)
def test_a_bad_snapshot_is_a_usage_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Pressure(**kwargs)  # type: ignore[arg-type]


def test_zones_include_enter_and_exclude_exit() -> None:
    trigger = Trigger("kv_usage", 0.92, 0.8)
    assert [trigger.zone(v) for v in (None, 0.0, 0.79, 0.8, 0.91, 0.92, 1.0)] == [
        Zone.UNKNOWN,
        Zone.COOL,
        Zone.COOL,
        Zone.WARM,
        Zone.WARM,
        Zone.HOT,
        Zone.HOT,
    ]
    assert trigger.reading(0.95) == Reading("kv_usage", 0.95, 0.92, 0.8)
    assert str(Reading("kv_usage", 0.85, 0.92, 0.8)) == "kv_usage=0.85 in [0.8, 0.92)"


@pytest.mark.parametrize(
    ("name", "enter", "exit_", "match"),
    [
        ("", 1.0, 0.5, "name"),
        ("t", 0.5, 0.5, "below enter"),
        ("t", 0.5, 0.6, "below enter"),
        ("t", math.nan, 0.5, "finite"),
        ("t", 1.0, None, "below enter"),
    ],
)
def test_a_bad_trigger_is_a_usage_error(
    name: str, enter: float, exit_: float | None, match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        Trigger(name, enter, exit_)  # type: ignore[arg-type]


def test_a_reader_must_return_a_finite_number_or_none() -> None:
    with pytest.raises(UsageError, match="callable"):
        Trigger("t", 1.0, 0.5, read=3)  # type: ignore[arg-type]
    bad = Trigger("t", 1.0, 0.5, read=lambda pressure: "high")  # type: ignore[arg-type,return-value]
    with pytest.raises(UsageError, match="trigger 't' read"):
        bad.value(Pressure())
    assert Trigger("t", 1.0, 0.5, read=lambda pressure: None).value(Pressure()) is None


def test_default_triggers_match_the_config_defaults_in_the_seed_order() -> None:
    triggers = default_triggers()
    # The seed's five; the TBT trigger, last, is off unless asked for.
    assert tuple(trigger.name for trigger in triggers) == SIGNALS[:5]
    assert SIGNALS[5] == "tbt_p99_fraction"
    config = LadderConfig()
    # The config leaves the TTFT trigger out by default (it reads prefill
    # interference as overload); every other trigger matches the core's.
    assert config.ttft_p95_fraction is None
    assert config.tbt_p99_fraction is None
    for trigger in triggers[1:]:
        threshold = getattr(config, trigger.name)
        assert threshold is not None
        assert (trigger.enter, trigger.exit) == (threshold.enter, threshold.exit)
        assert trigger.read is None
    built = config.build(["interactive", "batch"])
    assert built is not None
    assert [t.name for t in built._triggers] == list(SIGNALS[1:5])


def test_default_triggers_leave_out_the_ones_set_to_none() -> None:
    triggers = default_triggers(decode_tps_drop=None, tool_timeout_rate=None, kv_usage=(0.9, 0.7))
    assert [(t.name, t.enter, t.exit) for t in triggers] == [
        ("ttft_p95_fraction", 0.8, 0.6),
        ("queue_wait_fraction", 0.5, 0.25),
        ("kv_usage", 0.9, 0.7),
    ]
    with pytest.raises(UsageError, match="enter, exit"):
        default_triggers(kv_usage=[0.9, 0.7])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="below enter"):
        default_triggers(kv_usage=(0.7, 0.9))


def _paused(config: PolicyConfig) -> frozenset[str]:
    ladder = config.to_spec(counter=HeuristicCounter()).ladder
    assert ladder is not None
    (rung,) = [r for r in ladder.rungs if r.name == "pause_background"]
    return rung.pause_lanes


def test_pause_background_holds_only_lanes_nobody_waits_on_a_first_token_for() -> None:
    # The default lanes: background has only an end-to-end target.
    assert _paused(PolicyConfig()) == {"background"}
    # Chat and code both have TTFT targets: holding code would only have each
    # request wait out its deadline and expire (shed refuses by share instead).
    timed = PolicyConfig.from_dict(
        {
            "version": 1,
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 1.0}},
                {"name": "code", "slo": {"ttft_p99_s": 4.0}},
                {"name": "batch", "slo": {"e2e_p95_s": 600.0}},
                {"name": "offline"},
            ],
        }
    )
    assert _paused(timed) == {"batch", "offline"}
    # The watched lane is never held by default, even without a TTFT target.
    data = timed.model_dump(mode="json")
    data["ladder"]["watch_lane"] = "batch"
    assert _paused(PolicyConfig.from_dict(data)) == {"offline"}
    data["lanes"] = data["lanes"][:2]
    data["ladder"]["watch_lane"] = None
    assert _paused(PolicyConfig.from_dict(data)) == frozenset()
    # Named lanes are held as named.
    data["ladder"]["pause_lanes"] = ["code"]
    assert _paused(PolicyConfig.from_dict(data)) == {"code"}
