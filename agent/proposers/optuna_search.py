"""The offline proposer: Optuna's TPE over the numeric hyperparameters of train.py's block.

The search space is read from the block with ast, so it follows whatever the block holds:
each numeric literal (or constant expression such as 2**19) gets a range around its
current value. Every experiment changes one parameter: TPE first picks which, then its new
value, never one already tried on the same best (the claim says so; TPE is asked again). Each best
commit has a study of its own, so that after a keep TPE re-tunes around the new best's values. The
studies live in the workspace (optuna.journal), so a resumed run keeps learning. The first study on a
track with known good values (WARM_STARTS) tries those first.
"""

from __future__ import annotations

import ast
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from agent.proposers.base import Proposal, ProposalContext, Proposer, ProposerError
from agent.proposers.edits import Edit
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.transcript import Transcript
from trainer.files import parsing
from trainer.tracks.hyperparameters import BLOCK_END, BLOCK_START, set_hyperparameters

# Single changes a new study on a track tries first, in this order, each with what was measured of it
# (benchmarks/warm_starts.py, BENCHMARKS.md "The demo"): on the cpu track the first beats the baseline by
# several noise floors and the second loses to it, so that the demo's short night shows a keep and a discard.
WARM_STARTS: dict[str, list[tuple[str, float | int, str]]] = {
    "cpu": [("DEPTH", 3, "measured to beat this track's baseline by about 5 sigma"),
            ("UNEMBEDDING_LR", 0.008, "measured to lose to this track's baseline by about 4 sigma: tried so that a "
                                      "short night shows a discard")],
}
KNOWN_GOOD = "a value known to do well on this track (measured to beat its baseline)"
WARM_START = "warm_start"  # the user attribute that marks a trial of WARM_STARTS

# Set by the hardware profile (trainer/tracks/profiles.py): how the work is laid out, never what is learnt.
LAYOUT_ONLY = {"DEVICE_BATCH_SIZE"}


@dataclass(frozen=True)
class SearchDimension:
    name: str
    value: float | int
    kind: str               # "float", "log-float", "int", "pow2"
    low: float
    high: float

    def describe(self) -> str:
        if self.kind == "pow2":
            return f"powers of two {2 ** int(self.low)}..{2 ** int(self.high)}"
        return f"{self.kind} {self.low:g}..{self.high:g}"


def search_space(source: str) -> dict[str, SearchDimension]:
    start, end = BLOCK_START.search(source), source.find(BLOCK_END)
    if not start or end < 0:
        raise ProposerError("train.py has no hyperparameter block to search")
    first, last = source.count("\n", 0, start.start()) + 1, source.count("\n", 0, end) + 1
    space = {}
    for node in parsing.parse(source).body:
        if not (isinstance(node, ast.Assign) and first < node.lineno < last and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        if (value := _constant_number(node.value)) is not None and node.targets[0].id not in LAYOUT_ONLY:
            space[node.targets[0].id] = _dimension(node.targets[0].id, value)
    return space


BINARY_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.Pow: lambda a, b: a ** b if abs(b) <= 64 else None}


