"""Which attention kernel the runs trained with, as each run's summary says, for the person reading the night.

A profile on a Hopper GPU asks for FlashAttention-3; when no build of it loads (no kernel in the hub cache, a build
that disagrees with the reference), train.py trains with FlexAttention instead and says which builds it passed
over. Such a night is slower than the reference's and its numbers are not comparable to FA3's, so the fall-back is
said in `status`, the report and a notification, never left silent. It is the run's own word about itself: it
decides nothing and reaches no proposer.
"""

from __future__ import annotations

from typing import Any

from agent.untrusted import bounded

REASON_CHARS = 300


def attention_fallback(summary: dict[str, Any]) -> str | None:
    """What a run trained with instead of FlashAttention-3 and why, when it asked for it and none loaded."""
    used = str(summary.get("attention") or "")
    passed_over = str(summary.get("attention_skipped") or "none")
    if not used or used.startswith("fa3") or passed_over == "none":
        return None
    return f"trained with {bounded(used, 40)}: no FlashAttention-3 build loaded ({bounded(passed_over, REASON_CHARS)})"


def fallback_line(records: list) -> str | None:
    """One line on the experiments that fell back (how many, the latest and why), or None when none did."""
    fell_back = [(r.id, why) for r in records if (why := attention_fallback(r.summary))]
    if not fell_back:
        return None
    latest, why = fell_back[-1]
    return (f"attention: {len(fell_back)} experiment(s) trained without the FlashAttention-3 their profile asks "
            f"for, so slower than the reference and not comparable to its numbers; latest {latest}: {why}")
