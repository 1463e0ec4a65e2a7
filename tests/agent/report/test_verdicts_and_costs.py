"""A night through the real loop (scripted changes, the synthetic runner): every decided experiment shows its
test in the report and in `status`; the headline shows gain per GPU-hour and per dollar; --max-cost-usd counts
GPU time when it is priced."""

import io
import json
import math
import re
from html import unescape

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, run_cost, run_loop
from agent.recording.gpu_cost import store_gpu_price, stored_gpu_price
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from agent.report.status_view import status_view
from agent.report.summary import device_unit
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner

CHANGES = (("warmdown 0.3", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3"),       # a clear win
           ("weight decay 0.1", "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.1"),       # a loss
           ("matrix lr 0.05", "MATRIX_LR = 0.04", "MATRIX_LR = 0.05"))             # a small gain: re-run
GAINS = {"WARMDOWN_RATIO = 0.3": 0.2, "WEIGHT_DECAY = 0.1": -0.02, "MATRIX_LR = 0.05": 0.008}


def night(workspace, settings: LoopSettings, changes=CHANGES) -> str:
    return run_loop(workspace, ScriptedEdits(*changes), SyntheticRunner(GAINS), settings, say=lambda _: None)


def status_text(workspace) -> str:
    console = Console(file=io.StringIO(), width=1000, color_system=None)
    console.print(status_view(workspace))
    return console.file.getvalue()


def test_every_decided_experiment_shows_gain_sigma_runs_z_p_threshold_and_why(workspace):
    night(workspace, LoopSettings(max_experiments=4, noise_seeds=2, overlap=False))
    decided = [r for r in Ledger(workspace.dir).records if r.is_experiment and r.evidence.gain is not None]
    assert {r.status.value for r in decided} == {"keep", "discard"} and len(decided) == 3
    html, status = write_report(workspace).read_text(), status_text(workspace)
    for r in decided:
        e = r.evidence
        n_candidate, n_best = len(e.candidate_runs), len(e.best_runs)
        z = e.gain / (e.sigma * math.sqrt(1 / n_candidate + 1 / n_best))  # by hand, from the rounded evidence
        assert e.sigma_df == 2  # the floor's three runs
        p = 0.5 - z / (2 * math.sqrt(2 + z * z))  # Student's t upper tail on 2 degrees of freedom, in closed form
        why = "kept: the gain is above the threshold" if r.status == "keep" else "discarded:"
        said = (re.escape(f"gain {e.gain:+.6f}, sigma {e.sigma:.6f}, runs {n_candidate} vs the best's {n_best}, ")
                + r"z (\S+), p (< 1e-06|\S+) \(t, 2 df\), " + re.escape(f"threshold {e.threshold:.6f}: {why}"))
        for text in (unescape(html), status):
            shown_z, shown_p = re.search(said, text).groups()
            assert float(shown_z) == pytest.approx(z, abs=0.01), r.id
            assert shown_p == "< 1e-06" if p < 1e-6 else float(shown_p) == pytest.approx(p, rel=0.01, abs=1e-4)
    reran = next(r for r in decided if len(r.runs) > 1)
    assert "runs 2 vs the best's" in unescape(html) and reran.description in html
    assert "rule: one run: gain > 2 sigma keeps" in unescape(html)


def test_the_headline_prices_the_gain_per_gpu_hour_and_per_dollar(workspace):
    night(workspace, LoopSettings(max_experiments=2, noise_seeds=0), CHANGES[:1])
    records = Ledger(workspace.dir).records
    gpu_hours = sum(run.seconds for r in records for run in r.runs) / 3600
    gain = records[0].val_bpb - records[-1].val_bpb
    assert gpu_hours > 0 and gain > 0
    html = write_report(workspace).read_text()
    # its runs reached no GPU: the night is counted in the device's own unit
    assert f"{gain / gpu_hours:.4g}" in html and "val_bpb gained per CPU-hour" in html and "GPU-hour" not in html
    assert "CPU time not priced: --gpu-usd-per-hour" in html and "nothing spent" in html  # no LLM spend either
    assert f"val_bpb gained {gain / gpu_hours:.4g} per CPU-hour" in status_text(workspace)
    gpu_night = [r.model_copy(update={"runs": [run.model_copy(update={"device": "cuda"}) for run in r.runs]})
                 for r in records]
    assert device_unit(gpu_night) == "GPU" and device_unit(records) == "CPU"

    store_gpu_price(workspace, 2.5)
    assert stored_gpu_price(workspace) == 2.5
    html = write_report(workspace).read_text()
    assert f"{gain / (gpu_hours * 2.5):.4g}" in html and f"GPU ${gpu_hours * 2.5:.2f}" in html
    assert "not priced" not in html
    assert f"{gain / (gpu_hours * 2.5):.4g} per dollar" in status_text(workspace)
    # the comparison of tags states each tag's own gain per dollar, its price included, as the tag's report does
    compared = CliRunner().invoke(cli.app, ["report", "--tag", workspace.tag, "--tag", workspace.tag,
                                            "--workspaces", str(workspace.dir.parent)])
    assert compared.exit_code == 0, compared.output
    page = (workspace.dir.parent / f"compare-{workspace.tag}-{workspace.tag}" / "index.html").read_text()
    said = json.loads(CliRunner().invoke(cli.app, ["status", "--tag", workspace.tag, "--json", "--workspaces",
                                                   str(workspace.dir.parent)]).output)
    assert said["gain_per_usd"] == pytest.approx(gain / (gpu_hours * 2.5), rel=1e-3)
    assert f"<td>{said['gain_per_usd']:.4g}</td>" in page


def test_max_cost_counts_gpu_time_when_it_is_priced(workspace):
    run_seconds = 0.01  # the synthetic runner's wall clock per run
    per_run = 1.0
    price = per_run * 3600 / run_seconds
    why = night(workspace, LoopSettings(max_experiments=6, noise_seeds=0, overlap=False, max_cost_usd=2.5,
                                        gpu_usd_per_hour=price))
    records = Ledger(workspace.dir).records
    assert "reached the cost cap of $2.50" in why and "GPU time at $360000 per GPU-hour" in why
    spent = [per_run * sum(len(r.runs) for r in records[:n]) for n in range(1, len(records) + 1)]
    assert spent[-2] < 2.5 <= spent[-1] and len(records) < 4  # the last one started below the cap, none after
    assert run_cost(Ledger(workspace.dir), price) == pytest.approx(spent[-1])
    assert run_cost(Ledger(workspace.dir)) == 0.0  # the LLM spend alone


def test_without_a_price_the_cap_counts_llm_spend_only(workspace):
    why = night(workspace, LoopSettings(max_experiments=3, noise_seeds=0, overlap=False, max_cost_usd=2.5))
    assert "ran 3 experiment(s)" in why


def test_run_offers_the_gpu_price_and_says_the_cap_covers_it():
    shown = CliRunner().invoke(cli.app, ["run", "--help"], terminal_width=200).output
    words = " ".join(shown.replace("│", " ").split())
    assert "--gpu-usd-per-hour" in shown and "plus its runs' GPU time at --gpu-usd-per-hour when given" in words


def test_the_model_is_told_what_the_spend_counts():
    from agent.proposers.night_facts import NightFacts
    priced = NightFacts.of(LoopSettings(max_cost_usd=5, gpu_usd_per_hour=2), spent_usd=1).budget_line()
    assert "$4.00 of LLM spend and GPU time ($1.00 spent)" in priced
    assert "$4.00 of LLM spend ($1.00 spent)" in NightFacts.of(LoopSettings(max_cost_usd=5), spent_usd=1).budget_line()


def test_status_json_parses_and_carries_the_numbers_the_view_shows(workspace):
    night(workspace, LoopSettings(max_experiments=4, noise_seeds=2, overlap=False))
    records = Ledger(workspace.dir).records
    shown = CliRunner().invoke(cli.app, ["status", "--tag", workspace.tag, "--workspaces", str(workspace.dir.parent),
                                         "--json"])
    assert shown.exit_code == 0, shown.output
    night_json = json.loads(shown.output)
    assert night_json["tag"] == workspace.tag and night_json["headline"]["device"] == "CPU"
    assert [line["id"] for line in night_json["history"]] == [r.id for r in records]
    decided = [r for r in records if r.is_experiment and r.evidence.gain is not None]
    by_id = {line["id"]: line for line in night_json["history"]}
    for r in decided:
        assert by_id[r.id]["gain"] == r.evidence.gain and by_id[r.id]["p"] == r.evidence.p
        assert by_id[r.id]["sigma_df"] == 2 and by_id[r.id]["status"] == r.status.value
    assert night_json["best_id"] == max((r for r in records if r.status == "keep"), key=lambda r: -r.val_bpb).id
    assert night_json["headline"]["keeps"] == sum(1 for r in decided if r.status == "keep")


def test_every_experiment_shows_what_it_trained(workspace):
    night(workspace, LoopSettings(max_experiments=2, noise_seeds=0), CHANGES[:1])
    html = unescape(write_report(workspace).read_text())
    # the run's summary, with the tokens the seal counted (418 draws of the declared 2**11)
    assert html.count("417 steps · 0.86M tokens · 12.3M params · 218,453 tok/s · MFU 38.25% · 1,844 MB peak") == 2
    # no noise floor: a bare gain > 0 keeps half of all changes that do nothing, and the report says so
    assert "without a noise floor a change that does nothing is kept about half the time" in html
    assert "over this night's 1 judged experiment(s), each against the runs its best had then, about 0.5 keep(s)" \
        in html
