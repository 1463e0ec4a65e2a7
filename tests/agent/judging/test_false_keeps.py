"""How often the keep rule keeps a change that does nothing: the simulation of the rule's own code against the
rule worked out in closed form, and the sentence the report states."""

import math

import pytest
from scipy.stats import multivariate_normal, norm

from agent.judging.false_keeps import NULL_DRAWS, expected_false_keeps_words, null_keep_rate


def keep_rate_in_closed_form(k: float, m: int) -> float:
    """One run against a best of m runs, all N(0, 1): kept when its gain g1 > k; a close call (0 < g1 <= k) is
    re-run and kept when the mean's gain g2 > k sqrt(1/2 + 1/m). (g1, g2) is bivariate normal."""
    var1, var2, cov = 1 + 1 / m, 1 / 2 + 1 / m, 1 / 2 + 1 / m
    t = k * math.sqrt(1 / 2 + 1 / m)
    both = multivariate_normal(mean=[0, 0], cov=[[var1, cov], [cov, var2]])

    def above(a: float, b: float) -> float:  # P(g1 > a, g2 > b)
        return 1 - norm.cdf(a, scale=math.sqrt(var1)) - norm.cdf(b, scale=math.sqrt(var2)) + both.cdf([a, b])

    return (1 - norm.cdf(k, scale=math.sqrt(var1))) + above(0, t) - above(k, t)


@pytest.mark.parametrize(("k", "m"), [(2.0, 3), (2.0, 5), (3.0, 3), (1.0, 3)])
def test_the_simulated_rule_keeps_pure_noise_as_often_as_the_closed_form_says(k, m):
    expected = keep_rate_in_closed_form(k, m)
    spread = math.sqrt(expected * (1 - expected) / NULL_DRAWS)
    assert abs(null_keep_rate(k, 0.0, m) - expected) < 4 * spread + 1e-3, (null_keep_rate(k, 0.0, m), expected)


def test_without_a_noise_floor_half_of_all_do_nothing_changes_are_kept():
    assert null_keep_rate(2.0, 0.0, 1, measured=False) == pytest.approx(0.5, abs=0.03)
    said = expected_false_keeps_words(40, 2.0, 0.0, None, 0)
    assert said.startswith("Under this rule a change that does nothing is kept 50") and "about 20.2 keep(s)" in said
