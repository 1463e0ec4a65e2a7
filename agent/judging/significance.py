"""How sure a verdict is: the gain of a candidate over the best in standard errors (z) and the one-sided
p-value of a gain that large when the change did nothing (normal approximation).

The standard error is that of the difference of two means of runs with the same sigma:
SE = sigma x sqrt(1/n_candidate + 1/n_best); one run against the best's runs is the same formula with
n_candidate = 1.
"""

from __future__ import annotations

import math


def standard_error(sigma: float, candidate_runs: int, best_runs: int) -> float:
    return sigma * math.sqrt(1 / candidate_runs + 1 / best_runs)


def z_score(gain: float, sigma: float | None, candidate_runs: int, best_runs: int) -> float | None:
    """gain / SE, None where there is no sigma (or no runs) to measure it by."""
    if not sigma or candidate_runs < 1 or best_runs < 1:
        return None
    return gain / standard_error(sigma, candidate_runs, best_runs)


def one_sided_p(z: float) -> float:
    """P(Z > z) for a standard normal Z: 1 - Phi(z)."""
    return 0.5 * math.erfc(z / math.sqrt(2))
