"""Progress plots (matplotlib, rendered off-screen to PNG bytes)."""

from __future__ import annotations

import io
from itertools import accumulate

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from agent.recording.history import History  # noqa: E402
from agent.recording.record import ExperimentRecord, ExperimentStatus  # noqa: E402

LABEL_CHARS = 38


def _numbered(records: list[ExperimentRecord]) -> list[tuple[int, ExperimentRecord]]:
    """The experiments, each at the number its id carries (landing order differs where slots ran in parallel),
    sorted by it; an id without a number goes at its place in the ledger."""
    return sorted(((int(r.id) if r.id.isdigit() else i, r) for i, r in enumerate(History(records).experiments())),
                  key=lambda pair: pair[0])


def _running_best(records: list[ExperimentRecord]) -> tuple[list[int], list[float]]:
    xs, ys, best = [], [], None
    for i, r in _numbered(records):
        if r.status == ExperimentStatus.KEEP and r.val_bpb is not None:
            best = r.val_bpb if best is None else min(best, r.val_bpb)
        if best is not None:
            xs.append(i)
            ys.append(best)
    return xs, ys


def progress_png(records: list[ExperimentRecord], title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    sigma, numbered = History(records).sigma(), _numbered(records)
    valued = [(i, r) for i, r in numbered if r.val_bpb is not None]
    not_kept: dict[str, list[tuple[int, float]]] = {}  # by status: discard, and any other a record carries
    for i, r in valued:
        if r.status != ExperimentStatus.KEEP:
            not_kept.setdefault(str(r.status), []).append((i, r.val_bpb))
    keeps = [(i, r) for i, r in valued if r.status == ExperimentStatus.KEEP]
    for status, points in sorted(not_kept.items()):
        style = (dict(color="#9aa5b1", label="discarded") if status == ExperimentStatus.DISCARD.value
                 else dict(color="#b7791f", marker="^", label=status))
        ax.scatter(*zip(*points, strict=True), s=18, alpha=0.5, **style)
    if keeps:
        ax.scatter([i for i, _ in keeps], [r.val_bpb for _, r in keeps], s=46, color="#1f9d55", zorder=3,
                   label="kept")
        last = max(i for i, _ in valued)
        for i, r in keeps:
            near_end = last > 0 and i > 0.75 * last  # a label there runs to the left, inside the axes
            ax.annotate(r.description[:LABEL_CHARS], (i, r.val_bpb), textcoords="offset points",
                        xytext=(-6 if near_end else 6, 6), ha="right" if near_end else "left", fontsize=7.5,
                        color="#1f6f43", rotation=12)
    xs, ys = _running_best(records)
    if xs:
        ax.step(xs, ys, where="post", color="#1f9d55", linewidth=1.6, label="best so far")
        if sigma:
            ax.fill_between(xs, [y - 2 * sigma for y in ys], [y + 2 * sigma for y in ys], step="post",
                            color="#1f9d55", alpha=0.12, label=f"best ± 2 sigma (sigma {sigma:.4f})")
    crashes = [i for i, r in numbered if r.status in (ExperimentStatus.CRASH, ExperimentStatus.INTERRUPTED)]
    if crashes:
        low = min((r.val_bpb for _, r in valued), default=0.0)
        ax.scatter(crashes, [low] * len(crashes), marker="x", color="#d64545", s=30, label="crashed", zorder=3)
    ax.set_xlabel("experiment id")
    ax.set_ylabel("val_bpb (lower is better)")
    ax.set_title(title)
    ax.grid(alpha=0.25)
    ax.legend(loc="upper right", fontsize=8)
    return png_bytes(fig)


def reference_progress_png(records: list[ExperimentRecord], title: str) -> bytes:
    """val_bpb per experiment drawn as the reference's analysis notebook draws it (analysis.ipynb of
    github.com/karpathy/autoresearch, read 2026-12-05): crashes left out and the rest numbered in order, only
    points up to just above the baseline, discards as faint grey dots, keeps as green dots joined by the running
    best's step line, each keep labelled with its description."""
    fig, ax = plt.subplots(figsize=(16, 8), dpi=110)
    experiments = History(records).experiments()
    valid = [r for r in experiments if r.val_bpb is not None
             and r.status not in (ExperimentStatus.CRASH, ExperimentStatus.INTERRUPTED)]
    kept = [(i, r.val_bpb, r.description) for i, r in enumerate(valid) if r.status == ExperimentStatus.KEEP]
    if valid:
        ceiling = valid[0].val_bpb + 0.0005
        discarded = [(i, r.val_bpb) for i, r in enumerate(valid)
                     if r.status != ExperimentStatus.KEEP and r.val_bpb <= ceiling]
        if discarded:
            ax.scatter(*zip(*discarded, strict=True), c="#cccccc", s=12, alpha=0.5, zorder=2, label="Discarded")
    if kept:
        if shown := [(i, bpb) for i, bpb, _ in kept if bpb <= ceiling]:
            ax.scatter(*zip(*shown, strict=True), c="#2ecc71", s=50, zorder=4, label="Kept", edgecolors="black",
                       linewidths=0.5)
        running = list(accumulate((bpb for _, bpb, _ in kept), min))
        best = running[-1]
        ax.step([i for i, _, _ in kept], running, where="post", color="#27ae60", linewidth=2, alpha=0.7, zorder=3,
                label="Running best")
        for i, bpb, description in kept:
            label = description.strip()
            ax.annotate(label if len(label) <= 45 else label[:42] + "...", (i, bpb), textcoords="offset points",
                        xytext=(6, 6), fontsize=8.0, color="#1a7a3a", alpha=0.9, rotation=30, ha="left",
                        va="bottom")
        margin = (valid[0].val_bpb - best) * 0.15
        if margin > 0:
            ax.set_ylim(best - margin, valid[0].val_bpb + margin)
    ax.set_xlabel("Experiment #", fontsize=12)
    ax.set_ylabel("Validation BPB (lower is better)", fontsize=12)
    ax.set_title(f"Autoresearch Progress: {len(experiments)} Experiments, {max(len(kept) - 1, 0)} Kept Improvements "
                 f"besides the baseline\n{title}", fontsize=14)
    ax.legend(loc="upper right", fontsize=9)
    ax.grid(True, alpha=0.2)
    return png_bytes(fig)


PLOT_STYLES = {"ours": progress_png, "reference": reference_progress_png}


def comparison_png(runs: dict[str, list[ExperimentRecord]]) -> bytes:
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    for tag, records in runs.items():
        xs, ys = _running_best(records)
        if xs:
            ax.step(xs, ys, where="post", linewidth=1.8, label=f"{tag} (best {min(ys):.6f})")
    ax.set_xlabel("experiment")
    ax.set_ylabel("best val_bpb so far")
    ax.set_title("runs compared")
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8)
    return png_bytes(fig)


def png_bytes(fig, integer_x: bool = True) -> bytes:
    if integer_x:  # experiment numbers; the time line's x is minutes
        for ax in fig.axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
