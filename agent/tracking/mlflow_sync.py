"""Mirrors a workspace's ledger to an MLflow tracking server.

One MLflow run per tag (its name is the tag) holds a nested run per ledger record: the hyperparameter
block's values and the description as params; val_bpb, tokens/s, MFU, peak VRAM, training seconds and
LLM cost as metrics; status, triage and the decision's reason as tags; the diff, the run's log and the
transcript as artifacts. Noise floors are nested runs too (their sigma a metric), and the held-out
confirmation is logged on the tag's run.

The ledger is the source of truth and mlflow.json (beside it) says which records are already in
MLflow, so a sync logs whatever is pending: a server that is down is warned about, retried on the
next sync, and caught up when it is back; the loop never waits for it (syncs run on their own thread).
"""

from __future__ import annotations

import ast
import math
import os
import threading
import time

from pydantic import BaseModel

from agent.recording.confirmation import Confirmation
from agent.recording.record import ExperimentRecord, ExperimentStatus, summary_number
from agent.report.night import Night
from agent.report.summary import Headline, parse_time
from agent.untrusted import bounded
from trainer.files import parsing
from trainer.files.atomic import read_json, write_json_atomic
from trainer.tracks.hyperparameters import BLOCK_END, BLOCK_START

STATE_FILE = "mlflow.json"
EXPERIMENT = "autoresearch"
PARAM_CHARS = 500          # MLflow refuses params longer than 6000 characters; descriptions are kept short
TAG_CHARS = 5000
SUMMARY_METRICS = ("tokens_per_second", "mfu_percent", "training_seconds", "training_wall_seconds")


class SyncState(BaseModel):
    """What of a workspace is in MLflow already."""
    uri: str
    parent_run_id: str | None = None
    logged: dict[str, str] = {}         # ledger record id -> its MLflow run id
    confirmation_time: str | None = None  # the confirmation.json logged last
    headline: dict[str, float] = {}     # the night's numbers last logged on the tag's run


class TrackingUnavailable(Exception):
    """mlflow is not installed; the message says how to install it."""


def block_values(source: str) -> dict[str, str]:
    """NAME -> the value as written, for each assignment in train.py's hyperparameter block."""
    start, end = BLOCK_START.search(source), source.find(BLOCK_END)
    if not start or end < 0:
        return {}
    first, last = source.count("\n", 0, start.start()) + 1, source.count("\n", 0, end) + 1
    try:
        tree = parsing.parse(source)
    except SyntaxError:
        return {}
    return {node.targets[0].id: bounded(ast.get_source_segment(source, node.value) or "", 200)
            for node in tree.body
            if isinstance(node, ast.Assign) and first < node.lineno < last and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)}


def _number(value) -> float | None:
    number = summary_number(value)
    return number if number is not None and math.isfinite(number) else None


