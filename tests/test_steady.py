"""analysis.runs.steady: the median's interval of a long run, exact against the binomial it stands on."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from fractions import Fraction
from math import comb

import pytest
from scipy.stats import binom

from analysis.runs.steady import CONFIDENCE, median_rank, steady

TAIL = (1 - CONFIDENCE) / 2


@contextlib.contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Ends a computation that does not end: not a timing (the answers below take milliseconds; summing
    math.comb(n, j) / 2**n from j = 0 took 28 s at n = 20,000, hours at 10,000,000)."""

    def stop(*_: object) -> None:
        raise TimeoutError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def exact_rank(n: int) -> int:
    """The least j with P(B <= j) > TAIL, B ~ Binomial(n, 1/2), in whole numbers."""
    bound, total = Fraction(TAIL) * 2**n, 0
    for j in range(n + 1):
        total += comb(n, j)
        if total > bound:
            return j
    raise AssertionError("unreachable: P(B <= n) = 1")


def test_the_rank_is_exact_for_every_count_up_to_400() -> None:
    assert [median_rank(n) for n in range(400)] == [exact_rank(n) for n in range(400)]
    assert [median_rank(n) for n in (5, 6, 10, 20, 100)] == [0, 1, 2, 6, 40]


@pytest.mark.parametrize("n", [100_000, 1_000_000, 10_000_000])
def test_the_rank_of_a_long_run_is_the_binomial_quantile(n: int) -> None:
    with hang_guard(30):
        k = median_rank(n)
    assert binom.cdf(k - 1, n, 0.5) <= TAIL < binom.cdf(k, n, 0.5)


def test_the_interval_of_100000_steps() -> None:
    with hang_guard(30):
        s = steady(range(1, 100_001))
    assert median_rank(100_000) == 49_690
    assert (s.count, s.median_ns, s.ci_low_ns, s.ci_high_ns) == (100_000, 50_000.5, 49_690.0, 50_311.0)


def test_one_value_has_no_standard_deviation() -> None:
    """A sample standard deviation needs two values: one step's is undefined (None), not 0."""
    assert steady([5.0]).std_ns is None
    assert steady([1.0, 3.0]).std_ns == pytest.approx(2**0.5)
