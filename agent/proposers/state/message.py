"""The first message of a proposal: the whole night in bounded space.

train.py at the best commit comes first (the same for every proposal until the next keep, so a
provider's prefix cache can reuse it), then the state: the track, hardware and budget left, the best
run's numbers, every keep with its hypothesis and lesson, how many changes were new values or new code
and how each kind fared, the rest of the night grouped by what the diffs touched, the last few
experiments in full, the lesson that is due (and a code change, when too few recent ones were), and the
research notes.
Every part has a size limit, so the state stays under STATE_TOKEN_BUDGET however long the night.
"""

from __future__ import annotations

import math

from agent.proposers.base import ProposalContext
from agent.proposers.logview import prompt_tail
from agent.proposers.state.groups import delta, group_by_part
from agent.recording.history import History
from agent.recording.notes import NOTES_LIMIT, Notes
from agent.recording.novelty_share import recent_algorithmic_share, tally
from agent.recording.record import SIMPLIFY, ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import clip, lesson_due, lessons_by_id, proposed, reasoning

STATE_TOKEN_BUDGET = 6000
LAST_IN_FULL = 5
FULL_KEEPS = 12        # the newest keeps shown with hypothesis and lesson
COMPACT_KEEPS = 16     # the keeps before them, one short line each
MAX_GROUPS = 25
LOG_TAIL_LINES = 40
LLM = "llm"            # the proposer name the LLM's experiments are recorded under, alone or in hybrid
CODE_CHANGE_ASKED = "Code change asked for:"
BEST_RUN_KEYS = ("num_steps", "tokens_per_second", "peak_vram_mb", "mfu_percent", "training_seconds")


def state_message(context: ProposalContext, notes: Notes, algorithmic_share: float | None = None) -> list[str]:
    return [f"train.py at the best commit (read_file gives the same):\n```python\n{context.train_source}```",
            night_state(context, notes, algorithmic_share)]


def night_state(context: ProposalContext, notes: Notes, algorithmic_share: float | None = None) -> str:
    """algorithmic_share: the share of code changes wanted among the LLM's recent experiments; below it, the
    message asks for one."""
    records = context.history
    lessons = lessons_by_id(records)
    experiments = [r for r in records if proposed(r)]
    recent = experiments[-LAST_IN_FULL:]
    earlier = experiments[: len(experiments) - len(recent)]
    sections = [header(context), keeps_section(records, lessons), kinds_section(records)]
    if earlier:
        sections.append(groups_section(earlier))
    if recent:
        sections.append("The last experiments in full (newest last; delta is val_bpb minus the best's then):\n"
                        + "\n".join(in_full(r, lessons) for r in recent))
    due = lesson_due(records, [r.id for r in context.running])
    sections += [last_outcome(context), notes_section(notes),
                 closing(context, due, code_change_request(records, algorithmic_share))]
    return "\n\n".join(s for s in sections if s)


def kinds_section(records: list[ExperimentRecord]) -> str:
    kinds = tally(records)
    return ("Kinds of change so far (hyperparameter: only UPPER_CASE values changed; algorithmic: the code "
            "changed): " + "; ".join(kind.line() for kind in kinds) + ".") if kinds else ""


def code_change_request(records: list[ExperimentRecord], wanted: float | None) -> str:
    """The line asking for a code change when too few of the LLM's recent experiments were one; else empty."""
    share = recent_algorithmic_share(records, LLM) if wanted is not None else None
    if share is None or share >= wanted:
        return ""
    return (f"{CODE_CHANGE_ASKED} only {share:.0%} of your last experiments changed the code (the run asks for at "
            f"least {wanted:.0%}). Propose an algorithmic change this time (architecture, optimizer, schedule, data "
            "path), not a new hyperparameter value.")


def header(context: ProposalContext) -> str:
    track, best = context.track, context.best
    constants = ", ".join(f"{k}={v}" for k, v in track.constants.model_dump(exclude_unset=True).items())
    summary = {key: said_number(value) for key, value in best.summary.items()}
    memory = summary.get("device_memory_mb")
    runs = best.measured
    hardware = best.hardware.name if best.hardware else None  # the harness's reading, not what the run printed
    lines = [f"Track {track.track} (fingerprint {str(track.fingerprint or '')[:12]}): {constants}",
             f"Hardware: {hardware or 'unknown device'}"
             + (f", {float(memory) / 1024:.1f} GiB of memory" if memory and float(memory) > 0 else
                ", memory not reported")
             + ". " + context.facts.budget_line(),
             f"Best so far: val_bpb {best.val_bpb:.6f}" + (f" (mean of {len(runs)} runs)" if len(runs) > 1 else "")
             + f" at commit {best.commit[:7]}, experiment {best.id}: {clip(best.description, 200)}",
             "Its run: " + ", ".join(f"{k} {summary.get(k) if summary.get(k) not in (None, '') else 'n/a'}"
                                     for k in BEST_RUN_KEYS)]
    if sigma := History(context.history).sigma():
        lines.append(f"Noise: sigma of val_bpb between seeds {sigma:.6f}; the fixed rules say what a keep needs.")
    return "\n".join(lines)


SAID_LIMIT = 1e9  # no step count, token rate, MiB or second count of a run reaches it


