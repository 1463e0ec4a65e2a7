"""The night's tolerances come from its own baseline, scored both ways on this machine through the real loop
(agent/judging/tolerances.py). A machine where the baseline's printed number honestly differs from its weights'
(here: the baseline prints 5e-5 above them, as a GPU's compiled bf16 kernels would against the eager evaluator)
gets a tolerance MARGIN times that, so an honest experiment that differs as much is kept, not called tamper; a
baseline beyond the ceiling stops the night at once, saying why."""

import json

import pytest

from agent.judging.tolerances import CEILING, FLOOR, MARGIN
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from agent.running.runner import LocalRunner
from agent.steps.training import LoopStopped
from tests.helpers.scripted import ScriptedChanges
from trainer.tracks.hyperparameters import set_hyperparameters

MATRIX = "MATRIX_LR = 0.0            # times sqrt(max(1, rows / cols))"
WIN = (MATRIX, MATRIX.replace("0.0 ", "0.04"))  # the handicapped baseline cannot train its block matrices
PRINTED = 'val_bpb=f"{val_bpb:.6f}"'


def baseline_printing_off_by(workspace, offset: float) -> None:
    source = set_hyperparameters(workspace.file_at("train.py"), {"MATRIX_LR": 0.0})
    assert PRINTED in source
    source = source.replace(PRINTED, f'val_bpb=f"{{val_bpb + {offset}:.6f}}"')
    workspace.advance_to(workspace.commit_train(source, f"MATRIX_LR = 0, printing {offset} off"))


def test_tolerances_are_measured_on_the_baseline_and_an_honest_keep_within_them_stands(workspace):
    baseline_printing_off_by(workspace, 5e-5)
    off = 'val_bpb=f"{val_bpb + 5e-05:.6f}"'
    proposer = ScriptedChanges(("a real win that prints 1.5e-4 above its weights",
                                [WIN, (off, 'val_bpb=f"{val_bpb + 1.5e-4:.6f}"')]))
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)

    baseline, win = Ledger(workspace.dir).records
    shown = baseline.runs[0].check.gap
    assert abs(shown - 5e-5) < 2e-6, baseline.runs[0].check
    stored = json.loads((workspace.dir / "run.json").read_text())["tolerances"]
    assert stored["devices"] == "cpu" and stored["margin"] == MARGIN
    assert stored["measured"]["agreement"] == shown
    assert abs(stored["limits"]["agreement"] - MARGIN * shown) < 1e-12
    assert stored["limits"]["lookahead"] == FLOOR["cpu"].lookahead  # the baseline showed none: the floor
    assert win.status == "keep" and win.verified, win.reason
    check = win.runs[0].check
    assert FLOOR["cpu"].agreement < check.gap <= check.tolerance == stored["limits"]["agreement"]
    page = write_report(workspace).read_text()
    assert "The trusted evaluator's tolerances: measured on this machine&#x27;s baseline (printed against" in page


def test_a_baseline_beyond_the_ceiling_stops_the_night_saying_why(workspace):
    baseline_printing_off_by(workspace, 0.05)
    with pytest.raises(LoopStopped) as stopped:
        run_loop(workspace, ScriptedChanges(("never proposed", [WIN])), LocalRunner(),
                 LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)
    why = str(stopped.value)
    (baseline,) = Ledger(workspace.dir).records
    assert baseline.status == "crash" and baseline.triage == "tamper", baseline.reason
    assert "the unmodified baseline's run with seed" in baseline.reason
    assert f"agreement 0.05 (ceiling {CEILING.agreement:g})" in baseline.reason
    assert why.startswith("the baseline did not produce a result (tamper: the unmodified"), why
    assert "cannot tell tamper from noise" in why
    assert "tolerances" not in json.loads((workspace.dir / "run.json").read_text())
