"""Progress plots (matplotlib, rendered off-screen to PNG bytes)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from agent.recording.history import History  # noqa: E402
from agent.recording.record import ExperimentRecord, ExperimentStatus  # noqa: E402

LABEL_CHARS = 38


def _experiments(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    return [r for r in records if r.is_experiment]


def _running_best(records: list[ExperimentRecord]) -> tuple[list[int], list[float]]:
    xs, ys, best = [], [], None
    for i, r in enumerate(_experiments(records)):
        if r.status == ExperimentStatus.KEEP and r.val_bpb is not None:
            best = r.val_bpb if best is None else min(best, r.val_bpb)
        if best is not None:
            xs.append(i)
            ys.append(best)
    return xs, ys


def progress_png(records: list[ExperimentRecord], title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    sigma, records = History(records).sigma(), _experiments(records)
    valued = [(i, r) for i, r in enumerate(records) if r.val_bpb is not None]
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
        for i, r in keeps:
            ax.annotate(r.description[:LABEL_CHARS], (i, r.val_bpb), textcoords="offset points",
                        xytext=(6, 6), fontsize=7.5, color="#1f6f43", rotation=12)
    xs, ys = _running_best(records)
    if xs:
        ax.step(xs, ys, where="post", color="#1f9d55", linewidth=1.6, label="best so far")
        if sigma:
            ax.fill_between(xs, [y - 2 * sigma for y in ys], [y + 2 * sigma for y in ys], step="post",
                            color="#1f9d55", alpha=0.12, label=f"best ± 2 sigma (sigma {sigma:.4f})")
    crashes = [i for i, r in enumerate(records) if r.status in (ExperimentStatus.CRASH, ExperimentStatus.INTERRUPTED)]
    if crashes:
        values = [v for _, r in valued for v in [r.val_bpb]]
        low = min(values) if values else 0.0
        ax.scatter(crashes, [low] * len(crashes), marker="x", color="#d64545", s=30, label="crashed", zorder=3)
    ax.set_xlabel("experiment")
    ax.set_ylabel("val_bpb (lower is better)")
    ax.set_title(title)
    ax.grid(alpha=0.25)
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


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
    return _png(fig)


def _png(fig) -> bytes:
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
