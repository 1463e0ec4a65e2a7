"""One read model of the night, whoever reads it. A night of the real loop with a GPU price and a proposal that
failed after spending is ended as `run` ends it (report, the MLflow mirror's last sync to a real server, the
night's-end notification to a loopback webhook); the report's page and report.json, `status --json`, the tag's
MLflow run and the notification then state one spend and one gain per dollar, the failed proposal's spend and the
GPU time included."""

import json
import os
import re
import signal

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.llm.types import Usage
from agent.loop import LoopSettings, run_loop
from agent.proposers.base import Proposal, Proposer, ProposerError
from agent.proposers.edits import Edit
from agent.recording.gpu_cost import gpu_hours, store_gpu_price
from agent.recording.ledger import read_records
from agent.tracking.mlflow_sync import MlflowSync
from agent.tracking.notify.events import Event
from agent.tracking.notify.night import NightNotifier
from tests.agent.test_notify import FAST, Webhook
from tests.helpers.mlflow_server import free_port, start_mlflow_server, wait_healthy
from tests.helpers.synthetic_runner import SyntheticRunner

mlflow = pytest.importorskip("mlflow")

PRICE = 4.5          # dollars per GPU-hour
FAILED_USD = 0.25    # what the failed proposal spent before it failed
PROPOSAL_USD = 0.1   # what each proposal that became an experiment spent


class FailsOnceThenProposes(Proposer):
    name = "scripted"

    def __init__(self):
        self.changes = [("WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.25"), ("MATRIX_LR = 0.04", "MATRIX_LR = 0.05")]
        self.failed = False

    def propose(self, context, transcript):
        if not self.failed:
            self.failed = True
            raise ProposerError("the model's answer held no edit", usage=Usage(cost_usd=FAILED_USD, calls=1))
        before, after = self.changes.pop(0)
        return Proposal(after, [Edit(before, after)], usage=Usage(cost_usd=PROPOSAL_USD, calls=1))


@pytest.fixture
def ended(workspace, tmp_path):
    """The night, ended as `run` ends it; (the MLflow URI, the webhook)."""
    store_gpu_price(workspace, PRICE)
    (tmp_path / "mlflow").mkdir()
    port = free_port()
    uri, server = f"http://127.0.0.1:{port}", start_mlflow_server(tmp_path / "mlflow", port)
    hook = Webhook()
    try:
        wait_healthy(uri, server)
        tracking = MlflowSync(uri, workspace, say=lambda _: None).start(every_seconds=0.5)
        notifier = NightNotifier(workspace, [hook.url()], say=lambda _: None, policy=FAST, poll_seconds=0.05).start()
        runner = SyntheticRunner({"WEIGHT_DECAY = 0.25": 0.03, "MATRIX_LR = 0.05": 0.02}, delays={"": 0.05})
        why = run_loop(workspace, FailsOnceThenProposes(), runner,
                       LoopSettings(max_experiments=3, noise_seeds=0, overlap=False, gpu_usd_per_hour=PRICE),
                       say=lambda _: None)
        notifier.stopped(why)
        cli._finish(workspace, tracking, notifier)
        yield uri, hook
    finally:
        hook.close()
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_report_status_mlflow_and_the_notification_state_one_gain_per_dollar(workspace, ended):
    from mlflow.tracking import MlflowClient

    uri, hook = ended
    records = read_records(workspace.dir)
    assert [r.status for r in records if r.proposer != "baseline"] == ["keep", "keep"]
    spent = sum(r.llm.cost_usd for r in records) + FAILED_USD + gpu_hours(records) * PRICE
    gain = records[0].val_bpb - records[-1].val_bpb
    assert gain > 0 and sum(r.llm.cost_usd for r in records) == pytest.approx(2 * PROPOSAL_USD)

    report = json.loads((workspace.dir / "report" / "report.json").read_text())["status"]
    status = json.loads(CliRunner().invoke(cli.app, ["status", "--tag", workspace.tag, "--json", "--workspaces",
                                                     str(workspace.dir.parent)]).output)
    client = MlflowClient(tracking_uri=uri)
    [tag_run] = client.search_runs([client.get_experiment_by_name("autoresearch").experiment_id],
                                   f"tags.`autoresearch.tag` = '{workspace.tag}'")
    mirrored = tag_run.data.metrics
    [ended_note] = [n for n in hook.notifications() if n.event == Event.NIGHT_ENDED]

    for said in (report, status):
        assert said["spent_usd"] == pytest.approx(spent) and said["gain_per_usd"] == pytest.approx(gain / spent)
    assert mirrored["spent_usd"] == pytest.approx(spent) and mirrored["gain_per_usd"] == pytest.approx(gain / spent)
    assert ended_note.cost_usd == pytest.approx(spent) and ended_note.gain_per_usd == pytest.approx(gain / spent)
    assert f"{gain / spent:.4g} val_bpb per $" in ended_note.text
    page = (workspace.dir / "report" / "index.html").read_text()
    assert re.search(rf">\s*{re.escape(f'{gain / spent:.4g}')}\s*<", page)