class MlflowSync:
    def __init__(self, uri: str, workspace, say=print):
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as err:
            raise TrackingUnavailable("--mlflow needs the mlflow client: pip install 'autoresearch[tracking]' "
                                      "(or mlflow-skinny)") from err
        # A server that is down must fail a call quickly, not after minutes of retries: the next sync retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
        self.uri, self.workspace, self.say = uri, workspace, say
        self.client = MlflowClient(tracking_uri=uri)
        self.state_path = workspace.dir / STATE_FILE
        state = SyncState(**saved) if (saved := read_json(self.state_path)) else None
        self.state = state if state is not None and state.uri == uri else SyncState(uri=uri)
        self.failing: str | None = None   # the error of the outage in progress, said once
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- running beside the loop --------------------------------------------------------------------
    def start(self, every_seconds: float = 15.0) -> MlflowSync:
        def loop() -> None:
            while not self._stop.wait(every_seconds):
                self.sync()
        self._thread = threading.Thread(target=loop, name="mlflow-sync", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> bool:
        """Stops the thread and syncs once more; True if everything is in MLflow."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return self.sync()

    def sync(self) -> bool:
        """Logs every record not yet in MLflow; True if nothing is pending afterwards."""
        with self._lock:
            try:
                self._sync()
            except Exception as err:  # any failure of the service: said once per outage, retried next time
                message = f"{type(err).__name__}: {bounded(str(err), 300)}"
                if self.failing is None:
                    self.say(f"warning: MLflow at {self.uri} is not reachable ({message}); the loop goes on and "
                             "the records are sent when it is back")
                self.failing = message
                return False
            if self.failing is not None:
                self.say(f"MLflow at {self.uri} is reachable again; caught up")
                self.failing = None
            return True

    # --- what is logged -----------------------------------------------------------------------------
    def _sync(self) -> None:
        night = Night(self.workspace)
        records = night.records
        if self.state.parent_run_id is None:
            experiment = self.client.get_experiment_by_name(EXPERIMENT)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(EXPERIMENT)
            run = self.client.create_run(experiment_id, run_name=self.workspace.tag,
                                         tags={"autoresearch.tag": self.workspace.tag,
                                               "autoresearch.track": self.workspace.track.track})
            self.state.parent_run_id = run.info.run_id
            self._save()
        for number, record in enumerate(records):
            if record.id not in self.state.logged:
                self.state.logged[record.id] = self._log_record(record, number)
                self._save()
        headline = headline_metrics(night.headline)
        if headline != self.state.headline:  # a failed proposal's spend moves it without a record
            for key, value in headline.items():
                self.client.log_metric(self.state.parent_run_id, key, value, step=len(records))
            self.state.headline = headline
            self._save()
        confirmation = night.confirmation
        if confirmation is not None and confirmation.time != self.state.confirmation_time:
            self._log_confirmation(confirmation)
            self.state.confirmation_time = confirmation.time
            self._save()

    def _log_record(self, record: ExperimentRecord, number: int) -> str:
        from mlflow.entities import Metric, Param, RunTag
        parent = self.state.parent_run_id
        experiment_id = self.client.get_run(parent).info.experiment_id
        run = self.client.create_run(experiment_id, run_name=record.id,
                                     tags={"mlflow.parentRunId": parent, "autoresearch.id": record.id})
        run_id, now = run.info.run_id, _millis(record)
        params = {"description": bounded(record.description, PARAM_CHARS)}
        if record.commit:
            params.update(block_values(self.workspace.file_at("train.py", record.commit)))
        if record.proposer:
            params["proposer"] = bounded(record.proposer, 100)
        metrics = {"val_bpb": record.val_bpb, "peak_vram_mb": record.peak_vram_mb, "cost_usd": record.llm.cost_usd,
                   "sigma": record.sigma, "run_seconds": record.timings.run_s}
        metrics.update({key: record.summary.get(key) for key in SUMMARY_METRICS})
        tags = {"status": record.status.value, "triage": record.triage or "",
                "decision": bounded(record.reason or record.description, TAG_CHARS)}
        if record.verified:
            tags["verified"] = "true"
        if record.hardware:
            tags["hardware"] = bounded(record.hardware.describe(), TAG_CHARS)
        self.client.log_batch(
            run_id, metrics=[Metric(k, v, now, 0) for k, v in ((k, _number(v)) for k, v in metrics.items())
                             if v is not None],
            params=[Param(k, v) for k, v in params.items()], tags=[RunTag(k, v) for k, v in tags.items()])
        for i, run_entry in enumerate(record.runs):
            if _number(run_entry.val_bpb) is not None:
                self.client.log_metric(run_id, "val_bpb_of_each_run", run_entry.val_bpb, now, i)
        if record.diff:
            self.client.log_text(run_id, record.diff, "diff.patch")
        for relative in (record.log, record.transcript):
            path = self.workspace.dir / relative if relative else None
            if path is not None and path.is_file():
                self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, end_time=now)
        if record.status == ExperimentStatus.KEEP and _number(record.val_bpb) is not None:
            self.client.log_metric(parent, "best_val_bpb", record.val_bpb, now, number)
        return run_id

    def _log_confirmation(self, confirmation: Confirmation) -> None:
        values = {"holdout_gain": confirmation.holdout_gain, "search_gain": confirmation.search_gain,
                  "baseline_holdout": confirmation.baseline.holdout, "best_holdout": confirmation.best.holdout}
        for key, value in values.items():
            if _number(value) is not None:
                self.client.log_metric(self.state.parent_run_id, key, float(value))

    def _save(self) -> None:
        write_json_atomic(self.state_path, self.state.model_dump(), indent=2)


def headline_metrics(h: Headline) -> dict[str, float]:
    """The night so far, in its report's numbers, as the tag's run holds them (step: the records they count)."""
    values = {"gain": h.gain, "spent_usd": h.spent_usd, "gain_per_usd": h.gain_per_usd,
              "gain_per_device_hour": h.gain_per_gpu_hour, "experiments": h.experiments, "keeps": h.keeps}
    return {key: float(value) for key, value in values.items() if _number(value) is not None}


def _millis(record: ExperimentRecord) -> int:
    try:
        return int(parse_time(record.finished or record.started) * 1000)
    except (TypeError, ValueError):
        return int(time.time() * 1000)


def tracking_uri(option: str | None) -> str | None:
    """--mlflow URI, or MLFLOW_TRACKING_URI when --mlflow is given without one or not at all."""
    return option or os.environ.get("MLFLOW_TRACKING_URI") or None
