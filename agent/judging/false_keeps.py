"""How often the keep rule keeps a change that does nothing, and so how many of a night's keeps to expect from
luck alone.

The rule's own code (agent/judging/noise.py judge, with its re-run of a close call) is run on draws where the
candidate's runs and the best's come from the same distribution, in units of sigma: the share it keeps is the
false-keep rate of one experiment, and the night's experiments times that share its expected false keeps. The
draws are seeded and few (NULL_DRAWS): the rate is good to about half a percentage point.
"""

from __future__ import annotations

import functools
import random

from agent.judging.noise import CLOSE, KEEP, judge

NULL_DRAWS = 4000


@functools.lru_cache(maxsize=32)
def null_keep_rate(keep_sigmas: float, min_delta_in_sigmas: float, best_runs: int, measured: bool = True) -> float:
    """The share of do-nothing changes the rule keeps against a best measured on best_runs runs; measured: whether
    a noise floor gave it a sigma (without one the rule is a bare gain > min_delta)."""
    draw, kept, sigma = random.Random(0), 0, 1.0 if measured else None
    for _ in range(NULL_DRAWS):
        best = [draw.gauss(0.0, 1.0) for _ in range(max(1, best_runs))]
        runs = [draw.gauss(0.0, 1.0)]
        judged = judge(runs, best, sigma, keep_sigmas, min_delta_in_sigmas)
        if judged.status == CLOSE:
            judged = judge([*runs, draw.gauss(0.0, 1.0)], best, sigma, keep_sigmas, min_delta_in_sigmas)
        kept += judged.status == KEEP
    return kept / NULL_DRAWS


def expected_false_keeps_words(judged: list[tuple[int, float | None]], keep_sigmas: float, min_delta: float) -> str:
    """One sentence: the rule's false-keep rate and what it makes of this night's experiments, each judged against
    a best of its own number of runs with its own sigma (judged: (best's runs, sigma) per experiment)."""
    floored = [(runs, sigma) for runs, sigma in judged if sigma]
    if len(floored) < len(judged) and min_delta > 0:
        return ("Without a noise floor the rule is a bare gain above min_delta: how often that keeps a change that "
                "does nothing depends on a noise no run measured")
    rates = [null_keep_rate(keep_sigmas, min_delta / sigma if sigma else 0.0, runs, bool(sigma))
             for runs, sigma in judged]
    rule = (f"a change that does nothing is kept {100 * null_keep_rate(keep_sigmas, 0.0, 3):.1f}% of the time "
            "against a best of 3 runs, more against fewer" if floored or not judged else
            "without a noise floor a change that does nothing is kept about half the time")
    return (f"Under this rule {rule} (the rule's own code on {NULL_DRAWS:,} seeded draws of pure noise): over this "
            f"night's {len(judged)} judged experiment(s), each against the runs its best had then, about "
            f"{sum(rates):.1f} keep(s) are expected from luck alone")
