"""A fall too large for one change is trained again from scratch and kept only if the holdout split shows it
too: an honest fall passes through the real loop; a model that learnt val (trained on it here by the test, as a
channel to val would let a run) falls on val alone and is refused, on the trusted evaluator's real numbers."""

import json
import statistics
import subprocess
import sys
import textwrap
from html import unescape

from agent.judging.decisions import HOLDOUT_SHARE, holdout_disagrees
from agent.judging.verify import score_runs
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.record import RunEntry
from agent.report.build import write_report
from agent.running.runner import LocalRunner
from tests.helpers.jobs import evaluation_job
from tests.helpers.scripted import ScriptedChanges
from tests.helpers.synthetic_runner import SyntheticRunner
from trainer.files.hashing import file_sha256
from trainer.runs.run_id import RunId
from trainer.tracks.hyperparameters import set_hyperparameters

RATES = ("UNEMBEDDING_LR", "EMBEDDING_LR", "VALUE_EMBEDDING_LR", "RESID_LAMBDA_LR", "X0_LAMBDA_LR", "MATRIX_LR")


def test_an_honest_implausible_fall_is_re_run_and_kept_when_the_holdout_shows_it(workspace):
    source = workspace.file_at("train.py")
    frozen = set_hyperparameters(source, dict.fromkeys(RATES, 0.0))  # a baseline that cannot learn at all
    workspace.advance_to(workspace.commit_train(frozen, "every learning rate 0"))
    restore = [(line_of(frozen, name), line_of(source, name)) for name in RATES]
    run_loop(workspace, ScriptedChanges(("learn again", restore)), LocalRunner(),
             LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)

    baseline, learns = Ledger(workspace.dir).records
    assert learns.status == "keep" and learns.verified, learns.reason
    assert "fell" in learns.evidence.implausible_fall and len(learns.runs) == 2
    assert all(run.trusted and run.holdout_bpb for run in learns.runs)
    events = [json.loads(line) for line in (workspace.dir / learns.transcript).read_text().splitlines()]
    gate, = [e for e in events if e["type"] == "holdout_gate"]
    val_gain = gate["best_val"] - statistics.fmean(run.val_bpb for run in learns.runs)
    holdout_gain = gate["best_holdout"] - statistics.fmean(run.holdout_bpb for run in learns.runs)
    assert gate["passed"] and val_gain > 0.1 * gate["best_val"] and holdout_gain >= HOLDOUT_SHARE * val_gain


def line_of(source: str, name: str) -> str:
    return next(line + "\n" for line in source.splitlines() if line.startswith(f"{name} = "))


# Trains the workspace's model on the val split's rows (what a run could do only through a channel to val),
# starting from the baseline's weights, and saves it as prepare.evaluate_bpb saves a run's weights.
LEARNS_VAL = textwrap.dedent("""
    import dataclasses, sys, torch
    sys.path.insert(0, sys.argv[1])
    import prepare, train
    state = torch.load(sys.argv[2], weights_only=True)
    model = train.build_model(train.GPTConfig(**state["config"]))
    model.load_state_dict(state["state_dict"])
    tokenizer = prepare.Tokenizer.from_directory()
    packer = prepare.BestFitPacker(tokenizer, prepare.iter_documents(prepare.split_files("val")),
                                   prepare.MAX_SEQ_LEN + 1)
    rows = torch.from_numpy(packer.rows(prepare.EVAL_TOKENS // prepare.MAX_SEQ_LEN)).long()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(int(sys.argv[4])):
        batch = rows[torch.randint(len(rows), (32,))]
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.save(dict(state_dict=model.state_dict(), config=dataclasses.asdict(model.config)), sys.argv[3])
""")


