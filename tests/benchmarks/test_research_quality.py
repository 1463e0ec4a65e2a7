"""The pieces of benchmarks/research_quality.py: the random control, the noise-keep rule, the goals, the options."""

import random
from pathlib import Path

import pytest

from agent.proposers.base import ProposalContext
from agent.proposers.optuna_search import SearchDimension, search_space
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.recording.transcript import Transcript
from benchmarks.night_quality import NightFailed, NightQuality, check_keeps, keep_gain
from benchmarks.quality_summary import goals, summarize, verdict
from benchmarks.research_quality import loop_settings, parse_arguments
from tests.helpers.random_changes import RandomChanges, draw
from trainer.tracks.hyperparameters import BLOCK_END, BLOCK_START
from trainer.tracks.spec import TrackSpec

TRAIN = (Path(__file__).resolve().parents[2] / "trainer" / "train.py").read_text()


def context(source: str) -> ProposalContext:
    best = ExperimentRecord(id="0000", status=ExperimentStatus.KEEP, commit="0" * 40, val_bpb=3.0)
    return ProposalContext(track=TrackSpec.model_construct(track="test"), program_name="program.md", program_text="",
                           train_source=source, best=best, history=[best], experiment_id="0001")


def block_lines(source: str) -> range:
    first = source.count("\n", 0, BLOCK_START.search(source).start()) + 1
    return range(first + 1, source.count("\n", 0, source.find(BLOCK_END)) + 1)


def test_the_random_control_changes_one_value_of_the_block_within_optunas_range(tmp_path):
    space, block = search_space(TRAIN), block_lines(TRAIN)
    proposer = RandomChanges(seed=7)
    changed = set()
    for _ in range(30):
        proposal = proposer.propose(context(TRAIN), Transcript(tmp_path / "t.jsonl"))
        after = proposal.checked_against(TRAIN)  # applies and passes the policy, as the loop checks it
        differing = [n for n, (a, b) in enumerate(zip(TRAIN.splitlines(), after.splitlines(), strict=True), 1)
                     if a != b]
        assert len(proposal.edits) == 1 and len(differing) == 1 and differing[0] in block
        name, value = proposal.meta["parameter"], proposal.meta["new"]
        dim = space[name]
        low, high = (2 ** dim.low, 2 ** dim.high) if dim.kind == "pow2" else (dim.low, dim.high)
        assert value != dim.value and low <= value <= high
        assert search_space(after)[name].value == value
        changed.add(name)
    assert len(changed) > 3  # it wanders over the block, not one parameter


def test_the_random_control_repeats_itself_only_with_the_same_seed(tmp_path):
    def descriptions(seed):
        proposer = RandomChanges(seed)
        return [proposer.propose(context(TRAIN), Transcript(tmp_path / "t.jsonl")).description for _ in range(5)]

    assert descriptions(3) == descriptions(3)
    assert descriptions(3) != descriptions(4)


@pytest.mark.parametrize("dim", [SearchDimension("A", 64, "pow2", 5, 7), SearchDimension("B", 4, "int", 2, 8),
                                 SearchDimension("C", 0.04, "log-float", 0.01, 0.16),
                                 SearchDimension("D", 0.5, "float", 0.0, 0.95)])
def test_draws_stay_in_the_range_of_their_kind(dim):
    rng = random.Random(1)
    values = {draw(dim, rng) for _ in range(200)}
    low, high = (2 ** dim.low, 2 ** dim.high) if dim.kind == "pow2" else (dim.low, dim.high)
    assert all(low <= v <= high for v in values) and len(values) >= 3
    if dim.kind in ("pow2", "int"):
        assert all(isinstance(v, int) for v in values)


def test_a_keep_is_noise_unless_its_fresh_mean_beats_its_parents_pooled_mean():
    assert keep_gain([3.00, 3.02, 3.01], [3.05], [3.03, 3.04, 3.04]) == pytest.approx(3.04 - 3.01)
    assert keep_gain([3.04, 3.04], [3.00, 3.08], [3.04]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="fresh runs"):
        keep_gain([], [3.0], [3.0])


def record(id_, status, commit, runs, parent=None, gain=None):
    return ExperimentRecord(id=id_, status=status, commit=commit, parent=parent, val_bpb=sum(runs) / len(runs),
                            runs=[RunEntry(seed=n, val_bpb=v) for n, v in enumerate(runs)],
                            evidence={"gain": gain}, description=f"change {id_}")


def test_each_keep_is_checked_against_its_parent_with_the_parents_night_runs_pooled():
    records = [record("0000", "keep", "a", [3.10]), record("0000-noise", "noise", "a", [3.12, 3.14]),
               record("0001", "keep", "b", [3.00], parent="a", gain=0.12),
               record("0002", "discard", "x", [3.20], parent="b"),
               record("0003", "keep", "c", [2.95], parent="b", gain=0.05)]
    fresh = {"a": [3.10, 3.11, 3.12], "b": [3.05, 3.05, 3.05], "c": [3.06, 3.07, 3.05]}
    first, second = check_keeps(records, fresh)
    assert (first.keep, first.parent, first.decided_gain) == ("0001", "0000", 0.12)
    assert first.parent_runs == [3.10, 3.12, 3.14, 3.10, 3.11, 3.12] and not first.noise
    assert first.gain == pytest.approx(3.115 - 3.05)
    assert (second.keep, second.parent) == ("0003", "0001") and second.parent_runs == [3.00, 3.05, 3.05, 3.05]
    assert second.gain == pytest.approx(3.0375 - 3.06) and second.noise


