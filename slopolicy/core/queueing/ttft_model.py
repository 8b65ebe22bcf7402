"""The engine's time to a first token, as a function of the prompt work around a start.

:class:`FirstTokenModel` fits, by exponentially weighted least squares over
started requests' observed dispatch-to-first-token times,

    engine TTFT = floor + ahead / rate + quadratic · squares + blocking · shadow

- ``ahead``: prompt tokens the engine computes before this request's first
  token (the prompts handed over before it and not yet through prefill,
  its own included; see :mod:`slopolicy.core.queueing.ttft`);
- ``squares``: the sum of those prompts' squared lengths, in millions of
  tokens². Attention makes a prompt's prefill grow with its square (each
  token attends to those before it), which a rate alone reads as a slower
  engine for long prompts and a faster one for short;
- ``shadow``: seconds of prefill the *later* lanes' prompts in prefill have
  left, each as its own lane's model puts it (its prefill time less the
  time since it started). An engine that honours priorities still finishes
  a running prefill first, and one without a cap on a request's chunk per
  iteration (vLLM's default ``long_prefill_token_threshold`` 0) gives a
  long prompt whole iterations, so a request started beside it waits for
  it. ``blocking`` (a share, 0 to 1) measures how much: near 1 on
  such an engine, near 0 on one that interleaves long prompts with other
  work.

Terms the data cannot support (no squares or no shadow varies, or a fitted
coefficient below 0) are left out and the rest refitted, so a lane that
never started in another's shadow fits the others alone (``shadowed`` says
whether the shadow has varied, so ``blocking`` is measured). Where either
optional term alone would hold, the one with the smaller residual is kept,
not the first in a fixed order. ``blocking`` is
held at 1 where a free fit would put it above (a start cannot wait for more
of the later lanes' prefill than there is: a few starts that waited on
something else, a full engine, read as blocking otherwise, and every start
in a short shadow would then look lost), and the other terms are fitted to
what the shadow leaves of each TTFT. Until the fit measures ``blocking``,
:attr:`FirstTokenModel.waited_share` stands in for it: of the shadows the
starts in one had, the share they waited for (a start waited when its TTFT
passed the engine's unhindered TTFT by half its shadow or more, which the
errors of two provisional readings do not turn over). It needs no engine
profile: every term follows the engine as decode load, prompt mix and
hardware change. Sans-IO: callers pass observed seconds.
"""

from __future__ import annotations

import math
from itertools import combinations

from slopolicy.errors import UsageError

__all__ = ("FirstTokenModel",)

#: Squared prompt lengths are counted in millions of tokens², which keeps
#: every sum the fit keeps within a few orders of magnitude of the others.
SQUARES_UNIT = 1e6

# Regressors, by index into the fit's sums: ahead, squares, shadow.
_AHEAD, _SQUARES, _SHADOW = 0, 1, 2
# Where :meth:`FirstTokenModel._solved` puts the residual variance.
_RESIDUAL = -1
_OPTIONAL = (_SQUARES, _SHADOW)