def said_number(value: str) -> str | None:
    """A summary value as the researcher is shown it: a number in [0, SAID_LIMIT) to 3 significant digits, else
    nothing. The summary is printed after the run's seal, where its forward had seen validation rows, so what it
    says can carry them: about 12 bits a field pass here, not 200 characters."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(number) and 0 <= number < SAID_LIMIT):
        return None
    rounded = float(f"{number:.3g}")
    return str(int(rounded)) if rounded.is_integer() else repr(rounded)


def keeps_section(records: list[ExperimentRecord], lessons: dict[str, str]) -> str:
    """Every keep: the newest FULL_KEEPS with hypothesis and lesson, the COMPACT_KEEPS before them on one short
    line each, and any older ones counted on one line."""
    if not (kept := [r for r in History(records).kept() if proposed(r)]):
        return "Keeps: none yet; the baseline is the best."
    full, compact = kept[-FULL_KEEPS:], kept[:-FULL_KEEPS][-COMPACT_KEEPS:]
    older = kept[: len(kept) - len(full) - len(compact)]
    lines = []
    if older:
        total = sum(-(delta(r) or 0.0) for r in older)
        lines.append(f"- {older[0].id}..{older[-1].id}: {len(older)} earlier keeps, {total:.4f} gained in all "
                     "(list_experiments with status keep lists them)")
    lines += [f"- {r.id} {_gain_label(r)} {clip(r.description, 48)}" for r in compact]
    for r in full:
        why = reasoning(r, lessons)
        lines.append(f"- {r.id} {_gain_label(r)} {clip(r.description, 80)}"
                     + (f" | why: {clip(why.hypothesis, 110)}" if why.hypothesis else "")
                     + (f" | learned: {clip(why.lesson, 110)}" if why.lesson else ""))
    return f"Every keep ({len(kept)}, oldest first; the number is val_bpb minus the best's before it):\n" + \
        "\n".join(lines)


def _gain_label(r: ExperimentRecord) -> str:
    d = delta(r)
    return SIMPLIFY if r.kept_as == SIMPLIFY else (f"{d:+.4f}" if d is not None else "kept")


def groups_section(earlier: list[ExperimentRecord]) -> str:
    groups = group_by_part(earlier)
    shown, rest = groups[:MAX_GROUPS], groups[MAX_GROUPS:]
    lines = [f"- {g.line()}" for g in shown]
    if rest:
        lines.append(f"- and {len(rest)} other part(s) touched once or twice: "
                     + ", ".join(g.part for g in rest[:20]))
    return (f"The {len(earlier)} earlier experiments, grouped by the part of train.py their diff touched (one "
            "experiment counts in every part it touched; best is the lowest val_bpb minus the best's then):\n"
            + "\n".join(lines))


def in_full(r: ExperimentRecord, lessons: dict[str, str]) -> str:
    why = reasoning(r, lessons)
    d = delta(r)
    value = f"val_bpb {r.val_bpb:.6f}" if r.val_bpb is not None else "no val_bpb"
    text = (f"- {r.id} {r.kept_as}" + (f" [{r.novelty}]" if r.novelty else "") + f" {value}"
            + (f" (delta {d:+.4f})" if d is not None else "") + f": {clip(r.description, 120)}")
    if why.hypothesis:
        text += f"\n  hypothesis: {clip(why.hypothesis, 160)}\n  expected: {clip(why.expected, 80)}"
    if why.lesson:
        text += f"\n  lesson: {clip(why.lesson, 160)}"
    return text + f"\n  decision: {clip(r.reason, 140)}"


def last_outcome(context: ProposalContext) -> str:
    last = context.history[-1] if context.history else None
    lines = []
    if last is not None and last.status == ExperimentStatus.CRASH and last.log_tail:
        lines += [f"The last experiment, {last.id}, crashed ({last.triage}). Its log ends with:", "```",
                  prompt_tail(last.log_tail, LOG_TAIL_LINES), "```"]
    if context.running:
        lines.append("Running now, results not known yet (do not propose the same change; your change is applied to "
                     "whichever commit is best when it ends, re-applied on top of any of these that is kept, so "
                     "prefer one that does not depend on them):")
        lines += [f"- {r.id}: {clip(r.description, 160)}" + (f" (hypothesis: {clip(r.hypothesis, 160)})"
                                                           if r.hypothesis else "") for r in context.running]
    return "\n".join(lines)


def notes_section(notes: Notes) -> str:
    if not notes.text.strip():
        return ("Research notes (notes.md): empty. Keep open questions, promising directions and dead ends there "
                "with write_notes.")
    ask = (" They are nearly full: rewrite them shorter with write_notes in this conversation (merge, drop what is "
           "settled).") if notes.nearly_full else ""
    return (f"Research notes (notes.md, {notes.size} of {NOTES_LIMIT} bytes; write_notes replaces them).{ask}\n"
            f"<notes>\n{notes.text.strip()}\n</notes>")


def closing(context: ProposalContext, due: ExperimentRecord | None, request: str = "") -> str:
    lines = [request] if request else []
    if due is not None:
        lines.append(f"Lesson due: experiment {due.id} ({clip(due.description, 120)}) ended as {due.kept_as}"
                     + (f", val_bpb {due.val_bpb:.6f}" if due.val_bpb is not None else "")
                     + ". Set `lesson` in your submission: one or two sentences on what this result says "
                       "(against its hypothesis if it had one).")
    lines.append(f"Propose experiment {context.experiment_id}: one change, with its hypothesis and expected effect, "
                 "submitted with submit_experiment.")
    return "\n".join(lines)