def test_a_keep_whose_parent_is_no_keep_is_an_error_not_skipped():
    records = [record("0000", "keep", "a", [3.10]), record("0001", "keep", "b", [3.0], parent="elsewhere")]
    with pytest.raises(NightFailed, match="0001 was trained on elsewhere"):
        check_keeps(records, {"a": [3.1], "b": [3.0]})


def night(proposer, seed, gain, noise_keeps=0, holdout_gain=None):
    return NightQuality(proposer=proposer, seed=seed, stopped="limit", experiments=10, keeps=2, keep_rate=0.2,
                        gain=gain, fresh_gain=gain, holdout_gain=gain if holdout_gain is None else holdout_gain,
                        retention=(gain if holdout_gain is None else holdout_gain) / gain if gain > 0 else None,
                        noise_keeps=noise_keeps, checks=[], night_s=600.0, check_s=60.0, experiments_per_hour=60.0)


def test_the_summary_is_the_mean_and_sd_over_a_proposers_seeds():
    optuna, random_ = summarize([night("optuna", 1, 0.02), night("random", 1, 0.01), night("optuna", 2, 0.04)])
    assert (optuna.proposer, optuna.nights, random_.nights) == ("optuna", 2, 1)
    assert optuna.gain.mean == pytest.approx(0.03) and optuna.gain.sd == pytest.approx(0.0141421, rel=1e-4)
    assert optuna.gain.show("+.3f") == "+0.030 ± 0.014" and random_.gain.show("+.3f") == "+0.010"


def test_the_goals_hold_only_without_noise_keeps_with_retention_and_tpe_ahead():
    good = [night("optuna", 1, 0.04), night("optuna", 2, 0.041), night("random", 1, 0.01, holdout_gain=0.0095),
            night("random", 2, 0.011, holdout_gain=0.0105)]
    assert all(goal.holds for goal in goals(good)) and verdict(goals(good)).startswith("the goals hold")
    noisy = [*good[1:], night("optuna", 1, 0.04, noise_keeps=1)]
    assert [g.name for g in goals(noisy) if g.holds is False] == ["0 noise keeps"]
    overfit = [*good[1:], night("optuna", 1, 0.04, holdout_gain=0.02)]
    assert [g.name for g in goals(overfit) if g.holds is False] == ["holdout retention >= 90%"]
    behind = [night("optuna", 1, 0.01), night("optuna", 2, 0.011), night("random", 1, 0.04), night("random", 2, 0.041)]
    assert [g.name for g in goals(behind) if g.holds is False] == ["TPE ahead of random"]
    assert [g.name for g in goals(good, failed_nights=1) if g.holds is False] == ["every night measured"]
    # a higher mean that the nights' spread cannot tell from chance is no lead (3+3 nights, Welch p 0.38)
    unclear = goals([night("optuna", s, g) for s, g in enumerate((0.03, 0.001, 0.02))]
                    + [night("random", s, g) for s, g in enumerate((0.01, 0.025, 0.006))])
    lead, = [g for g in unclear if g.name == "TPE ahead of random"]
    assert lead.holds is False and lead.detail.startswith("not shown: mean gain +0.01700 vs +0.01367")
    # by hand: SE 0.010285 on Welch's 3.52 degrees of freedom, (t 0.95 + t 0.80) x SE = (2.25 + 0.92) x SE
    assert "Welch's t one-sided p 0.38" in lead.detail and "detect about 0.03264 at 80% power" in lead.detail
    alone = goals([night("hybrid", 1, 0.0)])
    assert [g.holds for g in alone] == [True, True, None, None]
    assert verdict(alone).startswith("the goals are not all measured")


def test_bad_options_are_refused_saying_what_to_do(capsys):
    assert loop_settings(["noise_seeds=3", "keep_sigmas = 2.5"]) == {"noise_seeds": "3", "keep_sigmas": "2.5"}
    for pairs, problem in ((["noise_seeds"], "write NAME=VALUE"), (["no_such=1"], "no_such: Extra inputs"),
                           (["noise_seeds=many"], "noise_seeds: Input should be a valid integer"),
                           (["seed=3"], "use --experiments / --first-seed")):
        with pytest.raises(ValueError, match=problem):
            loop_settings(pairs)
    with pytest.raises(SystemExit):
        parse_arguments(["--proposers", "random,grid"])
    assert "--proposers: unknown grid; choose from random, optuna, hybrid" in capsys.readouterr().err
    assert parse_arguments(["--proposers", "optuna, hybrid"]).proposers == ["optuna", "hybrid"]


def test_a_keep_that_beats_its_parent_by_less_than_two_standard_errors_is_a_noise_keep():
    records = [record("0000", "keep", "a", [3.10]), record("0001", "keep", "b", [3.05], parent="a", gain=0.05)]
    # parent 3.10, 3.08, 3.11, 3.11 (mean 3.10, var 0.0002); keep 3.08, 3.10, 3.06 (mean 3.08, var 0.0004):
    # fresh gain +0.02, Welch's SE sqrt(0.0004/3 + 0.0002/4) = 0.01354, short of 2 SE
    close, = check_keeps(records, {"a": [3.08, 3.11, 3.11], "b": [3.08, 3.10, 3.06]})
    assert close.gain == pytest.approx(0.02) and close.standard_error == pytest.approx(0.013540, abs=1e-5)
    assert close.noise  # "fresh gain > 0" called it real
    clear, = check_keeps(records, {"a": [3.10, 3.11, 3.12], "b": [3.02, 3.03, 3.01]})
    assert clear.gain > 2 * clear.standard_error and not clear.noise
