"""The novelty label: a change that only sets UPPER_CASE values is `hyperparameter`, anything else `algorithmic`."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.proposers.llm import values_only_refusal
from agent.recording.novelty import ALGORITHMIC, HYPERPARAMETER, changed_settings, novelty
from agent.recording.novelty_share import recent_algorithmic_share, tally
from agent.recording.record import Evidence, ExperimentRecord
from agent.settings import RunSettings
from trainer.tracks.hyperparameters import set_hyperparameters, train_source_for_track

TRAIN = train_source_for_track((Path(__file__).resolve().parents[3] / "trainer" / "train.py").read_text(), "test")
SCHEDULE = "    remaining = (1 - progress) / WARMDOWN_RATIO"


def test_a_value_change_in_the_block_is_a_hyperparameter_change():
    changed = set_hyperparameters(TRAIN, {"WARMDOWN_RATIO": 0.3, "DEPTH": 3})
    assert novelty(TRAIN, changed) == HYPERPARAMETER
    assert changed_settings(TRAIN, changed) == ["DEPTH", "WARMDOWN_RATIO"]


def test_a_code_change_is_algorithmic():
    changed = TRAIN.replace(SCHEDULE, "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)")
    assert changed != TRAIN and novelty(TRAIN, changed) == ALGORITHMIC
    assert changed_settings(TRAIN, changed) == []


def test_a_new_constant_that_the_code_uses_is_algorithmic():
    changed = TRAIN.replace("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.0\nMIN_REMAINING = 0.1").replace(
        SCHEDULE, "    remaining = max(MIN_REMAINING, (1 - progress) / WARMDOWN_RATIO)")
    assert novelty(TRAIN, changed) == ALGORITHMIC
    unused = TRAIN.replace("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.0\nMIN_REMAINING = 0.1")
    assert novelty(TRAIN, unused) == ALGORITHMIC  # the module gained a statement


def test_comments_and_layout_change_no_code():
    changed = TRAIN.replace("# linear decay over the last half", "# decay over the last half").replace(
        SCHEDULE, SCHEDULE.replace(" / ", "  /  "))
    assert changed != TRAIN and novelty(TRAIN, changed) == HYPERPARAMETER
    assert changed_settings(TRAIN, changed) == []
    assert "changes no code" in values_only_refusal(TRAIN, changed)


def test_a_constant_set_to_code_or_renamed_is_algorithmic():
    assert novelty(TRAIN, TRAIN.replace("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = float(len('ab')) / 10")) \
        == ALGORITHMIC
    assert novelty(TRAIN, TRAIN.replace("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRACTION = 0.0")) == ALGORITHMIC
    assert novelty(TRAIN, TRAIN + "\ndef broken(:\n") == ALGORITHMIC  # what does not parse is not a value


def test_a_code_only_proposal_is_refused_naming_the_values_it_set():
    changed = set_hyperparameters(TRAIN, {"WARMDOWN_RATIO": 0.3})
    why = values_only_refusal(TRAIN, changed)
    assert "only sets WARMDOWN_RATIO" in why and "Optuna tunes" in why
    assert values_only_refusal(TRAIN, TRAIN.replace(SCHEDULE, "    remaining = 1.0")) is None


def _record(i, proposer, kind, status="discard", gain=None):
    return ExperimentRecord(id=f"{i:04d}", status=status, proposer=proposer, novelty=kind, val_bpb=1.0,
                            evidence=Evidence(gain=gain))


def test_the_tally_counts_each_kind_and_the_gain_of_its_keeps():
    records = [ExperimentRecord(id="0000", status="keep", proposer="baseline", val_bpb=1.1),
               _record(1, "optuna", HYPERPARAMETER, "keep", 0.002), _record(2, "llm", ALGORITHMIC, "keep", 0.004),
               _record(3, "llm", ALGORITHMIC, "keep", 0.008), _record(4, "llm", HYPERPARAMETER),
               _record(5, "llm", ALGORITHMIC, "crash")]
    values, code = tally(records)
    assert (values.kind, values.experiments, values.keeps, values.mean_gain) == (HYPERPARAMETER, 2, 1, 0.002)
    assert (code.experiments, code.keeps, code.keep_rate, code.mean_gain) == (3, 2, 2 / 3, pytest.approx(0.006))
    assert code.share == 0.6 and "algorithmic 3 (60%), 2 kept (keep rate 67%)" in code.line()
    assert recent_algorithmic_share(records, "llm") == 0.75
    assert recent_algorithmic_share(records, "llm", window=2) == 0.5
    assert recent_algorithmic_share(records, "optuna") == 0.0 and recent_algorithmic_share(records, "x") is None
    assert tally(records[:1]) == []


def test_old_records_load_without_a_label_and_the_share_is_checked():
    assert ExperimentRecord.model_validate({"id": "0001", "status": "keep"}).novelty is None
    assert "novelty" not in ExperimentRecord(id="0000", status="keep").to_json()
    with pytest.raises(ValidationError, match="algorithmic_share"):
        RunSettings(algorithmic_share=1.5)
