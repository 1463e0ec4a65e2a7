"""Several experiments in flight through the real loop, on a runner that scores train.py from a table and
holds several runs at once: runs overlap, ids and ledger rows stay exactly-once, the branch head is the best
with a clean tree, and every keep beats the best it is recorded against (a result whose parent stopped being
the best is re-applied on the new best and trained again, or recorded as superseded)."""

import json
import re

from agent.loop import LoopSettings, run_loop
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentStatus
from agent.report.build import write_report
from tests.helpers.synthetic_runner import SyntheticRunner

GAINS = {"MATRIX_LR = 0.05": 0.010, "WARMDOWN_RATIO = 0.6": 0.006, "DEPTH = 3": 0.005, "EMBEDDING_LR = 0.8": 0.004,
         "WEIGHT_DECAY = 0.1": 0.003, "UNEMBEDDING_LR = 0.008": 0.002, "FINAL_LR_FRAC = 0.05": 0.002,
         "MATRIX_LR = 0.06": 0.008}


class Settings(Proposer):
    """Proposes `NAME = value` changes in order, each against the train.py it is given (the best's), and keeps
    what it was told was in flight."""

    name = "settings"

    def __init__(self, *changes: str):
        self.changes = list(changes)
        self.told_running: list[list[str]] = []
        self.observed: dict[str, str] = {}

    def propose(self, context, transcript):
        change = self.changes.pop(0)
        setting = change.split(" = ")[0]
        line = re.search(rf"^{setting} = .*$", context.train_source, re.MULTILINE).group(0)
        self.told_running.append([r.id for r in context.running])
        return Proposal(f"{setting} -> {change.split(' = ')[1]}", [Edit(line, change)],
                        hypothesis=f"{setting} is mistuned")

    def observe(self, record):
        self.observed[record.id] = record.status.value


def keeps_chain_holds(records):
    """Each keep's parent is the commit of the keep before it, and its val_bpb beats that keep's."""
    keeps = [r for r in records if r.status == ExperimentStatus.KEEP]
    return all(k.parent == before.commit and k.val_bpb < before.val_bpb
               for before, k in zip(keeps, keeps[1:], strict=False))


def test_a_night_with_four_in_flight(workspace):
    values = {"MATRIX_LR": ["0.05", "0.03", "0.07"], "WARMDOWN_RATIO": ["0.6", "0.4", "0.7"], "DEPTH": ["3", "6", "5"],
              "EMBEDDING_LR": ["0.8", "0.5", "0.7"], "WEIGHT_DECAY": ["0.1", "0.3", "0.15"],
              "UNEMBEDDING_LR": ["0.008", "0.002", "0.006"]}  # more than 12: a proposal may no longer apply
    changes = [f"{name} = {values[name][round_]}" for round_ in range(3) for name in values]
    proposer = Settings(*changes)
    runner = SyntheticRunner(GAINS, slots=4, delays={"": 1.5})
    messages = []
    why = run_loop(workspace, proposer, runner, LoopSettings(max_experiments=13, noise_seeds=2), say=messages.append)
    assert "ran 13 experiment(s)" in why
    records = Ledger(workspace.dir).records
    experiments = [r for r in records if r.is_experiment]
    assert sorted(r.id for r in experiments) == [f"{n:04d}" for n in range(13)]  # one row each, no gaps
    assert len(records) == len({r.id for r in records})
    assert any(not r.is_experiment for r in records)  # the noise floor, measured beside the experiments
    assert runner.most_at_once() >= 3 and runner.most_at_once() <= 4
    assert max(len(told) for told in proposer.told_running) >= 3  # proposals are told what is in flight
    assert keeps_chain_holds(records)
    best = Ledger(workspace.dir).best()
    assert best.commit == workspace.head() and workspace.is_clean()
    assert not list((workspace.dir / "inflight").glob("*.json"))
    assert {run.where for r in experiments for run in r.runs} <= {f"synthetic slot {n}" for n in range(1, 5)}
    assert sum(line.split()[0].isdigit() and len(line.split()[0]) == 4 for line in messages) == 13
    rows = (workspace.dir / "results.tsv").read_text().splitlines()[1:]
    assert len(rows) == 13