def test_a_model_that_learnt_val_falls_on_val_alone_and_is_refused(workspace, tmp_path):
    run_loop(workspace, ScriptedChanges(), LocalRunner(), LoopSettings(max_experiments=1, noise_seeds=0),
             say=lambda _: None)
    baseline, = Ledger(workspace.dir).records
    files = tmp_path / "files"
    files.mkdir()
    for name in ("train.py", "prepare.py", "track.json"):
        (files / name).write_text(workspace.file_at(name, baseline.commit))
    learnt = workspace.dir / "checkpoints" / "learnt.pt"
    subprocess.run([sys.executable, "-c", LEARNS_VAL, str(files), str(workspace.dir / baseline.checkpoint),
                    str(learnt), "150"], check=True, cwd=files)

    best = LocalRunner().evaluate(workspace, evaluation_job(baseline.commit, workspace.dir / baseline.checkpoint,
                                                            "best", ("val", "holdout"), probe=True))
    scored = LocalRunner().evaluate(workspace, evaluation_job(baseline.commit, learnt, "learnt", probe=True))
    run = RunEntry(run_id=RunId.train("learnt"), seed=1, val_bpb=scored.val, printed=scored.val,
                   checkpoint="checkpoints/learnt.pt", checkpoint_sha256=file_sha256(learnt), device="cpu",
                   log="logs/learnt.log")
    score_runs(workspace, LocalRunner(), baseline.commit, [run], ("val", "holdout"))  # every check passes

    assert run.trusted and best.val - run.val_bpb > 0.1 * best.val  # an implausible fall on val ...
    assert best.holdout - run.holdout_bpb < HOLDOUT_SHARE * (best.val - run.val_bpb)  # ... that holdout lacks
    problem = holdout_disagrees([run], best.val, best.holdout)
    assert problem and "a model that learnt val" in problem


class FallsOnLaterSeeds(SyntheticRunner):
    """A train.py that reads its seed: the change scores a hair better than the best on its first run (a close
    call) and a third better on every run after it; its weights score as well on holdout as the baseline's only
    (what a model that learnt val shows)."""

    CHANGE = "WARMDOWN_RATIO = 0.3"

    def __init__(self):
        super().__init__({}, noise=0.0)
        self.candidate_runs = 0

    def score(self, source: str, seed: int) -> float:
        if self.CHANGE not in source:
            return self.base
        self.candidate_runs += 1
        return self.base - 0.0005 if self.candidate_runs == 1 else round(self.base * 0.66, 6)

    def evaluate(self, workspace, job):
        return super().evaluate(workspace, job).model_copy(update={"holdout": self.base})


def test_a_fall_that_shows_only_in_a_close_call_s_re_run_still_meets_the_holdout_gate(workspace):
    runner = FallsOnLaterSeeds()
    change = ("warmdown 0.3", [("WARMDOWN_RATIO = 0.5", FallsOnLaterSeeds.CHANGE)])
    run_loop(workspace, ScriptedChanges(change), runner, LoopSettings(max_experiments=2, noise_seeds=2),
             say=lambda _: None)
    records = [r for r in Ledger(workspace.dir).records if r.is_experiment]
    candidate = records[-1]
    assert runner.candidate_runs == 3  # the close call's re-run, then once more from scratch on val and holdout
    assert candidate.status == "crash" and candidate.triage == "tamper", candidate.reason
    assert "fell" in candidate.evidence.implausible_fall and "a model that learnt val" in candidate.reason


class FallsStepByStep(SyntheticRunner):
    """Each change present falls val_bpb by FALL, under the implausible line one at a time. Weights that learnt val
    score on holdout as the baseline's do; honest ones score there as on val."""

    CHANGES = ("WARMDOWN_RATIO = 0.4", "FINAL_LR_FRAC = 0.1", "WEIGHT_DECAY = 0.1")
    FALL = 0.06

    def __init__(self, learnt_val: bool):
        super().__init__({}, noise=0.0)
        self.learnt_val = learnt_val

    def score(self, source: str, seed: int) -> float:
        present = sum(1 for change in self.CHANGES if change in source)
        return round(self.base * (1 - self.FALL) ** present, 6)

    def evaluate(self, workspace, job):
        scored = super().evaluate(workspace, job)
        return scored.model_copy(update={"holdout": self.base}) if self.learnt_val else scored


