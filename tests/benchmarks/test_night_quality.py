"""benchmarks/night_quality.py on a night the real loop ran over a synthetic runner: a real keep, and a keep that
only won on the night's own runs and is found out when trained again."""

from pathlib import Path

import pytest

from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import read_records
from agent.workspace import Workspace
from benchmarks.night_quality import RECHECK_RUN_NUMBER, measure_night
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner
from trainer.runs.run_id import RunKind

PROGRAM = Path(__file__).resolve().parents[2] / "prompts" / "program.md"
BASE = 3.0


class LuckyRunner(SyntheticRunner):
    """A synthetic runner on which one change wins by `luck` on the night's runs and by nothing on re-checks."""

    def __init__(self, gains: dict[str, float], lucky: str, luck: float):
        super().__init__(gains, base=BASE, noise=0.0)
        self.lucky, self.luck = lucky, luck
        self.rechecks: list[tuple[str, int]] = []  # (commit, seed) of every re-check run
        self._recheck = False

    def run(self, workspace, job):
        self._recheck = job.run.kind == RunKind.RERUN and job.run.n > RECHECK_RUN_NUMBER
        if self._recheck:
            self.rechecks.append((job.commit, job.seed))
        return super().run(workspace, job)

    def score(self, source, seed):
        won = self.luck if self.lucky in source and not self._recheck else 0.0
        return round(super().score(source, seed) - won, 6)


def line(source: str, name: str) -> str:
    return next(text for text in source.splitlines() if text.startswith(f"{name} = "))


def test_a_night_is_measured_and_its_lucky_keep_found_out(test_track, tmp_path):
    workspace = Workspace.create("night", test_track.spec, PROGRAM, root=tmp_path)
    source = workspace.file_at("train.py")
    warmdown, matrix = line(source, "WARMDOWN_RATIO"), line(source, "MATRIX_LR")
    proposer = ScriptedEdits(("WARMDOWN_RATIO 0.5 -> 0.3", warmdown, warmdown.replace("0.5 ", "0.3 ")),
                             ("MATRIX_LR 0.04 -> 0.05", matrix, matrix.replace("0.04 ", "0.05 ")))
    runner = LuckyRunner({"WARMDOWN_RATIO = 0.3": 0.05}, lucky="MATRIX_LR = 0.05", luck=0.03)
    settings = LoopSettings(max_experiments=3, noise_seeds=0, overlap=False)
    stopped = run_loop(workspace, proposer, runner, settings, say=lambda _: None)

    night = measure_night(workspace, runner, settings, "scripted", 42, stopped, night_s=36.0, recheck_seeds=3)

    assert (night.experiments, night.keeps, night.keep_rate) == (2, 2, 1.0)
    assert night.gain == pytest.approx(0.08)  # on the night's runs, the lucky keep's luck included
    assert night.fresh_gain == pytest.approx(0.05) and night.holdout_gain == pytest.approx(0.05)  # fresh: no luck
    assert night.retention == pytest.approx(1.0)  # the synthetic evaluator scores holdout as val
    assert night.experiments_per_hour == pytest.approx(200.0)
    real, lucky = night.checks
    assert (real.keep, real.parent, lucky.keep, lucky.parent) == ("0001", "0000", "0002", "0001")
    assert real.fresh == [BASE - 0.05] * 3 and real.gain == pytest.approx(0.05) and not real.noise
    assert lucky.decided_gain == pytest.approx(0.03) and lucky.fresh == [BASE - 0.05] * 3
    assert lucky.gain == pytest.approx(0.0) and lucky.noise and night.noise_keeps == 1
    night_seeds = {run.seed for r in read_records(workspace.dir) for run in r.runs}
    assert len(runner.rechecks) == 9  # three kept commits, each once, three seeds each
    assert len({seed for _, seed in runner.rechecks}) == 9 and not night_seeds & {s for _, s in runner.rechecks}