def test_a_keep_while_another_trains_rebases_it_or_supersedes_it(workspace):
    # 0001 (fast) is kept while 0002 and 0003 train against the baseline. 0002 beat the baseline: it is
    # re-applied on 0001 and trained again; 0003 edits the line 0001 changed, so it no longer applies.
    proposer = Settings("MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.6", "MATRIX_LR = 0.06")
    runner = SyntheticRunner(GAINS, slots=3, delays={"MATRIX_LR = 0.05": 2.0, "WARMDOWN_RATIO = 0.6": 4.0,
                                                  "MATRIX_LR = 0.06": 4.0})
    run_loop(workspace, proposer, runner, LoopSettings(max_experiments=4, noise_seeds=0, overlap=False),
             say=lambda _: None)
    records = {r.id: r for r in Ledger(workspace.dir).records}
    base, first, second, third = (records[i] for i in ("0000", "0001", "0002", "0003"))
    assert proposer.told_running[1:] == [["0001"], ["0001", "0002"]]
    assert first.status == "keep" and first.parent == base.commit

    assert second.status == "keep" and second.parent == first.commit and second.rebased
    assert second.proposed_against == base.commit
    assert [r.parent for r in second.rebased_from] == [base.commit] and second.rebased_from[0].status == "keep"
    assert second.val_bpb < first.val_bpb and len(second.runs) == 1
    assert second.runs[0].log == "logs/0002.rebase1.log" and second.rebased_from[0].runs[0].log == "logs/0002.log"
    trained = workspace.file_at("train.py", second.commit)
    assert "MATRIX_LR = 0.05" in trained and "WARMDOWN_RATIO = 0.6" in trained
    events = [json.loads(line)["type"] for line in (workspace.dir / second.transcript).read_text().splitlines()]
    assert events.count("run_started") == 2 and "rebase" in events and events[-1] == "decision"

    assert third.status == ExperimentStatus.SUPERSEDED and third.parent == base.commit
    assert "no longer apply" in third.reason and proposer.observed["0003"] == "superseded"
    rows = [line.split("\t") for line in (workspace.dir / "results.tsv").read_text().splitlines()[1:]]
    assert [row[3] for row in rows if row[0] == third.commit[:7]] == ["discard"]
    assert keeps_chain_holds(list(records.values()))
    assert workspace.head() == second.commit and workspace.is_clean()
    assert write_report(workspace).is_file()  # the report reads a superseded record


def test_a_would_be_keep_waits_for_the_one_re_based_ahead_of_it_instead_of_overtaking_it(workspace):
    # Two places, three slots. 0001 (fast) is kept while 0002 trains on the baseline; 0002 beat the baseline,
    # so it is re-based on 0001 and trains again. 0003, proposed on 0001, beats 0001 while 0002's re-run is
    # under way: it waits for 0002 instead of landing first (which would re-base 0002 a second time), then
    # is re-based once on 0002. The later experiments are slow discards, so the loop is still starting
    # experiments (the line is not open yet) when 0003 ends.
    proposer = Settings("MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.6", "EMBEDDING_LR = 0.8", "FINAL_LR_FRAC = 0.5",
                        "WEIGHT_DECAY = 0.5", "DEPTH = 5")
    runner = SyntheticRunner(GAINS, slots=3, noise=0.0, delays={
        "MATRIX_LR = 0.05": 1.0, "WARMDOWN_RATIO = 0.6": 3.0, "EMBEDDING_LR = 0.8": 3.5, "FINAL_LR_FRAC = 0.5": 4.5,
        "WEIGHT_DECAY = 0.5": 4.5})  # the last experiment starts when 0004 ends, 1.5 s after 0002's re-run
    run_loop(workspace, proposer, runner, LoopSettings(max_experiments=7, parallel=2, noise_seeds=0, overlap=False),
             say=lambda _: None)
    records = {r.id: r for r in Ledger(workspace.dir).records}
    first, second, third = records["0001"], records["0002"], records["0003"]
    assert first.status == second.status == third.status == "keep"
    assert second.parent == first.commit and [r.parent for r in second.rebased_from] == [records["0000"].commit]
    assert third.parent == second.commit and [r.parent for r in third.rebased_from] == [first.commit]
    waits = [json.loads(line) for line in (workspace.dir / third.transcript).read_text().splitlines()
             if json.loads(line)["type"] == "waiting_to_land"]
    assert [w["behind"] for w in waits] == ["0002"]
    assert keeps_chain_holds(list(records.values()))
    assert workspace.head() == third.commit and workspace.is_clean()
