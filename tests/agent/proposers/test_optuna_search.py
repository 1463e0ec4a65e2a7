"""The offline proposer's search space and proposals."""

from pathlib import Path

from agent.proposers.base import ProposalContext
from agent.proposers.edits import apply_edits
from agent.proposers.optuna_search import OptunaProposer, search_space
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript
from trainer.tracks.hyperparameters import set_hyperparameters, train_source_for_track

SOURCE = (Path(__file__).resolve().parents[3] / "trainer" / "train.py").read_text()


def test_search_space_follows_the_block():
    space = search_space(SOURCE)
    assert space["MATRIX_LR"].kind == "log-float" and (space["MATRIX_LR"].low, space["MATRIX_LR"].high) == (0.01, 0.16)
    assert space["TOTAL_BATCH_SIZE"].value == 2**19 and space["TOTAL_BATCH_SIZE"].kind == "pow2"
    assert space["DEPTH"].kind == "int" and (space["DEPTH"].low, space["DEPTH"].high) == (4, 16)
    assert space["WARMDOWN_RATIO"].high <= 0.95
    assert "COMPILE_ON_CPU" not in space and "WINDOW_PATTERN" not in space and "LOGIT_SOFTCAP" not in space


def test_expressions_in_the_block_are_never_evaluated(tmp_path):
    marker = tmp_path / "evaluated"
    hostile = set_hyperparameters(SOURCE, {"DEPTH": 8}).replace(
        "DEPTH = 8 ", f"DEPTH = len(open({str(marker)!r}, 'w').name) ", 1)
    assert "DEPTH" not in search_space(hostile)
    assert not marker.exists()


def test_proposals_change_one_value_and_apply(tmp_path):
    source = train_source_for_track(SOURCE, "test")
    proposer = OptunaProposer(tmp_path / "journal", seed=0)
    best = ExperimentRecord(id="0000", status="keep", val_bpb=2.0, commit="a" * 40)
    seen, made = set(), []
    for i in range(8):
        context = ProposalContext(track={}, program_name="p", program_text="", train_source=source, best=best,
                                  history=[], experiment_id=f"{i:04d}")
        transcript = Transcript(tmp_path / f"{i}.jsonl")
        proposal = proposer.propose(context, transcript)
        changed = apply_edits(source, proposal.edits)
        diff = [(a, b) for a, b in zip(source.splitlines(), changed.splitlines(), strict=True) if a != b]
        assert len(diff) == 1 and diff[0][0].startswith(proposal.meta["parameter"] + " = ")
        assert proposal.meta["old"] != proposal.meta["new"]
        assert proposal.meta["parameter"] in transcript.events()[0]["text"]
        seen.add(proposal.meta["parameter"])
        made.append((proposal.meta["parameter"], proposal.meta["new"]))
        proposer.observe(ExperimentRecord(id=f"{i:04d}", status="discard", val_bpb=2.0 + i / 100,
                                          proposal=proposal.meta))
    assert len(seen) > 1
    resumed = OptunaProposer(tmp_path / "journal", seed=0)
    assert len([t for t in resumed.study.trials if t.state.name == "COMPLETE"]) == 8
    context = ProposalContext(track={}, program_name="p", program_text="", train_source=source, best=best,
                              history=[], experiment_id="0008")
    again = resumed.propose(context, Transcript(tmp_path / "again.jsonl"))
    assert (again.meta["parameter"], again.meta["new"]) not in made, "a resumed study must not replay its proposals"


def test_a_new_study_tries_the_warm_start_values_first_and_a_resumed_one_does_not_again(tmp_path):
    source = train_source_for_track(SOURCE, "cpu")
    warm = [("FINAL_LR_FRAC", 0.3), ("TOTAL_BATCH_SIZE", 2**13)]
    best = ExperimentRecord(id="0000", status="keep", val_bpb=2.0, commit="a" * 40)

    def propose(proposer, i):
        context = ProposalContext(track={}, program_name="p", program_text="", train_source=source, best=best,
                                  history=[], experiment_id=f"{i:04d}")
        proposal = proposer.propose(context, Transcript(tmp_path / f"{i}.jsonl"))
        proposer.observe(ExperimentRecord(id=f"{i:04d}", status="discard", val_bpb=2.0, proposal=proposal.meta))
        return proposal.meta["parameter"], proposal.meta["new"]

    proposer = OptunaProposer(tmp_path / "journal", seed=0, warm_start=warm)
    assert [propose(proposer, 0), propose(proposer, 1)] == warm
    resumed = OptunaProposer(tmp_path / "journal", seed=0, warm_start=warm)
    propose(resumed, 2)
    assert len(resumed.study.trials) == 3  # the warm start was not enqueued a second time


def test_a_warm_start_says_it_is_one_and_the_search_after_it_says_it_is_tpe(tmp_path):
    source = train_source_for_track(SOURCE, "cpu")
    best = ExperimentRecord(id="0000", status="keep", val_bpb=2.0, commit="a" * 40)
    proposer = OptunaProposer(tmp_path / "journal", seed=0,
                              warm_start=[("FINAL_LR_FRAC", 0.3, "measured to lose to this track's baseline")])
    said = []
    for i in range(2):
        context = ProposalContext(track={}, program_name="p", program_text="", train_source=source, best=best,
                                  history=[], experiment_id=f"{i:04d}")
        transcript = Transcript(tmp_path / f"{i}.jsonl")
        proposal = proposer.propose(context, transcript)
        proposer.observe(ExperimentRecord(id=f"{i:04d}", status="discard", val_bpb=2.0, proposal=proposal.meta))
        reasoning, = [e["text"] for e in transcript.events() if e["type"] == "reasoning"]
        said.append((proposal, reasoning))
    (warm, warm_reasoning), (searched, searched_reasoning) = said
    assert warm.meta.get("warm_start") is True and "warm start" in warm.hypothesis
    assert "FINAL_LR_FRAC = 0.3, measured to lose to this track's baseline" in warm_reasoning  # what was measured
    assert "measured to lose" in warm.hypothesis and "warm start, not TPE's choice" in warm_reasoning
    assert "finished trial" not in warm.hypothesis and "expects" not in warm_reasoning
    assert "warm_start" not in searched.meta and "warm start" not in searched.hypothesis + searched_reasoning
    assert searched.hypothesis.startswith("TPE trial 1: after 1 finished trial(s) its model")
