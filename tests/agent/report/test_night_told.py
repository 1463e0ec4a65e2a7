"""The report of a night through the real loop (scripted changes, the synthetic runner) with a keep that fell too far
to believe, a close call, a discard and a crash: every flag where it happened, one gain per keep, what each
experiment trained, where the time went, each experiment's loss curve against the best's, and the same numbers in
report.json beside the page."""

import json
import re
from html import unescape

import pytest

from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner

CHANGES = (("warmdown 0.3", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3"),       # falls 13%: implausible
           ("weight decay 0.1", "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.1"),       # worse: a discard
           ("unembedding lr 0.008", "UNEMBEDDING_LR = 0.004", "UNEMBEDDING_LR = 0.008"),  # out of memory
           ("matrix lr 0.05", "MATRIX_LR = 0.04", "MATRIX_LR = 0.05"),             # a close call, re-run
           ("weight decay 0.25", "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.25"))     # a clear win
GAINS = {"WARMDOWN_RATIO = 0.3": 0.2, "WEIGHT_DECAY = 0.1": -0.02, "MATRIX_LR = 0.05": 0.008,
         "WEIGHT_DECAY = 0.25": 0.03}


@pytest.fixture
def told(workspace):
    run_loop(workspace, ScriptedEdits(*CHANGES), SyntheticRunner(GAINS, crashes=("UNEMBEDDING_LR = 0.008",)),
             LoopSettings(max_experiments=6, noise_seeds=2, overlap=False), say=lambda _: None)
    every = Ledger(workspace.dir).records
    records = {r.description: r for r in every if r.is_experiment}
    index = write_report(workspace)
    return records, unescape(index.read_text()), json.loads((index.parent / "report.json").read_text()), every


def section(html: str, title: str) -> str:
    return html.split(f"<h2>{title}")[1].split("<h2>")[0]


def test_each_flag_and_one_gain_per_keep(told):
    records, html, _, _ = told
    implausible, discard, crash, close, win = (records[d] for d, *_ in CHANGES)
    assert [r.status for r in (implausible, discard, crash, close, win)] == ["keep", "discard", "crash", "discard",
                                                                               "keep"]
    kept = section(html, "Kept changes")
    for keep in (implausible, win):
        shown = kept.split(f"id='keep-{keep.id}'")[1].split("<div class='change'")[0]
        gains = set(re.findall(r"gain ([+-]?\d\.\d{6})", shown))
        assert gains == {f"{keep.evidence.gain:+.6f}"}, shown  # the rule's gain, said once however often it is shown
    flagged = kept.split(f"id='keep-{implausible.id}'")[1].split("<div class='change'")[0]
    assert "implausible" in implausible.evidence.implausible_fall or "fell" in implausible.evidence.implausible_fall
    assert f"flagged: {implausible.evidence.implausible_fall}, and the holdout split confirmed it" in flagged
    close_row = section(html, "Every experiment").split(f"#t-{close.id}'")[1].split("</tr>")[0]
    assert len(close.runs) == 2 and "runs 2 vs the best's" in close_row and "the re-run did not confirm it" in close_row
    every = section(html, "Every experiment")
    crash_row = every.split(f"#t-{crash.id}'")[1].split("</tr>")[0]
    assert "crash" in crash_row and crash.triage_shown in crash_row
    discard_row = every.split(f"#t-{discard.id}'")[1].split("</tr>")[0]
    assert "discard" in discard_row and "discarded:" in discard_row


def test_what_each_experiment_trained(told):
    records, html, _, _ = told
    every = section(html, "Every experiment")
    for record in records.values():
        if record.status in ("keep", "discard"):
            row = every.split(f"#t-{record.id}'")[1].split("</tr>")[0]
            tokens = record.runs[0].trained_tokens
            assert f"{record.summary['num_steps']} steps" in row and f"{tokens / 1e6:.2f}M tokens" in row


def test_where_the_time_went(told):
    _, html, data, every = told
    timed = section(html, "Where the time went")
    assert "alt='time line'" in timed and "nothing running" in timed
    training = [s for s in data["spans"] if s["phase"] == "training"]
    # one span per run of every record, the noise floor's and the controls' included, in the slot that ran it
    assert sorted(s["experiment_id"] for s in training) == sorted(r.id for r in every for _ in r.runs)
    assert {s["lane"] for s in training} == {"synthetic slot 1"}
    went = data["time_went"]
    assert 0 < went["phases"]["training"] <= went["wall_s"] and went["idle_s"] >= 0
    shares = [int(x) for x in re.findall(r"<td>(\d+)%</td>", timed)]
    assert len(shares) == 4 and all(0 <= x <= 100 for x in shares)


def test_each_experiment_s_loss_curve_beside_the_best_s(told):
    records, html, data, _ = told
    curves = section(html, "Loss curves")
    for record in records.values():
        if record.proposer == "baseline":
            continue
        cell = curves.split(f"<b>{record.id}</b>")[1].split("</svg>")[0]
        assert cell.count("<polyline") == 2, record.id  # its own curve over the best's it was compared with
        points = data["loss_curves"][record.id]
        if record.status == "crash":
            assert points[-1][0] == 30.0  # it died at 30% of its budget, and the curve stops there
        else:
            assert points[-1][0] == 100.0
            assert points[-1][1] == pytest.approx(2 * record.runs[0].printed, abs=1e-3)


def test_the_json_beside_the_page_carries_the_page_s_numbers(told):
    records, html, data, _ = told
    assert {e["id"] for e in data["experiments"]} >= {r.id for r in records.values()}
    assert data["status"]["best_id"] == records["weight decay 0.25"].id
    keeps = data["returns"]["keeps"]
    assert [k["id"] for k in keeps] == [records["warmdown 0.3"].id, records["weight decay 0.25"].id]
    assert "a curve needs 3 or more" in data["returns"]["why_not"]
    bought = section(html, "What the night bought")
    for keep in keeps:
        assert f"{keep['moved']:.6f}" in bought