def _constant_number(node: ast.expr) -> float | int | None:
    """The value of a literal arithmetic expression (2**19, 3e-4, -1); never evaluates anything else."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _constant_number(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPS:
        left, right = _constant_number(node.left), _constant_number(node.right)
        if left is None or right is None:
            return None
        try:
            return BINARY_OPS[type(node.op)](left, right)
        except (ArithmeticError, ValueError):
            return None
    return None


def _dimension(name: str, value: float | int) -> SearchDimension:
    if isinstance(value, int):
        if value >= 16 and value & (value - 1) == 0:  # sizes: halve or double
            exponent = int(math.log2(value))
            return SearchDimension(name, value, "pow2", exponent - 1, exponent + 1)
        return SearchDimension(name, value, "int", max(1, value // 2), max(2, value * 2))
    if name.endswith(("_RATIO", "_FRAC")):
        return SearchDimension(name, value, "float", 0.0, max(0.5, min(0.95, 2 * value)))
    if "BETA" in name:
        return SearchDimension(name, value, "float", 0.8, 0.999)
    if value > 0:
        return SearchDimension(name, value, "log-float", value / 4, value * 4)
    return SearchDimension(name, value, "float", 0.0, 0.1)


def _suggest(trial: optuna.Trial, dim: SearchDimension) -> float | int:
    if dim.kind == "pow2":
        return 2 ** trial.suggest_int(f"{dim.name}.log2", int(dim.low), int(dim.high))
    if dim.kind == "int":
        return trial.suggest_int(dim.name, int(dim.low), int(dim.high))
    value = trial.suggest_float(dim.name, dim.low, dim.high, log=dim.kind == "log-float")
    return float(f"{value:.4g}")


def study_name(best_commit: str) -> str:
    return f"best-{best_commit[:12]}"


class OptunaProposer(Proposer):
    """`study`: the study of the latest best asked about (one per best commit, whichever proposer kept it)."""

    name = "optuna"

    def __init__(self, journal: Path, seed: int = 0, warm_start: list[tuple] = ()):
        self.storage = JournalStorage(JournalFileBackend(str(journal)))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.seed, self.warm_start = seed, list(warm_start)
        self._lock = threading.Lock()  # asked and told from the threads of several experiments
        self._studies: dict[str, optuna.Study] = {}
        for frozen in self.storage.get_all_studies():
            study = self._load(frozen.study_name)
            for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                study.tell(trial.number, state=TrialState.FAIL)  # asked before an interruption
        self.study: optuna.Study | None = next(reversed(self._studies.values()), None)

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        return [t for study in self._studies.values() for t in study.trials]

    def _load(self, name: str) -> optuna.Study:
        if name not in self._studies:
            first = not self._studies
            study = optuna.create_study(study_name=name, storage=self.storage, direction="minimize",
                                        load_if_exists=True)
            # Seeded by how far the journal got, so that a resumed run does not replay the same proposals. Trials
            # still training count as results as bad as the worst so far (constant_liar), as Optuna advises for
            # parallel trials, so that trials asked while others train do not pile up in one place.
            study.sampler = optuna.samplers.TPESampler(seed=self.seed + len(self.trials()) + len(study.trials),
                                                       constant_liar=True)
            if first and not study.trials:
                for parameter, value, *measured in self.warm_start:  # under either name _suggest may ask by
                    fixed = {"parameter": parameter, parameter: value}
                    if isinstance(value, int) and value > 0:
                        fixed[f"{parameter}.log2"] = int(math.log2(value))
                    study.enqueue_trial(fixed, user_attrs={WARM_START: measured[0] if measured else KNOWN_GOOD},
                                        skip_if_exists=True)
            self._studies[name] = study
        return self._studies[name]

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        with self._lock:
            return self._propose(context, transcript)

    def _propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        if not (space := search_space(context.train_source)):
            raise ProposerError("the hyperparameter block holds no numeric values to tune")
        self.study = study = self._load(study_name(context.best.commit))
        finished = [t for t in study.trials if t.state == TrialState.COMPLETE]
        for _ in range(20):
            trial = study.ask()
            dim = space[trial.suggest_categorical("parameter", sorted(space))]
            if (value := _suggest(trial, dim)) == dim.value:
                study.tell(trial, state=TrialState.PRUNED)  # the current value again: not an experiment
                continue
            new_source = set_hyperparameters(context.train_source, {dim.name: value})
            old_line, new_line = _changed_line(context.train_source, new_source)
            # a value already tried on this best, or being tried now, by Optuna or anyone: not again
            if taken := context.claim(new_source, [Edit(old_string=old_line, new_string=new_line)]):
                transcript.event("reasoning", text=f"TPE trial {trial.number} proposed {dim.name} = {value}, "
                                                   f"which is taken ({taken}); asking again")
                study.tell(trial, state=TrialState.PRUNED)
                continue
            break
        else:
            raise ProposerError("TPE kept proposing the current values or values already tried on this best")
        best = min(finished, key=lambda t: t.value, default=None)
        against = (f"One change, against the current best (val_bpb {context.best.val_bpb:.6f}, commit "
                   f"{context.best.commit[:7]}).")
        if warm := trial.user_attrs.get(WARM_START):
            measured = KNOWN_GOOD if warm is True else warm  # True: a journal written before the notes
            said = (f"Trial {trial.number} is a warm start, not TPE's choice: {dim.name} = {value}, {measured}, "
                    f"tried before the search proper. It proposes {dim.value} -> {value}. {against}")
            hypothesis = (f"warm start (trial {trial.number}): {dim.name} = {value}, {measured}; tried first to "
                          f"see whether it does here what it did there")
        else:
            said = (f"TPE trial {trial.number} ({len(finished)} finished so far"
                    + (f"; its best, trial {best.number}, reached val_bpb {best.value:.6f}" if best else "") + "). "
                    f"It chose {dim.name} among {len(space)} parameters and proposes {dim.value} -> {value} "
                    f"(searched over {dim.describe()}). {against}")
            hypothesis = (f"TPE trial {trial.number}: after {len(finished)} finished trial(s) its model of the results "
                          f"expects {dim.name} = {value} (searched over {dim.describe()}) to score better than "
                          f"{dim.value}")
        transcript.event("reasoning", text=said)
        return Proposal(description=f"{dim.name} {dim.value} -> {value}",
                        edits=[Edit(old_string=old_line, new_string=new_line)],
                        meta={"trial": trial.number, "study": study.study_name, "parameter": dim.name,
                              "old": dim.value, "new": value, **({WARM_START: True} if warm else {})},
                        hypothesis=hypothesis, expected=f"val_bpb below the best's {context.best.val_bpb:.6f}")

    def observe(self, record: ExperimentRecord) -> None:
        if (trial := record.proposal.get("trial")) is None:
            return
        judged = record.status in (ExperimentStatus.KEEP, ExperimentStatus.DISCARD)
        with self._lock:
            study = self._load(record.proposal["study"]) if record.proposal.get("study") else self.study
            if study is None:
                return
            if judged and record.val_bpb is not None:
                study.tell(trial, record.val_bpb)
            else:
                study.tell(trial, state=TrialState.FAIL)


def _changed_line(old: str, new: str) -> tuple[str, str]:
    pairs = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    if len(pairs) != 1:
        raise ProposerError(f"setting one hyperparameter changed {len(pairs)} lines")
    return pairs[0]
