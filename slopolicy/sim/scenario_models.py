"""The scenario file's schema: frozen pydantic models, validated like the policy config.

See ``docs/simulator.md`` for the format with an example. Every model
converts to the plain simulator value it describes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel
from slopolicy.sim import arrival_processes as arrivals
from slopolicy.sim import lengths
from slopolicy.sim.agents import AgentTurns
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.ours import SIGNALS
from slopolicy.sim.profiles import PROFILES, profile
from slopolicy.sim.simulator import Client
from slopolicy.sim.streams import Stream, Tenants

__all__ = ("AgentModel", "ClientModel", "EngineModel", "ScenarioModel", "StreamModel", "TraceModel")

_Positive = Annotated[float, Field(gt=0)]
_NonNegative = Annotated[float, Field(ge=0)]
_Count = Annotated[int, Field(ge=1)]
_Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]


class EngineModel(ConfigModel):
    """The engine model: a cost profile and vLLM's scheduler knobs."""

    profile: str = "llama3-8b/h100"
    t_cpu_ms: _NonNegative | None = None
    max_num_seqs: _Count = 256
    max_num_batched_tokens: _Count = 8192
    long_prefill_token_threshold: Annotated[int, Field(ge=0)] = 0
    block_size: _Count = 16
    num_blocks: _Count | None = None
    max_model_len: Annotated[int, Field(ge=2)] | None = None

    @model_validator(mode="after")
    def _known(self) -> EngineModel:
        if self.profile.lower() not in PROFILES:
            raise ValueError(
                f"unknown profile {self.profile!r}; profiles are {', '.join(PROFILES)}"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
        return self

    def to_spec(self) -> EngineSpec:
        """The plain engine spec."""
        chosen = profile(self.profile)
        if self.t_cpu_ms is not None:
            chosen = chosen.with_cpu(self.t_cpu_ms / 1000)
        return EngineSpec(
            chosen,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.long_prefill_token_threshold,
            self.block_size,
            self.num_blocks,
            self.max_model_len,
        )


class _Poisson(ConfigModel):
    kind: Literal["poisson"]
    rate: _Positive

    def build(self) -> arrivals.ArrivalProcess:
        return arrivals.Poisson(self.rate)


class _Gamma(ConfigModel):
    kind: Literal["gamma"]
    rate: _Positive
    cv: _Positive

    def build(self) -> arrivals.ArrivalProcess:
        return arrivals.GammaArrivals(self.rate, self.cv)


class _OnOff(ConfigModel):
    kind: Literal["on_off"]
    rate: _Positive
    on_s: _Positive
    off_s: _Positive

    def build(self) -> arrivals.ArrivalProcess:
        return arrivals.OnOff(self.rate, self.on_s, self.off_s)


class _Ramp(ConfigModel):
    kind: Literal["ramp"]
    start_rate: _NonNegative
    end_rate: _NonNegative

    def build(self) -> arrivals.ArrivalProcess:
        return arrivals.Ramp(self.start_rate, self.end_rate)


class _Burst(ConfigModel):
    kind: Literal["burst"]
    count: _Count
    at_s: _NonNegative = 0.0
    spread_s: _NonNegative = 0.0

    def build(self) -> arrivals.ArrivalProcess:
        return arrivals.Burst(self.count, self.at_s, self.spread_s)


Arrivals = Annotated[_Poisson | _Gamma | _OnOff | _Ramp | _Burst, Field(discriminator="kind")]


class _Constant(ConfigModel):
    kind: Literal["constant"]
    value: _Count

    def build(self) -> lengths.LengthDistribution:
        return lengths.Constant(self.value)


class _Uniform(ConfigModel):
    kind: Literal["uniform"]
    low: _Count
    high: _Count

    @model_validator(mode="after")
    def _ordered(self) -> _Uniform:
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self

    def build(self) -> lengths.LengthDistribution:
        return lengths.Uniform(self.low, self.high)


class _LogNormal(ConfigModel):
    kind: Literal["lognormal"]
    median: Annotated[float, Field(ge=1)]
    sigma: _NonNegative
    min: _Count = 1
    max: _Count = 1_000_000

    @model_validator(mode="after")
    def _ordered(self) -> _LogNormal:
        if self.max < self.min:
            raise ValueError("max must be >= min")
        return self

    def build(self) -> lengths.LengthDistribution:
        return lengths.LogNormal(self.median, self.sigma, self.min, self.max)


class _Empirical(ConfigModel):
    kind: Literal["empirical"]
    values: Annotated[list[_Count], Field(min_length=1)]

    def build(self) -> lengths.LengthDistribution:
        return lengths.Empirical(self.values)


Lengths = Annotated[_Constant | _Uniform | _LogNormal | _Empirical, Field(discriminator="kind")]


class TenantsModel(ConfigModel):
    """Who sends a stream: ``names``, or ``count`` tenants called
    ``prefix0``, ``prefix1``...; ``weights`` (one per name) sets each one's
    share of the traffic, else ``skew`` > 0 makes the first ones busier (Zipf)."""

    names: Annotated[list[_Name], Field(min_length=1)] | None = None
    count: _Count | None = None
    prefix: _Name = "tenant-"
    skew: _NonNegative = 0.0
    weights: list[_NonNegative] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> TenantsModel:
        if (self.names is None) == (self.count is None):
            raise ValueError("give either names or count")
        if self.weights is not None:
            if self.names is None or len(self.weights) != len(self.names):
                raise ValueError("give one weight per name")
            if not sum(self.weights) > 0:
                raise ValueError("weights must not all be 0")
        return self

    def build(self) -> Tenants:
        if self.names is not None:
            weights = None if self.weights is None else tuple(self.weights)
            return Tenants(tuple(self.names), self.skew, weights)
        assert self.count is not None
        return Tenants.numbered(self.prefix, self.count, skew=self.skew)


class AgentModel(ConfigModel):
    """Each arrival is an agent task (see :class:`~slopolicy.sim.agents.AgentTurns`):
    ``turns`` per task, ``tool_wait_ms`` before each later turn,
    ``tool_output_tokens`` added to the context per tool call, and the task's
    ``deadline_s`` after its first turn arrives."""

    turns: Lengths
    tool_wait_ms: Lengths
    tool_output_tokens: Lengths
    deadline_s: _Positive | None = None

    def build(self) -> AgentTurns:
        return AgentTurns(
            self.turns.build(),
            self.tool_wait_ms.build(),
            self.tool_output_tokens.build(),
            self.deadline_s,
        )


class StreamModel(ConfigModel):
    """One kind of synthetic traffic (see :class:`~slopolicy.sim.streams.Stream`)."""

    name: _Name
    arrivals: Arrivals
    prompt_tokens: Lengths
    output_tokens: Lengths
    tenants: TenantsModel
    max_new_tokens: _Count = 1024
    lane: str | None = None
    start_s: _NonNegative = 0.0
    end_s: _Positive | None = None
    retries: Annotated[int, Field(ge=0)] = 0
    tier: str | None = None
    agent: AgentModel | None = None

    def build(self) -> Stream:
        return Stream(
            self.name,
            self.arrivals.build(),
            self.prompt_tokens.build(),
            self.output_tokens.build(),
            self.tenants.build(),
            self.max_new_tokens,
            self.lane,
            self.start_s,
            self.end_s,
            self.retries,
            self.tier,
            None if self.agent is None else self.agent.build(),
        )


class TraceModel(ConfigModel):
    """A recorded trace: ``path`` (relative to the scenario file) or
    ``builtin: azure-2023``, with its column mapping when not recognised."""

    path: str | None = None
    builtin: Literal["azure-2023"] | None = None
    time_col: str | None = None
    input_col: str | None = None
    output_col: str | None = None
    tenant_col: str | None = None
    lane_col: str | None = None
    time_unit: Literal["s", "ms", "datetime"] = "s"
    tenant: str | None = None
    lane: str | None = None
    max_new_tokens: _Count = 1024
    retries: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _one_source(self) -> TraceModel:
        if (self.path is None) == (self.builtin is None):
            raise ValueError("give either path or builtin")
        named = (self.time_col, self.input_col, self.output_col)
        if any(c is not None for c in named) and any(c is None for c in named):
            raise ValueError("give time_col, input_col and output_col together")
        return self


class ClientModel(ConfigModel):
    """How clients retry refusals (see :class:`~slopolicy.sim.simulator.Client`)."""

    backoff_s: _Positive = 0.5
    max_backoff_s: _Positive = 8.0
    max_retry_after_s: _Positive = 60.0
    jitter: Annotated[float, Field(ge=0, lt=1)] = 0.25

    def build(self, seed: int) -> Client:
        return Client(self.backoff_s, self.max_backoff_s, self.max_retry_after_s, self.jitter, seed)


class ScenarioModel(ConfigModel):
    """A whole scenario: workload, engine, policy file and run settings.

    Attributes:
        name: shown in reports.
        description: one paragraph for people.
        seed: seeds every stream and the clients' retry jitter.
        duration_s: seconds of synthetic traffic (traces bring their own).
        rate_scale: compresses time: arrival rates multiply by it.
        engine: the engine model.
        policy: policy file, relative to the scenario file (default: the
            built-in ``PolicyConfig()``).
        streams: synthetic traffic.
        traces: recorded traffic, merged with the streams.
        rpm_limit: the ``rpm`` baseline's requests per tenant per minute.
        client: how clients retry refusals.
        drain_s: how long after the traffic the run may go on finishing work.
        signals: engine signals fed to our policy.
        engine_priority: our policy passes lane ranks as engine priorities.
    """

    version: Literal[1] = 1
    name: _Name = "scenario"
    description: str = ""
    seed: int = 0
    duration_s: _Positive | None = None
    rate_scale: _Positive = 1.0
    engine: EngineModel = EngineModel()
    policy: str | None = None
    streams: list[StreamModel] = []
    traces: list[TraceModel] = []
    rpm_limit: _Count = 60
    client: ClientModel = ClientModel()
    drain_s: _NonNegative = 3600.0
    signals: list[
        Literal[
            "kv_usage", "waiting", "running", "decode_tps", "preemption_rate", "kv_capacity_tokens"
        ]
    ] = ["kv_usage", "waiting", "running", "preemption_rate", "kv_capacity_tokens"]
    engine_priority: bool = True

    @model_validator(mode="after")
    def _has_traffic(self) -> ScenarioModel:
        if not self.streams and not self.traces:
            raise ValueError("a scenario needs streams or traces")
        if self.streams and self.duration_s is None:
            raise ValueError("duration_s is required with streams")
        names = [stream.name for stream in self.streams]
        if len(set(names)) != len(names):
            raise ValueError("stream names must be unique")
        assert set(self.signals) <= set(SIGNALS)
        return self
