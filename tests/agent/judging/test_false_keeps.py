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
    said = expected_false_keeps_words([(1, None)] * 40, 2.0, 0.0)
    assert "without a noise floor a change that does nothing is kept about half the time" in said
    assert "about 20.2 keep(s) are expected from luck alone" in said


def test_each_experiment_counts_against_the_runs_its_best_had():
    """A best of one run (a fresh keep before the next floor) lets nearly twice as much noise through as three."""
    assert null_keep_rate(2.0, 0.0, 1) > 1.5 * null_keep_rate(2.0, 0.0, 3)
    said = expected_false_keeps_words([(3, 0.01)] * 10 + [(1, 0.01)] * 10, 2.0, 0.0)
    expected = 10 * (null_keep_rate(2.0, 0.0, 3) + null_keep_rate(2.0, 0.0, 1))
    assert "over this night's 20 judged experiment(s)" in said and f"about {expected:.1f} keep(s)" in said