class FirstTokenModel:
    """Engine TTFT from the prompt work around a start, fitted online (see the module).

    Args:
        half_life: observations after which an old one weighs half.
        min_samples: observations before the model answers.
    """

    __slots__ = (
        "_decay",
        "_n",
        "_sums",
        "_waited",
        "blocking",
        "floor",
        "min_samples",
        "quadratic",
        "r2",
        "rate",
        "shadowed",
        "spread",
    )

    def __init__(self, *, half_life: float = 256.0, min_samples: int = 32) -> None:
        if not (isinstance(half_life, int | float) and 1 <= half_life < float("inf")):
            raise UsageError(f"half_life must be a finite number >= 1, got {half_life!r}")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise UsageError(f"min_samples must be an int >= 2, got {min_samples!r}")
        self._decay = 0.5 ** (1.0 / half_life)
        self.min_samples = min_samples
        #: The fitted floor (seconds), rate (prompt tokens per second),
        #: quadratic (seconds per million tokens² of squared prompts) and
        #: blocking (the share of later lanes' prefill left that holds a start
        #: up, 0 to 1); the
        #: standard deviation of the fit's residuals (seconds) and its R².
        #: ``None``/0 until ``min_samples`` observations of different sizes
        #: give a positive rate.
        self.floor: float | None = None
        self.rate: float | None = None
        self.quadratic = 0.0
        self.blocking = 0.0
        #: Whether the fit has seen the shadow vary, so ``blocking`` is
        #: measured (0 included); until then it reads 0, which keeps
        #: requests (see :mod:`slopolicy.core.queueing.interference` for
        #: the price's prior).
        self.shadowed = False
        self.spread = 0.0
        self.r2 = 0.0
        self._n = 0
        # Weighted sums: [w, Σx_j (3), Σy, Σx_j·x_k (upper triangle, 6), Σx_j·y (3), Σy²].
        self._sums = [0.0] * 15
        # Σ of what the starts in a shadow waited of it (see ``waited_share``).
        self._waited = 0.0

    def observe(
        self,
        ahead: int,
        seconds: float,
        *,
        squares: float = 0.0,
        shadow: float = 0.0,
        unhindered: float | None = None,
    ) -> None:
        """A request started with ``ahead`` prompt tokens ahead of its first
        token (its own included), whose squared lengths sum to ``squares``
        (tokens²), and ``shadow`` seconds of later lanes' prefill left, had
        it ``seconds`` after it was handed over; ``unhindered``: the TTFT
        the engine would have given it with no shadow (seconds; ``None``:
        unknown, taken as 0), which :attr:`waited_share` reads."""
        if seconds < 0:
            return
        d, s = self._decay, self._sums
        if shadow > 0.0:
            waited = shadow if seconds - (unhindered or 0.0) >= 0.5 * shadow else 0.0
            self._waited = d * self._waited + waited
        else:
            self._waited *= d
        x = (float(ahead), squares / SQUARES_UNIT, shadow)
        y = seconds
        terms = (
            1.0,
            *x,
            y,
            *(x[j] * x[k] for j in range(3) for k in range(j, 3)),
            *(xj * y for xj in x),
            y * y,
        )
        for i, term in enumerate(terms):
            s[i] = d * s[i] + term
        self._n += 1
        if self._n >= self.min_samples:
            self._fit()

    def expected(self, ahead: int, *, squares: float = 0.0, shadow: float = 0.0) -> float | None:
        """The engine TTFT expected of a request started now with ``ahead``
        tokens ahead (its own included), ``squares`` their squared lengths
        summed (tokens²) and ``shadow`` seconds of later lanes' prefill left,
        in seconds; ``None`` while the model is not fitted."""
        computed, floor = self.compute(ahead, squares=squares), self.floor
        if computed is None or floor is None:
            return None
        return floor + computed + self.blocking * shadow

    def compute(self, ahead: int, *, squares: float = 0.0) -> float | None:
        """Seconds the engine computes ``ahead`` prompt tokens in, ``squares``
        their squared lengths summed (tokens²): the rate and quadratic terms of
        :meth:`expected`, without the floor or a shadow (``None``: not fitted)."""
        rate = self.rate
        if rate is None:
            return None
        return ahead / rate + self.quadratic * squares / SQUARES_UNIT

    def optimistic(self, ahead: int, *, squares: float = 0.0, shadow: float = 0.0) -> float | None:
        """:meth:`expected` less one standard deviation of the residuals: a
        TTFT the engine beats about one time in six (``None``: not fitted)."""
        expected = self.expected(ahead, squares=squares, shadow=shadow)
        return None if expected is None else expected - self.spread

    def prefill(self, prompt_tokens: int) -> float | None:
        """Seconds the engine takes to a first token for one prompt of
        ``prompt_tokens`` with nothing else ahead (``None``: not fitted)."""
        return self.expected(prompt_tokens, squares=float(prompt_tokens) ** 2)

    def provisional(self, prompt_tokens: int) -> float | None:
        """:meth:`prefill` before the model is fitted: ``prompt_tokens`` at the
        seconds per token ahead of the observations so far, weighted like the
        fit (``None`` before the first). It counts the floor per token and
        leaves attention's square out (too long for short prompts, too short
        for the longest), and it is there from the first observation."""
        ahead = self._sums[1]
        return None if ahead <= 0.0 else prompt_tokens * self._sums[4] / ahead

    @property
    def measured(self) -> bool:
        """Whether the fit measures ``blocking`` (fitted, with the shadow varying)."""
        return self.floor is not None and self.shadowed

    @property
    def waited_share(self) -> float | None:
        """``blocking`` before the fit measures it: of the shadows the starts
        observed in one had (seconds, weighted like the fit), the share they
        waited for, 0 to 1. A start counts its whole shadow as waited when
        its TTFT passed its unhindered TTFT by half the shadow or more, and
        none of it otherwise. ``None`` before the first start in a shadow.
        It reads an engine that interleaves from its first such starts,
        where the fit needs shadows of many lengths."""
        shadows = self._sums[_SHADOW + 1]
        return None if shadows <= 0.0 else min(1.0, self._waited / shadows)

    @property
    def beside(self) -> bool:
        """Whether a start this model observed had a later lane's prefill
        left beside it (a shadow over 0), however few: the lane has been put
        to the test (``blocking`` is measured later, once the shadow varies)."""
        return self._sums[_SHADOW + 1] > 0.0

    def _fit(self) -> None:
        s = self._sums
        w = s[0]
        mean = [s[1 + j] / w for j in range(3)]
        mean_y = s[4] / w
        pairs = iter(s[5:11])
        cov = [[0.0] * 3 for _ in range(3)]
        for j in range(3):
            for k in range(j, 3):
                cov[j][k] = cov[k][j] = next(pairs) / w - mean[j] * mean[k]
        cov_y = [s[11 + j] / w - mean[j] * mean_y for j in range(3)]
        var_y = s[14] / w - mean_y * mean_y
        # A regressor must vary (a relative spread of 1% at least) to mean
        # anything; without ahead varying the last fit stays.
        varies = [cov[j][j] > (0.01 * mean[j]) ** 2 for j in range(3)]
        if not varies[_AHEAD] or var_y <= 0:
            return
        usable = [j for j in _OPTIONAL if varies[j]]
        for count in range(len(usable), -1, -1):
            # Of the fits with this many terms that hold, the closest: a
            # term the data cannot support is left out, not a better one.
            fits = (self._held(extra, cov, cov_y, var_y) for extra in combinations(usable, count))
            found = min(
                (fit for fit in fits if fit is not None),
                key=lambda fit: fit[_RESIDUAL],
                default=None,
            )
            if found is None:
                continue
            explained = var_y - found.pop(_RESIDUAL)
            self.rate = 1.0 / found[_AHEAD]
            self.quadratic = found.get(_SQUARES, 0.0)
            self.blocking = found.get(_SHADOW, 0.0)
            self.shadowed = varies[_SHADOW]
            self.floor = max(0.0, mean_y - sum(b * mean[j] for j, b in found.items()))
            self.r2 = min(1.0, max(0.0, explained / var_y))
            self.spread = math.sqrt(max(0.0, var_y - explained))
            return

    def _held(
        self,
        extra: tuple[int, ...],
        cov: list[list[float]],
        cov_y: list[float],
        var_y: float,
    ) -> dict[int, float] | None:
        """The fit of the rate and ``extra`` (see :meth:`_solved`), with
        ``blocking`` held at 1 where a free fit puts it above."""
        found = self._solved((_AHEAD, *extra), cov, cov_y, var_y)
        if found is None or found.get(_SHADOW, 0.0) <= 1.0:
            return found
        # A start cannot wait for more of the later lanes' prefill than there
        # is left: a fit above 1 reads outliers (or a shadow that ran long)
        # as blocking. Hold it at 1 and fit the rest to what the shadow leaves
        # of each TTFT (the quadratic term too, where it holds).
        cov_rest = [cov_y[j] - cov[j][_SHADOW] for j in range(3)]
        var_rest = var_y - 2.0 * cov_y[_SHADOW] + cov[_SHADOW][_SHADOW]
        kept = (_AHEAD, *(j for j in extra if j != _SHADOW))
        for rest in dict.fromkeys((kept, (_AHEAD,))):
            held = self._solved(rest, cov, cov_rest, var_rest)
            if held is not None:
                held[_SHADOW] = 1.0
                return held
        return None

    @staticmethod
    def _solved(
        terms: tuple[int, ...], cov: list[list[float]], cov_y: list[float], var_y: float
    ) -> dict[int, float] | None:
        """The least-squares coefficients of ``terms`` for a response of
        covariances ``cov_y`` with the regressors and variance ``var_y``, and
        the residual variance under ``_RESIDUAL``; ``None`` when they cannot
        be told apart, the first (``ahead``: the rate) is not positive or
        another is negative."""
        # Solved on standardized regressors (a correlation matrix), so
        # terms of very different magnitudes compare fairly.
        sd = {j: math.sqrt(cov[j][j]) for j in terms}
        found = _solve(
            [[cov[j][k] / (sd[j] * sd[k]) for k in terms] for j in terms],
            [cov_y[j] / sd[j] for j in terms],
        )
        if found is None or found[0] <= 0 or any(b < 0 for b in found[1:]):
            return None
        coef = {j: b / sd[j] for j, b in zip(terms, found, strict=True)}
        coef[_RESIDUAL] = var_y - sum(b * cov_y[j] for j, b in coef.items())
        return coef


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """``matrix⁻¹ · vector`` for a correlation matrix of up to 3x3 by
    Gaussian elimination; ``None`` when it is (nearly) singular: regressors
    so correlated that their coefficients cannot be told apart."""
    n = len(vector)
    a = [[*row, value] for row, value in zip(matrix, vector, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) <= 1e-6:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for row in range(col + 1, n):
            factor = a[row][col] / a[col][col]
            for k in range(col, n + 1):
                a[row][k] -= factor * a[col][k]
    out = [0.0] * n
    for row in range(n - 1, -1, -1):
        out[row] = (a[row][n] - sum(a[row][k] * out[k] for k in range(row + 1, n))) / a[row][row]
    return out
