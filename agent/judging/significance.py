"""How sure a verdict is: the gain of a candidate over the best in standard errors (z) and the one-sided
p-value of a gain that large when the change did nothing. sigma is estimated from a noise floor of a few runs,
so z follows Student's t with that floor's degrees of freedom (runs - 1), whose tail is far heavier than the
normal's at 2 or 4: z 2.01 on 2 degrees of freedom is p 0.09, not the normal's 0.022. Without them (a record
judged before they were stored) the normal tail is used and said.

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


def one_sided_p(z: float, df: int | None = None) -> float:
    """P(T > z) for Student's t with df degrees of freedom; the standard normal's tail without df."""
    if df is not None and df >= 1:
        from scipy.stats import t
        return float(t.sf(z, df))
    return 0.5 * math.erfc(z / math.sqrt(2))