STEPS = [("warmdown 0.4", [("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.4")]),
         ("final lr 0.1", [("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.1")]),
         ("weight decay 0.1", [("WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.1")])]


def test_falls_under_the_line_one_by_one_meet_the_holdout_split_once_they_add_up(workspace):
    runner = FallsStepByStep(learnt_val=True)
    run_loop(workspace, ScriptedChanges(*STEPS), runner, LoopSettings(max_experiments=4, noise_seeds=0),
             say=lambda _: None)
    baseline, first, second, third = Ledger(workspace.dir).records
    assert first.status == "keep" and first.evidence.implausible_fall is None  # 6%: under the line
    for later in (second, third):  # 11.6% from the baseline, none of it on holdout
        assert later.status == "crash" and later.triage == "tamper", later.reason
        assert "since the baseline" in later.evidence.implausible_fall and "a model that learnt val" in later.reason
    assert Ledger(workspace.dir).head().id == first.id


def test_an_honest_chain_moves_the_anchor_to_the_best_the_holdout_split_checked(workspace):
    run_loop(workspace, ScriptedChanges(*STEPS), FallsStepByStep(learnt_val=False),
             LoopSettings(max_experiments=4, noise_seeds=0), say=lambda _: None)
    ledger = Ledger(workspace.dir)
    baseline, first, second, third = ledger.records
    assert [r.status for r in (first, second, third)] == ["keep"] * 3
    assert first.evidence.implausible_fall is None and "since the baseline" in second.evidence.implausible_fall
    assert third.evidence.implausible_fall is None  # 6% from the second, which the holdout split checked
    assert ledger.history().holdout_anchor().id == second.id
    assert (workspace.dir / second.checkpoint).is_file()  # its weights are what the next fall is scored against
    kept = unescape(write_report(workspace).read_text())  # each keep's one gain, and the flag where it was met
    for keep in (first, second, third):
        assert f"gain {keep.evidence.gain:+.6f} against the best's mean of {len(keep.evidence.best_runs)} run(s)" \
            in kept
    assert f"flagged: {second.evidence.implausible_fall}, and the holdout split confirmed it" in kept
    assert "flagged" not in kept[kept.index("id='keep-0001'"):kept.index("id='keep-0002'")]


class HonestThenValOnly(SyntheticRunner):
    """HONEST falls val_bpb and holdout 6%; VAL_ONLY falls val 5% and holdout nothing (it learnt val)."""

    HONEST, VAL_ONLY = "WARMDOWN_RATIO = 0.4", "FINAL_LR_FRAC = 0.1"

    def __init__(self):
        super().__init__({}, noise=0.0)

    def score(self, source: str, seed: int) -> float:
        return round(self.base * (0.94 if self.HONEST in source else 1) * (0.95 if self.VAL_ONLY in source else 1), 6)

    def evaluate(self, workspace, job):
        scored = super().evaluate(workspace, job)
        honest = self.HONEST in workspace.file_at("train.py", job.commit)
        return scored.model_copy(update={"holdout": round(self.base * (0.94 if honest else 1), 6)})


def test_a_step_that_learnt_val_is_refused_even_when_an_honest_keep_before_it_carries_the_fall(workspace):
    run_loop(workspace, ScriptedChanges(*STEPS[:2]), HonestThenValOnly(),
             LoopSettings(max_experiments=3, noise_seeds=2), say=lambda _: None)
    honest, val_only = [r for r in Ledger(workspace.dir).records if r.is_experiment][1:]
    assert honest.status == "keep" and honest.evidence.implausible_fall is None
    assert val_only.status == "crash" and val_only.triage == "tamper", val_only.reason
    assert "since the baseline" in val_only.evidence.implausible_fall  # 10.7%, 56% of it on holdout: the anchor's
    assert f"its own step from {honest.id} fell" in val_only.reason and "this step learnt val" in val_only.reason
